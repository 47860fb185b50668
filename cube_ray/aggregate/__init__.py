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
    RATER as RATER,
    HumanComparison as HumanComparison,
    PairStats as PairStats,
    compare_with_humans as compare_with_humans,
    judge_agreement as judge_agreement,
    krippendorff_alpha_interval as krippendorff_alpha_interval,
    pair_stats as pair_stats,
    score_matrix as score_matrix,
)
from cube_ray.aggregate._availability import (
    BOUND_UNAVAILABLE as BOUND_UNAVAILABLE,
    SYSTEM_UNAVAILABLE as SYSTEM_UNAVAILABLE,
    UNAVAILABLE_CODES as UNAVAILABLE_CODES,
    incomplete_reasons as incomplete_reasons,
    unavailable_sets as unavailable_sets,
)
from cube_ray.aggregate._bootstrap import (
    CubeReplicates as CubeReplicates,
    FixedWeights as FixedWeights,
    evaluate_replicates as evaluate_replicates,
    fixed_judge_mean as fixed_judge_mean,
)
from cube_ray.aggregate._calibrated import (
    CalibrationResult as CalibrationResult,
    calibrate as calibrate,
    calibrated_value as calibrated_value,
    effective_gain as effective_gain,
    power_tuned_lambda as power_tuned_lambda,
    with_calibration as with_calibration,
)
from cube_ray.aggregate._diagnostics import (
    rank_correlations as rank_correlations,
    recall_curve as recall_curve,
)
from cube_ray.aggregate._frames import (
    CUBE as CUBE,
)
from cube_ray.aggregate._intervals import (
    BootstrapResult as BootstrapResult,
    bootstrap_cube as bootstrap_cube,
    headline_intervals as headline_intervals,
    summary_replicates as summary_replicates,
    with_intervals as with_intervals,
)
from cube_ray.aggregate._math import (
    COUNT as COUNT,
    RANK_SCORE as RANK_SCORE,
    cross_judge as cross_judge,
    histogram as histogram,
    normalise as normalise,
    pearson as pearson,
    pearson_exprs as pearson_exprs,
    pearson_weights as pearson_weights,
    rank_scores as rank_scores,
    recall_at_k as recall_at_k,
    trim_count as trim_count,
    trimmed_mean_exprs as trimmed_mean_exprs,
    trimmed_means as trimmed_means,
    weighted_totals as weighted_totals,
)
from cube_ray.aggregate._model import (
    BOUNDS_NOT_SEPARATED as BOUNDS_NOT_SEPARATED,
    DEGENERATE_BOUNDS as DEGENERATE_BOUNDS,
    MISSING_SCORES as MISSING_SCORES,
    NO_CERTIFICATE as NO_CERTIFICATE,
    NO_CERTIFIED_JUDGE as NO_CERTIFIED_JUDGE,
    NO_JUDGE_SEPARATES as NO_JUDGE_SEPARATES,
    NO_RETRIEVED_QUESTIONS as NO_RETRIEVED_QUESTIONS,
    NO_SHARED_JURY as NO_SHARED_JURY,
    SCHEMA_VERSION as SCHEMA_VERSION,
    UNQUALIFIED_JUDGE as UNQUALIFIED_JUDGE,
    AcrossJudges as AcrossJudges,
    CalibratedAcross as CalibratedAcross,
    CalibratedFigure as CalibratedFigure,
    Calibration as Calibration,
    Counts as Counts,
    CrossJudgeFigure as CrossJudgeFigure,
    FigureInterval as FigureInterval,
    Flag as Flag,
    Intervals as Intervals,
    JudgeDifference as JudgeDifference,
    JudgeFigures as JudgeFigures,
    PairedComparison as PairedComparison,
    Qualification as Qualification,
    Reason as Reason,
    Sample as Sample,
    SampleStratum as SampleStratum,
    Separation as Separation,
    Summary as Summary,
    SystemInterval as SystemInterval,
    WithoutOwnModel as WithoutOwnModel,
)
from cube_ray.aggregate._paired import (
    Replicates as Replicates,
    compare_systems as compare_systems,
    paired_comparison as paired_comparison,
    shared_questions as shared_questions,
)
from cube_ray.aggregate._paired_runs import (
    RunsComparison as RunsComparison,
    RunTables as RunTables,
    compare_runs as compare_runs,
)
from cube_ray.aggregate._qualification import (
    FALSE_ALARM as FALSE_ALARM,
    MISSES_FAULTS as MISSES_FAULTS,
    TOO_FEW_FAULTS as TOO_FEW_FAULTS,
    QualificationInput as QualificationInput,
    false_alarms as false_alarms,
    fault_detection as fault_detection,
    fault_misses as fault_misses,
    fixed_weights as fixed_weights,
    qualification_block as qualification_block,
)
from cube_ray.aggregate._replicate_rows import (
    k_of as k_of,
)
from cube_ray.aggregate._resample import (
    DEFAULT_INTERVAL as DEFAULT_INTERVAL,
    DEFAULT_RESAMPLES as DEFAULT_RESAMPLES,
    DEFAULT_SEED as DEFAULT_SEED,
    INTERVAL_METHODS as INTERVAL_METHODS,
    IntervalMethod as IntervalMethod,
    bca_interval as bca_interval,
    check_method as check_method,
    interval_of as interval_of,
    jackknife_indices as jackknife_indices,
    percentile_interval as percentile_interval,
    resample_indices as resample_indices,
    strata_positions as strata_positions,
)
from cube_ray.aggregate._separation import (
    MIN_NONZERO_PAIRS as MIN_NONZERO_PAIRS,
    NOT_SEPARATED as NOT_SEPARATED,
    separated as separated,
    verdict_minimum as verdict_minimum,
    wilcoxon_greater as wilcoxon_greater,
)
from cube_ray.aggregate._summary import (
    DEGENERATE as DEGENERATE,
    OUTSIDE as OUTSIDE,
    WEIGHTED as WEIGHTED,
    summarize as summarize,
)
from cube_ray.aggregate._text import (
    bleu as bleu,
    lcs_length as lcs_length,
    rouge_l as rouge_l,
    text_baselines as text_baselines,
    tokenize as tokenize,
)
from cube_ray.aggregate._weights import (
    ResolvedWeights as ResolvedWeights,
    resolve_weights as resolve_weights,
)
from cube_ray.config import (
    AggregateOptions as AggregateOptions,
    BoundsOptions as BoundsOptions,
    WeightsError as WeightsError,
)
