"""The part-file protocol of the run dir's tables (no Ray here).

A table (``documents/``, ``questions/``, ``answers/``, ``scores/``) is a folder
of Parquet part files ``part-<run stamp>-<stage>-<seq>[-<key digest>].parquet``.
Every row carries its key and ``content_hash`` (the hash of its inputs).
A part file is written under a temporary name (``.tmp-``) and renamed when
complete, so a crash never leaves a half-written file that readers take for a
complete one; a file named by the keys of its rows is rewritten, not doubled,
when Ray retries the task that wrote it.
"""

from __future__ import annotations

import hashlib
import json
import re
import shutil
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from cube_ray import schema
from cube_ray.credentials import MASK, secret_forms, secret_values
from cube_ray.errors import InputError
from cube_ray.files import TMP_PREFIX, write_atomic
from cube_ray.pipeline.method import QUALIFICATION_TABLES, TABLES
from cube_ray.stages import NODE_ID

__all__ = [
    "CORRUPT_SUFFIX",
    "PartWriter",
    "StageStats",
    "count_unseen",
    "part_files",
    "read_table",
    "redact_table",
    "set_aside_corrupt",
    "verify_part",
]

_TMP_PREFIX = TMP_PREFIX
_PENDING_PREFIX = ".compact-pending-"
_CUR_HASH = "_cur_hash"


def part_files(table_dir: Path, stage: str | None = None) -> list[Path]:
    """The complete part files of a table directory (of one stage), oldest first.

    Temporary files (``.tmp-*``, being written or left by a crash) are ignored.
    """
    if not table_dir.is_dir():
        return []
    files = sorted(p for p in table_dir.glob("part-*.parquet") if p.is_file())
    if stage is None:
        return files
    pattern = re.compile(
        rf"^part-\d{{8}}T\d+Z-{re.escape(_safe(stage))}-\d{{6}}(-[0-9a-f]{{16}})?"
        r"\.parquet$"
    )
    return [p for p in files if pattern.match(p.name)]


def _safe(stage: str) -> str:
    """A stage label as it appears in part file names."""
    return "".join(c if c.isalnum() or c in "-_@." else "_" for c in stage)


def _rows_in(files: list[Path]) -> int:
    return sum(pq.ParquetFile(f).metadata.num_rows for f in files)


class PartWriter:
    """Writes Arrow tables as Parquet part files, atomically.

    Rows are buffered up to ``max_rows`` and written to a
    ``.tmp-`` file that is renamed to ``part-<run>-<stage>-<seq>.parquet`` once
    it is complete. Part names sort by run start time, so "newest" is well
    defined.
    """

    def __init__(
        self,
        table_dir: Path,
        *,
        run_stamp: str,
        stage: str,
        schema_: pa.Schema | None,
        max_rows: int = 65536,
        first_seq: int = 0,
    ) -> None:
        self.table_dir = table_dir
        self._stem = f"part-{run_stamp}-{_safe(stage)}"
        self._schema = schema_
        self._max_rows = max_rows
        self._buf: list[pa.Table] = []
        self._buf_rows = 0
        self._seq = first_seq
        self.rows = 0

    def write(self, table: pa.Table) -> None:
        """Buffer a table; flush when enough rows have accumulated."""
        if table.num_rows:
            if self._schema is not None:
                table = table.select(self._schema.names).cast(self._schema)
            self._buf.append(table)
            self._buf_rows += table.num_rows
        if self._buf_rows >= self._max_rows:
            self.flush()

    def flush(self) -> None:
        """Write the buffered rows as one part file."""
        if not self._buf_rows:
            return
        table = pa.concat_tables(self._buf)
        self._buf, self._buf_rows = [], 0
        self.table_dir.mkdir(parents=True, exist_ok=True)
        name = f"{self._stem}-{self._seq:06d}.parquet"
        self._seq += 1
        write_atomic(self.table_dir / name, _parquet(table))
        self.rows += table.num_rows


def _parquet(table: pa.Table) -> Callable[[Any], None]:
    """Writes ``table`` as Parquet with page checksums (:func:`verify_part`)."""

    def write(sink: Any) -> None:
        pq.write_table(table, sink, write_page_checksum=True)

    return write


CORRUPT_SUFFIX = ".corrupt-"
"""A part file that does not read is renamed ``<name>.corrupt-<run stamp>``:
out of every table read (which takes ``part-*.parquet`` only), kept for a
look, and its rows are recomputed as missing ones."""


def verify_part(path: Path) -> str | None:
    """Why a part file does not read whole, or None when it does.

    Every row group is read with its page checksums verified (part files are
    written with ``write_page_checksum=True``), so bad bytes, a truncated file
    and a silent bit flip in a value all count.
    """
    try:
        pf = pq.ParquetFile(path, page_checksum_verification=True)
        for i in range(pf.metadata.num_row_groups):
            pf.read_row_group(i)
    except Exception as exc:  # pyarrow raises OSError, ArrowInvalid, ...
        return f"{type(exc).__name__}: {exc}"
    return None


def set_aside_corrupt(
    run_dir: Path, *, stamp: str, say: Callable[[str], None]
) -> list[Path]:
    """Rename each part file of the run dir that does not read; returns them.

    Runs once at the start of a resumed run, on the driver, reading the files
    in a few threads (pyarrow releases the GIL). Each file set aside is named
    on the console; the stages then recompute its rows, which are missing.
    """
    if run_dir.is_dir():
        _heal_swaps(run_dir)  # a table mid-swap is whole again first
    files = [f for name in TABLES for f in part_files(run_dir / name)]
    if not files:
        return []
    with ThreadPoolExecutor(max_workers=4) as pool:
        problems = list(pool.map(verify_part, files))
    moved = []
    for path, why in zip(files, problems, strict=True):
        if why is None:
            continue
        target = path.with_name(f"{path.name}{CORRUPT_SUFFIX}{stamp}")
        path.replace(target)
        moved.append(target)
        say(
            f"part file {path} does not read ({why[:200]}); set aside as "
            f"{target.name}, its rows are recomputed"
        )
    return moved


def _remove_temp(table_dir: Path) -> None:
    if table_dir.is_dir():
        for p in table_dir.glob(f"{_TMP_PREFIX}*"):
            p.unlink(missing_ok=True)


def _swap_dir(new: Path, target: Path) -> None:
    """Replace ``target`` by ``new``; a crash between the renames is healed later."""
    old = target.with_name(f".{target.name}.old")
    if old.exists():
        shutil.rmtree(old)
    if target.exists():
        target.replace(old)
    new.replace(target)
    if old.exists():
        shutil.rmtree(old)


def _heal_swaps(run_dir: Path) -> None:
    for name in TABLES + QUALIFICATION_TABLES:
        target = run_dir / name
        old = run_dir / f".{name}.old"
        if old.exists() and not target.exists():
            old.replace(target)
        elif old.exists():
            shutil.rmtree(old)
        _remove_temp(target)
    for stale in run_dir.glob(".staging-*"):
        shutil.rmtree(stale, ignore_errors=True)


def read_table(table_dir: Path, key: tuple[str, ...] | None = None) -> pa.Table:
    """Read a whole table directory (small runs, tests); dedup by key, newest wins.

    The pipeline itself never calls this on the driver for big tables.
    """
    files = part_files(table_dir)
    if not files:
        msg = f"no part files under {table_dir}"
        raise InputError(msg, path=str(table_dir))
    tables = [pq.read_table(f) for f in files]
    table = pa.concat_tables(tables, promote_options="default")
    if key is None or table.num_rows == 0:
        return table
    # lazy: loads polars, not in the Ray stage workers
    import polars as pl

    df = pl.from_arrow(table)
    assert isinstance(df, pl.DataFrame)
    return df.unique(subset=list(key), keep="last", maintain_order=True).to_arrow()


@dataclass
class StageStats:
    """What one stage did."""

    expected: int = 0
    written: int = 0
    skipped: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    statuses: Counter[str] = field(default_factory=Counter)
    nodes: Counter[str] = field(default_factory=Counter)
    seconds: float = 0.0
    retries: list[str] = field(default_factory=list)
    redacted: Counter[str] = field(default_factory=Counter)
    """Cells in which a secret was masked (:func:`redact_table`), per system."""

    def plus(self, other: StageStats) -> StageStats:
        """Both together: a stage over two waves of the records.

        >>> a = StageStats(expected=4, written=4, seconds=1.0, retries=["x"])
        >>> b = StageStats(expected=2, written=1, skipped=1, seconds=0.5)
        >>> c = a.plus(b)
        >>> c.expected, c.written, c.skipped, c.seconds, c.retries
        (6, 5, 1, 1.5, ['x'])
        """
        return StageStats(
            expected=self.expected + other.expected,
            written=self.written + other.written,
            skipped=self.skipped + other.skipped,
            prompt_tokens=self.prompt_tokens + other.prompt_tokens,
            completion_tokens=self.completion_tokens + other.completion_tokens,
            statuses=self.statuses + other.statuses,
            nodes=self.nodes + other.nodes,
            seconds=self.seconds + other.seconds,
            retries=[*self.retries, *other.retries],
            redacted=self.redacted + other.redacted,
        )

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready view for the manifest."""
        return {
            "expected_rows": self.expected,
            "rows_written": self.written,
            "rows_skipped": self.skipped,
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "statuses": dict(self.statuses),
            "nodes": dict(self.nodes),
            "seconds": round(self.seconds, 3),
            "retries": list(self.retries),
            "secrets_redacted": dict(self.redacted),
        }


# What a writer task reports of the part file it wrote (one row per file).
_WRITTEN = pa.schema(
    [
        ("file", pa.string()),
        ("rows", pa.int64()),
        ("prompt_tokens", pa.int64()),
        ("completion_tokens", pa.int64()),
        ("statuses", pa.string()),  # JSON {status: rows}
        ("nodes", pa.string()),  # JSON {node id: rows}
        ("redacted", pa.string()),  # JSON {system: cells with a secret masked}
    ]
)


def _part_name(stem: str, table: pa.Table, key: tuple[str, ...]) -> str:
    """A part file name that depends only on the keys of its rows.

    A task Ray retries on the same block rewrites the same file instead of
    adding a second copy of its rows.

    >>> t = pa.table({"k": ["a", "b"], "v": [1, 2]})
    >>> _part_name("part-x-s-000000", t, ("k",))
    'part-x-s-000000-31f7be3973bff6f4.parquet'
    >>> _part_name("part-x-s-000000", t.set_column(1, "v", pa.array([3, 4])), ("k",))
    'part-x-s-000000-31f7be3973bff6f4.parquet'
    """
    digest = hashlib.blake2b(digest_size=8)
    for k in _key_strings(table, key):
        digest.update(k.encode())
        digest.update(b"\x1e")
    return f"{stem}-{digest.hexdigest()}.parquet"


def _describe(
    name: str,
    table: pa.Table,
    nodes: dict[str, int] | None = None,
    redacted: dict[str, int] | None = None,
) -> dict[str, Any]:
    """One ``_WRITTEN`` row for a part file holding ``table``."""

    def total(col: str) -> int:
        if col not in table.column_names:
            return 0
        return int(pc.sum(table.column(col)).as_py() or 0)

    statuses: Counter[str] = Counter()
    if schema.STATUS in table.column_names:
        statuses.update(table.column(schema.STATUS).to_pylist())
    return {
        "file": name,
        "rows": table.num_rows,
        "prompt_tokens": total(schema.PROMPT_TOKENS),
        "completion_tokens": total(schema.COMPLETION_TOKENS),
        "statuses": json.dumps(dict(statuses), sort_keys=True),
        "nodes": json.dumps(nodes or {}, sort_keys=True),
        "redacted": json.dumps(redacted or {}, sort_keys=True),
    }


def redact_table(
    table: pa.Table, secrets: tuple[str, ...]
) -> tuple[pa.Table, dict[str, int]]:
    """``table`` with every secret masked in its text columns, and where.

    Each secret's forms (itself, URL- and base64-encoded:
    :func:`cube_ray.credentials.secret_forms`) become ``***`` in every
    string column. Returns the cells masked, per ``system`` when the table
    has that column (else under ``""``).

    >>> t = pa.table({"system": ["rag", "zero"], "answer": ["key sk-12345678!", "no"]})
    >>> out, hits = redact_table(t, ("sk-12345678",))
    >>> out.column("answer").to_pylist(), hits
    (['key ***!', 'no'], {'rag': 1})
    """
    forms = [f for value in secrets for f in secret_forms(value)]
    forms.sort(key=len, reverse=True)
    if not forms or table.num_rows == 0:
        return table, {}
    hit: Any = None
    for i, column in enumerate(table.schema):
        if not (
            pa.types.is_string(column.type) or pa.types.is_large_string(column.type)
        ):
            continue
        values = table.column(i)
        changed = False
        for form in forms:
            found = pc.fill_null(pc.match_substring(values, form), False)
            if not pc.any(found).as_py():
                continue
            values = pc.replace_substring(values, pattern=form, replacement=MASK)
            changed = True
            hit = found if hit is None else pc.or_(hit, found)
        if changed:
            table = table.set_column(i, column, values)
    if hit is None:
        return table, {}
    mask = pa.chunked_array([hit]) if isinstance(hit, pa.Array) else hit
    if schema.SYSTEM in table.column_names:
        systems = table.column(schema.SYSTEM).filter(mask).to_pylist()
        return table, dict(Counter(str(s) for s in systems))
    return table, {"": int(pc.sum(mask.cast(pa.int64())).as_py() or 0)}


def _write_part(
    batch: pa.Table,
    *,
    directory: str,
    stem: str,
    key: tuple[str, ...],
    schema_: pa.Schema | None,
    secrets: tuple[str, ...] = (),
) -> pa.Table:
    """Write one block as a part file, atomically, and describe it in one row.

    Runs in a Ray task beside the actor pools, so blocks go from the object
    store to disk without passing through the driver; the driver receives
    only these one-row descriptions. ``secrets``: the names of the variables
    whose values are masked in the rows (:func:`redact_table`); the values
    are read here, from the task's environment, and never travel.
    """
    if batch.num_rows == 0:
        return _WRITTEN.empty_table()
    nodes: dict[str, int] = {}
    if NODE_ID in batch.column_names:
        nodes = dict(Counter(batch.column(NODE_ID).to_pylist()))
        batch = batch.drop_columns([NODE_ID])
    if schema_ is not None:
        batch = batch.select(schema_.names).cast(schema_)
    batch, redacted = redact_table(batch, secret_values(secrets))
    name = _part_name(stem, batch, key)
    out_dir = Path(directory)
    out_dir.mkdir(parents=True, exist_ok=True)
    # A unique temporary name: two attempts of one task may overlap.
    write_atomic(out_dir / name, _parquet(batch))
    return pa.Table.from_pylist(
        [_describe(name, batch, nodes, redacted)], schema=_WRITTEN
    )


def _keep_current(batch: pa.Table) -> pa.Table:
    """Rows whose hash is current, or whose key the current input lacks."""
    cur = batch.column(_CUR_HASH)
    ok = pc.or_(pc.is_null(cur), pc.equal(batch.column(schema.CONTENT_HASH), cur))
    return batch.filter(pc.fill_null(ok, True)).drop_columns([_CUR_HASH])


def _key_strings(table: pa.Table, key: tuple[str, ...]) -> list[str]:
    """One string per row joining the key columns (for set lookups)."""
    cols = [table.column(c).to_pylist() for c in key]
    return ["\x1f".join(parts) for parts in zip(*cols, strict=True)]


_DONE_CACHE: dict[str, Any] = {}


def _count(stats: StageStats, info: dict[str, Any]) -> None:
    """Add a written file's description (``_WRITTEN``) to a stage's stats."""
    stats.written += info["rows"]
    stats.prompt_tokens += info["prompt_tokens"]
    stats.completion_tokens += info["completion_tokens"]
    stats.statuses.update(json.loads(info["statuses"]))
    stats.nodes.update(json.loads(info["nodes"]))
    stats.redacted.update(json.loads(info.get("redacted") or "{}"))


def count_unseen(
    stats: StageStats, table_dir: Path, stem: str, seen: dict[str, int]
) -> int:
    """Count the files of one attempt not yet described; its rows written.

    ``seen``: the part files already counted (name -> rows), updated here.
    """
    cols = [schema.STATUS, schema.PROMPT_TOKENS, schema.COMPLETION_TOKENS]
    for f in table_dir.glob(f"{stem}-*.parquet") if table_dir.is_dir() else []:
        if f.name not in seen:
            pf = pq.ParquetFile(f)
            names = set(pf.schema_arrow.names)
            t = pf.read(columns=[c for c in cols if c in names])
            _count(stats, _describe(f.name, t))
            seen[f.name] = pf.metadata.num_rows
    return sum(seen.values())


def _status_ok(row: dict[str, Any]) -> bool:
    return bool(row[schema.STATUS] == schema.STATUS_OK)
