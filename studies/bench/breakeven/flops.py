"""FLOP estimates of the offline stages from parameter counts and tokens: estimates, never counted.

A dense forward costs 2 FLOPs per parameter per token, a training step 6 (forward, gradients of the inputs and of
the weights), a frozen weight inside a trained model 4 (no weight gradient). Attention's own products over the
context, norms and activations are left out (small against the weights at these widths). A search costs 2·d per
key or centroid compared; an IVF-PQ list scan one add per code byte. FAISS's k-means runs ``KMEANS_ITERS``
iterations over its training sample.
"""

from __future__ import annotations

from dataclasses import dataclass

from torch import nn

KMEANS_ITERS = 25
"""FAISS's default k-means iterations (``ClusteringParameters.niter``)."""
PQ_CENTROIDS = 256
"""Centroids per PQ sub-quantizer (8-bit codes)."""


@dataclass(frozen=True)
class BackboneCounts:
    """Parameters of a backbone: all of them, per transformer layer, and the layers there are."""

    parameters: int
    per_layer: int
    layers: int

    def up_to(self, layer: int) -> int:
        """Parameters of the layers ``0..layer`` (what a key pass that stops after ``layer`` runs)."""
        return self.per_layer * (layer + 1)


def backbone_counts(model: nn.Module) -> BackboneCounts:
    """Parameter counts of a causal LM (embeddings and head apart from the layers, tied tensors once)."""
    seen, total = set(), 0
    for p in model.parameters():
        if p.data_ptr() not in seen:
            seen.add(p.data_ptr())
            total += p.numel()
    layers = model.config.num_hidden_layers
    outside = {p.data_ptr(): p.numel() for m in (model.get_input_embeddings(), model.get_output_embeddings())
               for p in m.parameters()}
    return BackboneCounts(total, (total - sum(outside.values())) // layers, layers)


def key_extraction(counts: BackboneCounts, layer: int, scored_tokens: int, block: int, stride: int) -> float:
    """The datastore's key pass: windows of ``block`` tokens every ``stride`` (each scored token is read
    ``block / stride`` times), the layers up to the key layer."""
    return 2.0 * counts.up_to(layer) * scored_tokens * block / stride


def search(kind: str, dim: int, keys: int, queries: int, nlist: int = 1, nprobe: int = 1, pq_bytes: int = 1) -> float:
    """``queries`` nearest-neighbour searches over ``keys`` keys of ``dim`` floats (exact, IVF-flat or IVF-PQ)."""
    if kind == "exact":
        return 2.0 * dim * keys * queries
    scanned = keys * min(nprobe, nlist) / nlist  # keys in the lists a query visits
    if kind == "ivf_flat":
        return queries * 2.0 * dim * (nlist + scanned)
    return queries * (2.0 * dim * (nlist + PQ_CENTROIDS) + scanned * pq_bytes)  # coarse + look-up tables + scan


def ivf_build(kind: str, dim: int, keys: int, nlist: int, train: int) -> float:
    """Training an IVF index (k-means of the lists; PQ codebooks) on ``train`` keys, then adding all ``keys``."""
    if kind == "exact":
        return 0.0
    centroids = nlist + (PQ_CENTROIDS if kind == "ivf_pq" else 0)
    return 2.0 * dim * centroids * (KMEANS_ITERS * train + keys)


def memory_training(trainable: int, frozen: int, tokens_seen: int) -> float:
    """The memory's training: 6 FLOPs per trainable parameter per token, 4 per frozen one (a tied head)."""
    return (6.0 * trainable + 4.0 * frozen) * tokens_seen


def finetune(backbone_parameters: int, trainable: int, tokens: int, full: bool) -> float:
    """CPT (``full``: every weight trained) or LoRA (the backbone frozen, ``trainable`` adapter weights)."""
    if full:
        return 6.0 * backbone_parameters * tokens
    return (4.0 * backbone_parameters + 6.0 * trainable) * tokens


def encoding(encoder_parameters: int | None, tokens: int) -> float | None:
    """RAG's passage encoding (the corpus tokens through the sentence encoder); None without an encoder (BM25)."""
    return None if encoder_parameters is None else 2.0 * encoder_parameters * tokens
