"""Probes of a forget: every position of each prompt (the one after its last token included) is taught the
backbone's distribution beside the forgotten positions; the datastore and teacher are the same as without them."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
import torch

from helpers.fast import quiet_and_fast  # noqa: F401 (autouse: no fsync, one thread)
from helpers.maintenance import new_docs, state, tiny_run
from mlpmem.cli import main
from mlpmem.errors import CorpusError
from mlpmem.maintenance.config import load_maintenance_config
from mlpmem.maintenance.forget import forget_run
from mlpmem.maintenance.probes import probe_rows, probe_tokens, probes_digest, read_probes
from mlpmem.maintenance.update import update_run

QUICK = load_maintenance_config(overrides=["update.epochs=1", "forget.epochs=1", "forget.replay_ratio=1"])
PROBES = ["Question: Where does the harbour keeper live?\nAnswer:", "The keeper of the harbour"]


def test_probe_rows_are_every_position_under_the_backbone_distribution(run_dir, tmp_path):
    run = tiny_run(run_dir)
    tokens = probe_tokens(run, PROBES)
    model, tokenizer = run.backbone
    assert [int(t[-1]) for t in tokens] == [tokenizer.eos_token_id] * 2  # the last prompt position predicts one
    rows = probe_rows(run, PROBES, tmp_path / "keys", None, top_k=8)
    assert len(rows) == sum(len(t) - 1 for t in tokens)
    np.testing.assert_array_equal(rows.targets, np.concatenate([t[1:] for t in tokens]))
    assert (rows.ids[:, -1] == -1).all() and (rows.probs[:, -1] == 0).all()  # no cross-entropy column
    with torch.no_grad():  # the first prompt's last position: the backbone's most probable token leads its row
        logits = model(input_ids=torch.tensor(tokens[0][None, :-1], dtype=torch.long)).logits[0, -1]
    assert rows.ids[len(tokens[0]) - 2, 0] == int(logits.argmax())
    np.testing.assert_allclose(rows.probs[: len(tokens[0]) - 1].sum(1) + rows.residual[: len(tokens[0]) - 1], 1.0,
                               atol=1e-4)
    head = np.unique(np.concatenate([t[1:] for t in tokens]))[::2]  # a corpus head holding some of the tokens
    narrow = probe_rows(run, PROBES, tmp_path / "keys", head, top_k=8)  # the keys resumed from the folder
    np.testing.assert_array_equal(narrow.keys, rows.keys)
    assert np.isin(narrow.targets, head).all() and np.isin(narrow.ids[narrow.ids >= 0], head).all()


def test_a_forget_with_probes_tunes_on_them_and_leaves_the_same_datastore(run_dir, tmp_path):
    update_run(tiny_run(run_dir), new_docs(tmp_path / "new.jsonl"), QUICK)
    plain_dir = tmp_path / "plain"
    shutil.copytree(run_dir, plain_dir)
    plain = forget_run(tiny_run(plain_dir), ["new0"], QUICK)
    probed = forget_run(tiny_run(run_dir), ["new0"], QUICK, probes=PROBES)
    extra = sum(len(t) - 1 for t in probe_tokens(tiny_run(run_dir), PROBES))
    assert probed["probes"] == 2 and plain["probes"] == 0
    assert probed["tune_rows"] == plain["tune_rows"] + 2 * extra  # each probe row and its replayed row
    after, reference = state(run_dir), state(plain_dir)
    assert after["datastore"] == reference["datastore"] and after["teacher"] == reference["teacher"]
    assert after["memory"] != reference["memory"]
    ops = json.loads((run_dir / "maintenance" / "manifest.json").read_text())["operations"]
    assert ops[-1]["kind"] == "forget" and ops[-1]["counts"]["probes"] == 2


def test_read_probes_takes_lines_or_json_lines_and_refuses_bad_files(tmp_path):
    plain = tmp_path / "probes.txt"
    plain.write_text("Where does X live?\n\nWho employs X?\n")
    assert read_probes(plain) == ["Where does X live?", "Who employs X?"]
    jsonl = tmp_path / "probes.jsonl"
    jsonl.write_text(json.dumps({"text": "Question: A?\nAnswer:"}) + "\n")
    assert read_probes(jsonl) == ["Question: A?\nAnswer:"]
    jsonl.write_text(json.dumps({"text": "ok"}) + "\n" + json.dumps({"prompt": "no text"}) + "\n")
    with pytest.raises(CorpusError, match="probes.jsonl:2 is not a JSON object with a non-empty string 'text'"):
        read_probes(jsonl)
    with pytest.raises(CorpusError, match="does not exist"):
        read_probes(tmp_path / "missing.txt")
    (tmp_path / "empty.txt").write_text("\n")
    with pytest.raises(CorpusError, match="holds no prompt"):
        read_probes(tmp_path / "empty.txt")
    (tmp_path / "latin1.txt").write_bytes("Wo wohnt J\u00fcrgen?\n".encode("latin-1"))
    with pytest.raises(CorpusError, match="latin1.txt is not UTF-8"):
        read_probes(tmp_path / "latin1.txt")
    assert probes_digest(["a", "b"]) != probes_digest(["b", "a"])


def test_the_cli_forgets_with_probes(run_dir, tmp_path, capsys):
    update_run(tiny_run(run_dir), new_docs(tmp_path / "new.jsonl"), QUICK)
    probes = tmp_path / "probes.txt"
    probes.write_text("\n".join(PROBES[1:]) + "\n")
    assert main(["forget", str(run_dir), "--docs", "new1", "--probes", str(probes), "--set", "forget.epochs=1",
                 "--quiet"]) == 0
    assert "(1 probe prompt(s))" in capsys.readouterr().out
    before = state(run_dir)
    assert main(["forget", str(run_dir), "--docs", "new2", "--probes", str(tmp_path / "none.txt"), "--quiet"]) == 2
    assert "probes file" in capsys.readouterr().err and state(run_dir) == before
