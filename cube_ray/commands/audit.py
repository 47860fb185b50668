"""``cube-ray audit RUN_DIR (--size m | --import FILLED)``: the human audit."""

from __future__ import annotations

import argparse
from typing import Any

from cube_ray.errors import ConfigError
from cube_ray.run_lock import writing_into

__all__ = ["register", "run"]


def register(subparsers: Any) -> None:
    """Add the ``audit`` subcommand."""
    p: argparse.ArgumentParser = subparsers.add_parser(
        "audit",
        help="draw a human audit worksheet, or import a filled one",
        description=(
            "--size m: draw m questions of the run (nested: a larger m keeps "
            "every smaller sample; within the run's strata when it is sampled) "
            "and write audit-<m>.csv (UTF-8 with BOM: one row per answer, the "
            "answer sets shuffled and unnamed, one empty 0-10 column per "
            "dimension), the same sheet as audit-<m>.xlsx when openpyxl is "
            "installed (the report extra), audit-<m>.key.json (which question "
            "and set each row is: not for the rater) and audit-<m>.rubrics.txt. "
            "--import FILLED.csv or FILLED.xlsx: check every cell and write "
            "human.csv for `cube-ray report --human` (CUBE_METHOD.md section 13)."
        ),
    )
    p.add_argument("run_dir", metavar="RUN_DIR", help="the run directory")
    what = p.add_mutually_exclusive_group(required=True)
    what.add_argument(
        "--size", type=int, metavar="m", help="questions to audit (e.g. 150)"
    )
    what.add_argument(
        "--import",
        dest="filled",
        metavar="FILLED",
        help="a filled worksheet (.csv or .xlsx) to check and turn into human.csv",
    )
    p.add_argument(
        "--out", metavar="DIR", help="where to write (default: RUN_DIR/audit)"
    )
    p.add_argument(
        "--seed",
        type=int,
        metavar="S",
        help="seed of the draw (default: the run sample's seed, else 0)",
    )
    p.add_argument(
        "--key",
        metavar="FILE",
        help="with --import: the sheet's .key.json (default: found beside it or "
        "in RUN_DIR/audit)",
    )
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Write a worksheet or import a filled one; print what was written."""
    if args.filled is None:
        if args.key is not None:
            raise ConfigError("--key goes with --import FILLED, not --size")
        with writing_into(args.run_dir):  # the sheet goes into RUN_DIR/audit
            return _draw(args)
    if args.seed is not None:
        msg = "--seed goes with --size (the draw); --import reads the sheet's key"
        raise ConfigError(msg)
    with writing_into(args.run_dir):
        return _import(args)


def _draw(args: argparse.Namespace) -> int:
    # lazy: loads polars, pyarrow, pydantic; --help imports every command module
    from cube_ray.audit import write_worksheet

    if args.size < 1:
        raise ConfigError(f"--size must be >= 1 question, got {args.size}")
    sheet = write_worksheet(
        args.run_dir, size=args.size, out_dir=args.out, seed=args.seed
    )
    key = sheet.audit
    short = (
        f" (the run has {key.population}: all of them)"
        if key.questions < key.size
        else f" of {key.population}"
    )
    strata = (
        f", stratified by {', '.join(key.stratified_by)} ({len(key.strata)} strata)"
        if key.stratified_by
        else ""
    )
    print(
        f"drew {key.questions} questions{short}{strata}, seed {key.seed}: "
        f"{len(key.rows)} answers x {len(key.dimensions)} dimensions to score"
    )
    print(f"rubrics: {sheet.rubric_source}")
    print(f"{sheet.sheet}  (the worksheet: give this to the rater)")
    if sheet.xlsx is not None:
        print(f"{sheet.xlsx}  (the same worksheet for Excel: or give this)")
    else:
        print(sheet.xlsx_note)
    print(f"{sheet.rubrics}  (the rubrics: give this too)")
    print(f"{sheet.key}  (the key: keep it from the rater)")
    return 0


def _import(args: argparse.Namespace) -> int:
    # lazy: loads polars, pyarrow, pydantic; --help imports every command module
    from cube_ray.audit import import_sheet

    done = import_sheet(
        args.filled, run_dir=args.run_dir, out_dir=args.out, key_path=args.key
    )
    print(
        f"imported {done.scored} scored questions ({done.empty} left empty), "
        f"{done.scores} scores, with key {done.key}"
    )
    print(done.path)
    return 0
