"""The explanation of :mod:`mlpmem.maintenance.explain` as one self-contained HTML page a person can read.

The text comes first, each token shaded by the teacher's mass on the memory's top prediction at that position
(how much of it the datastore supports) and titled with its best document; a table follows with one row per
token: the memory's top prediction and its probability, then the documents supporting it and the documents
supporting the token that actually came, and the sources in context of that token (the documents holding it,
by their support of the text before it), each with its weight drawn as a bar and a snippet. No script, no
external file: the page opens anywhere.
"""

from __future__ import annotations

import json
from html import escape
from pathlib import Path

from mlpmem.errors import ConfigError
from mlpmem.maintenance.explain import Explanation, Support, TokenRow
from mlpmem.utils.outputs import check_output_file, write_output

HEAD = '<!doctype html><html><head><meta charset="utf-8"><title>mlpmem explain</title>'
"""How every page opens (its signature: a file that opens otherwise is not replaced)."""
JSON_HEAD = b'{\n "run": '
"""How the JSON of an explanation opens (``run`` is its first field)."""

STYLE = """
body { font-family: system-ui, sans-serif; margin: 2em; max-width: 70em; color: #222; }
.text { font-family: ui-monospace, monospace; line-height: 2; white-space: pre-wrap; }
.tok { padding: 1px 0; border-radius: 3px; }
.gen { text-decoration: underline dotted; }
table { border-collapse: collapse; margin-top: 1.5em; width: 100%; }
th, td { border-bottom: 1px solid #ddd; padding: 4px 6px; text-align: left; vertical-align: top; font-size: 90%; }
td.mono { font-family: ui-monospace, monospace; white-space: pre; }
.bar { display: inline-block; height: 0.7em; background: #4a7bd0; margin-right: 4px; }
.doc { margin: 2px 0; }
.snippet { color: #666; }
"""


def _token(text: str) -> str:
    return escape(text.replace("\n", "\\n"))


def _shade(mass: float) -> str:
    alpha = min(max(mass, 0.0), 1.0) * 0.6
    return f"background: rgba(74, 123, 208, {alpha:.3f})"


def _supports(supports: list[Support]) -> str:
    if not supports:
        return '<span class="snippet">no neighbour supports it</span>'
    return "".join(f'<div class="doc"><span class="bar" style="width: {max(1, round(120 * s.weight))}px"></span>'
                   f"{s.weight:.3f} <b>{escape(s.name)}</b> <code>{escape(s.id)}</code> "
                   f'<span class="snippet">{escape(s.snippet)}</span></div>' for s in supports)


def _text(rows: list[TokenRow]) -> str:
    spans = []
    for r in rows:
        best = r.supports[0].name if r.supports else "no supporting document"
        title = f"memory: {r.predicted!r} ({r.memory_prob:.3f}); p_kNN {r.teacher_mass:.3f}; {best}"
        cls = "tok gen" if r.generated else "tok"
        spans.append(f'<span class="{cls}" style="{_shade(r.teacher_mass)}" title="{escape(title)}">'
                     f"{_token(r.token)}</span>")
    return "".join(spans)


def _table(rows: list[TokenRow]) -> str:
    head = ("<tr><th>pos</th><th>next token</th><th>memory top (p_mem)</th><th>p_kNN(top)</th>"
            "<th>documents supporting the top</th><th>p_kNN(next)</th>"
            "<th>documents supporting the next token</th><th>sources in context of the next token</th></tr>")
    body = "".join(
        f"<tr><td>{r.position}{' (generated)' if r.generated else ''}</td><td class=\"mono\">{_token(repr(r.token))}"
        f"</td><td class=\"mono\">{_token(repr(r.predicted))} ({r.memory_prob:.3f})</td><td>{r.teacher_mass:.3f}</td>"
        f"<td>{_supports(r.supports)}</td><td>{r.next_mass:.3f}</td><td>{_supports(r.next_supports)}</td>"
        f"<td>{_supports(r.next_sources)}</td></tr>"
        for r in rows)
    return f"<table>{head}{body}</table>"


def render_html(explanation: Explanation) -> str:
    """The page (see the module docstring)."""
    lam = "" if explanation.lam is None else f"; generated tokens (underlined) at λ = {explanation.lam:g}"
    return (HEAD + f"<style>{STYLE}</style></head><body><h1>Where the memory's predictions come from</h1>"
            f"<p>Run <code>{escape(explanation.run)}</code>; neighbours in its datastore: k = {explanation.k}, "
            f"T = {explanation.temperature:g}{escape(lam)}. A document's weight is the kNN weight of its neighbours "
            "that hold the token; the weights of all documents sum to p_kNN of that token. Sources in context: the "
            "documents holding the token, weighted by their support of the text before it (shares).</p>"
            f"<p class=\"text\">{_text(explanation.rows)}</p>{_table(explanation.rows)}</body></html>\n")


def check_outputs(html: str | None, json_path: str | None) -> None:
    """Refuse ``explain --html``/``--json`` paths before any work: a folder, a path under a file, a file mlpmem
    did not write (:mod:`mlpmem.utils.outputs`), or both options naming one file."""
    if html:
        check_output_file(html, "--html", HEAD.encode())
    if json_path:
        check_output_file(json_path, "--json", JSON_HEAD)
    if html and json_path and Path(html).resolve() == Path(json_path).resolve():
        raise ConfigError(f"--html and --json both name {html}: give each its own file")


def write_html(explanation: Explanation, path: str | Path) -> Path:
    return write_output(Path(path), render_html(explanation).encode("utf-8"))


def write_json(explanation: Explanation, path: str | Path) -> Path:
    text = json.dumps(explanation, default=lambda o: o.__dict__, indent=1) + "\n"
    return write_output(Path(path), text.encode("utf-8"))
