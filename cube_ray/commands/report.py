"""``cube-ray report RUN_DIR``: write report.html and report.md for a run."""

from __future__ import annotations

import argparse
from typing import Any

__all__ = ["register"]


def register(subparsers: Any) -> None:
    """Add the ``report`` subcommand."""
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "report",
        help="write report.html and report.md for a run directory",
        description="Write a self-contained report.html (plots inline, works "
        "offline) and report.md for RUN_DIR, from its summary.json and tables.",
    )
    parser.add_argument("run_dir", metavar="RUN_DIR", help="the run directory")
    parser.add_argument(
        "--human",
        metavar="FILE.csv",
        default=None,
        help="human ratings (question_id,system,dimension,score[,rater]) to "
        "compare the judges with",
    )
    parser.add_argument(
        "--baselines",
        action="store_true",
        help="add character-level BLEU / ROUGE-L against the full-score answers",
    )
    parser.add_argument(
        "--out-dir", default=None, help="where to write (default: RUN_DIR)"
    )
    parser.add_argument(
        "--resamples",
        type=int,
        default=None,
        help="bootstrap resamples of the questions (0: no interval); default: "
        "the intervals summary.json records (1000 when it has none)",
    )
    parser.add_argument(
        "--seed", type=int, default=None, help="bootstrap seed (default: recorded)"
    )
    add_interval_argument(parser)
    parser.set_defaults(func=_run)


def add_interval_argument(parser: Any) -> None:
    """``--interval percentile|bca`` (shared by ``report`` and ``compare``)."""
    parser.add_argument(
        "--interval",
        choices=["percentile", "bca"],  # cube_ray.aggregate.INTERVAL_METHODS
        default=None,
        help="bootstrap interval: percentile or bca (bias-corrected and "
        "accelerated); default: the one summary.json records (bca, whose "
        "coverage BENCHMARKS.md measured closest to 95 %%, when it has none)",
    )


def _run(args: argparse.Namespace) -> int:
    from cube_ray.report._deps import require_report_deps

    require_report_deps()
    from cube_ray.report import write_report

    paths = write_report(
        args.run_dir,
        out_dir=args.out_dir,
        human_ratings=args.human,
        baselines=args.baselines,
        n_resamples=args.resamples,
        seed=args.seed,
        interval=args.interval,
    )
    print(paths.html)
    print(paths.markdown)
    return 0
