"""Resume and compaction of one stage: the rows left to do, the stale rows dropped.

Rows whose (key, hash) is already written are never sent to an engine again.
After a stage that wrote into a table which already had rows, the table is
compacted: rows whose key is in the current input but whose hash is not are
dropped. A marker file (``.compact-pending-<stage>``) set while such a stage
runs makes the next run compact even when no row is left to do.
"""

from __future__ import annotations

import datetime as dt
import shutil
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import pyarrow as pa
import pyarrow.parquet as pq

from cube_ray import schema
from cube_ray.pipeline import faults
from cube_ray.pipeline.data import _drop_done
from cube_ray.pipeline.parts import (
    _CUR_HASH,
    PartWriter,
    _keep_current,
    _key_strings,
    _rows_in,
    _safe,
    _status_ok,
    part_files,
)
from cube_ray.stages import INPUT_HASH, KEYS

if TYPE_CHECKING:
    from ray.data import Dataset

    from cube_ray.pipeline.data import DataOps
    from cube_ray.pipeline.state import RunState

__all__ = ["Compaction"]


class Compaction:
    """The anti-join with written rows, and the compaction of stale rows."""

    def __init__(self, state: RunState, data: DataOps) -> None:
        self._state = state
        self._data = data

    def todo_join(
        self, inputs: Dataset, existing: list[Path], key: tuple[str, ...], rows: int
    ) -> Dataset:
        """Inputs whose (key, hash) is not written yet: a Ray Data anti-join."""
        cols = [*key, schema.CONTENT_HASH]
        done = self._data.read_files(existing, [*cols, schema.STATUS])
        if self._state.options.retry_failed:
            done = done.filter(_status_ok)
        done = done.select_columns(cols).rename_columns(
            {schema.CONTENT_HASH: INPUT_HASH}
        )
        return self._data.join(inputs, done, "left_anti", (*key, INPUT_HASH), rows)

    def todo_small(
        self, inputs: Dataset, existing: list[Path], key: tuple[str, ...]
    ) -> tuple[Dataset, set[str]]:
        """The anti-join for small stages: the done set is broadcast, no shuffle.

        Returns the (materialised) rows to do and the keys among them that
        already have a row with another hash (stale rows to drop afterwards).
        """
        # heavy: ray, imported only where this code uses it
        import ray

        done: set[str] = set()
        written: set[str] = set()
        for f in existing:
            t = pq.read_table(f, columns=[*key, schema.CONTENT_HASH, schema.STATUS])
            keys = _key_strings(t, key)
            hashes = t.column(schema.CONTENT_HASH).to_pylist()
            statuses = t.column(schema.STATUS).to_pylist()
            for k, h, st in zip(keys, hashes, statuses, strict=True):
                written.add(k)
                if not self._state.options.retry_failed or st == schema.STATUS_OK:
                    done.add(f"{k}\x1f{h}")
        ref = ray.put(done)
        todo = inputs.map_batches(
            cast("Any", _drop_done),
            fn_kwargs={"done": [ref], "key": key},
            batch_format="pyarrow",
            num_cpus=self._state.config.ray.task_num_cpus,
        ).materialize()
        stale: set[str] = set()
        for block in todo.select_columns(list(key)).iter_batches(
            batch_format="pyarrow", batch_size=None
        ):
            stale.update(k for k in _key_strings(block, key) if k in written)
        return todo, stale

    def compact_small(
        self, table: str, label: str, files: list[Path], stale: set[str]
    ) -> None:
        """Rewrite the stage's old part files without the stale keys."""
        if not stale:
            return
        key = KEYS[table]
        stamp = dt.datetime.now(dt.timezone.utc).strftime("%Y%m%dT%H%M%S%fZ")
        dropped = 0
        for i, f in enumerate(files):
            t = pq.read_table(f)
            keep = pa.array([k not in stale for k in _key_strings(t, key)])
            kept = t.filter(keep)
            if kept.num_rows == t.num_rows:
                continue
            dropped += t.num_rows - kept.num_rows
            if kept.num_rows:
                # One file per old file, unique within the stamp.
                writer = PartWriter(
                    f.parent, run_stamp=stamp, stage=label, schema_=None, first_seq=i
                )
                writer.write(kept)
                writer.flush()
            f.unlink()
        self._state.say(f"{label}: dropped {dropped} stale rows")

    def compact_retrying(
        self, table: str, label: str, inputs: Dataset, expected: int
    ) -> None:
        """``compact``, retried after a lost node (it calls no engine)."""
        attempts = self._state.config.ray.stage_retries + 1
        for attempt in range(1, attempts + 1):
            nodes_before = faults.alive_nodes()
            try:
                self.compact(table, label, inputs, expected)
                return
            except Exception as exc:
                if attempt == attempts or not faults.is_infra_failure(exc):
                    raise
                self._state.say(
                    f"{label}: compaction {faults.infra_reason(exc)}; retrying"
                )
            self._state.await_node_loss(label, nodes_before, attempt)

    def compact(self, table: str, label: str, inputs: Dataset, expected: int) -> None:
        """Drop a stage's rows whose key is in ``inputs`` with another hash.

        Such rows are stale after a config or corpus change. The kept rows are
        written as new part files of the stage before the old ones are removed.
        """
        key = KEYS[table]
        table_dir = self._state.table_dir(table)
        files = part_files(table_dir, label)
        rows = _rows_in(files)
        current = inputs.select_columns([*key, INPUT_HASH]).rename_columns(
            {INPUT_HASH: _CUR_HASH}
        )
        mine = self._data.read_files(files)
        joined = self._data.join(mine, current, "left_outer", key, rows + expected)
        kept = joined.map_batches(_keep_current, batch_format="pyarrow")
        staging = self._state.run_dir / f".staging-{table}-{uuid.uuid4().hex[:8]}"
        stamp = dt.datetime.now(dt.timezone.utc).strftime("%Y%m%dT%H%M%S%fZ")
        stem = f"part-{stamp}-{_safe(label)}-000000"
        try:
            for _ in self._data.write_parts(
                kept, staging, stem=stem, key=key, schema_=None
            ):
                pass
            new_files = part_files(staging)
            kept_rows = _rows_in(new_files)
            if kept_rows != rows:
                for new in new_files:
                    new.replace(table_dir / new.name)
                for old in files:
                    old.unlink()
                self._state.say(f"{label}: dropped {rows - kept_rows} stale rows")
        finally:
            shutil.rmtree(staging, ignore_errors=True)
