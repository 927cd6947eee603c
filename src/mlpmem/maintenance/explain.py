"""``mlpmem explain RUN --prompt "..."``: where the memory's predictions come from, read off the offline datastore.

The memory needs no datastore at inference; its provenance is recovered from the datastore it was taught from.
For every position of the prompt (and of the tokens generated after it, with the memory mixed at λ), the key the
memory reads is searched in the datastore with the teacher's k and T. The neighbours give the kNN distribution the
teacher would have taught at that key, ``p_kNN(y) = Σ_i 1[v_i = y] w_i`` with ``w = softmax(−d / T)`` over the k
neighbours; grouping the neighbours that support a token by the document holding them gives each document's
weight, and the weights of all documents sum to the teacher's mass on that token, ``p_kNN(y)``. Rows show the
memory's top prediction, its probability, the teacher's mass on it and the documents best supporting it (and the
same for the token that actually comes next).

The neighbours of one key tell which documents hold positions *like this one*; for a question they are found by
the question's form, and every document holding the answer in that form supports it alike. Each row therefore
also names the **sources in context**: among the documents that hold the token anywhere in the datastore (as a
next token), the ones that support the text before it, ``context_j(t) = Σ_{s<t} w_j(s, x_{s+1})``, the summed
weight of document j over the earlier positions for the tokens that actually came (the prompt, then what was
generated). Their weights are shares of that context support (they sum to 1 over all such documents). For a
question about an entity, its name's tokens are supported by the entity's own documents, so the document that
holds the answer *and* the question's subject comes first.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch

from mlpmem.backbone import KeyHook
from mlpmem.compute import autocast, model_device
from mlpmem.corpora.documents import doc_start_token
from mlpmem.datastore import KeyStore
from mlpmem.errors import MlpmemError
from mlpmem.index import IndexConfig, open_or_build
from mlpmem.inference.hf_model import MemoryAugmentedForCausalLM
from mlpmem.inference.positions import check_positions
from mlpmem.maintenance.config import ExplainConfig
from mlpmem.maintenance.documents import Holdings
from mlpmem.maintenance.finetune import load_memory
from mlpmem.maintenance.ledger import holdings, load_ledger
from mlpmem.pipeline import records, require
from mlpmem.pipeline.run import Run
from mlpmem.teacher import TeacherStore, exclude_and_weight
from mlpmem.utils.shards import read_json


@dataclass
class Support:
    """One training document supporting a token: its weight is its neighbours' share of the kNN mass."""

    id: str
    name: str
    snippet: str
    weight: float


@dataclass
class TokenRow:
    position: int
    token: str
    """The token that comes next at this position (given, or generated)."""
    token_id: int
    generated: bool
    predicted: str
    """The memory's most probable next token."""
    predicted_id: int
    memory_prob: float
    teacher_mass: float
    """p_kNN(predicted): the sum of every document's weight in ``supports`` (and beyond the ones listed)."""
    supports: list[Support] = field(default_factory=list)
    next_mass: float = 0.0
    """p_kNN(token)."""
    next_supports: list[Support] = field(default_factory=list)
    sources: list[Support] = field(default_factory=list)
    """Documents holding the predicted token, by their support of the text before it (see the module docstring)."""
    next_sources: list[Support] = field(default_factory=list)
    """The same for the token that comes next."""


@dataclass
class Explanation:
    run: str
    prompt: str
    k: int
    temperature: float
    lam: float | None
    rows: list[TokenRow]


def document_weights(weights: np.ndarray, values: np.ndarray, neighbours: np.ndarray, token: int,
                     held: Holdings) -> dict[int, float]:
    """``{document index: weight}`` of one position: the kNN weights (k,) of the neighbours (datastore ids (k,),
    ``-1`` none) whose next token (``values`` (k,)) is ``token``, summed per document. They sum to p_kNN(token)."""
    support = (values == token) & (neighbours >= 0) & (weights > 0)
    docs = held.document_of(neighbours[support])
    out: dict[int, float] = {}
    for doc, w in zip(docs.tolist(), weights[support].tolist()):
        out[doc] = out.get(doc, 0.0) + w
    return out


def _supports(by_doc: dict[int, float], held: Holdings, cfg: ExplainConfig) -> list[Support]:
    best = sorted(by_doc.items(), key=lambda kv: (-kv[1], kv[0]))[: cfg.documents]
    return [Support(held.documents[j]["id"], held.documents[j]["name"],
                    held.documents[j]["snippet"][: cfg.snippet_chars].replace("\n", " "), w) for j, w in best]


def run_lambda(run: Run, cfg: ExplainConfig) -> float:
    """The memory weight for generated tokens: the configured one, else the run's validation choice (for its
    current memory), else 0.5."""
    if cfg.lam is not None:
        return cfg.lam
    if run.layout.results.is_file() and records.results_match_memory(run):
        return float(read_json(run.layout.results, "run results")["lambda"])
    return 0.5


@torch.no_grad()
def sequence(run: Run, memory, prompt: str, max_new_tokens: int, lam: float) -> tuple[torch.Tensor, int]:
    """``[doc_start, prompt tokens..., generated...]`` (1, T) and the number of given tokens (with doc_start)."""
    model, tokenizer = run.backbone
    ids = tokenizer(prompt, add_special_tokens=False)["input_ids"]
    if not ids:
        raise MlpmemError("--prompt encodes to no token with this tokenizer: give some text")
    given = torch.tensor([[doc_start_token(tokenizer), *ids]], device=model_device(model))
    check_positions(model.config, given.shape[1], max_new_tokens)
    if max_new_tokens < 1:
        return given, given.shape[1]
    mixed = MemoryAugmentedForCausalLM.from_parts(model, memory, lam=lam, tokenizer=tokenizer)
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    out = mixed.generate(input_ids=given, attention_mask=torch.ones_like(given), max_new_tokens=max_new_tokens,
                         do_sample=False, pad_token_id=pad)
    return out.cpu(), given.shape[1]


@torch.no_grad()
def position_keys(run: Run, ids: torch.Tensor) -> np.ndarray:
    """The keys (T, d) the memory reads at every position, rounded to fp16 like the datastore's."""
    model, cfg = run.backbone[0], run.cfg.backbone
    with autocast(model, cfg.precision), KeyHook(model, cfg.layer, cfg.site) as hook:
        ids = ids.to(model_device(model))
        model(input_ids=ids, attention_mask=torch.ones_like(ids), use_cache=False)
    return hook.keys[0].to(torch.float16).float().cpu().numpy()


class Explainer:
    """A run's datastore, its documents, its memory and the teacher's search, opened once for many prompts."""

    def __init__(self, run: Run, cfg: ExplainConfig):
        self.run, self.cfg = run, cfg
        self.store = KeyStore(run.layout.datastore)
        self.store.check_backbone(*run.backbone)
        teacher = TeacherStore(run.layout.teacher, datastore=self.store, verify=False)
        records.verify_memory(run)
        self.held = holdings(load_ledger(run.layout, self.store.num_rows))
        self.memory = load_memory(run)
        self.k, self.temperature = cfg.k or int(teacher.manifest["k"]), float(teacher.manifest["temperature"])
        self.index = open_or_build(self.store, IndexConfig(**teacher.manifest["index"]), teacher.path / "index")
        self.values = self.store.rows("values")
        self._holders: dict[int, np.ndarray] = {}

    @torch.no_grad()
    def explain(self, prompt: str, max_new_tokens: int = 0) -> Explanation:
        """Every position of ``prompt`` and of ``max_new_tokens`` generated tokens (see the module docstring)."""
        lam = run_lambda(self.run, self.cfg) if max_new_tokens > 0 else None
        ids, given = sequence(self.run, self.memory, prompt, max_new_tokens, lam or 0.0)
        keys = position_keys(self.run, ids)[:-1]  # (T - 1, d): position t predicts token t + 1
        dists, neighbours = self.index.search(keys, self.k)  # (T - 1, k)
        weights = exclude_and_weight(torch.from_numpy(dists), torch.from_numpy(neighbours), None, self.k,
                                     self.temperature).numpy()  # (T - 1, k)
        values = self.values[np.clip(neighbours, 0, None)]  # (T - 1, k)
        p_mem = torch.softmax(self.memory(torch.from_numpy(keys).to(model_device(self.memory))).float(), -1).cpu()
        tops = p_mem.argmax(-1)  # (T - 1,)
        self._find_holders({*tops.tolist(), *ids[0, 1:].tolist()})
        context, rows = np.zeros(len(self.held)), []  # (documents,): support of the text before position t
        for t in range(len(keys)):
            following = document_weights(weights[t], values[t], neighbours[t], int(ids[0, t + 1]), self.held)
            rows.append(self._row(t, ids[0], given, p_mem[t], int(tops[t]), weights[t], values[t], neighbours[t],
                                  following, context))
            for doc, w in following.items():
                context[doc] += w
        return Explanation(str(self.run.dir), prompt, self.k, self.temperature, lam, rows)

    def _row(self, t: int, ids: torch.Tensor, given: int, p_mem: torch.Tensor, top: int, weights: np.ndarray,
             values: np.ndarray, neighbours: np.ndarray, following: dict[int, float], context: np.ndarray) -> TokenRow:
        decode, held, cfg = self.run.backbone[1].decode, self.held, self.cfg
        nxt = int(ids[t + 1])
        predicted = document_weights(weights, values, neighbours, top, held)
        return TokenRow(t + 1, decode([nxt]), nxt, t + 1 >= given, decode([top]), top, float(p_mem[top]),
                        float(sum(predicted.values())), _supports(predicted, held, cfg),
                        float(sum(following.values())), _supports(following, held, cfg),
                        self._sources(top, context), self._sources(nxt, context))

    def _find_holders(self, tokens: set[int]) -> None:
        """For every token of ``tokens`` not yet looked up, the documents (sorted indices) holding it as the next
        token of one of their positions: one pass over the datastore's values for all of them."""
        wanted = np.array(sorted(tokens - set(self._holders)), np.int64)
        if not len(wanted):
            return
        rows, vals = [], []
        for first, chunk in self.values.chunks():
            hit = np.flatnonzero(np.isin(chunk, wanted))
            rows.append(first + hit)
            vals.append(chunk[hit])
        docs, vals = self.held.document_of(np.concatenate(rows)), np.concatenate(vals)
        for token in wanted.tolist():
            self._holders[token] = np.unique(docs[vals == token])

    def _sources(self, token: int, context: np.ndarray) -> list[Support]:
        docs = self._holders[token]
        support = context[docs]
        total = support.sum()
        if total <= 0:
            return []
        return _supports({int(j): float(w / total) for j, w in zip(docs, support) if w > 0}, self.held, self.cfg)


def explain_run(run: Run, prompt: str, cfg: ExplainConfig, max_new_tokens: int = 0) -> Explanation:
    """Explain every position of ``prompt`` (and of ``max_new_tokens`` generated tokens), under the run folder's
    lock."""
    with run.locked():
        require(run, ("datastore", "teacher", "train"))
        return Explainer(run, cfg).explain(prompt, max_new_tokens)


def format_text(explanation: Explanation) -> str:
    """The explanation as plain text: one line a token, then one indented line per supporting document and one
    (``ctx``) per source in context of the top prediction."""
    lam = "" if explanation.lam is None else f", generated at λ={explanation.lam:g}"
    lines = [f"explain {explanation.run}: k={explanation.k}, T={explanation.temperature:g}{lam}",
             "pos  next token            memory top (p_mem)          p_kNN(top)  documents supporting the top"]
    for r in explanation.rows:
        mark = "+" if r.generated else " "
        lines.append(f"{r.position:>3}{mark} {r.token!r:<20} {r.predicted!r:<18} ({r.memory_prob:.3f})   "
                     f"{r.teacher_mass:.3f}")
        for s in r.supports:
            lines.append(f"       {s.weight:.3f}  {s.name} [{s.id}]  {s.snippet!r}")
        for s in r.sources:
            lines.append(f"   ctx {s.weight:.3f}  {s.name} [{s.id}]  {s.snippet!r}")
    lines.append("(+: generated; the weights of all documents sum to p_kNN(top); ctx: the documents holding the top "
                 "token, by their support of the text before it, as shares)")
    return "\n".join(lines)
