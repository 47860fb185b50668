"""``cube-ray run CONFIG``: run (or resume) a CuBE evaluation."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from cube_ray.commands.check import run_preflight
from cube_ray.console import console
from cube_ray.errors import INCOMPLETE_EXIT_CODE, ConfigError, CubeRayError

__all__ = ["check_out_dir", "dry_run_checks", "register", "run_command"]


def register(subparsers: Any) -> None:
    """Add the ``run`` subcommand."""
    p: argparse.ArgumentParser = subparsers.add_parser(
        "run",
        help="run or resume a CuBE evaluation",
        description=(
            "Run the CuBE job of CONFIG on a local Ray or a cluster. Rerunning on "
            "the same run dir resumes: rows already written are not recomputed."
        ),
    )
    p.add_argument("config", help="run config (YAML), e.g. conf/demo.yaml")
    p.add_argument(
        "--out", metavar="RUN_DIR", help="run directory (default: output_dir)"
    )
    p.add_argument("--limit", type=int, metavar="N", help="use the first N records")
    p.add_argument(
        "--address", metavar="ADDR", help="Ray address (auto, ray://host:10001)"
    )
    p.add_argument(
        "--dry-run",
        action="store_true",
        help=(
            "print engine calls, estimated prompt tokens and which environment "
            "variables go to which host; start no engine (with --address, also "
            "check the cluster as `cube-ray check` does)"
        ),
    )
    p.add_argument(
        "--retry-failed",
        action="store_true",
        help="recompute rows whose status is not ok",
    )
    p.add_argument(
        "--update",
        action="store_true",
        help=(
            "let a changed config or corpus update RUN_DIR in place (changed rows "
            "are recomputed); without it, a run dir made by another config or "
            "corpus is refused"
        ),
    )
    p.add_argument(
        "--shrink",
        action="store_true",
        help=(
            "allow a sample: that leaves out documents an earlier run of RUN_DIR "
            "sampled (smaller size, other seed or strata); their rows are kept "
            "and left out of the summary"
        ),
    )
    size = p.add_mutually_exclusive_group()
    size.add_argument(
        "--sample-size",
        type=int,
        metavar="N",
        help="questions for a planned sample of N documents (overrides sample.size)",
    )
    size.add_argument(
        "--fit-minutes",
        type=float,
        metavar="M",
        help=(
            "the largest sample (up to sample.size) whose estimated time on this "
            "CPU fits M minutes, never fewer questions than a verdict needs (6 at "
            "aggregate.alpha 0.05): below that it drops the LLM judges that cannot "
            "enter the headline instead, and says so"
        ),
    )
    p.add_argument("--no-progress", action="store_true", help="no progress bars")
    p.add_argument("--no-report", action="store_true", help="skip report.html/.md")
    p.add_argument(
        "--verbose",
        action="store_true",
        help="show vLLM and Ray output on the console (default: RUN_DIR/logs/)",
    )
    p.add_argument(
        "--human",
        metavar="FILE.csv",
        default=None,
        help="human scores of an audit (question_id,system,dimension,score"
        "[,rater]): the summary adds each judge's CuBE calibrated against them "
        "(docs/calibration.md)",
    )
    p.add_argument("--call-log", help=argparse.SUPPRESS)
    p.set_defaults(func=run_command)


def run_command(args: argparse.Namespace) -> int:
    """Load the config, then plan (``--dry-run``) or run the pipeline."""
    # lazy: loads pyarrow, pydantic, yaml; --help imports every command module
    from cube_ray.config import RunConfig

    config = RunConfig.from_yaml(args.config)
    if args.limit is not None and args.limit < 1:
        msg = f"--limit must be >= 1, got {args.limit}"
        raise ConfigError(msg)
    run_dir = Path(args.out) if args.out else Path(config.output_dir)
    check_out_dir(run_dir, flag="--out" if args.out else "output_dir")
    config = _sized(config, args)
    if args.dry_run:
        dry_run_checks(config, run_dir, update=args.update)
        # lazy: loads pandas, pyarrow, pydantic; --help imports every command module
        from cube_ray.plan import (
            file_uses,
            format_env_uses,
            format_file_uses,
            format_plan,
            plan_run,
        )

        print(format_plan(plan_run(config, limit=args.limit)))
        print(format_env_uses(config.env_uses()))
        print(format_file_uses(file_uses(config)))
        _state_work(config, args)
        if args.address:
            run_preflight(config, run_dir=run_dir, address=args.address)
        return 0
    # lazy: loads pandas, pyarrow, pydantic; --help imports every command module
    from cube_ray.pipeline import RunOptions, run_pipeline
    from cube_ray.preflight import check_env

    check_env(config)  # an unset variable fails before Ray starts
    if args.human is not None:  # a bad file fails before Ray starts
        # lazy: loads cube_ray.aggregate (scipy, polars), pyarrow, pydantic; --help
        # imports every command module
        from cube_ray.report import read_human_ratings

        read_human_ratings(args.human)

    options = RunOptions(
        run_dir=run_dir,
        limit=args.limit,
        address=args.address,
        call_log=args.call_log,
        retry_failed=args.retry_failed,
        update=args.update,
        shrink=args.shrink,
        progress=False if args.no_progress else None,
        report=not args.no_report,
        quiet=not args.verbose,
        config_path=args.config,
        human=Path(args.human) if args.human is not None else None,
        before_engines=lambda: _state_work(config, args),
    )
    try:
        result = run_pipeline(config, options)
    except CubeRayError:
        raise
    except Exception as exc:
        if args.verbose:
            raise
        # The traceback and the engines' output are in the run's log.
        logs = run_dir / "logs"
        where = f"; details in {logs}/" if logs.is_dir() else ""
        print(f"cube-ray: error: {type(exc).__name__}: {exc}{where}", file=sys.stderr)
        return 1
    headline = result.headline
    if not headline and result.summary_path is not None:  # no report: no interval
        # lazy: loads cube_ray.aggregate (scipy, polars), pyarrow, pydantic; --help
        # imports every command module
        from cube_ray.report import console_lines, load_run

        headline = console_lines(load_run(result.run_dir, tables=False))
    # The headline first: what a run found, before where it put it.
    for i, line in enumerate(headline):
        print(f"{'result:' if i == 0 else '':10s}{line}")
    print(f"run dir:  {result.run_dir}")
    for table in ("documents", "questions", "answers", "scores"):
        print(f"{table + ':':10s}{result.run_dir / table}/")
    if result.summary_path is not None:
        print(f"summary:  {result.summary_path}")
    else:
        print("summary:  not written (cube_ray.aggregate is not available)")
    for path in result.report_paths:
        print(f"report:   {path}")
    print(f"manifest: {result.manifest_path}")
    if result.log_path is not None:
        print(f"logs:     {result.log_path} (vLLM and Ray output; --verbose shows it)")
    sys.stdout.flush()
    if result.incomplete:
        # Every stage ran, but failed answers left a set empty: say so last,
        # with the rerun that completes the run.
        for system, reason in result.incomplete.items():
            print(
                f"cube-ray: incomplete: {system}: no verdict — {reason}",
                file=sys.stderr,
            )
        print(
            "cube-ray: fix what made the answers fail (the warnings above name the "
            f"setting), then rerun: cube-ray run {args.config} --out {run_dir} "
            f"--retry-failed (exit code {INCOMPLETE_EXIT_CODE}: incomplete)",
            file=sys.stderr,
        )
        return INCOMPLETE_EXIT_CODE
    return 0


def _sized(config: Any, args: argparse.Namespace) -> Any:
    """The config with ``--sample-size`` or ``--fit-minutes`` applied."""
    # lazy: loads pandas, pyarrow, pydantic; --help imports every command module
    from cube_ray.run_statement import cpu_info, fit_sample, with_sample_size

    for flag, value in (
        ("--sample-size", args.sample_size),
        ("--fit-minutes", args.fit_minutes),
    ):
        if value is not None and not value > 0:
            msg = f"{flag} must be > 0, got {value:g}; e.g. {flag} 4"
            raise ConfigError(msg)
    if args.sample_size is not None:
        return with_sample_size(config, args.sample_size)
    if args.fit_minutes is not None:
        config, note = fit_sample(
            config, minutes=args.fit_minutes, limit=args.limit, cpu=cpu_info()
        )
        print(f"cube-ray: {note}", file=sys.stderr, flush=True)
    return config


def _state_work(config: Any, args: argparse.Namespace) -> None:
    """Say the run's work, its time on this CPU and how to shorten it."""
    # lazy: loads pandas, pyarrow, pydantic; --help imports every command module
    from cube_ray.run_statement import cpu_info, run_statement

    try:
        statement = run_statement(
            config,
            limit=args.limit,
            cpu=cpu_info(),
            remote=bool(args.address),
            config_path=args.config,
        )
    except Exception as exc:  # a statement must not stop the run it describes
        msg = f"work: not estimated ({type(exc).__name__}: {exc})"
        print(f"cube-ray: {msg}", file=console(), flush=True)
        return
    for line in statement.lines:  # the terminal, also while a run is quiet
        print(f"cube-ray: {line}", file=console(), flush=True)


def check_out_dir(run_dir: Path, *, flag: str = "--out") -> None:
    """The run dir is a folder, or can become one.

    Raises:
        ConfigError: ``run_dir`` (or a folder above it) is a file.
    """
    for path in (run_dir, *run_dir.parents):
        if path.exists() and not path.is_dir():
            what = "is" if path == run_dir else f"is inside {str(path)!r}, which is"
            msg = (
                f"{flag} {str(run_dir)!r} {what} a file; a run dir is a folder "
                "(new, or made by an earlier run of this config): choose another "
                f"{flag}"
            )
            raise ConfigError(msg)
        if path.exists():
            return


def dry_run_checks(config: Any, run_dir: Path, *, update: bool = False) -> None:
    """What a run checks before Ray starts, without a cluster.

    Environment variables are set, QA files are valid row by row (the question
    file and the corpus are read by the plan itself), and the run dir is not
    another run's (its config; the corpus is compared when the run stages it).

    Raises:
        ConfigError, ClusterError, InputError: As the run would (exit 2).
    """
    # lazy: loads pyarrow, pydantic, yaml; --help imports every command module
    from cube_ray.corpus import with_prompt_language
    from cube_ray.pipeline.ownership import check_config_owner
    from cube_ray.preflight import check_env
    from cube_ray.systems.kinds import system_kind

    check_env(config)
    for system in config.systems:
        system_kind(system).check(system)
        system_kind(system).check_rows(system)  # every row, as the run reads them
    if not update:
        check_config_owner(run_dir, with_prompt_language(config))
