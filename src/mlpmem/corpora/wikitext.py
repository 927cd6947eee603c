"""Plain text from MediaWiki markup: tables flattened, then gensim's ``filter_wiki`` and a second markup pass.

Tables (``{| ... |}``) are first flattened to one line per row with the cells joined by ``"; "``; then
``gensim.corpora.wikicorpus.filter_wiki`` removes templates, references, links and tags, and a second pass
strips what it leaves: ``'''``/``''`` quotes, ``==`` heading marks (the heading text stays on its own line),
list markers (``* # : ;``) at line starts, ``|`` remnants (gallery file names and image options are dropped,
captions kept), ``{{ }}``, ``[[ ]]``, magic words (``__TOC__``), HTML entities, lines with no letter at all
(number-only table cells), back-matter sections (References, External links, See also, Further reading,
Notes, Bibliography, ...) and headings left without any text under them; runs of blank lines collapse to one.
"""

from __future__ import annotations

import html
import re

_BACK_MATTER = frozenset(
    {
        "references", "external links", "see also", "further reading", "notes", "bibliography",
        "footnotes", "sources", "citations", "works cited", "notes and references",
        "references and notes", "general references", "general and cited references",
        "cited sources", "explanatory notes", "related articles", "other reading", "external link",
    }
)
_QUOTES = re.compile(r"'{2,}")
_HEADING = re.compile(r"^\s*(={1,6})\s*(.*?)\s*\1\s*$")
_LIST_MARKER = re.compile(r"^\s*[*#:;]+\s*")
_MAGIC_WORD = re.compile(r"__[A-Z]+__")
_EQUALS_RUN = re.compile(r"={2,}")
_FILE_PIECE = re.compile(
    r"^\s*((file|image|media|category):.*|.*\.(jpe?g|png|gif|svg|tiff?|ogg|ogv|oga|webm|pdf|mid)"
    r"|thumb|thumbnail|frame|frameless|border|left|right|center|centre|none|upright(=[\d.]+)?"
    r"|\d+px|\d*x\d+px|alt=.*)\s*$",
    re.IGNORECASE,
)
_LETTER = re.compile(r"[^\W\d_]")
_ALT_PARAMETER = re.compile(r"\|\s*alt\s*=[^|\]]*(?=[|\]])")
_ORPHAN_PUNCTUATION = re.compile(r"^[:;,]\s+")
_EMPTY_CELLS = re.compile(r"^(?:\s*;)+\s*|\s*(?:;\s*)+$|(?<=;)(?:\s*;)+")
_SPACES = re.compile(r"[ \t\u00a0\u2009\u200b]+")


def _split_top_level(text: str, separator: str) -> list[str]:
    """Split at ``separator`` where it is outside ``[[ ]]`` links and ``{{ }}`` templates."""
    parts, depth, start, i = [], 0, 0, 0
    while i < len(text):
        pair = text[i : i + 2]
        if pair in ("[[", "{{"):
            depth += 1
            i += 2
            continue
        if pair in ("]]", "}}"):
            depth = max(0, depth - 1)
            i += 2
            continue
        if depth == 0 and text.startswith(separator, i):
            parts.append(text[start:i])
            i += len(separator)
            start = i
            continue
        i += 1
    parts.append(text[start:])
    return parts


def _cell_content(cell: str) -> str:
    """A table cell without its attributes (``style="..." | content`` -> ``content``)."""
    pieces = _split_top_level(cell, "|")
    if len(pieces) > 1 and ("=" in pieces[0] or not pieces[0].strip()):
        return "|".join(pieces[1:]).strip()
    return cell.strip()


def _flatten_table(lines: list[str]) -> list[str]:
    """The lines of one ``{| ... |}`` table (without nested tables) as one line per row."""
    rows, cells, caption = [], [], []

    def close_row():
        content = [c for c in (_cell_content(c) for c in cells) if c]
        if content:
            rows.append("; ".join(content))
        cells.clear()

    for line in lines[1:-1]:
        stripped = line.strip()
        if stripped.startswith("|-"):
            close_row()
        elif stripped.startswith("|+"):
            caption.append(_cell_content(stripped[2:]))
        elif stripped.startswith(("|", "!")):
            separator = "||" if stripped.startswith("|") else "!!"
            body = stripped[1:]
            parts = _split_top_level(body, separator)
            if separator == "!!":
                parts = [p for part in parts for p in _split_top_level(part, "||")]
            cells.extend(parts)
        elif cells:
            cells[-1] += " " + stripped
        elif stripped:
            cells.append(stripped)
    close_row()
    return [c for c in caption if c] + rows


def _flatten_tables(raw: str) -> str:
    """Replace each wikitext table by its rows (innermost tables first), one line per row."""
    lines = raw.split("\n")
    changed = True
    while changed:
        changed = False
        start = None
        for index, line in enumerate(lines):
            stripped = line.lstrip()
            if stripped.startswith("{|"):
                start = index
            elif stripped.startswith("|}") and start is not None:
                lines[start : index + 1] = _flatten_table(lines[start : index + 1])
                changed = True
                break
    return "\n".join(lines)


def _clean_line(line: str) -> tuple[int, str]:
    """One line of ``filter_wiki`` output as ``(heading level or 0, text)``, its leftover markup removed."""
    level = 0
    match = _HEADING.match(line)
    if match and match.group(2).strip("= "):
        level, line = len(match.group(1)), match.group(2)
    else:
        line = _LIST_MARKER.sub("", line)
    line = _QUOTES.sub("", line)
    for mark in ("{{", "}}", "[[", "]]"):
        line = line.replace(mark, "")
    line = _EQUALS_RUN.sub("", line)
    if "|" in line:
        parts = [part.strip() for part in line.split("|")]
        line = " ".join(part for part in parts if part and not _FILE_PIECE.match(part))
    line = _EMPTY_CELLS.sub("", _SPACES.sub(" ", line)).strip()  # cells emptied by filter_wiki
    line = _ORPHAN_PUNCTUATION.sub("", line)  # ": gloss" whose leading symbol was a removed template
    return level, line


def _drop_back_matter(items: list[tuple[int, str]]) -> list[tuple[int, str]]:
    """Without back-matter sections (References, See also, ...) and their subsections."""
    kept: list[tuple[int, str]] = []
    skip_level = 0
    for level, line in items:
        if level and skip_level and level <= skip_level:
            skip_level = 0
        if skip_level:
            continue
        if level and line.strip().lower().rstrip(":") in _BACK_MATTER:
            skip_level = level
            continue
        kept.append((level, line))
    return kept


def _drop_empty_headings(items: list[tuple[int, str]]) -> list[tuple[int, str]]:
    """Without headings that have no text under them before the next heading of the same or a higher level."""
    result: list[tuple[int, str]] = []
    for level, line in reversed(items):
        if level:
            following = next((item for item in reversed(result) if item[0] or item[1]), None)
            if following is None or (following[0] and following[0] <= level):
                continue
        result.append((level, line))
    result.reverse()
    return result


def _join(items: list[tuple[int, str]]) -> str:
    """The text: each heading on its own line between blank lines, runs of blank lines collapsed to one."""
    out: list[str] = []
    for level, line in items:
        if level:
            if out and out[-1]:
                out.append("")
            out.append(line)
            out.append("")
        elif line or (out and out[-1]):
            out.append(line)
    return re.sub(r"\n{3,}", "\n\n", "\n".join(out)).strip()


def clean_wikitext(raw: str) -> str:
    """Plain text of one article's wikitext (see the module docstring for the steps)."""
    from gensim.corpora.wikicorpus import filter_wiki  # local: slow to import; mlpmem.corpora loads this module

    raw = _ALT_PARAMETER.sub("", raw)  # filter_wiki would keep an image's alt text when it comes last
    text = filter_wiki(_flatten_tables(raw))
    text = html.unescape(text)  # filter_wiki decodes once; doubly escaped entities (&amp;nbsp;) remain
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    text = _MAGIC_WORD.sub("", text)
    items: list[tuple[int, str]] = []  # (heading level or 0, line)
    for raw_line in text.split("\n"):
        level, line = _clean_line(raw_line)
        if line and not _LETTER.search(line):
            continue
        if level and not line:
            continue
        items.append((level, line))
    return _join(_drop_empty_headings(_drop_back_matter(items)))
