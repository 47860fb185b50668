"""The CuBE report: one offline HTML page (and its Markdown twin) per run.

``write_report(run_dir)`` reads ``summary.json`` (figures of the aggregation)
and the run's tables, and writes ``report.html`` and ``report.md``;
``write_comparison(run_dirs, out=...)`` compares runs. The pure helpers
(bootstrap, agreement, baselines) are exported for notebooks and tests.
"""

from cube_ray.report._cube import (
    DEFAULT_INTERVAL,
    INTERVAL_METHODS,
    BootstrapResult,
    CubeReplicates,
    IntervalMethod,
    bca_interval,
    bootstrap_cube,
    evaluate_replicates,
    fixed_judge_mean,
    jackknife_indices,
    masked_pearson,
    masked_trimmed_mean,
    percentile_interval,
    resample_indices,
    weighted_total,
)
from cube_ray.report._data import RunData, load_run, read_options
from cube_ray.report._human import (
    HumanComparison,
    compare_with_humans,
    read_human_ratings,
)
from cube_ray.report._report import (
    NO_VERDICT,
    ReportPaths,
    check_recomputation,
    console_lines,
    write_comparison,
    write_report,
)
from cube_ray.report._stats import (
    PairStats,
    judge_agreement,
    krippendorff_alpha_interval,
    pair_stats,
)
from cube_ray.report._text import bleu, lcs_length, rouge_l, tokenize

__all__ = [
    "DEFAULT_INTERVAL",
    "INTERVAL_METHODS",
    "NO_VERDICT",
    "BootstrapResult",
    "CubeReplicates",
    "HumanComparison",
    "IntervalMethod",
    "PairStats",
    "ReportPaths",
    "RunData",
    "bca_interval",
    "bleu",
    "bootstrap_cube",
    "check_recomputation",
    "compare_with_humans",
    "console_lines",
    "evaluate_replicates",
    "fixed_judge_mean",
    "jackknife_indices",
    "judge_agreement",
    "krippendorff_alpha_interval",
    "lcs_length",
    "load_run",
    "masked_pearson",
    "masked_trimmed_mean",
    "pair_stats",
    "percentile_interval",
    "read_human_ratings",
    "read_options",
    "resample_indices",
    "rouge_l",
    "tokenize",
    "weighted_total",
    "write_comparison",
    "write_report",
]
