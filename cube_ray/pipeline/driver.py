"""``_Driver``: one run's state on the driver, and the sources of its stages.

The driver builds each stage's inputs from its recipe (``method.Inputs``):
small sources are read and joined with Arrow on the driver, large ones with
Ray Data; then it walks the stage graph (``schedule``). Reading, joining,
compaction and intake are its mixins' (``data``, ``compaction``, ``intake``,
``sampling``, ``runner``); ``run_pipeline`` (``run``) owns the run around it.
"""

from __future__ import annotations

import datetime as dt
import math
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.parquet as pq

from cube_ray import schema
from cube_ray.config import RunConfig
from cube_ray.pipeline.compaction import Compaction
from cube_ray.pipeline.data import DataOps, rows_in_wave
from cube_ray.pipeline.engine_pool import EnginePools, engine_id
from cube_ray.pipeline.intake import Intake
from cube_ray.pipeline.method import (
    ANSWERS,
    DOCUMENTS,
    FAULTS,
    QUALIFICATION,
    QUESTIONS,
    StageSpec,
    stage_graph,
)
from cube_ray.pipeline.parts import StageStats, _rows_in, part_files
from cube_ray.pipeline.qualify import faults_source, qualification_source
from cube_ray.pipeline.retrieval_check import EARLY_MIN_ROWS, check_system_ids
from cube_ray.pipeline.runner import StageRunner
from cube_ray.pipeline.sampling import SampleSelection
from cube_ray.pipeline.schedule import run_graph
from cube_ray.stages import ANSWER_HASH, DOC_HASH, JUDGE_SOURCE
from cube_ray.stages.qualify import SAMPLED
from cube_ray.systems.kinds import system_kind

if TYPE_CHECKING:
    from ray.data import Dataset

    from cube_ray.pipeline.run import RunOptions

__all__ = ["_Driver"]


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
        self.engines = EnginePools(before_first=options.before_engines)
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
