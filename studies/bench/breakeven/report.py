"""The Markdown report and the figure of ``python -m studies bench breakeven``, written from its results alone."""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path

from mlpmem.reporting.plots import pyplot
from mlpmem.reporting.tables import markdown_table
from studies.bench.breakeven.arithmetic import BreakEven, MethodCost, RequestShape, draw_totals
from studies.bench.breakeven.config import BreakEvenConfig

OFFLINE = ("memory", "knnlm-exact", "knnlm", "rag", "cpt", "lora")
TIMED = ("backbone", "memory", "knnlm-exact", "knnlm", "rag")
LABELS = {"backbone": "backbone", "memory": "memory", "knnlm-exact": "kNN-LM (exact)", "knnlm": "kNN-LM (IVF-PQ)",
          "rag": "RAG", "cpt": "CPT", "lora": "LoRA"}


def _num(x: float | None, fmt: str = ".3g") -> str:
    return "—" if x is None else format(x, fmt)


def _mib(x: float | None) -> str:
    return "—" if x is None else f"{x / 2**20:,.2f}"


def _verdict(entry: dict | None) -> str:
    return "—" if entry is None else BreakEven(**{**entry, "against": LABELS[entry["against"]]}).describe()


def _shape(results: dict) -> RequestShape:
    return RequestShape(**results["request"])


NOT_OPTIONS = ("sizes", "overrides", "out_dir", "docs_dir")
"""Fields the command line gives otherwise (``--sizes``, ``--set``) or that only say where results go."""


def _options(cfg: dict) -> str:
    """``--name value`` of every option whose value is not the default, in the config's order (a list comma-joined,
    an empty one ``none``)."""
    defaults = asdict(BreakEvenConfig())
    out = ""
    for name, value in cfg.items():
        if name in NOT_OPTIONS or value == defaults.get(name):
            continue
        text = (",".join(str(v) for v in value) or "none") if isinstance(value, list) else str(value)
        out += f" --{name.replace('_', '-')} {text}"
    return out


def header(results: dict) -> list[str]:
    cfg, req = results["config"], results["request"]
    machine = results.get("machine") or {}
    sizes = ",".join(str(s) for s in cfg["sizes"])
    sets = "".join(f" --set {o}" for o in cfg["overrides"]) + _options(cfg)
    return ["# When does the memory pay for itself? Offline cost against per-request savings\n",
            f"`python -m studies bench breakeven {results['run_config']} --sizes {sizes}{sets}`: one full run per "
            f"corpus size (the training split capped at that many tokens), its stages timed as they ran; then "
            f"`bench infer` on it (backbone, memory, kNN-LM over the size's own datastore, RAG over its corpus). "
            f"Machine: {machine.get('cpu', '?')}, {machine.get('threads', '?')} threads, torch "
            f"{machine.get('torch', '?')}.\n",
            f"A request: a {req['prompt_tokens']}-token prompt, the first token (TTFT) and {req['new_tokens']} more "
            f"decoded (median of {cfg['repeats']} interleaved repetitions after {cfg['warmup']} warm-up). Total "
            f"cost of n requests = offline + n × (TTFT + {req['new_tokens']} × decode step), in seconds of this "
            f"machine; at batch {cfg['serving_batch']} a request pays its share of the batch's TTFT and steps.\n",
            "Offline: memory = key extraction (training split) + teacher + training to its end (early stopping as "
            "the config sets it); kNN-LM = key extraction + index (none for exact search); RAG = passage encoding + "
            "index; CPT and LoRA = their training (their requests cost the backbone's; not in the break-even). The "
            "kNN-LM sweep and the evaluation that choose k, T and λ are not counted for either. FLOPs are estimates "
            "from parameter counts × tokens (`studies/bench/breakeven/flops.py`), never counted.\n"]


def offline_table(entries: list[dict]) -> list[str]:
    names = [n for n in OFFLINE if any(n in e["offline_seconds"] for e in entries)]
    rows = []
    for e in entries:
        s, f, parts = e["offline_seconds"], e["offline_flops_estimate"], e["offline_seconds"]["memory_parts"]
        rows.append([f"{e['tokens']:,}", f"{parts['keys']:.1f} / {parts['teacher']:.1f} / {parts['train']:.1f}",
                     *[f"{_num(s.get(n), '.1f')} ({_num(f.get(n), '.2e')})" for n in names]])
    return ["## Offline cost per corpus size: seconds (estimated FLOPs)\n",
            markdown_table(["corpus tokens", "memory: keys / teacher / training s",
                            *[LABELS[n] for n in names]], rows), ""]


def online_table(entries: list[dict]) -> list[str]:
    rows = []
    for e in entries:
        for name in TIMED:
            for batch, v in sorted(e["online"].get(name, {}).items(), key=lambda kv: int(kv[0])):
                base = e["online"]["backbone"][batch]
                rows.append([f"{e['tokens']:,}", LABELS[name], batch, f"{1e3 * v['ttft_s']:.1f}",
                             f"{v['ttft_s'] / base['ttft_s']:.3f}", f"{v['decode_tok_s']:.1f}",
                             f"{v['decode_tok_s'] / base['decode_tok_s']:.3f}"])
    return ["## Online cost: TTFT and decode\n",
            markdown_table(["corpus tokens", "method", "batch", "TTFT ms", "TTFT / backbone", "decode tok/s",
                            "decode / backbone"], rows), ""]


def storage_table(entries: list[dict]) -> list[str]:
    names = [n for n in OFFLINE if any(n in e["storage_bytes"] for e in entries)]
    rows = [[f"{e['tokens']:,}", *[_mib(e["storage_bytes"].get(n)) for n in names]] for e in entries]
    return ["## Storage at inference besides the backbone's weights (MiB)\n",
            "Memory: its saved weights (a tied head is the backbone's); kNN-LM: fp16 keys + int32 next tokens (+ the "
            "IVF-PQ index, whose re-ranking reads the keys); RAG: passage embeddings + text; CPT: a whole new model; "
            "LoRA: its adapters.\n",
            markdown_table(["corpus tokens", *[LABELS[n] for n in names]], rows), ""]


def breakeven_table(entries: list[dict]) -> list[str]:
    rows = [[f"{e['tokens']:,}", batch, *[_verdict(by.get(o)) for o in ("rag", "knnlm-exact", "knnlm")]]
            for e in entries for batch, by in sorted(e["breakeven"].items(), key=lambda kv: int(kv[0]))]
    ratios = [f"{e['tokens']:,} tokens: {e['online']['rag']['1']['ttft_s'] / e['online']['memory']['1']['ttft_s']:.2f}"
              for e in entries if "rag" in e["online"]]
    return ["## Break-even: after how many requests the memory's total cost is below the other's\n",
            markdown_table(["corpus tokens", "batch", "vs RAG", "vs kNN-LM (exact)", "vs kNN-LM (IVF-PQ)"], rows), "",
            f"TTFT RAG ÷ memory (batch 1): {'; '.join(ratios)}.", "", *knn_ratio_lines(entries)]


def knn_ratio_lines(entries: list[dict]) -> list[str]:
    largest = max(entries, key=lambda e: e["tokens"])
    mem = largest["online"]["memory"]["1"]["decode_tok_s"]
    parts = [f"{LABELS[n]} {mem / largest['online'][n]['1']['decode_tok_s']:.2f}"
             for n in ("knnlm-exact", "knnlm") if n in largest["online"]]
    notes = [f"{e['tokens']:,} tokens: {e['ivfpq_note']}" for e in entries if e.get("ivfpq_note")]
    return [f"Decode tokens/s, memory ÷ kNN-LM at the largest measured datastore ({largest['tokens']:,} keys, "
            f"batch 1): {', '.join(parts)}.", "", *([f"IVF-PQ not timed: {'; '.join(notes)}.", ""] if notes else [])]


def search_table(searched: list[dict]) -> list[str]:
    """kNN-LM's decode over more keys than any measured corpus (:mod:`.search_scale`)."""
    if not searched:
        return []
    rows = [[f"{s['keys']:,}", f"{s['keys'] - s['real_keys']:,}", str(s["index"]["nlist"]),
             f"{s['index']['build_seconds']:.0f}", _mib(s["index"]["bytes"]), f"{1e3 * s['search_s_per_token']:.2f}",
             *[f"{s['decode_tok_s'][m]:.1f}" for m in ("backbone", "memory", "knnlm")],
             f"{s['memory_over_knnlm']:.2f}"] for s in searched]
    return ["## kNN-LM's search beyond the measured corpora (synthetic keys)\n",
            f"The largest size's run ({searched[0]['run_tokens']:,} corpus tokens) with its datastore topped up by "
            "synthetic keys, each a real key drawn at random plus Gaussian noise of 0.1 standard deviation per "
            "dimension, with that key's next token (`studies/bench/synthetic_keys.py`); IVF-PQ with lists sized to the "
            "keys, the same probes and codes, re-ranked from the fp16 keys; decode at batch 1. Only the search's "
            "cost is measured: what the synthetic neighbours predict is no kNN-LM's. Exact search is not timed "
            "at these counts (it holds every key in RAM as fp32).\n",
            markdown_table(["keys", "of them synthetic", "IVF lists", "index build s", "index MiB",
                            "search ms / token", "decode tok/s: backbone", "memory", "kNN-LM", "memory ÷ kNN-LM"],
                           rows), ""]


def growth_table(growth: dict) -> list[str]:
    rows = []
    for name, law in growth.items():
        if not law["points"]:
            continue
        lin, power = law.get("linear"), law.get("power")
        rows.append([name, law["unit"], len(law["points"]),
                     "—" if lin is None else f"{lin['slope'] * 1e6:.3g} per 1M tokens + {lin['intercept']:.3g} "
                                             f"(R² {lin['r2']:.3f})",
                     "—" if power is None else f"{power['exponent']:.2f} (R² {power['r2']:.3f})"])
    return ["## How each cost grows with the corpus (fitted on the measured sizes)\n",
            "A straight line in the corpus tokens, and the exponent b of a power law a·N^b (1: linear, 0: constant; "
            "an exact teacher's search is quadratic).\n",
            markdown_table(["cost", "unit", "sizes", "linear fit", "power-law exponent"], rows), ""]


def projection_lines(proj: dict) -> list[str]:
    lines = ["## Projection to the paper's regime (a projection, not a measurement)\n"]
    if "sizes" not in proj:
        return [*lines, proj["note"], ""]
    a = proj["assumptions"]
    lines += [f"From the largest measured size ({proj['from_tokens']:,} tokens): FLOPs of the paper's settings "
              f"(backbone {a['backbone_parameters']:.3g} parameters, keys of {a['key_dim']}, a memory of "
              f"{a['memory_parameters']:.3g} parameters trained {a['memory_epochs']:g} epochs, IVF-PQ with "
              f"{a['nlist']} lists, {a['nprobe']} probes, {a['pq_bytes']}-byte codes) divided by the FLOP/s this "
              f"machine reached on the same stage (the search's over {proj['rates_flop_s']['search_keys']:,} keys); "
              "decode and TTFT scale with the backbone's parameters and keep "
              "the measured ratios to it. The memory's size at 7B is an assumption. "
              "`studies/bench/breakeven/projection.py` lists every assumption.\n"]
    rows = [[f"{s['tokens']:.3g}", *[f"{s['flops'][m]:.2e}" for m in ("memory", "knnlm", "rag")],
             *[f"{s['seconds_this_machine'][m] / 3600:,.3g}" for m in ("memory", "knnlm", "rag")],
             f"{s['storage_bytes']['knnlm'] / 1e12:,.3g}", f"{s['decode_memory_over_knnlm']:.2f}",
             _verdict(s["breakeven"]["rag"]), _verdict(s["breakeven"]["knnlm"])] for s in proj["sizes"]]
    lines += [markdown_table(["corpus tokens", "memory FLOPs", "kNN-LM FLOPs", "RAG FLOPs", "memory h", "kNN-LM h",
                              "RAG h", "datastore TB", "decode memory ÷ kNN-LM", "vs RAG", "vs kNN-LM"], rows), ""]
    six = proj.get("decode_6x_tokens")
    lines += [f"The projected kNN-LM decode reaches 6× the memory's time per token (the paper's ratio) at "
              f"{six:.3g} corpus tokens." if six else "The projected kNN-LM decode does not reach 6× the memory's "
              "time per token at any corpus size: the search's fixed part alone does not, and it grows too slowly.",
              ""]
    return lines


def report(results: dict) -> str:
    entries = results["sizes"]
    lines = [*header(results), *offline_table(entries), *online_table(entries), *storage_table(entries),
             *breakeven_table(entries), *search_table(results.get("search_scale") or []),
             *growth_table(results["growth"]), *projection_lines(results["projection"]),
             "![total cost against requests, one panel per corpus size](breakeven.png)"]
    return "\n".join(lines) + "\n"


def _max_requests(entry: dict) -> int:
    found = [v["requests"] for by in entry["breakeven"].values() for v in by.values() if v["requests"]]
    return max(100, 10 * max(found)) if found else 10**6


def plot(results: dict, path: str | Path) -> Path:
    """Total cost against requests at batch 1, one line per method, one panel per corpus size."""
    plt, entries, shape = pyplot(), results["sizes"], _shape(results)
    fig, axes = plt.subplots(1, len(entries), figsize=(4.5 * len(entries), 3.8), squeeze=False)
    for ax, e in zip(axes[0], entries):
        methods = [MethodCost(LABELS[n], e["offline_seconds"][n], e["online"][n]["1"]["ttft_s"],
                              e["online"][n]["1"]["decode_s"]) for n in TIMED if n in e["online"]]
        draw_totals(ax, methods, shape, _max_requests(e), f"{e['tokens']:,} corpus tokens, batch 1", log=True)
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path
