"""Speed benchmarks: ``mlpmem bench infer`` (inference) and ``mlpmem bench offline`` (offline stages)."""
