"""Intake: the corpus, a question file and QA files, checked before anything runs.

The corpus is streamed on the driver into one-chunk documents, validated into
a staging folder beside the run dir (a bad corpus leaves the run dir
untouched), then swapped in. A question file is checked against the staged
document ids; QA files are checked by their kind (``cube_ray.systems.kinds``).
"""

from __future__ import annotations

import hashlib
import shutil
import time
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from cube_ray import schema
from cube_ray.corpus import iter_document_batches, stable_hash
from cube_ray.errors import CubeRayError, InputError
from cube_ray.manifest import Manifest
from cube_ray.pipeline.method import DOCUMENTS, QUESTIONS
from cube_ray.pipeline.parts import (
    CORRUPT_SUFFIX,
    PartWriter,
    StageStats,
    _heal_swaps,
    _rows_in,
    _swap_dir,
    part_files,
)
from cube_ray.stages import QUESTIONS_OUT_SCHEMA, questions_table
from cube_ray.systems import load_question_file
from cube_ray.systems.kinds import file_digest, system_kind

if TYPE_CHECKING:
    from cube_ray.pipeline.sampling import SampleSelection
    from cube_ray.pipeline.state import RunState

__all__ = ["Intake"]


class Intake:
    """The run's inputs, staged and checked; each system's set-up."""

    def __init__(self, state: RunState, sample: SampleSelection) -> None:
        self._state = state
        self._sample = sample

    def stage_documents(self) -> tuple[Path, str, pa.Table | None]:
        """Validate the corpus (and question file) into a staging folder.

        The folder is beside the run dir, which stays untouched; returns it,
        the corpus fingerprint and the question file's table.
        """
        state = self._state
        cfg = state.config
        parent = state.run_dir.parent
        parent.mkdir(parents=True, exist_ok=True)
        # Stage outside the run dir so a bad corpus leaves it untouched.
        staging = parent / f".{state.run_dir.name}.staging-{uuid.uuid4().hex[:8]}"
        start = time.monotonic()
        h = hashlib.blake2b(digest_size=16)
        writer = PartWriter(
            staging,
            run_stamp=state.stamp,
            stage=DOCUMENTS,
            schema_=schema.DOCUMENTS_SCHEMA,
            max_rows=cfg.ray.write_rows,
        )
        try:
            for read in iter_document_batches(
                cfg.corpus,
                batch_rows=cfg.ray.read_batch_size,
                limit=state.options.limit,
                keep_fields=cfg.sample.strata if cfg.sample else (),
            ):
                batch = self._sample.collect_strata(read)  # strata kept for the sample
                for ch in batch.column(schema.CONTENT_HASH).to_pylist():
                    h.update(ch.encode())
                writer.write(batch)
            writer.flush()
            state.n_docs = writer.rows
            fingerprint = h.hexdigest()
            questions = (
                self._question_file_table(staging)
                if cfg.questions.source == "file"
                else None
            )
            self._sample.draw_sample(fingerprint, questions)
            self._check_qa_files()
        except BaseException:
            shutil.rmtree(staging, ignore_errors=True)
            raise
        state.stats[DOCUMENTS] = StageStats(
            expected=state.n_docs,
            written=state.n_docs,
            seconds=time.monotonic() - start,
        )
        return staging, fingerprint, questions

    def documents(self, staged: tuple[Path, str, pa.Table | None]) -> str:
        """Move staged documents into the run dir; returns the corpus fingerprint."""
        staging, fingerprint, questions = staged
        state = self._state
        state.run_dir.mkdir(parents=True, exist_ok=True)
        _heal_swaps(state.run_dir)
        target = state.table_dir(DOCUMENTS)
        manifest = Manifest.read(state.run_dir)
        old_fp = manifest.corpus_fingerprint if manifest is not None else None
        # Same corpus, all documents there (a part set aside as corrupt is not).
        if old_fp == fingerprint and _rows_in(part_files(target)) == state.n_docs:
            shutil.rmtree(staging, ignore_errors=True)
        else:
            staging.mkdir(parents=True, exist_ok=True)
            for kept in target.glob(f"*{CORRUPT_SUFFIX}*"):  # set aside: keep it
                kept.replace(staging / kept.name)
            _swap_dir(staging, target)
        self._sample.write_sample_dir()
        if questions is not None:
            self._write_question_file(questions)
        n_sampled = self._sample.sample_questions()
        if n_sampled is not None:  # only the sample's questions are asked
            state.n_questions = n_sampled
        return fingerprint

    def _question_file_table(self, staging: Path) -> pa.Table:
        """Load and check the question file against the staged document ids."""
        # lazy: loads polars, not in the Ray stage workers
        import polars as pl

        qcfg = self._state.config.questions
        assert qcfg.path is not None
        # Known ids come from the staged documents (only the id column).
        doc_dir_files = [str(f) for f in part_files(staging)]
        ids = (
            pl.scan_parquet(doc_dir_files)
            .select(schema.DOC_ID)
            .collect()[schema.DOC_ID]
        )
        known = set(ids.to_list())
        limit = self._state.options.limit
        frame = load_question_file(
            qcfg.path,
            question_field=qcfg.question_field,
            doc_id_field=qcfg.doc_id_field,
            id_field=qcfg.question_id_field,
            reference_answer_field=qcfg.reference_answer_field,
            # Under a limit most gold documents are legitimately not staged.
            known_doc_ids=known if limit is None else None,
        )
        if limit is not None:
            # A trial run: the questions about the first N documents.
            frame = frame.filter(pl.col(schema.DOC_ID).is_in(list(known)))
            frame = frame.head(limit)
            if frame.height == 0:
                msg = (
                    f"no question's gold document is among the first {limit} "
                    "corpus documents (--limit / corpus.limit); raise the limit "
                    "or put those documents first in the corpus"
                )
                raise InputError(msg, path=str(qcfg.path), field=qcfg.doc_id_field)
        digest = stable_hash(file_digest(qcfg.path))
        n = frame.height
        # Latency and token columns stay null: nobody generated these questions.
        return questions_table(
            {
                schema.QUESTION_ID: frame[schema.QUESTION_ID].to_arrow(),
                schema.DOC_ID: frame[schema.DOC_ID].to_arrow(),
                schema.QUESTION: frame[schema.QUESTION].to_arrow(),
                schema.GENERATOR: pa.array(["file"] * n, pa.string()),
                schema.REFERENCE_ANSWER: frame[schema.REFERENCE_ANSWER].to_arrow(),
                schema.CONTENT_HASH: pa.array([digest] * n, pa.string()),
                schema.STATUS: pa.array([schema.STATUS_OK] * n, pa.string()),
            }
        )

    def _write_question_file(self, table: pa.Table) -> None:
        staging = self._state.run_dir / f".staging-questions-{uuid.uuid4().hex[:8]}"
        writer = PartWriter(
            staging,
            run_stamp=self._state.stamp,
            stage="questions",
            schema_=QUESTIONS_OUT_SCHEMA,
        )
        writer.write(table)
        writer.flush()
        staging.mkdir(parents=True, exist_ok=True)
        _swap_dir(staging, self._state.table_dir(QUESTIONS))
        self._state.n_questions = table.num_rows
        self._state.stats[QUESTIONS] = StageStats(
            expected=table.num_rows, written=table.num_rows
        )

    def _check_qa_files(self) -> None:
        """Each system's driver-side checks (a QA file's header), before any write."""
        for system in self._state.config.systems:
            system_kind(system).check(system)

    def prepare_system(self, system: Any) -> None:
        """A system's one-off set-up (its kind's ``prepare``) in one task.

        That is the built-in RAG's index, or a QA file's validation and lookup
        index (``index/`` of the run dir). The task is pinned to the driver's
        node, where the run dir (and so the documents and the index) lives;
        the driver itself holds nothing. A bad QA file fails here with its
        file, row and field.
        """
        # heavy: ray, imported only where this code uses it
        import ray
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        prep = system_kind(system).prepare(system, run_dir=self._state.run_dir)
        if prep is None:
            return
        node = ray.get_runtime_context().get_node_id()
        task = ray.remote(prep.fn).options(
            num_cpus=self._state.config.ray.task_num_cpus,
            scheduling_strategy=NodeAffinitySchedulingStrategy(node, soft=False),
        )
        try:
            ray.get(task.remote(system, **prep.kwargs))
        except ray.exceptions.RayTaskError as exc:
            if isinstance(exc.cause, CubeRayError):
                raise exc.cause from None
            raise
