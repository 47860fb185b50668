"""CuBE aggregation: scored answer tables in, summary figures out (pure Polars).

:func:`summarize` turns an answers and a scores table (CUBE_METHOD.md section 9)
into the typed content of ``summary.json`` (:class:`Summary`);
:func:`headline_intervals` adds the headline's bootstrap intervals
(:func:`bootstrap_cube`, whose replicates :func:`evaluate_replicates` computes
with the same Polars kernels). The building blocks (rank scores, recall@k,
Pearson weights, trimmed means, bound normalisation, cross-judge statistics)
are exported for reuse. Nothing here reads or writes files except
:meth:`Summary.read` / :meth:`Summary.write`, and nothing imports ray, vllm or
torch.

The package imports its modules on first use (PEP 562): the run config imports
:class:`AggregateOptions`, and every Ray worker that runs a stage imports the
config, so an eager import would load Polars and SciPy (about 95 MB) into
processes that never aggregate.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from cube_ray.aggregate._agreement import (
        HUMAN_JUDGE,
        RATER,
        HumanComparison,
        PairStats,
        compare_with_humans,
        judge_agreement,
        krippendorff_alpha_interval,
        pair_stats,
        score_matrix,
    )
    from cube_ray.aggregate._availability import (
        BOUND_UNAVAILABLE,
        SYSTEM_UNAVAILABLE,
        UNAVAILABLE_CODES,
        incomplete_reasons,
        unavailable_sets,
    )
    from cube_ray.aggregate._bootstrap import (
        CubeReplicates,
        FixedWeights,
        evaluate_replicates,
        fixed_judge_mean,
        k_of,
    )
    from cube_ray.aggregate._diagnostics import (
        rank_correlations,
        recall_curve,
    )
    from cube_ray.aggregate._intervals import (
        BootstrapResult,
        bootstrap_cube,
        headline_intervals,
        with_intervals,
    )
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
        weighted_totals,
    )
    from cube_ray.aggregate._model import (
        BOUNDS_NOT_SEPARATED,
        DEGENERATE_BOUNDS,
        MISSING_SCORES,
        NO_JUDGE_SEPARATES,
        NO_RETRIEVED_QUESTIONS,
        SCHEMA_VERSION,
        AcrossJudges,
        Counts,
        CrossJudgeFigure,
        FigureInterval,
        Flag,
        Intervals,
        JudgeFigures,
        Qualification,
        Reason,
        Sample,
        SampleStratum,
        Separation,
        Summary,
        SystemInterval,
        WithoutOwnModel,
    )
    from cube_ray.aggregate._options import (
        AggregateOptions,
        BoundsOptions,
        WeightsError,
    )
    from cube_ray.aggregate._parts import (
        CUBE,
    )
    from cube_ray.aggregate._qualification import (
        MISSES_FAULTS,
        TOO_FEW_FAULTS,
        QualificationInput,
        fault_detection,
        fault_misses,
        qualification_block,
    )
    from cube_ray.aggregate._resample import (
        DEFAULT_INTERVAL,
        INTERVAL_METHODS,
        IntervalMethod,
        bca_interval,
        check_method,
        jackknife_indices,
        percentile_interval,
        resample_indices,
        strata_positions,
    )
    from cube_ray.aggregate._separation import (
        MIN_NONZERO_PAIRS,
        NOT_SEPARATED,
        separated,
        wilcoxon_greater,
    )
    from cube_ray.aggregate._summary import DEGENERATE, OUTSIDE, WEIGHTED, summarize
    from cube_ray.aggregate._text import (
        bleu,
        lcs_length,
        rouge_l,
        text_baselines,
        tokenize,
    )

__all__ = [
    "BOUNDS_NOT_SEPARATED",
    "BOUND_UNAVAILABLE",
    "COUNT",
    "CUBE",
    "DEFAULT_INTERVAL",
    "DEGENERATE",
    "DEGENERATE_BOUNDS",
    "HUMAN_JUDGE",
    "INTERVAL_METHODS",
    "MIN_NONZERO_PAIRS",
    "MISSES_FAULTS",
    "MISSING_SCORES",
    "NOT_SEPARATED",
    "NO_JUDGE_SEPARATES",
    "NO_RETRIEVED_QUESTIONS",
    "OUTSIDE",
    "RANK_SCORE",
    "RATER",
    "SCHEMA_VERSION",
    "SYSTEM_UNAVAILABLE",
    "TOO_FEW_FAULTS",
    "UNAVAILABLE_CODES",
    "WEIGHTED",
    "AcrossJudges",
    "AggregateOptions",
    "BootstrapResult",
    "BoundsOptions",
    "Counts",
    "CrossJudgeFigure",
    "CubeReplicates",
    "FigureInterval",
    "FixedWeights",
    "Flag",
    "HumanComparison",
    "IntervalMethod",
    "Intervals",
    "JudgeFigures",
    "PairStats",
    "Qualification",
    "QualificationInput",
    "Reason",
    "Sample",
    "SampleStratum",
    "Separation",
    "Summary",
    "SystemInterval",
    "WeightsError",
    "WithoutOwnModel",
    "bca_interval",
    "bleu",
    "bootstrap_cube",
    "check_method",
    "compare_with_humans",
    "cross_judge",
    "evaluate_replicates",
    "fault_detection",
    "fault_misses",
    "fixed_judge_mean",
    "headline_intervals",
    "histogram",
    "incomplete_reasons",
    "jackknife_indices",
    "judge_agreement",
    "k_of",
    "krippendorff_alpha_interval",
    "lcs_length",
    "normalise",
    "pair_stats",
    "pearson",
    "pearson_exprs",
    "pearson_weights",
    "percentile_interval",
    "qualification_block",
    "rank_correlations",
    "rank_scores",
    "recall_at_k",
    "recall_curve",
    "resample_indices",
    "rouge_l",
    "score_matrix",
    "separated",
    "strata_positions",
    "summarize",
    "text_baselines",
    "tokenize",
    "trim_count",
    "trimmed_mean_exprs",
    "trimmed_means",
    "unavailable_sets",
    "weighted_totals",
    "wilcoxon_greater",
    "with_intervals",
]

_HOME = {
    "BOUND_UNAVAILABLE": "_availability",
    "SYSTEM_UNAVAILABLE": "_availability",
    "UNAVAILABLE_CODES": "_availability",
    "incomplete_reasons": "_availability",
    "unavailable_sets": "_availability",
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
    "CubeReplicates": "_bootstrap",
    "FixedWeights": "_bootstrap",
    "evaluate_replicates": "_bootstrap",
    "fixed_judge_mean": "_bootstrap",
    "k_of": "_bootstrap",
    "BootstrapResult": "_intervals",
    "bootstrap_cube": "_intervals",
    "headline_intervals": "_intervals",
    "with_intervals": "_intervals",
    "weighted_totals": "_math",
    "BOUNDS_NOT_SEPARATED": "_model",
    "DEGENERATE_BOUNDS": "_model",
    "MISSING_SCORES": "_model",
    "NO_JUDGE_SEPARATES": "_model",
    "NO_RETRIEVED_QUESTIONS": "_model",
    "SCHEMA_VERSION": "_model",
    "FigureInterval": "_model",
    "Intervals": "_model",
    "Reason": "_model",
    "Summary": "_model",
    "SystemInterval": "_model",
    "WithoutOwnModel": "_model",
    "DEFAULT_INTERVAL": "_resample",
    "INTERVAL_METHODS": "_resample",
    "IntervalMethod": "_resample",
    "bca_interval": "_resample",
    "check_method": "_resample",
    "jackknife_indices": "_resample",
    "percentile_interval": "_resample",
    "resample_indices": "_resample",
    "strata_positions": "_resample",
    "HUMAN_JUDGE": "_agreement",
    "RATER": "_agreement",
    "HumanComparison": "_agreement",
    "PairStats": "_agreement",
    "compare_with_humans": "_agreement",
    "judge_agreement": "_agreement",
    "krippendorff_alpha_interval": "_agreement",
    "pair_stats": "_agreement",
    "score_matrix": "_agreement",
    "bleu": "_text",
    "lcs_length": "_text",
    "rouge_l": "_text",
    "text_baselines": "_text",
    "tokenize": "_text",
    "rank_correlations": "_diagnostics",
    "recall_curve": "_diagnostics",
    "AcrossJudges": "_model",
    "CrossJudgeFigure": "_model",
    "Flag": "_model",
    "JudgeFigures": "_model",
    "Separation": "_model",
    "Counts": "_model",
    "Sample": "_model",
    "SampleStratum": "_model",
    "Qualification": "_model",
    "CUBE": "_parts",
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
