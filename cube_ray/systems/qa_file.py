"""A system whose answers were collected elsewhere (a QA file).

The file is validated once and written to an on-disk SQLite index (key ->
answer, retrieved ids) that every actor opens read-only: an actor's memory
does not grow with the file (SQLite reads the pages a lookup needs), where a
Python dict of a million answers costs each actor about 1 GB.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import shutil
import sqlite3
import tempfile
import uuid
from collections.abc import Iterator, Sequence
from pathlib import Path

from cube_ray.errors import InputError
from cube_ray.systems._tables import as_text, parse_doc_ids, read_rows, require_columns
from cube_ray.systems.base import QuestionIn, SystemAnswer
from cube_ray.systems.config import QaFileSystemConfig

__all__ = [
    "STATUS_MISSING",
    "STATUS_NO_ANSWER",
    "QaFileSystem",
    "build_qa_index",
    "qa_index_path",
]

STATUS_MISSING = "missing_in_qa_file"
"""Status of a question that has no row in the QA file."""
STATUS_NO_ANSWER = "empty_answer_in_qa_file"
"""Status of a question whose row has an empty answer."""

_INDEX_VERSION = "1"
_LOOKUP_CHUNK = 500  # keys per SELECT (SQLite allows at least 999 parameters)


def _file_chunks(path: Path) -> Iterator[bytes]:
    files = sorted(path.rglob("*.parquet")) if path.is_dir() else [path]
    for f in files:
        yield str(f.relative_to(path) if path.is_dir() else f.name).encode()
        with f.open("rb") as fh:
            while chunk := fh.read(1 << 20):
                yield chunk


def qa_index_path(config: QaFileSystemConfig, index_dir: str | Path) -> Path:
    """Where the index of this QA file (its bytes and field settings) lives.

    A changed file or field setting gets a new name, so a stale index is
    never opened.

    Raises:
        InputError: If the QA file does not exist.
    """
    path = Path(config.path)
    if not path.exists():
        msg = "QA file not found; check the path in your config"
        raise InputError(msg, path=str(path))
    h = hashlib.blake2b(digest_size=8)
    for part in (
        _INDEX_VERSION,
        config.question_field or "",
        config.question_id_field,
        config.answer_field,
        config.retrieved_field,
    ):
        h.update(part.encode() + b"\x1f")
    for chunk in _file_chunks(path):
        h.update(chunk)
    safe = "".join(c if c.isalnum() or c in "-_" else "_" for c in config.name)
    return Path(index_dir) / f"qa-{safe}-{h.hexdigest()}.sqlite"


def build_qa_index(config: QaFileSystemConfig, index_dir: str | Path) -> Path:
    """Validate the QA file and write its index (a no-op when it exists).

    The index is written to a temporary name and renamed, so a reader never
    opens a partial one; two builders racing both succeed.

    Returns:
        The index path (:func:`qa_index_path`).

    Raises:
        InputError: Naming the file, row and field of the first bad row
            (missing column, empty or repeated key, answer not text, bad
            retrieved ids).
    """
    final = qa_index_path(config, index_dir)
    if final.exists():
        return final
    created = not final.parent.exists()
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = final.with_name(f".tmp-{uuid.uuid4().hex[:8]}-{final.name}")
    try:
        con = sqlite3.connect(tmp)
        try:
            _fill(con, config)
        finally:
            con.close()
        tmp.replace(final)
    except BaseException:
        tmp.unlink(missing_ok=True)
        if created:  # leave the run dir as it was
            with contextlib.suppress(OSError):
                final.parent.rmdir()
        raise
    return final


def _fill(con: sqlite3.Connection, config: QaFileSystemConfig) -> None:
    path = config.path
    by_text = config.question_field is not None
    key_field = config.question_field or config.question_id_field
    what = "QA file"
    columns, rows = read_rows(path, what=what)
    require_columns(
        columns,
        [key_field, config.answer_field, config.retrieved_field],
        path=path,
        what=what,
    )
    con.execute("PRAGMA journal_mode=OFF")
    con.execute("PRAGMA synchronous=OFF")
    con.execute(
        "CREATE TABLE qa (key TEXT PRIMARY KEY, place TEXT NOT NULL, "
        "answer TEXT, retrieved TEXT NOT NULL) WITHOUT ROWID"
    )
    insert = "INSERT INTO qa VALUES (?, ?, ?, ?)"
    for at, row in rows:
        key = as_text(row.get(key_field), path=path, row=at, field=key_field)
        if not key:
            msg = (
                f"{key_field} is empty; every row needs the question "
                f"{'text' if by_text else 'id'} it answers"
            )
            raise InputError(msg, path=path, row=at, field=key_field)
        answer_value = row.get(config.answer_field)
        if answer_value is not None and not isinstance(answer_value, str):
            msg = (
                f"answer has type {type(answer_value).__name__}; expected text or null"
            )
            raise InputError(msg, path=path, row=at, field=config.answer_field)
        retrieved = parse_doc_ids(
            row.get(config.retrieved_field),
            path=path,
            row=at,
            field=config.retrieved_field,
        )
        try:
            con.execute(insert, (key, str(at), answer_value, json.dumps(retrieved)))
        except sqlite3.IntegrityError:
            (first,) = con.execute(
                "SELECT place FROM qa WHERE key = ?", (key,)
            ).fetchone()
            msg = f"{key_field} {key[:80]!r} repeats {first}; keep one row per question"
            raise InputError(msg, path=path, row=at, field=key_field) from None
    con.commit()


class QaFileSystem:
    """Answers and ranked retrieved doc ids read from a Parquet/CSV/JSONL file.

    Rows are matched to questions by question id (``question_id_field``) or, when
    ``question_field`` is set, by the question text (surrounding whitespace
    ignored). The file is validated when its index is built: once per run in
    the pipeline (:func:`build_qa_index` before the actors start), else here,
    so a bad file fails before any question is answered.

    Args:
        config: The system's configuration.
        index_dir: Directory of the on-disk index (the run's ``index/``);
            None builds it in a temporary directory removed by :meth:`close`.
    """

    def __init__(
        self, config: QaFileSystemConfig, index_dir: str | Path | None = None
    ) -> None:
        self.name = config.name
        self.k = config.k
        self._by_text = config.question_field is not None
        self._tmp: str | None = None
        if index_dir is None:
            self._tmp = index_dir = tempfile.mkdtemp(prefix="cube-ray-qa-")
        try:
            index = build_qa_index(config, index_dir)
        except BaseException:
            self.close()
            raise
        self._con: sqlite3.Connection | None = sqlite3.connect(
            f"{index.resolve().as_uri()}?mode=ro&immutable=1",
            uri=True,
            check_same_thread=False,
        )

    def _lookup(self, keys: list[str]) -> dict[str, tuple[str | None, list[str]]]:
        assert self._con is not None, "QaFileSystem is closed"
        found: dict[str, tuple[str | None, list[str]]] = {}
        unique = list(dict.fromkeys(keys))
        for start in range(0, len(unique), _LOOKUP_CHUNK):
            chunk = unique[start : start + _LOOKUP_CHUNK]
            marks = ",".join("?" * len(chunk))
            for key, answer, retrieved in self._con.execute(
                f"SELECT key, answer, retrieved FROM qa WHERE key IN ({marks})",
                chunk,
            ):
                found[key] = (answer, json.loads(retrieved))
        return found

    def answer(self, questions: Sequence[QuestionIn]) -> list[SystemAnswer]:
        """Look each question up.

        A question without a row gets status :data:`STATUS_MISSING`, no answer.
        """
        keys = [
            q.question.strip() if self._by_text else q.question_id for q in questions
        ]
        rows = self._lookup(keys)
        out = []
        for key in keys:
            found = rows.get(key)
            if found is None:
                out.append(SystemAnswer(None, status=STATUS_MISSING))
                continue
            answer, retrieved = found
            if answer is None or not answer.strip():
                out.append(SystemAnswer(None, list(retrieved), status=STATUS_NO_ANSWER))
            else:
                out.append(SystemAnswer(answer, list(retrieved)))
        return out

    def close(self) -> None:
        """Close the index (and remove it when it was temporary); idempotent."""
        con = getattr(self, "_con", None)
        if con is not None:
            con.close()
            self._con = None
        tmp = getattr(self, "_tmp", None)
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)
            self._tmp = None

    def __del__(self) -> None:
        with contextlib.suppress(Exception):
            self.close()
