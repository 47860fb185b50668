"""The CuBE report: one offline HTML page (and its Markdown twin) per run.

``write_report(run_dir)`` reads ``summary.json`` (figures of the aggregation)
and the run's tables, and writes ``report.html`` and ``report.md``;
``write_comparison(run_dirs, out=...)`` compares runs. The pure helpers
(bootstrap, agreement, baselines) are exported for notebooks and tests.
"""

from cube_ray.report._cube import (
    BootstrapResult,
    CubeOptions,
    CubeReplicates,
    bootstrap_cube,
    evaluate_replicates,
    masked_pearson,
    masked_trimmed_mean,
    resample_indices,
)
from cube_ray.report._data import RunData, load_run
from cube_ray.report._human import (
    HumanComparison,
    compare_with_humans,
    read_human_ratings,
)
from cube_ray.report._report import ReportPaths, write_comparison, write_report
from cube_ray.report._stats import (
    PairStats,
    judge_agreement,
    krippendorff_alpha_interval,
    pair_stats,
)
from cube_ray.report._text import bleu, lcs_length, rouge_l, tokenize

__all__ = [
    "BootstrapResult",
    "CubeOptions",
    "CubeReplicates",
    "HumanComparison",
    "PairStats",
    "ReportPaths",
    "RunData",
    "bleu",
    "bootstrap_cube",
    "compare_with_humans",
    "evaluate_replicates",
    "judge_agreement",
    "krippendorff_alpha_interval",
    "lcs_length",
    "load_run",
    "masked_pearson",
    "masked_trimmed_mean",
    "pair_stats",
    "read_human_ratings",
    "resample_indices",
    "rouge_l",
    "tokenize",
    "write_comparison",
    "write_report",
]
