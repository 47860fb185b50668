"""The run's sample (config ``sample:``): which documents get questions.

The corpus is read whole (every record is a document, indexed by the
built-in RAG); while it is staged, each document's stratum is collected
(:meth:`SampleSelection.collect_strata`). :meth:`~SampleSelection.draw_sample`
orders the population (``cube_ray.sample``), refuses a sample that leaves out
documents a previous run of the dir sampled unless ``--shrink``, and the
stage sources keep only the sampled documents' questions
(:meth:`~SampleSelection.in_sample`). The order and ``sample.json`` go to
``RUN_DIR/sample/`` once the run is allowed to write.
"""

from __future__ import annotations

import shutil
import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

import pyarrow as pa
import pyarrow.compute as pc

from cube_ray import schema
from cube_ray.corpus import stable_hash
from cube_ray.errors import ConfigError, InputError
from cube_ray.pipeline.parts import _swap_dir, part_files

if TYPE_CHECKING:
    import polars as pl
    from ray.data import Dataset

    from cube_ray.pipeline.state import RunState
    from cube_ray.sample import SampleState

# Polars and cube_ray.sample are imported where used: the stage workers, which
# import this package, must not load Polars (tests/unit/test_lazy_imports.py).

__all__ = ["SampleSelection"]

_FIELD = "field:"
"""Prefix of the record fields ``iter_document_batches`` keeps (the strata)."""

_IDS_CACHE: dict[str, Any] = {}


def _keep_sampled(batch: pa.Table, *, ids: list[Any]) -> pa.Table:
    """The rows of a batch whose ``doc_id`` is in the broadcast sample."""
    # heavy: ray, imported only where this code uses it
    import ray

    ref = ids[0]
    if ref.hex() not in _IDS_CACHE:
        _IDS_CACHE.clear()
        _IDS_CACHE[ref.hex()] = ray.get(ref)
    keep = pc.is_in(batch.column(schema.DOC_ID), value_set=_IDS_CACHE[ref.hex()])
    return batch.filter(keep)


@dataclass(frozen=True)
class _Draw:
    order: pl.DataFrame
    state: SampleState
    ids: pa.Array
    """Document ids of the sample."""
    questions: int
    """Questions of the sample (generated: one per document)."""


class SampleSelection:
    """The sample of one run: its strata while staging, then its draw."""

    def __init__(self, state: RunState) -> None:
        self._state = state
        self._draw: _Draw | None = None
        self._strata: list[pa.Table] | None = None
        """``doc_id, stratum`` of each staged batch, until the draw."""
        self._filled: set[str] | None = None
        """The strata fields some staged record has a value for."""

    def collect_strata(self, batch: pa.Table) -> pa.Table:
        """Keep a staged batch's ``doc_id, stratum``; the batch without them."""
        # lazy: loads polars, not in the Ray stage workers
        from cube_ray.sample import STRATUM, stratum_key

        sample = self._state.config.sample
        kept = [c for c in batch.column_names if c.startswith(_FIELD)]
        if sample is None:
            return batch.drop_columns(kept)
        if self._strata is None:
            self._strata, self._filled = [], set()
        assert self._filled is not None
        columns = [batch.column(f"{_FIELD}{f}").to_pylist() for f in sample.strata]
        for name, values in zip(sample.strata, columns, strict=True):
            if name not in self._filled and any(v is not None for v in values):
                self._filled.add(name)
        strata = [stratum_key(list(vals)) for vals in zip(*columns, strict=True)]
        if not sample.strata:
            strata = [stratum_key([])] * batch.num_rows
        self._strata.append(
            pa.table(
                {
                    schema.DOC_ID: batch.column(schema.DOC_ID),
                    STRATUM: pa.array(strata, pa.string()),
                }
            )
        )
        return batch.drop_columns(kept)

    def draw_sample(self, corpus_fp: str, questions: pa.Table | None) -> None:
        """Order the population and check the sample against the dir's last one.

        The population is every document, or with a question file the
        documents its questions ask about.

        Raises:
            InputError: A strata field has no value in any record.
            ConfigError: The sample leaves out documents a previous run of this
                dir sampled, without ``--shrink``.
        """
        # lazy: loads polars, not in the Ray stage workers
        import polars as pl

        # lazy: loads polars, not in the Ray stage workers
        from cube_ray.sample import STRATUM, SampleState, sample_block, sample_order

        cfg = self._state.config.sample
        if cfg is None:
            return
        empty = [f for f in cfg.strata if f not in (self._filled or set())]
        if empty:
            msg = (
                f"sample.strata names {empty}, which no record has a value for; "
                "name corpus fields that hold the strata (e.g. a region field)"
            )
            raise InputError(msg, path=self._state.config.corpus.path, field=empty[0])
        parts = self._strata or []
        population = pl.from_arrow(pa.concat_tables(parts))
        assert isinstance(population, pl.DataFrame)
        population_fp = corpus_fp
        if questions is not None:
            gold = questions.column(schema.DOC_ID).unique()
            population = population.filter(
                pl.col(schema.DOC_ID).is_in(gold.to_pylist())
            )
            population_fp = stable_hash(
                corpus_fp, *questions.column(schema.CONTENT_HASH).unique().to_pylist()
            )
        order = sample_order(
            population[schema.DOC_ID], population[STRATUM], seed=cfg.seed
        )
        size = min(cfg.size, order.height)
        block = sample_block(order, size=size, seed=cfg.seed, fields=cfg.strata)
        state = SampleState(size, cfg.seed, tuple(cfg.strata), population_fp, block)
        ids = order.head(size)[schema.DOC_ID].to_arrow()
        self._check_nested(order, ids)
        n_questions = size
        if questions is not None:
            keep = pc.is_in(questions.column(schema.DOC_ID), value_set=ids)
            n_questions = int(pc.sum(keep).as_py() or 0)
        self._draw = _Draw(order, state, ids, n_questions)
        self._strata = None  # the driver holds only the order from here on

    def _previous_sample(self) -> tuple[set[str], str, bool]:
        """The documents the dir's last run sampled, and how it is described.

        The flag says whether a rule earlier than this version's drew them.
        """
        # lazy: loads polars, not in the Ray stage workers
        import polars as pl

        # lazy: loads polars, not in the Ray stage workers
        from cube_ray.sample import ORDER, RULE, SAMPLE_DIR, read_sample

        state = read_sample(self._state.run_dir)
        if state is not None:
            old = (
                pl.scan_parquet(self._state.run_dir / SAMPLE_DIR / "sample.parquet")
                .filter(pl.col(ORDER) < state.size)
                .select(schema.DOC_ID)
                .collect()
            )
            what = (
                f"a sample of {state.size} documents (seed {state.seed}, strata "
                f"{list(state.fields)})"
            )
            old_rule = state.rule != RULE
            if old_rule:
                what += (
                    f" drawn by the earlier sample rule {state.rule!r} (section "
                    "11's keys (i + u_h) / N_h, not within +-1 of proportional "
                    f"with more than two strata), which this version replaced "
                    f"by {RULE!r}: the same config draws other documents now"
                )
            return set(old[schema.DOC_ID].to_list()), what, old_rule
        files = part_files(self._state.run_dir / "questions")
        if not files or self._state.config.questions.source == "file":
            return set(), "", False
        done = pl.scan_parquet(files).select(schema.DOC_ID).unique().collect()
        ids = set(done[schema.DOC_ID].to_list())
        return ids, f"questions for {len(ids)} documents (no sample)", False

    def _check_nested(self, order: pl.DataFrame, ids: pa.Array) -> None:
        old, what, old_rule = self._previous_sample()
        if not old:
            return
        cfg = self._state.config.sample
        assert cfg is not None
        population = set(order[schema.DOC_ID].to_list())
        left_out = sorted((old & population) - set(ids.to_pylist()))
        if not left_out or self._state.options.shrink:
            return
        msg = (
            f"sample: run dir {self._state.run_dir} holds {what}; this config's sample "
            f"(size {cfg.size}, seed {cfg.seed}, strata {cfg.strata}) leaves out "
            f"{len(left_out)} of those documents (e.g. {left_out[0]!r}). Samples "
            "grow, they do not shrink: raise sample.size (same seed and strata), "
            "or pass --shrink to leave those rows out of the summary (nothing is "
            "deleted)"
        )
        if old_rule:
            msg = (
                f"sample: run dir {self._state.run_dir} holds {what}. This config's "
                f"sample (size {cfg.size}) leaves out {len(left_out)} of those "
                f"documents (e.g. {left_out[0]!r}). Pass --shrink to keep every "
                "row and evaluate the new rule's sample (questions are asked for "
                "its new documents; rows outside it are left out of the summary, "
                "nothing is deleted), or start a new run dir (--out)"
            )
        raise ConfigError(msg)

    def write_sample_dir(self) -> None:
        """Write ``RUN_DIR/sample/`` (or remove it for a run without a sample)."""
        # lazy: loads polars, not in the Ray stage workers
        from cube_ray.sample import SAMPLE_DIR, write_sample

        target = self._state.run_dir / SAMPLE_DIR
        if self._draw is None:
            if target.exists():  # the run covers every document again
                shutil.rmtree(target)
            return
        staging = self._state.run_dir / f".staging-sample-{uuid.uuid4().hex[:8]}"
        write_sample(staging, self._draw.order, self._draw.state)
        _swap_dir(staging, target)

    def sample_questions(self) -> int | None:
        """Questions in the sample (None: no sample, every question)."""
        return None if self._draw is None else self._draw.questions

    def in_sample(self, table: pa.Table) -> pa.Table:
        """The rows of a driver-side table whose document is sampled."""
        if self._draw is None:
            return table
        keep = pc.is_in(table.column(schema.DOC_ID), value_set=self._draw.ids)
        return table.filter(keep)

    def in_sample_ds(self, ds: Dataset) -> Dataset:
        """The rows of a dataset whose document is sampled (ids broadcast)."""
        if self._draw is None:
            return ds
        # heavy: ray, imported only where this code uses it
        import ray

        ref = ray.put(self._draw.ids)
        return ds.map_batches(
            cast("Any", _keep_sampled),
            fn_kwargs={"ids": [ref]},
            batch_format="pyarrow",
            num_cpus=self._state.config.ray.task_num_cpus,
        )
