"""``mlpmem explain``: per token the memory's top prediction and the documents supporting it, whose weights sum to
the teacher's mass on that token; as text and as an HTML page."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from helpers.fast import quiet_and_fast  # noqa: F401 (autouse: no fsync, one thread)
from helpers.maintenance import new_docs, tiny_run
from mlpmem.cli import main
from mlpmem.datastore import KeyStore
from mlpmem.maintenance.config import ExplainConfig, load_maintenance_config
from mlpmem.maintenance.documents import Holdings
from mlpmem.maintenance.explain import document_weights, explain_run, position_keys, sequence
from mlpmem.maintenance.explain_html import render_html
from mlpmem.maintenance.ledger import load_ledger
from mlpmem.maintenance.update import update_run
from mlpmem.teacher import TeacherStore, exclude_and_weight, knn_sparse

PROMPT = "The keeper lit the lamp early and watched the waves"


def test_document_weights_sum_to_the_teachers_mass(run_dir):
    """At every position of a prompt, the weights per document of the neighbours holding a token sum to p_kNN of
    that token as the teacher computes it (:func:`mlpmem.teacher.knn_sparse`, no self to exclude)."""
    run = tiny_run(run_dir)
    store = KeyStore(run.layout.datastore)
    teacher = TeacherStore(run.layout.teacher)
    k, temperature = int(teacher.manifest["k"]), float(teacher.manifest["temperature"])
    held = Holdings(load_ledger(run.layout, store.num_rows)["documents"])
    ids, _ = sequence(run, None, PROMPT, 0, 0.0)
    keys = position_keys(run, ids)  # (T, d)
    all_keys = store.array("keys").astype(np.float32)
    dists = ((keys[:, None, :] - all_keys[None]) ** 2).sum(-1)  # (T, N) exact
    order = np.argsort(dists, axis=1, kind="stable")[:, :k]
    d, i = np.take_along_axis(dists, order, 1).astype(np.float32), order.astype(np.int64)
    values = store.array("values")
    tok, prob, _ = knn_sparse(d, i, values, None, k, temperature, top_k=64)
    weights = exclude_and_weight(torch.from_numpy(d), torch.from_numpy(i), None, k, temperature).numpy()
    checked = 0
    for t in range(len(keys)):
        for token, p in zip(tok[t], prob[t]):
            if token < 0:
                continue
            by_doc = document_weights(weights[t], values[i[t]], i[t], int(token), held)
            assert sum(by_doc.values()) == pytest.approx(float(p), abs=1e-5)
            assert set(by_doc) <= set(range(len(held)))
            checked += 1
    assert checked > len(keys)


def test_explain_names_documents_and_their_weights_sum_to_the_teacher_mass(run_dir):
    explanation = explain_run(tiny_run(run_dir), PROMPT, ExplainConfig(documents=100), max_new_tokens=3)
    rows = explanation.rows
    assert sum(r.generated for r in rows) == 3 and not rows[0].generated
    for r in rows:
        assert 0.0 <= r.teacher_mass <= 1.0 + 1e-6 and 0.0 < r.memory_prob <= 1.0
        assert sum(s.weight for s in r.supports) == pytest.approx(r.teacher_mass, abs=1e-5)
        assert sum(s.weight for s in r.next_supports) == pytest.approx(r.next_mass, abs=1e-5)
        assert all(s.snippet and len(s.id) == 16 for s in r.supports)
    assert any(r.supports for r in rows)
    page = render_html(explanation)
    named = next(r for r in rows if r.supports).supports[0].name
    assert page.startswith("<!doctype html>") and "<table>" in page and named in page


def test_sources_in_context_hold_the_token_and_rank_by_the_text_before_it(run_dir, tmp_path):
    """A row's sources hold its token as a next token somewhere in the datastore, their weights are shares of the
    context support (summing to 1 when all are listed), and with a training document's own text as the prompt
    that document leads the sources once its first tokens have been read."""
    run = tiny_run(run_dir)
    store = KeyStore(run.layout.datastore)
    held = Holdings(load_ledger(run.layout, store.num_rows)["documents"])
    values = store.array("values")
    explanation = explain_run(run, PROMPT, ExplainConfig(documents=1000), max_new_tokens=2)
    assert not explanation.rows[0].next_sources  # nothing read yet: no context
    assert any(r.next_sources for r in explanation.rows)
    for r in explanation.rows:
        for token, sources in ((r.predicted_id, r.sources), (r.token_id, r.next_sources)):
            holders = {held.documents[j]["id"] for j in np.unique(held.document_of(np.flatnonzero(values == token)))}
            assert {s.id for s in sources} <= holders
            if sources:
                assert sum(s.weight for s in sources) == pytest.approx(1.0, abs=1e-6)
                assert [s.weight for s in sources] == sorted((s.weight for s in sources), reverse=True)
    own = next(d for d in held.documents if d["tokens"] > 12)
    text = run.backbone[1].decode(run.backbone[1](own["snippet"], add_special_tokens=False)["input_ids"][:12])
    rows = explain_run(run, text, ExplainConfig(documents=1)).rows
    led = [r.next_sources[0].id == own["id"] for r in rows[4:] if r.next_sources]
    assert led and sum(led) >= 0.75 * len(led)


def test_explain_sees_updated_documents(run_dir, tmp_path):
    update_run(tiny_run(run_dir), new_docs(tmp_path / "new.jsonl"),
               load_maintenance_config(overrides=["update.epochs=1"]))
    text = json.loads((tmp_path / "new.jsonl").read_text().splitlines()[0])["text"]
    explanation = explain_run(tiny_run(run_dir), text[:60], ExplainConfig(documents=1))
    names = {s.name for r in explanation.rows for s in r.next_supports}
    assert "new0" in names  # the prompt is the start of an added document: its own rows are the neighbours


def test_the_cli_prints_text_and_writes_html(run_dir, tmp_path, capsys):
    page, data = tmp_path / "explain.html", tmp_path / "explain.json"
    assert main(["explain", str(run_dir), "--prompt", PROMPT, "--html", str(page), "--json", str(data),
                 "--set", "explain.documents=2", "--quiet"]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"explain {run_dir}: k=") and "p_kNN(top)" in out and f"html: {page}" in out
    assert page.read_text().startswith("<!doctype html>")
    rows = json.loads(data.read_text())["rows"]
    assert rows and all(len(r["supports"]) <= 2 for r in rows)
    assert main(["explain", str(run_dir), "--prompt", "  ", "--quiet"]) == 2
