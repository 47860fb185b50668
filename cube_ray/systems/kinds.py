"""What each kind of system under test does around a run (no Ray here).

The pipeline and ``--dry-run`` ask a system's kind, never test ``kind ==``:

* ``check`` — checks on the driver before anything is written (a QA file's
  header);
* ``prepare`` — its one-off set-up task (the built-in RAG's index, a QA file's
  lookup index) and whether that runs before the first stage (``early``);
* ``fingerprint_parts`` — what, beside its config and the answer template,
  decides its answers (a QA file's bytes; the generator and the corpus);
* ``uses_generator`` — whether it answers with the run's generator engine;
* ``plan`` — its dry-run row (engine, calls, prompt tokens).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from cube_ray.errors import InputError

__all__ = [
    "PlanCounts",
    "Preparation",
    "SystemKind",
    "file_digest",
    "header_columns",
    "system_kind",
]


def file_digest(path: str) -> str:
    """Hash of a file's (or a folder's files') bytes; ``missing`` if absent."""
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


def header_columns(path: Path) -> set[str] | None:
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


@dataclass(frozen=True)
class Preparation:
    """A system's one-off set-up: ``fn(system, **kwargs)`` in one task."""

    fn: Callable[..., Any]
    kwargs: dict[str, str]


@dataclass(frozen=True)
class PlanCounts:
    """A system's dry-run row: which engine, how many calls, prompt tokens."""

    engine: str
    calls: int
    prompt_tokens: int


class SystemKind:
    """Defaults: no check, no preparation, nothing beyond the config."""

    uses_generator = False
    """It answers with the run's generator engine."""
    prepares_early = False
    """Its preparation runs before the first stage (a failure writes nothing)."""

    def check(self, system: Any) -> None:
        """Driver-side checks before anything is written."""

    def prepare(self, system: Any, *, run_dir: Path) -> Preparation | None:
        """Its one-off set-up task, if any."""
        return None

    def fingerprint_parts(
        self, system: Any, *, generator_fp: str, corpus_fp: str
    ) -> list[str]:
        """Inputs of its answers beyond its config and the answer template."""
        return []

    def plan(
        self, system: Any, *, questions: int, prompt_tokens: int, doc_tokens: float
    ) -> PlanCounts:
        """Its dry-run row (``prompt_tokens``: answer template + question)."""
        return PlanCounts(system.kind, 0, 0)


class _QaFile(SystemKind):
    prepares_early = True

    def check(self, system: Any) -> None:
        """The file exists and its header has the configured columns."""
        path = Path(system.path)
        if not path.exists():
            msg = f"the QA file of system {system.name!r} does not exist"
            raise InputError(msg, path=str(path))
        columns = header_columns(path)
        if columns is None:
            return
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

    def prepare(self, system: Any, *, run_dir: Path) -> Preparation:
        from cube_ray.systems.qa_file import build_qa_index

        return Preparation(build_qa_index, {"index_dir": str(run_dir / "index")})

    def fingerprint_parts(
        self, system: Any, *, generator_fp: str, corpus_fp: str
    ) -> list[str]:
        return [file_digest(system.path)]


class _BuiltinRag(SystemKind):
    uses_generator = True

    def prepare(self, system: Any, *, run_dir: Path) -> Preparation:
        from cube_ray.systems.factory import prepare_system

        return Preparation(
            prepare_system, {"documents_path": str(run_dir / "documents")}
        )

    def fingerprint_parts(
        self, system: Any, *, generator_fp: str, corpus_fp: str
    ) -> list[str]:
        return [generator_fp, corpus_fp]

    def plan(
        self, system: Any, *, questions: int, prompt_tokens: int, doc_tokens: float
    ) -> PlanCounts:
        tokens = prompt_tokens + int(questions * system.k * doc_tokens)
        return PlanCounts("generator", questions, tokens)


class _Http(SystemKind):
    def plan(
        self, system: Any, *, questions: int, prompt_tokens: int, doc_tokens: float
    ) -> PlanCounts:
        return PlanCounts(f"http:{system.url}", questions, 0)


_KINDS: dict[str, SystemKind] = {
    "qa_file": _QaFile(),
    "builtin_rag": _BuiltinRag(),
    "http": _Http(),
}


def system_kind(system: Any) -> SystemKind:
    """The behaviour of a system's kind."""
    return _KINDS[system.kind]
