"""CuBE aggregation: scored answer tables in, summary figures out (pure Polars).

:func:`summarize` turns an answers and a scores table (CUBE_METHOD.md section 9)
into the content of ``summary.json``. The building blocks it is made of (rank
scores, recall@k, Pearson weights, trimmed means, bound normalisation,
cross-judge statistics) are exported for reuse, e.g. by the report. Nothing here
reads or writes files, and nothing imports ray, vllm or torch.
"""

from cube_ray.aggregate._math import (
    COUNT,
    RANK_SCORE,
    cross_judge,
    histogram,
    normalise,
    pearson,
    pearson_exprs,
    pearson_weights,
    rank_scores,
    recall_at_k,
    trim_count,
    trimmed_mean_exprs,
    trimmed_means,
)
from cube_ray.aggregate._options import AggregateOptions, BoundsOptions, WeightsError
from cube_ray.aggregate._separation import (
    MIN_NONZERO_PAIRS,
    NOT_SEPARATED,
    separated,
    wilcoxon_greater,
)
from cube_ray.aggregate._summary import DEGENERATE, OUTSIDE, WEIGHTED, summarize

__all__ = [
    "COUNT",
    "DEGENERATE",
    "MIN_NONZERO_PAIRS",
    "NOT_SEPARATED",
    "OUTSIDE",
    "RANK_SCORE",
    "WEIGHTED",
    "AggregateOptions",
    "BoundsOptions",
    "WeightsError",
    "cross_judge",
    "histogram",
    "normalise",
    "pearson",
    "pearson_exprs",
    "pearson_weights",
    "rank_scores",
    "recall_at_k",
    "separated",
    "summarize",
    "trim_count",
    "trimmed_mean_exprs",
    "trimmed_means",
    "wilcoxon_greater",
]
