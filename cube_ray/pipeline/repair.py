"""Repair of a run dir that holds one key twice (two runs wrote it at once).

Before the run dir had a lock (``cube_ray.run_lock``), two ``cube-ray run``
processes on one dir both computed and wrote the same rows: the tables then
held duplicate keys, and every later run and ``aggregate`` stopped at
"duplicate rows". A run now repairs such a dir before its stages:

- rows with the same key and the same input hash (``content_hash``) are the
  same work done twice: one is kept, the earliest (part files sort by the run
  that wrote them) among those whose status is ``ok``, else the earliest;
- a key left with rows of several input hashes is an interrupted update
  (``--update``), which the stage's compaction settles against the current
  inputs: the stage is marked for it (``.compact-pending-<stage>``).

The check is cheap when there is nothing to repair: per stage, one 64-bit hash
per row of the key columns, compared with the row count; only suspected rows
are then read whole.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from cube_ray import schema
from cube_ray.files import write_atomic
from cube_ray.pipeline.parts import _PENDING_PREFIX, _parquet, _rows_in, part_files
from cube_ray.stages import KEYS

__all__ = ["repair_duplicate_keys"]

_PART = re.compile(r"^part-\d{8}T\d+Z-(?P<stage>.+)-\d{6}(?:-[0-9a-f]{16})?\.parquet$")
_FILE, _ROW = "__file", "__row"


def _stage_groups(files: list[Path]) -> dict[str, list[Path]]:
    """Part files by the stage that wrote them (a key belongs to one stage).

    >>> names = ["part-20260101T000000Z-judge-j1-000000.parquet",
    ...          "part-20260102T000000Z-judge-j1-000000-0123456789abcdef.parquet",
    ...          "part-20260101T000000Z-rag-000001.parquet"]
    >>> {k: len(v) for k, v in _stage_groups([Path(n) for n in names]).items()}
    {'judge-j1': 2, 'rag': 1}
    """
    groups: dict[str, list[Path]] = {}
    for f in files:
        m = _PART.match(f.name)
        groups.setdefault(m.group("stage") if m else "", []).append(f)
    return groups


def _key_hashes(files: list[Path], key: tuple[str, ...]) -> Any:
    """One frame: file index, row index and a hash of the key, per row."""
    # lazy: loads polars, not in the Ray stage workers
    import polars as pl

    frames = []
    for i, f in enumerate(files):
        df = pl.from_arrow(pq.read_table(f, columns=list(key)))
        assert isinstance(df, pl.DataFrame)
        frames.append(
            df.select(
                pl.lit(i, dtype=pl.UInt32).alias(_FILE),
                pl.int_range(pl.len(), dtype=pl.UInt32).alias(_ROW),
                pl.struct(list(key)).hash(seed=7).alias("h"),
            )
        )
    return pl.concat(frames)


def _rows_to_drop(
    files: list[Path], key: tuple[str, ...]
) -> tuple[dict[int, list[int]], bool]:
    """Rows to drop per file index, and whether a key keeps several hashes."""
    # lazy: loads polars, not in the Ray stage workers
    import polars as pl

    hashes = _key_hashes(files, key)
    if hashes["h"].n_unique() == hashes.height:
        return {}, False
    suspects = hashes.filter(pl.col("h").is_duplicated())
    cols = [*key, schema.CONTENT_HASH, schema.STATUS]
    parts = []
    for (i,), rows in suspects.group_by(_FILE, maintain_order=True):
        f = files[int(i)]
        names = set(pq.ParquetFile(f).schema_arrow.names)
        t = pq.read_table(f, columns=[c for c in cols if c in names])
        df = pl.from_arrow(t.take(pa.array(rows[_ROW].to_list())))
        assert isinstance(df, pl.DataFrame)
        if schema.STATUS not in df.columns:
            df = df.with_columns(pl.lit(schema.STATUS_OK).alias(schema.STATUS))
        parts.append(df.with_columns(rows[_FILE], rows[_ROW]))
    rows = pl.concat(parts, how="diagonal").sort(_FILE, _ROW)
    same_work = [*key, schema.CONTENT_HASH]
    kept = (
        rows.with_columns((pl.col(schema.STATUS) != schema.STATUS_OK).alias("_bad"))
        .sort("_bad", _FILE, _ROW)
        .unique(subset=same_work, keep="first", maintain_order=True)
    )
    drop = rows.join(kept.select(_FILE, _ROW), on=[_FILE, _ROW], how="anti")
    several = kept.select(pl.struct(list(key)).is_duplicated().any()).item()
    out: dict[int, list[int]] = {}
    for i, r in drop.select(_FILE, _ROW).iter_rows():
        out.setdefault(int(i), []).append(int(r))
    return out, bool(several)


def _rewrite(path: Path, drop: list[int]) -> None:
    """The part file without the given rows (removed when none is left)."""
    table = pq.read_table(path)
    mask = [True] * table.num_rows
    for r in drop:
        mask[r] = False
    kept = table.filter(pa.array(mask))
    if kept.num_rows:
        write_atomic(path, _parquet(kept))
    else:
        path.unlink()


def repair_duplicate_keys(run_dir: Path, *, say: Callable[[str], None]) -> int:
    """Keep one row per (key, input hash) in every table; returns rows dropped.

    Each table with dropped rows is named with the count, so the repair of a
    dir two runs wrote at once is never silent.
    """
    total = 0
    for table, key in KEYS.items():
        table_dir = run_dir / table
        files = part_files(table_dir)
        if not files:
            continue
        dropped = 0
        for stage, group in _stage_groups(files).items():
            drops, several = _rows_to_drop(group, key)
            for i, rows in drops.items():
                _rewrite(group[i], rows)
                dropped += len(rows)
            if several and stage:
                (table_dir / f"{_PENDING_PREFIX}{stage}").touch()
        if dropped:
            left = _rows_in(part_files(table_dir))
            say(
                f"run dir {str(run_dir)!r}: {table} held {dropped} duplicate rows "
                "(one key written twice, as by two runs at once); kept one row "
                f"per key (the earliest, an ok one first), dropped {dropped}, "
                f"{left} rows left"
            )
        total += dropped
    return total
