"""``python -m studies bench infer``: time to first token and decoding speed of backbone, memory, kNN-LM and RAG.

All methods run the same frozen backbone on the same prompts (token windows of the default corpus's test
split), in one process, interleaved repetition by repetition after warm-up (see ``bench.common``):

  - **TTFT**: from the prompt ids to the first generated token id: one prefill forward with KV cache
    and ``logits_to_keep=1``, plus, for RAG, retrieval and building the longer prompt (timed inside);
  - **decode**: ``new_tokens - 1`` further greedy steps from that cache, in generated tokens/s (all
    sequences of the batch counted).

Methods, each built by :mod:`mlpmem.baselines.methods`: ``backbone``; ``memory``
(:class:`~mlpmem.inference.hf_model.MemoryAugmentedForCausalLM`, the run's trained memory and λ); ``knnlm``
(:class:`~mlpmem.baselines.knnlm.KnnLMDecoder`: one IVF-PQ search of ≥ 1M keys per kept position and step;
the run's k, T, λ); ``rag`` (:class:`~mlpmem.baselines.rag.RAG`: dense retrieval of ``rag_top_k`` passages of
the run's training corpus, the prompt placed after them, cut to one common length per batch). With
``ladder`` the memory is also timed without each decode optimization (memory on every prompt position,
separate heads, mixing through two log_softmax tensors) to measure each step's effect. The physical limit
of the memory's decode ratio at batch 1 — weight bytes read per step, backbone / (backbone + memory extra) —
is printed next to the measurement.

Modules: :mod:`.config` (the options), :mod:`.setup` (prompts and the timed methods of a finished run),
:mod:`.ladder` (the memory without each optimization), :mod:`.measure` (one measurement, the interleaved
repetitions, the summaries), :mod:`.report` (Markdown and figure), :mod:`.run` (the command).
"""
