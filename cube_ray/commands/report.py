"""``cube-ray report RUN_DIR``: write report.html and report.md for a run."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from cube_ray.errors import ConfigError
from cube_ray.run_lock import writing_into

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
    # lazy: loads cube_ray.aggregate (scipy, polars), pyarrow, pydantic; --help imports
    # every command module
    from cube_ray.aggregate import DEFAULT_INTERVAL, INTERVAL_METHODS

    parser.add_argument(
        "--interval",
        choices=INTERVAL_METHODS,
        default=None,
        help="bootstrap interval: percentile or bca (bias-corrected and "
        "accelerated); default: the one summary.json records "
        f"({DEFAULT_INTERVAL}, whose coverage BENCHMARKS.md measured "
        "closest to 95 %%, when it has none)",
    )


def _run(args: argparse.Namespace) -> int:
    # lazy: loads cube_ray.aggregate (scipy, polars), pyarrow, pydantic; --help imports
    # every command module
    from cube_ray.report import require_report_deps

    require_report_deps()
    # lazy: loads cube_ray.aggregate (scipy, polars), pyarrow, pydantic; --help imports
    # every command module
    from cube_ray.report import write_report

    _check_paths(args.run_dir, args.out_dir)

    with writing_into(args.run_dir):
        return _write(args, write_report)


def _write(args: argparse.Namespace, write_report: Any) -> int:
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
    for line in paths.compared:  # the paired differences of its systems
        print(line)
    for line in paths.calibrated:  # with a human audit (--human)
        print(line)
    return 0


def _check_paths(run_dir: str, out_dir: str | None) -> None:
    """RUN_DIR is a run dir and ``--out-dir`` a folder (or a new path).

    Raises:
        ConfigError: Naming the argument, what it is and what is expected.
    """
    run = Path(run_dir)
    if run.exists() and not run.is_dir():  # a missing one: write_report says so
        msg = (
            f"RUN_DIR {run_dir!r} is a file; report wants a run directory (the "
            "--out of cube-ray run, holding summary.json, answers/ and scores/)"
        )
        raise ConfigError(msg)
    if out_dir is None:
        return
    for path in (Path(out_dir), *Path(out_dir).parents):
        if path.exists() and not path.is_dir():
            msg = (
                f"--out-dir {out_dir!r}: {str(path)!r} is a file; --out-dir is the "
                "folder that gets report.html and report.md: give a folder (new "
                "or existing)"
            )
            raise ConfigError(msg)
        if path.exists():
            return
