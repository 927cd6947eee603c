"""Probes of a forget: prompts where the forgotten documents' knowledge must not surface.

A forget teaches the backbone's distribution on the forgotten documents' own positions. A memory generalises, so it
can still answer about them at positions no document holds, e.g. after a question in a wording the documents never
use. ``mlpmem forget RUN --docs IDS --probes FILE`` adds such prompts (a JSON lines file of ``{"text"}``, or plain
text with one prompt per line): every position of each prompt, the position after its last token included, is
taught the backbone's own distribution as well, like a forgotten position (no cross-entropy). The keys come from the
run's own key extraction (:func:`~mlpmem.maintenance.operation.run_keys`: layer, site, windows and precision),
so they are the keys the memory sees at inference; they join no datastore.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np

from mlpmem.corpora.documents import Document, encode_documents
from mlpmem.errors import CorpusError, MlpmemError
from mlpmem.maintenance.documents import text_lines
from mlpmem.maintenance.finetune import TuneSet
from mlpmem.maintenance.operation import run_keys
from mlpmem.maintenance.targets import backbone_rows, pure_label, restrict_to_head
from mlpmem.pipeline.run import Run


def read_probes(path: str | Path) -> list[str]:
    """The prompts of a probes file: JSON lines with a string ``text``, or plain text, one prompt per line."""
    path = Path(path)
    if not path.is_file():
        raise CorpusError(f"probes file {path} does not exist")
    lines = text_lines(path)
    if not lines:
        raise CorpusError(f"probes file {path} holds no prompt")
    if not lines[0][1].startswith("{"):
        return [line for _, line in lines]
    out = []
    for n, line in lines:
        try:
            text = json.loads(line).get("text")
        except (json.JSONDecodeError, AttributeError):
            text = None
        if not isinstance(text, str) or not text.strip():
            raise CorpusError(f"{path}:{n} is not a JSON object with a non-empty string 'text'")
        out.append(text)
    return out


def probes_digest(probes: list[str]) -> str:
    """What a resumed forget compares: the sha256 of the prompts in order."""
    return hashlib.sha256(json.dumps(probes, ensure_ascii=False).encode()).hexdigest()


def probe_tokens(run: Run, probes: list[str]) -> list[np.ndarray]:
    """Each prompt as the run encodes a document, followed by the end-of-text token: its last position then predicts
    a token too, and is scored like every other."""
    tokenizer = run.backbone[1]
    end = tokenizer.eos_token_id if tokenizer.eos_token_id is not None else tokenizer.pad_token_id
    docs = [Document(f"probe-{i}", text) for i, text in enumerate(probes)]
    return [np.append(t, np.int32(end)).astype(np.int32) for t in encode_documents(docs, tokenizer)]


def probe_rows(run: Run, probes: list[str], folder: Path, head_ids: np.ndarray | None, top_k: int) -> TuneSet:
    """Every position of the probes: its key (the run's extraction, built or resumed in ``folder``), its next token
    and the backbone's top-``top_k`` distribution there (restricted to a corpus head), taught without cross-entropy."""
    cfg, model = run.cfg, run.backbone[0]
    tokens = probe_tokens(run, probes)
    store = run_keys(run, tokens, folder, "keys (probes)")
    rows = restrict_to_head(backbone_rows(model, tokens, cfg.corpus.block_size, cfg.corpus.stride, top_k,
                                          cfg.backbone.precision, cfg.datastore.batch_size), head_ids)
    if len(rows[0]) != store.num_rows:
        raise MlpmemError(f"probes: {store.num_rows} keys but {len(rows[0])} backbone rows (the key extraction and "
                          "the targets walk the windows differently)")
    values = store.array("values")
    if head_ids is not None:  # the rows carry no cross-entropy: a next token is never taught, but must be in the head
        values = np.where(np.isin(values, head_ids), values, head_ids[0]).astype(values.dtype)
    return TuneSet(store.array("keys"), values, *pure_label(rows))
