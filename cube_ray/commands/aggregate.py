"""``cube-ray aggregate``: summary figures from scored answer tables.

Usage::

    cube-ray aggregate (RUN_DIR | --answers PATH --scores PATH) [--k 8]
        [--trim 0.1] [--weights pearson|equal|FILE.json] [--bounds-on all|paired]
        [--out FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

__all__ = ["parse_k", "register", "run"]

HELP = "Aggregate answers + scores tables into the CuBE summary (summary.json)."


def register(subparsers: Any) -> None:
    """Add the ``aggregate`` subcommand to the CLI's subparsers."""
    parser = subparsers.add_parser(
        "aggregate",
        help=HELP,
        description=HELP
        + " Reads RUN_DIR/answers and RUN_DIR/scores (Parquet files or directories"
        " of them), or the tables given by --answers and --scores.",
    )
    parser.add_argument(
        "run_dir",
        nargs="?",
        metavar="RUN_DIR",
        help="run directory holding answers/ and scores/; the summary goes to "
        "RUN_DIR/summary.json unless --out is given",
    )
    parser.add_argument("--answers", metavar="PATH", help="answers table (file or dir)")
    parser.add_argument("--scores", metavar="PATH", help="scores table (file or dir)")
    parser.add_argument(
        "--k",
        default="8",
        metavar="K",
        help="retrieval depth for rank_score (default 8); per system as "
        "'rag@a=4,rag@b=8'",
    )
    parser.add_argument(
        "--trim",
        type=float,
        default=0.1,
        help="proportion trimmed from each end, 0 <= trim < 0.5 (default 0.1)",
    )
    parser.add_argument(
        "--weights",
        default="pearson",
        metavar="pearson|equal|FILE.json",
        help="dimension weights: Pearson with rank_score (default), equal, or a JSON"
        ' file {"<dim>": w} or {"<judge>": {"<dim>": w}}',
    )
    parser.add_argument(
        "--bounds-on",
        choices=("all", "paired"),
        default="all",
        help="questions the zero/full bounds use: all (default) or only those the "
        "system retrieved (paired)",
    )
    parser.add_argument(
        "--min-gap",
        type=float,
        default=0.5,
        metavar="POINTS",
        help="smallest full - zero gap (0-10 scale) for a judge's bounds to count"
        " as separated (default 0.5; CUBE_METHOD.md section 10)",
    )
    parser.add_argument(
        "--alpha",
        type=float,
        default=0.05,
        help="largest one-sided Wilcoxon p-value of full > zero for separated"
        " bounds (default 0.05)",
    )
    parser.add_argument(
        "--no-require-separation",
        dest="require_separation",
        action="store_false",
        help="keep judges whose bounds are not separated in the across-judge"
        " figures (they stay flagged)",
    )
    parser.add_argument(
        "--out",
        metavar="FILE",
        help="output file (default RUN_DIR/summary.json, or stdout without RUN_DIR);"
        " '-' for stdout",
    )
    parser.set_defaults(func=run, _parser=parser)


def parse_k(text: str) -> int | dict[str, int]:
    """Parse ``--k``: one integer, or ``system=k`` pairs separated by commas.

    Args:
        text: The option's value.

    Returns:
        The integer, or a mapping from system name to k.

    Raises:
        ConfigError: The value is neither form.

    Examples:
        >>> parse_k("8"), parse_k("rag@a=4, rag@b=8")
        (8, {'rag@a': 4, 'rag@b': 8})
    """
    from cube_ray.errors import ConfigError

    try:
        if "=" not in text:
            return int(text)
        pairs = (item.split("=", 1) for item in text.split(",") if item.strip())
        return {name.strip(): int(value) for name, value in pairs}
    except ValueError:
        raise ConfigError(
            f"--k {text!r} is not an integer or a list of system=k pairs "
            "(e.g. --k 8 or --k rag@a=4,rag@b=8)."
        ) from None


def _load_weights(value: str) -> Any:
    from cube_ray.errors import InputError

    if value in ("pearson", "equal"):
        return value
    path = Path(value)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise InputError(
            f"cannot read the weights file ({exc.strerror}). Expected 'pearson', "
            "'equal' or a JSON file of weights.",
            path=value,
        ) from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise InputError(
            f"the weights file is not valid JSON ({exc.msg} at line {exc.lineno}).",
            path=value,
        ) from None
    if not isinstance(data, dict) or not data:
        raise InputError(
            'the weights file must hold a JSON object: {"<dimension>": weight, ...}'
            ' or {"<judge>": {"<dimension>": weight, ...}, ...}; got '
            f"{type(data).__name__}.",
            path=value,
        )
    return data


def _options(args: argparse.Namespace, weights: Any) -> Any:
    from pydantic import ValidationError

    from cube_ray.aggregate import AggregateOptions
    from cube_ray.errors import ConfigError, InputError

    try:
        return AggregateOptions(
            k=parse_k(args.k),
            trim=args.trim,
            weights=weights,
            bounds_on=args.bounds_on,
            min_gap=args.min_gap,
            alpha=args.alpha,
            require_separation=args.require_separation,
        )
    except ValidationError as exc:
        err = exc.errors()[0]
        where = ".".join(str(p) for p in err["loc"])
        message = f"{where}: {err['msg']} (got {err.get('input')!r})"
        if where.startswith("weights") and weights not in ("pearson", "equal"):
            raise InputError(
                f'malformed weights: {message}. Expected {{"<dimension>": w}} or '
                '{"<judge>": {"<dimension>": w}} with numbers >= 0.',
                path=args.weights,
            ) from None
        field = where.split(".")[0]
        flag = "--" + field.replace("_", "-") if field in vars(args) else where
        raise ConfigError(f"invalid {flag}: {message}") from None


def _write_atomic(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
        Path(tmp).replace(path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def run(args: argparse.Namespace) -> int:
    """Run ``cube-ray aggregate``; returns the exit code."""
    parser: argparse.ArgumentParser = args._parser
    if args.run_dir and (args.answers or args.scores):
        parser.error("give either RUN_DIR or --answers and --scores, not both")
    if not args.run_dir and not (args.answers and args.scores):
        parser.error("give RUN_DIR, or both --answers PATH and --scores PATH")

    from cube_ray.aggregate import WeightsError, summarize
    from cube_ray.errors import InputError
    from cube_ray.tables import read_answers, read_scores

    if args.run_dir:
        run_dir = Path(args.run_dir)
        answers_path, scores_path = run_dir / "answers", run_dir / "scores"
        out = args.out or str(run_dir / "summary.json")
    else:
        answers_path, scores_path = Path(args.answers), Path(args.scores)
        out = args.out or "-"

    weights = _load_weights(args.weights)
    options = _options(args, weights)
    answers = read_answers(answers_path)
    scores = read_scores(scores_path)
    sample = None
    if args.run_dir:  # a run's planned sample: its questions, and its block
        from cube_ray.sample import in_run_sample

        answers, scores, sample = in_run_sample(args.run_dir, answers, scores)
    try:
        summary = summarize(
            answers,
            scores,
            options=options,
            sources={"answers": str(answers_path), "scores": str(scores_path)},
            sample=sample,
        )
    except WeightsError as exc:
        raise InputError(str(exc), path=args.weights, field=exc.key) from None
    summary["inputs"] = {"answers": str(answers_path), "scores": str(scores_path)}
    text = json.dumps(summary, indent=2, ensure_ascii=False, allow_nan=False) + "\n"
    if out == "-":
        sys.stdout.write(text)
    else:
        _write_atomic(Path(out), text)
        print(f"wrote {out}", file=sys.stderr)
    return 0
