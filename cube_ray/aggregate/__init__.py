"""CuBE aggregation: scored answer tables in, summary figures out (pure Polars).

:func:`summarize` turns an answers and a scores table (CUBE_METHOD.md section 9)
into the content of ``summary.json``. The building blocks it is made of (rank
scores, recall@k, Pearson weights, trimmed means, bound normalisation,
cross-judge statistics) are exported for reuse, e.g. by the report. Nothing here
reads or writes files, and nothing imports ray, vllm or torch.

The package imports its modules on first use (PEP 562): the run config imports
:class:`AggregateOptions`, and every Ray worker that runs a stage imports the
config, so an eager import would load Polars and SciPy (about 95 MB) into
processes that never aggregate.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
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
    from cube_ray.aggregate._options import (
        AggregateOptions,
        BoundsOptions,
        WeightsError,
    )
    from cube_ray.aggregate._qualification import (
        MISSES_FAULTS,
        TOO_FEW_FAULTS,
        QualificationInput,
        fault_detection,
        fault_misses,
        qualification_block,
    )
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
    "MISSES_FAULTS",
    "NOT_SEPARATED",
    "OUTSIDE",
    "RANK_SCORE",
    "TOO_FEW_FAULTS",
    "WEIGHTED",
    "AggregateOptions",
    "BoundsOptions",
    "QualificationInput",
    "WeightsError",
    "cross_judge",
    "fault_detection",
    "fault_misses",
    "histogram",
    "normalise",
    "pearson",
    "pearson_exprs",
    "pearson_weights",
    "qualification_block",
    "rank_scores",
    "recall_at_k",
    "separated",
    "summarize",
    "trim_count",
    "trimmed_mean_exprs",
    "trimmed_means",
    "wilcoxon_greater",
]

_HOME = {
    "COUNT": "_math",
    "RANK_SCORE": "_math",
    "cross_judge": "_math",
    "histogram": "_math",
    "normalise": "_math",
    "pearson": "_math",
    "pearson_exprs": "_math",
    "pearson_weights": "_math",
    "rank_scores": "_math",
    "recall_at_k": "_math",
    "trim_count": "_math",
    "trimmed_mean_exprs": "_math",
    "trimmed_means": "_math",
    "AggregateOptions": "_options",
    "BoundsOptions": "_options",
    "WeightsError": "_options",
    "MISSES_FAULTS": "_qualification",
    "TOO_FEW_FAULTS": "_qualification",
    "QualificationInput": "_qualification",
    "fault_detection": "_qualification",
    "fault_misses": "_qualification",
    "qualification_block": "_qualification",
    "MIN_NONZERO_PAIRS": "_separation",
    "NOT_SEPARATED": "_separation",
    "separated": "_separation",
    "wilcoxon_greater": "_separation",
    "DEGENERATE": "_summary",
    "OUTSIDE": "_summary",
    "WEIGHTED": "_summary",
    "summarize": "_summary",
}
"""Where each exported name lives."""


def __getattr__(name: str) -> Any:
    """An exported name, imported from its module on first use."""
    module = _HOME.get(name)
    if module is None:
        msg = f"module {__name__!r} has no attribute {name!r}"
        raise AttributeError(msg)
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value
