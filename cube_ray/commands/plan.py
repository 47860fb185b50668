"""``cube-ray plan RUN_DIR --half-width H``: sample size and cost from a pilot."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from cube_ray.errors import ConfigError
from cube_ray.files import write_atomic

__all__ = ["register", "run"]


def register(subparsers: Any) -> None:
    """Add the ``plan`` subcommand."""
    p: argparse.ArgumentParser = subparsers.add_parser(
        "plan",
        help="sample size for a target interval, and its cost, from a pilot run",
        description=(
            "From a pilot run (RUN_DIR): per system, the questions needed for a "
            "95% bootstrap half-width H of the headline CuBE, n = ceil(n0 * "
            "(h0 / H)^2), and the tokens, engine-hours, GPU-hours and API cost of "
            "a run of that size and of the whole corpus, at what the pilot "
            "measured per question; with --pair A B, the same for the paired "
            "difference of two systems. A pilot whose interval has zero width "
            "is refused (exit 2): it measured no spread. It extrapolates: the "
            "run of the planned size re-measures its interval (CUBE_METHOD.md "
            "section 11)."
        ),
    )
    p.add_argument("run_dir", metavar="RUN_DIR", help="the pilot's run directory")
    p.add_argument(
        "--half-width",
        type=float,
        required=True,
        metavar="H",
        help="target 95%% half-width of the CuBE, in CuBE points (e.g. 2)",
    )
    p.add_argument(
        "--corpus-size",
        type=int,
        metavar="N",
        help="documents of the whole corpus (default: the sample's population)",
    )
    p.add_argument(
        "--config",
        metavar="CONFIG",
        help=(
            "run config giving engine prices (price_per_mtok) and GPUs; default: "
            "the config recorded in RUN_DIR/manifest.json"
        ),
    )
    p.add_argument(
        "--pair",
        nargs=2,
        metavar=("A", "B"),
        help=(
            "size the paired difference CuBE(A) - CuBE(B) of two systems of the "
            "pilot instead (the same formula on its paired interval)"
        ),
    )
    p.add_argument("--json", metavar="FILE", help="also write the plan as JSON")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Plan from the pilot; print the plan (and write ``--json``)."""
    # lazy: loads polars, pyarrow, pydantic; --help imports every command module
    from cube_ray.sizing import HALF_WIDTH_RANGE, format_sample_plan, plan_sample

    low, high = HALF_WIDTH_RANGE
    if not low <= args.half_width <= high:  # NaN and inf included
        msg = (
            f"--half-width must be {low} to {high} CuBE points, got "
            f"{args.half_width}; give the interval's half-width you aim for, "
            "e.g. --half-width 2"
        )
        raise ConfigError(msg)
    if args.corpus_size is not None and args.corpus_size < 1:
        msg = f"--corpus-size must be >= 1, got {args.corpus_size}"
        raise ConfigError(msg)
    plan = plan_sample(
        args.run_dir,
        half_width=args.half_width,
        corpus_size=args.corpus_size,
        config_path=args.config,
        pair=tuple(args.pair) if args.pair else None,
    )
    print(format_sample_plan(plan, half_width=args.half_width))
    if args.json:
        path = Path(args.json)

        write_atomic(path, json.dumps(plan, indent=2, ensure_ascii=False) + "\n")
        print(f"wrote {path}")
    return 0
