"""``cube-ray aggregate``: summary figures from scored answer tables.

Usage::

    cube-ray aggregate (RUN_DIR | --answers PATH --scores PATH) [--k K]
        [--trim T] [--weights pearson|equal|FILE.json] [--bounds-on all|paired]
        [--require-qualification] [--resamples B] [--seed S]
        [--interval bca|percentile] [--human FILE.csv] [--out FILE]

Defaults (see ``--help``) come from :class:`~cube_ray.aggregate.AggregateOptions`
and, for the bootstrap, from :func:`~cube_ray.aggregate.with_intervals`.

The summary carries the headline's bootstrap intervals (``intervals``), which
the report and ``cube-ray plan`` read. With RUN_DIR it is the summary the run
wrote: the run's options and config (``manifest.json``) give the qualification
blocks and the "judges its own model's answers" flags (CUBE_METHOD.md
section 12); flags override the options. With ``--human`` the summary also
carries each judge's CuBE calibrated against the human audit (``calibrated``,
``calibration``; CUBE_METHOD.md section 13, docs/calibration.md).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from cube_ray.aggregate import (
    DEFAULT_INTERVAL,
    DEFAULT_RESAMPLES,
    DEFAULT_SEED,
    INTERVAL_METHODS,
    WeightsError,
    incomplete_reasons,
    summarize,
    with_calibration,
    with_intervals,
)
from cube_ray.config import AggregateOptions, RunConfig
from cube_ray.errors import INCOMPLETE_EXIT_CODE, ConfigError, InputError
from cube_ray.manifest import MANIFEST, Manifest
from cube_ray.report import calibrated_lines, read_human_ratings
from cube_ray.run_lock import writing_into
from cube_ray.sample import load_strata
from cube_ray.tables import read_answers, read_scores

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
        default=None,
        metavar="K",
        help="retrieval depth for rank_score (default: the run's own, from "
        f"RUN_DIR/manifest.json, else {_DEFAULTS['k']}); per system as "
        "'rag@a=4,rag@b=8'",
    )
    parser.add_argument(
        "--trim",
        type=float,
        default=None,
        help="proportion trimmed from each end, 0 <= trim < 0.5 (default: the "
        f"run's own, else {_DEFAULTS['trim']})",
    )
    parser.add_argument(
        "--weights",
        default=None,
        metavar="pearson|equal|FILE.json",
        help="dimension weights: Pearson with rank_score, equal, or a JSON file "
        '{"<dim>": w} or {"<judge>": {"<dim>": w}} (default: the run\'s own, '
        f"else {_DEFAULTS['weights']})",
    )
    parser.add_argument(
        "--bounds-on",
        choices=("all", "paired"),
        default=None,
        help="questions the zero/full bounds use: all or only those the system "
        f"retrieved (paired); default: the run's own, else {_DEFAULTS['bounds_on']}",
    )
    parser.add_argument(
        "--min-gap",
        type=float,
        default=None,
        metavar="POINTS",
        help="smallest full - zero gap (0-10 scale) for a judge's bounds to count"
        f" as separated (default {_DEFAULTS['min_gap']}; CUBE_METHOD.md section 10)",
    )
    parser.add_argument(
        "--alpha",
        type=float,
        default=None,
        help="largest one-sided Wilcoxon p-value of full > zero for separated"
        f" bounds (default {_DEFAULTS['alpha']})",
    )
    parser.add_argument(
        "--no-require-separation",
        dest="require_separation",
        action="store_false",
        default=None,
        help="keep judges whose bounds are not separated in the across-judge"
        " figures (they stay flagged)",
    )
    parser.add_argument(
        "--require-qualification",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="leave judges that miss an expected fault kind on the weighted total"
        " out of the across-judge figures (default: the run's own"
        " aggregate.require_qualification, else no; CUBE_METHOD.md section 12)",
    )
    parser.add_argument(
        "--resamples",
        type=int,
        default=DEFAULT_RESAMPLES,  # those of a run's own summary
        metavar="B",
        help="bootstrap resamples of the questions for the headline's interval "
        f"(0: no interval; default {DEFAULT_RESAMPLES})",
    )
    parser.add_argument(
        "--seed",
        type=int,
        default=DEFAULT_SEED,
        help=f"bootstrap seed (default {DEFAULT_SEED})",
    )
    parser.add_argument(
        "--interval",
        choices=INTERVAL_METHODS,
        default=DEFAULT_INTERVAL,
        help="bootstrap interval: bca (bias-corrected and accelerated) or "
        f"percentile (default {DEFAULT_INTERVAL}: its coverage was closest to 95 %% "
        "in BENCHMARKS.md)",
    )
    parser.add_argument(
        "--human",
        metavar="FILE.csv",
        default=None,
        help="human scores of an audit (question_id,system,dimension,score"
        "[,rater]; `cube-ray audit` writes it): add each judge's CuBE calibrated "
        "against them, with its interval (docs/calibration.md)",
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


def _load_weights(value: Any) -> Any:

    if isinstance(value, dict):  # the run's own weights (manifest.json)
        return value
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
    try:
        return AggregateOptions(
            k=parse_k(args.k),
            trim=args.trim,
            weights=weights,
            bounds_on=args.bounds_on,
            min_gap=args.min_gap,
            alpha=args.alpha,
            require_separation=args.require_separation,
            require_qualification=args.require_qualification,
        )
    except ValidationError as exc:
        err = exc.errors()[0]
        where = ".".join(str(p) for p in err["loc"])
        message = f"{where}: {err['msg']} (got {err.get('input')!r})"
        if where.startswith("weights") and weights not in ("pearson", "equal"):
            raise InputError(
                f'malformed weights: {message}. Expected {{"<dimension>": w}} or '
                '{"<judge>": {"<dimension>": w}} with numbers >= 0.',
                path=_weights_source(args),
            ) from None
        field = where.split(".")[0]
        flag = "--" + field.replace("_", "-") if field in vars(args) else where
        raise ConfigError(f"invalid {flag}: {message}") from None


def run(args: argparse.Namespace) -> int:
    """Run ``cube-ray aggregate``; returns the exit code."""
    parser: argparse.ArgumentParser = args._parser
    if args.run_dir and (args.answers or args.scores):
        parser.error("give either RUN_DIR or --answers and --scores, not both")
    if not args.run_dir and not (args.answers and args.scores):
        parser.error("give RUN_DIR, or both --answers PATH and --scores PATH")

    # The run dir's lock: no run writes its tables while they are summarised.
    with writing_into(args.run_dir):
        return _aggregate(args)


def _aggregate(args: argparse.Namespace) -> int:

    if args.run_dir:
        run_dir = Path(args.run_dir)
        _check_run_dir(run_dir)
        answers_path, scores_path = run_dir / "answers", run_dir / "scores"
        out = args.out or str(run_dir / "summary.json")
        _from_manifest(args, run_dir)
    else:
        answers_path, scores_path = Path(args.answers), Path(args.scores)
        out = args.out or "-"
    _check_out(out)
    _fill_defaults(args)

    weights = _load_weights(args.weights)
    options = _options(args, weights)
    answers = read_answers(answers_path)
    scores = read_scores(scores_path)
    sources = {"answers": str(answers_path), "scores": str(scores_path)}
    strata = None
    try:
        if args.run_dir:  # the summary the run writes (see summarize_tables)
            # lazy: loads pandas; --help imports every command module
            from cube_ray.pipeline.run import summarize_tables

            summary, answers, scores = summarize_tables(
                Path(args.run_dir),
                answers,
                scores,
                options=options,
                config=_run_config(Path(args.run_dir)),
                sources=sources,
            )
            strata = load_strata(args.run_dir)  # the bootstrap follows the design
        else:
            summary = summarize(answers, scores, options=options, sources=sources)
    except WeightsError as exc:
        raise InputError(str(exc), path=_weights_source(args), field=exc.key) from None
    if args.resamples < 0:
        raise ConfigError(f"--resamples must be >= 0, got {args.resamples}")
    summary = with_intervals(
        summary.model_copy(
            update={
                "inputs": {"answers": str(answers_path), "scores": str(scores_path)}
            }
        ),
        answers,
        scores,
        n_resamples=args.resamples,
        seed=args.seed,
        method=args.interval,
        strata=strata,
    )
    if args.human is not None:
        summary = _calibrated(args, summary, answers, scores, strata)

        for line in calibrated_lines(summary):
            print(line, file=sys.stderr)
    if out == "-":
        sys.stdout.write(summary.to_json())
    else:
        summary.write(out)
        print(f"wrote {out}", file=sys.stderr)

    # Failed answers left a set empty: the summary is written, with the
    # verdict a run gives (CUBE_METHOD.md section 10), and the exit code says
    # it is incomplete.
    incomplete = incomplete_reasons(summary)
    for system, reason in incomplete.items():
        print(f"cube-ray: {system}: no verdict — {reason}", file=sys.stderr)
    return INCOMPLETE_EXIT_CODE if incomplete else 0


def _calibrated(
    args: argparse.Namespace, summary: Any, answers: Any, scores: Any, strata: Any
) -> Any:
    """``summary`` with the judges' CuBE calibrated by the ``--human`` audit."""
    if args.resamples < 2:
        raise ConfigError(
            f"--human needs the bootstrap (--resamples >= 2), got --resamples "
            f"{args.resamples}; leave --resamples at its default "
            f"({DEFAULT_RESAMPLES})"
        )
    return with_calibration(
        summary,
        answers,
        scores,
        read_human_ratings(args.human),
        n_resamples=args.resamples,
        seed=args.seed,
        strata=strata,
        source=str(args.human),
    )


_DEFAULTS: dict[str, Any] = {
    name: field.default for name, field in AggregateOptions.model_fields.items()
} | {"k": str(AggregateOptions.model_fields["k"].default)}  # parsed as --k is
"""The options' values when neither a flag nor the run's manifest gives one."""


def _check_run_dir(run_dir: Path) -> None:

    if run_dir.is_dir():
        return
    what = "a file" if run_dir.exists() else "missing (no such file or directory)"
    msg = (
        f"RUN_DIR {str(run_dir)!r} is {what}; aggregate wants a run directory "
        "(holding answers/ and scores/), or the tables as --answers PATH "
        "--scores PATH"
    )
    raise ConfigError(msg)


def _check_out(out: str) -> None:

    if out != "-" and Path(out).is_dir():
        msg = (
            f"--out {out!r} is a folder; --out is the summary file to write: give "
            f"a file path, e.g. {str(Path(out) / 'summary.json')!r}"
        )
        raise ConfigError(msg)


def _from_manifest(args: argparse.Namespace, run_dir: Path) -> None:
    """Options the flags leave unset, from the run's own config (manifest.json).

    A run's k (each system's, or ``aggregate.k``), trim, weights and guards are
    what its summary used; flags override them.
    """
    config = _recorded_config(run_dir)
    if config is None:
        return
    agg = config.get("aggregate") or {}
    if args.k is None:
        k = agg.get("k")
        if k is None:
            systems = {
                s["name"]: s["k"]
                for s in config.get("systems") or []
                if isinstance(s, dict) and isinstance(s.get("k"), int)
            }
            k = systems or None
        if isinstance(k, int):
            args.k = str(k)
        elif isinstance(k, dict) and k:
            args.k = ",".join(f"{name}={v}" for name, v in k.items())
    weights = agg.get("weights")
    if args.weights is None and weights is not None:
        if weights == "fixed":
            weights = {
                d["name"]: d.get("weight")
                for d in config.get("dimensions") or []
                if isinstance(d, dict)
            }
        args.weights = weights
        args.weights_source = f"{run_dir / MANIFEST} (aggregate.weights)"
    for name in (
        "trim",
        "bounds_on",
        "min_gap",
        "alpha",
        "require_separation",
        "require_qualification",
    ):
        if getattr(args, name) is None and agg.get(name) is not None:
            setattr(args, name, agg[name])


def _recorded_config(run_dir: Path) -> dict[str, Any] | None:
    """The config the run dir's manifest records, as written (None: none)."""
    manifest = Manifest.read(run_dir)
    return manifest.config if manifest is not None else None


def _run_config(run_dir: Path) -> Any:
    """The run's config from ``manifest.json`` (None if absent or invalid).

    It gives the summary what only the config knows (CUBE_METHOD.md section
    12): the qualification's kinds and expected faults, and which judge shares
    a model with a writer. A config that no longer validates (written by
    another version) costs those blocks only: one line says so.
    """
    manifest = run_dir / MANIFEST
    config = _recorded_config(run_dir)
    if config is None:
        return None
    try:
        return RunConfig.model_validate(config)
    except (ValidationError, ConfigError) as exc:
        if isinstance(exc, ValidationError):
            err = exc.errors()[0]
            why = f"{'.'.join(str(p) for p in err['loc']) or 'config'}: {err['msg']}"
        else:
            why = str(exc)
        print(
            f"cube-ray: {manifest}: the run's config no longer validates "
            f"({why}); the summary leaves out the qualification "
            'and the "judges its own model\'s answers" flags (CUBE_METHOD.md '
            "section 12).",
            file=sys.stderr,
        )
        return None


def _weights_source(args: argparse.Namespace) -> str:
    """Where the weights came from: their file, or the run's manifest."""
    source = getattr(args, "weights_source", None)
    return str(source) if source else str(args.weights)


def _fill_defaults(args: argparse.Namespace) -> None:
    for name, value in _DEFAULTS.items():
        if getattr(args, name) is None:
            setattr(args, name, value)
