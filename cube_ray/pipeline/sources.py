"""``StageSources``: the source table of each stage's inputs, one wave at a time.

Small sources are read and joined with Arrow on the driver (under
``ray.driver_source_mb``), large ones with Ray Data; either way only the
sampled documents' questions are kept (``sampling``). The qualification
sample's sources (CUBE_METHOD.md section 12) are always read on the driver.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.parquet as pq

from cube_ray import schema
from cube_ray.pipeline.data import rows_in_wave
from cube_ray.pipeline.method import (
    ANSWERS,
    DOCUMENTS,
    FAULTS,
    QUALIFICATION,
    QUESTIONS,
)
from cube_ray.pipeline.parts import _rows_in, part_files
from cube_ray.pipeline.qualify import faults_source, qualification_source
from cube_ray.stages import ANSWER_HASH, DOC_HASH, JUDGE_SOURCE
from cube_ray.stages.qualify import SAMPLED

if TYPE_CHECKING:
    from ray.data import Dataset

    from cube_ray.pipeline.data import DataOps
    from cube_ray.pipeline.sampling import SampleSelection
    from cube_ray.pipeline.state import RunState

__all__ = ["StageSources"]


_QUESTION_COLS = [schema.QUESTION_ID, schema.DOC_ID, schema.QUESTION]
_DOC_COLS = [schema.DOC_ID, schema.TEXT, schema.CONTENT_HASH]
_ANSWER_COLS = [schema.QUESTION_ID, schema.SYSTEM, schema.ANSWER, schema.CONTENT_HASH]
"""Columns the stage sources read from each table; a source that joins
documents or answers renames their ``content_hash`` (``DOC_HASH``,
``ANSWER_HASH``)."""

_SAMPLE_SOURCES = {FAULTS: faults_source, QUALIFICATION: qualification_source}
"""Sources of the qualification stages (CUBE_METHOD.md section 12), always read
on the driver: a few hundred rows whatever the run's size."""


class StageSources:
    """The stages' source tables (``method.Inputs.source``) of one run."""

    def __init__(
        self, state: RunState, *, data: DataOps, sample: SampleSelection
    ) -> None:
        self._state = state
        self._data = data
        self._sample = sample

    def wave_source(self, name: str, wave: int, waves: int) -> tuple[Dataset, int]:
        """A source table of stage inputs (the rows of one wave) and its row count.

        Generated questions take their document's id, so a document and its
        question, answers and scores are in the same wave.
        """
        state = self._state
        column = schema.DOC_ID if name == DOCUMENTS else schema.QUESTION_ID
        small = _SAMPLE_SOURCES.get(name)  # the qualification sample: filtered reads
        table = small(state.run_dir, state.config) if small else self.on_driver(name)
        if table is not None:
            if waves > 1:
                table = rows_in_wave(table, column=column, wave=wave, waves=waves)
            count = table.num_rows
            if SAMPLED in table.column_names:  # donor documents make no rows
                count = sum(table.column(SAMPLED).to_pylist())
            return self._data.from_table(table), count
        source, count = self._with_ray(name)
        if waves > 1:
            # The wave's rows are kept in the object store (not on the
            # driver): counted once, read by the anti-join and the stage.
            source = self._data.in_wave(source, column, wave, waves).materialize()
            count = source.count()
        return source, count

    def on_driver(self, name: str) -> pa.Table | None:
        """A source table, read and joined with Arrow on the driver.

        None when its files are over ``ray.driver_source_mb`` (or missing:
        Ray Data's read then says so).
        """
        needs = {
            DOCUMENTS: (DOCUMENTS,),
            QUESTIONS: (QUESTIONS,),
            "qdocs": (QUESTIONS, DOCUMENTS),
            ANSWERS: (ANSWERS, QUESTIONS, DOCUMENTS),
        }[name]
        files = {t: part_files(self._state.table_dir(t)) for t in needs}
        size = sum(f.stat().st_size for fs in files.values() for f in fs)
        limit = self._state.config.ray.driver_source_mb * 2**20
        if not all(files.values()) or size > limit:
            return None

        def read(table: str, columns: list[str] | None = None) -> pa.Table:
            parts = [pq.ParquetFile(f).read(columns=columns) for f in files[table]]
            return pa.concat_tables(parts, promote_options="default")

        in_sample = self._sample.in_sample
        # Only the sampled documents get questions (all without ``sample:``).
        if name == DOCUMENTS:
            return in_sample(read(DOCUMENTS))
        if name == QUESTIONS:
            return in_sample(read(QUESTIONS, _QUESTION_COLS))
        docs = read(DOCUMENTS, _DOC_COLS).rename_columns(
            {schema.CONTENT_HASH: DOC_HASH}
        )
        questions = in_sample(read(QUESTIONS, _QUESTION_COLS))
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

    def _with_ray(self, name: str) -> tuple[Dataset, int]:
        """A source table of stage inputs and its row count (Ray Data reads)."""
        state, data, sample = self._state, self._data, self._sample
        if name == DOCUMENTS:
            docs = sample.in_sample_ds(data.read(DOCUMENTS))
            n = sample.sample_questions()
            return docs, state.n_docs if n is None else n
        if name == QUESTIONS:
            questions = sample.in_sample_ds(
                data.read(QUESTIONS, columns=_QUESTION_COLS)
            )
            return questions, state.n_questions
        if name == "qdocs":
            return self._qdocs(), state.n_questions
        n_answers = _rows_in(part_files(state.table_dir(ANSWERS)))
        answers = data.read(ANSWERS, columns=_ANSWER_COLS).rename_columns(
            {schema.CONTENT_HASH: ANSWER_HASH}
        )
        qdocs = self._qdocs().drop_columns([schema.DOC_ID])
        joined = data.join(answers, qdocs, "inner", (schema.QUESTION_ID,), n_answers)
        return joined, n_answers

    def _qdocs(self) -> Dataset:
        """Questions joined with their gold documents' text and hash."""
        data = self._data
        questions = self._sample.in_sample_ds(
            data.read(QUESTIONS, columns=_QUESTION_COLS)
        )
        docs = data.read(DOCUMENTS, columns=_DOC_COLS).rename_columns(
            {schema.CONTENT_HASH: DOC_HASH}
        )
        rows = self._state.n_docs + self._state.n_questions
        return data.join(questions, docs, "inner", (schema.DOC_ID,), rows)
