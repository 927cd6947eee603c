"""``python -m studies bench scale``: throughput with 1 and N processes, peak memory against datastore size,
resume cost.

Five measurements, each in fresh subprocesses so that peak RSS and timings belong to one stage:

1. **Processes.** Key extraction (the datastore stage) and the teacher on the first ``--tokens`` training
   tokens of a config's corpus, launched with ``accelerate launch --multi_gpu --num_processes W`` for each W
   (on a machine without GPUs accelerate runs W CPU processes over gloo). Reported: wall time of the launch
   (process start included) and tokens/s of the stage itself (slowest process).
2. **Memory.** Synthetic keystores (random fp16 keys, ``--dim`` wide) of two sizes; for each, the peak RSS of
   the teacher (IVF-PQ filled shard by shard) and of ``--train-steps`` training steps reading rows from the
   memory-mapped shards, next to the peak RSS of training from keys held in RAM (the old way).
3. **Resume.** The teacher over the larger synthetic store: from scratch, then killed with SIGKILL once half of
   its shards are recorded and rerun: the rerun's time against the from-scratch time.
4. **Sharding.** ``--shard-steps`` training steps of a wide memory (``--shard-width``, 8 blocks) on the smaller
   synthetic store with 2 processes, DDP against FSDP: each process's peak RSS and the time per step.
5. **Corpus size.** The datastore stage (training split: tokenize to disk, then encode every window) over the
   config corpus's training documents repeated ``--corpus-repeats`` times, with a random 2-layer backbone that
   has the config's tokenizer (so millions of tokens encode in minutes; the backbone's weights are the same
   constant at every size). Next to it, the peak RSS of tokenizing the same split in RAM (the old way).

Modules: :mod:`.run` (the command: measure, write; its options are declared in :mod:`studies.cli`),
:mod:`.sections` (the five measurements, driving the workers), :mod:`.launch` (starting workers),
:mod:`.workers` (what runs in them; ``python -m studies.bench.scale WORKER ARGS`` via
:mod:`.__main__`), :mod:`.synthetic` (teacher and training over the synthetic keystores of
:mod:`studies.bench.synthetic_keys`), :mod:`.corpus` (the repeated corpus), :mod:`.report` (the Markdown).
"""
