"""``python -m studies bench breakeven``: when does the memory pay for its offline cost? Measured at several corpus
sizes, with the break-even requests against RAG and kNN-LM, the growth laws and a projection.

Modules: :mod:`.arithmetic` (total cost against requests, break-even, growth-law fits, the plot of one size),
:mod:`.config` (the options), :mod:`.stages` (one size: the pipeline run timed stage by stage, CPT and LoRA),
:mod:`.online` (one size: ``bench infer``'s timings, the kNN-LM index and RAG, storage), :mod:`.flops` (FLOP
estimates from parameter counts and tokens), :mod:`.projection` (the paper's regime, from FLOPs and measured
ratios), :mod:`.report` (results, Markdown, figure), :mod:`.run` (the command).
"""

from studies.bench.breakeven.arithmetic import (
    BreakEven,
    LinearLaw,
    MethodCost,
    PowerLaw,
    RequestShape,
    break_even,
    crossing_size,
    draw_totals,
    fit_linear,
    fit_power_law,
    plot_totals,
)

__all__ = ["BreakEven", "LinearLaw", "MethodCost", "PowerLaw", "RequestShape", "break_even", "crossing_size",
           "draw_totals", "fit_linear", "fit_power_law", "plot_totals"]
