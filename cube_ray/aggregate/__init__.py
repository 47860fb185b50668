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

Each export is named once, below, as ``name as name`` (an explicit re-export).
The options models (:class:`AggregateOptions`, :class:`BoundsOptions`) live with
the run config that owns them (:mod:`cube_ray.config`), so the config no longer
imports this package, and Ray workers that run stages never load it, nor Polars
and SciPy with it (``tests/unit/test_lazy_imports.py``).
"""

from cube_ray.aggregate._agreement import (
    HUMAN_JUDGE as HUMAN_JUDGE,
)
from cube_ray.aggregate._agreement import (
    RATER as RATER,
)
from cube_ray.aggregate._agreement import (
    HumanComparison as HumanComparison,
)
from cube_ray.aggregate._agreement import (
    PairStats as PairStats,
)
from cube_ray.aggregate._agreement import (
    compare_with_humans as compare_with_humans,
)
from cube_ray.aggregate._agreement import (
    judge_agreement as judge_agreement,
)
from cube_ray.aggregate._agreement import (
    krippendorff_alpha_interval as krippendorff_alpha_interval,
)
from cube_ray.aggregate._agreement import (
    pair_stats as pair_stats,
)
from cube_ray.aggregate._agreement import (
    score_matrix as score_matrix,
)
from cube_ray.aggregate._availability import (
    BOUND_UNAVAILABLE as BOUND_UNAVAILABLE,
)
from cube_ray.aggregate._availability import (
    SYSTEM_UNAVAILABLE as SYSTEM_UNAVAILABLE,
)
from cube_ray.aggregate._availability import (
    UNAVAILABLE_CODES as UNAVAILABLE_CODES,
)
from cube_ray.aggregate._availability import (
    incomplete_reasons as incomplete_reasons,
)
from cube_ray.aggregate._availability import (
    unavailable_sets as unavailable_sets,
)
from cube_ray.aggregate._bootstrap import (
    CubeReplicates as CubeReplicates,
)
from cube_ray.aggregate._bootstrap import (
    FixedWeights as FixedWeights,
)
from cube_ray.aggregate._bootstrap import (
    evaluate_replicates as evaluate_replicates,
)
from cube_ray.aggregate._bootstrap import (
    fixed_judge_mean as fixed_judge_mean,
)
from cube_ray.aggregate._calibrated import (
    CalibrationResult as CalibrationResult,
)
from cube_ray.aggregate._calibrated import (
    calibrate as calibrate,
)
from cube_ray.aggregate._calibrated import (
    calibrated_value as calibrated_value,
)
from cube_ray.aggregate._calibrated import (
    effective_gain as effective_gain,
)
from cube_ray.aggregate._calibrated import (
    power_tuned_lambda as power_tuned_lambda,
)
from cube_ray.aggregate._calibrated import (
    with_calibration as with_calibration,
)
from cube_ray.aggregate._diagnostics import (
    rank_correlations as rank_correlations,
)
from cube_ray.aggregate._diagnostics import (
    recall_curve as recall_curve,
)
from cube_ray.aggregate._frames import (
    CUBE as CUBE,
)
from cube_ray.aggregate._intervals import (
    BootstrapResult as BootstrapResult,
)
from cube_ray.aggregate._intervals import (
    bootstrap_cube as bootstrap_cube,
)
from cube_ray.aggregate._intervals import (
    headline_intervals as headline_intervals,
)
from cube_ray.aggregate._intervals import (
    summary_replicates as summary_replicates,
)
from cube_ray.aggregate._intervals import (
    with_intervals as with_intervals,
)
from cube_ray.aggregate._math import (
    COUNT as COUNT,
)
from cube_ray.aggregate._math import (
    RANK_SCORE as RANK_SCORE,
)
from cube_ray.aggregate._math import (
    cross_judge as cross_judge,
)
from cube_ray.aggregate._math import (
    histogram as histogram,
)
from cube_ray.aggregate._math import (
    normalise as normalise,
)
from cube_ray.aggregate._math import (
    pearson as pearson,
)
from cube_ray.aggregate._math import (
    pearson_exprs as pearson_exprs,
)
from cube_ray.aggregate._math import (
    pearson_weights as pearson_weights,
)
from cube_ray.aggregate._math import (
    rank_scores as rank_scores,
)
from cube_ray.aggregate._math import (
    recall_at_k as recall_at_k,
)
from cube_ray.aggregate._math import (
    trim_count as trim_count,
)
from cube_ray.aggregate._math import (
    trimmed_mean_exprs as trimmed_mean_exprs,
)
from cube_ray.aggregate._math import (
    trimmed_means as trimmed_means,
)
from cube_ray.aggregate._math import (
    weighted_totals as weighted_totals,
)
from cube_ray.aggregate._model import (
    BOUNDS_NOT_SEPARATED as BOUNDS_NOT_SEPARATED,
)
from cube_ray.aggregate._model import (
    DEGENERATE_BOUNDS as DEGENERATE_BOUNDS,
)
from cube_ray.aggregate._model import (
    MISSING_SCORES as MISSING_SCORES,
)
from cube_ray.aggregate._model import (
    NO_JUDGE_SEPARATES as NO_JUDGE_SEPARATES,
)
from cube_ray.aggregate._model import (
    NO_RETRIEVED_QUESTIONS as NO_RETRIEVED_QUESTIONS,
)
from cube_ray.aggregate._model import (
    NO_SHARED_JURY as NO_SHARED_JURY,
)
from cube_ray.aggregate._model import (
    SCHEMA_VERSION as SCHEMA_VERSION,
)
from cube_ray.aggregate._model import (
    AcrossJudges as AcrossJudges,
)
from cube_ray.aggregate._model import (
    CalibratedAcross as CalibratedAcross,
)
from cube_ray.aggregate._model import (
    CalibratedFigure as CalibratedFigure,
)
from cube_ray.aggregate._model import (
    Calibration as Calibration,
)
from cube_ray.aggregate._model import (
    Counts as Counts,
)
from cube_ray.aggregate._model import (
    CrossJudgeFigure as CrossJudgeFigure,
)
from cube_ray.aggregate._model import (
    FigureInterval as FigureInterval,
)
from cube_ray.aggregate._model import (
    Flag as Flag,
)
from cube_ray.aggregate._model import (
    Intervals as Intervals,
)
from cube_ray.aggregate._model import (
    JudgeDifference as JudgeDifference,
)
from cube_ray.aggregate._model import (
    JudgeFigures as JudgeFigures,
)
from cube_ray.aggregate._model import (
    PairedComparison as PairedComparison,
)
from cube_ray.aggregate._model import (
    Qualification as Qualification,
)
from cube_ray.aggregate._model import (
    Reason as Reason,
)
from cube_ray.aggregate._model import (
    Sample as Sample,
)
from cube_ray.aggregate._model import (
    SampleStratum as SampleStratum,
)
from cube_ray.aggregate._model import (
    Separation as Separation,
)
from cube_ray.aggregate._model import (
    Summary as Summary,
)
from cube_ray.aggregate._model import (
    SystemInterval as SystemInterval,
)
from cube_ray.aggregate._model import (
    WithoutOwnModel as WithoutOwnModel,
)
from cube_ray.aggregate._paired import (
    Replicates as Replicates,
)
from cube_ray.aggregate._paired import (
    compare_systems as compare_systems,
)
from cube_ray.aggregate._paired import (
    paired_comparison as paired_comparison,
)
from cube_ray.aggregate._paired import (
    shared_questions as shared_questions,
)
from cube_ray.aggregate._paired_runs import (
    RunsComparison as RunsComparison,
)
from cube_ray.aggregate._paired_runs import (
    RunTables as RunTables,
)
from cube_ray.aggregate._paired_runs import (
    compare_runs as compare_runs,
)
from cube_ray.aggregate._qualification import (
    FALSE_ALARM as FALSE_ALARM,
)
from cube_ray.aggregate._qualification import (
    MISSES_FAULTS as MISSES_FAULTS,
)
from cube_ray.aggregate._qualification import (
    TOO_FEW_FAULTS as TOO_FEW_FAULTS,
)
from cube_ray.aggregate._qualification import (
    QualificationInput as QualificationInput,
)
from cube_ray.aggregate._qualification import (
    false_alarms as false_alarms,
)
from cube_ray.aggregate._qualification import (
    fault_detection as fault_detection,
)
from cube_ray.aggregate._qualification import (
    fault_misses as fault_misses,
)
from cube_ray.aggregate._qualification import (
    qualification_block as qualification_block,
)
from cube_ray.aggregate._replicate_rows import (
    k_of as k_of,
)
from cube_ray.aggregate._resample import (
    DEFAULT_INTERVAL as DEFAULT_INTERVAL,
)
from cube_ray.aggregate._resample import (
    DEFAULT_RESAMPLES as DEFAULT_RESAMPLES,
)
from cube_ray.aggregate._resample import (
    DEFAULT_SEED as DEFAULT_SEED,
)
from cube_ray.aggregate._resample import (
    INTERVAL_METHODS as INTERVAL_METHODS,
)
from cube_ray.aggregate._resample import (
    IntervalMethod as IntervalMethod,
)
from cube_ray.aggregate._resample import (
    bca_interval as bca_interval,
)
from cube_ray.aggregate._resample import (
    check_method as check_method,
)
from cube_ray.aggregate._resample import (
    interval_of as interval_of,
)
from cube_ray.aggregate._resample import (
    jackknife_indices as jackknife_indices,
)
from cube_ray.aggregate._resample import (
    percentile_interval as percentile_interval,
)
from cube_ray.aggregate._resample import (
    resample_indices as resample_indices,
)
from cube_ray.aggregate._resample import (
    strata_positions as strata_positions,
)
from cube_ray.aggregate._separation import (
    MIN_NONZERO_PAIRS as MIN_NONZERO_PAIRS,
)
from cube_ray.aggregate._separation import (
    NOT_SEPARATED as NOT_SEPARATED,
)
from cube_ray.aggregate._separation import (
    separated as separated,
)
from cube_ray.aggregate._separation import (
    wilcoxon_greater as wilcoxon_greater,
)
from cube_ray.aggregate._summary import (
    DEGENERATE as DEGENERATE,
)
from cube_ray.aggregate._summary import (
    OUTSIDE as OUTSIDE,
)
from cube_ray.aggregate._summary import (
    WEIGHTED as WEIGHTED,
)
from cube_ray.aggregate._summary import (
    summarize as summarize,
)
from cube_ray.aggregate._text import (
    bleu as bleu,
)
from cube_ray.aggregate._text import (
    lcs_length as lcs_length,
)
from cube_ray.aggregate._text import (
    rouge_l as rouge_l,
)
from cube_ray.aggregate._text import (
    text_baselines as text_baselines,
)
from cube_ray.aggregate._text import (
    tokenize as tokenize,
)
from cube_ray.aggregate._weights import (
    ResolvedWeights as ResolvedWeights,
)
from cube_ray.aggregate._weights import (
    resolve_weights as resolve_weights,
)
from cube_ray.config import (
    AggregateOptions as AggregateOptions,
)
from cube_ray.config import (
    BoundsOptions as BoundsOptions,
)
from cube_ray.config import (
    WeightsError as WeightsError,
)
