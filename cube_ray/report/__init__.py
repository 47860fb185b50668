"""The CuBE report: one offline HTML page (and its Markdown twin) per run.

``write_report(run_dir)`` reads ``summary.json`` (the typed
:class:`cube_ray.aggregate.Summary`, with the headline's intervals) and the
run's tables, and writes ``report.html`` and ``report.md``;
``write_comparison(run_dirs, out=...)`` compares runs. The report only
formats: every statistic it shows is computed in :mod:`cube_ray.aggregate`.
"""

from cube_ray.report._calibrated import calibrated_lines
from cube_ray.report._compare import write_comparison
from cube_ray.report._data import RunData, load_run
from cube_ray.report._deps import require_report_deps
from cube_ray.report._format import NO_VERDICT
from cube_ray.report._headline import console_lines
from cube_ray.report._human import read_human_ratings
from cube_ray.report._report import (
    ReportPaths,
    build_sections,
    resolve_intervals,
    write_report,
)

__all__ = [
    "NO_VERDICT",
    "ReportPaths",
    "RunData",
    "build_sections",
    "calibrated_lines",
    "console_lines",
    "load_run",
    "read_human_ratings",
    "require_report_deps",
    "resolve_intervals",
    "write_comparison",
    "write_report",
]
