"""``cube-ray compare RUN_A RUN_B ...``: one page comparing several runs."""

from __future__ import annotations

import argparse
from typing import Any

from cube_ray.commands.report import add_interval_argument

__all__ = ["register"]


def register(subparsers: Any) -> None:
    """Add the ``compare`` subcommand."""
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "compare",
        help="write one HTML page comparing several runs",
        description="Compare the headline CuBE figures of several run directories "
        "on one self-contained page (and a Markdown twin beside it).",
    )
    parser.add_argument("run_dirs", nargs="+", metavar="RUN_DIR")
    parser.add_argument(
        "--out",
        default="comparison.html",
        metavar="FILE",
        help="HTML file to write (default: comparison.html)",
    )
    parser.add_argument(
        "--resamples",
        type=int,
        default=None,
        help="bootstrap resamples per run (0: no interval); default: the "
        "intervals each summary.json records (1000 when it has none)",
    )
    parser.add_argument(
        "--seed", type=int, default=None, help="bootstrap seed (default: recorded)"
    )
    add_interval_argument(parser)
    parser.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    # lazy: loads cube_ray.aggregate (scipy, polars), pyarrow, pydantic; --help imports
    # every command module
    from cube_ray.report import require_report_deps

    require_report_deps()
    # lazy: loads cube_ray.aggregate (scipy, polars), pyarrow, pydantic; --help imports
    # every command module
    from cube_ray.report import write_comparison

    lines: list[str] = []  # printed after the page's path
    print(
        write_comparison(
            args.run_dirs,
            out=args.out,
            n_resamples=args.resamples,
            seed=args.seed,
            interval=args.interval,
            console=lines.append,
        )
    )
    for line in lines:
        print(line)
    return 0
