"""System kinds: what each kind of system under test is and does (no Ray here).

A kind is one object, registered by name with :func:`register_system_kind`;
config validation, the factory, the pipeline, ``--dry-run``, the preflight and
the environment audit ask a system's kind, never test ``kind ==``. A kind
declares (the defaults of :class:`SystemKind` in brackets):

* ``config`` — its config model: a :class:`SystemConfigBase` subclass whose
  ``kind`` is a one-value ``Literal`` (its name);
* ``build`` — the live system, once per Ray actor (required);
* ``check`` — checks on the driver before anything is written [none];
  ``check_rows`` — the dry run's check of every row [none];
* ``prepare`` — its one-off set-up task and whether that runs before the first
  stage (``prepares_early``) [none]; ``set_up`` — that set-up's work [none];
* ``fingerprint_parts`` — what, beside its config and the answer template,
  decides its answers [nothing];
* ``uses_generator`` — whether it answers with the run's generator engine [no];
* ``env_uses`` — the environment variables it reads, and where they go [none];
* ``path_fields`` — config fields naming files it reads, resolved against the
  config's folder and held to its ``data_dirs`` [none];
* ``endpoints`` — model endpoints the preflight probes [none];
* ``destination`` — where the questions go, for the dry run's file list [none];
* ``plan`` — its dry-run row (engine, calls, prompt tokens) [no calls].

The built-in kinds (``kinds.qa_file``, ``kinds.builtin_rag``, ``kinds.http``)
are registered by :mod:`cube_ray.systems`; docs/systems.md, "Adding a system
kind", shows a new one.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

import pyarrow as pa
import pyarrow.parquet as pq

from cube_ray.errors import ConfigError
from cube_ray.systems.kinds.base import DEFAULT_K, SystemConfigBase

if TYPE_CHECKING:
    from cube_ray.engines.base import Engine
    from cube_ray.engines.config import EngineConfig
    from cube_ray.env import EnvUse
    from cube_ray.systems.base import SystemUnderTest

__all__ = [
    "DEFAULT_K",
    "Endpoint",
    "PlanCounts",
    "Preparation",
    "SystemConfigBase",
    "SystemKind",
    "file_digest",
    "header_columns",
    "kind_named",
    "kind_names",
    "register_system_kind",
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


@dataclass(frozen=True)
class Endpoint:
    """A model endpoint a system calls, which the preflight probes."""

    field: str
    """The config field naming it, e.g. ``systems[rag].embedding_url``."""
    base_url: str
    model: str
    api_key_env: str | None


class SystemKind:
    """One kind of system under test; the defaults do nothing beyond the config."""

    name: ClassVar[str]
    """The ``kind`` value in a config (set from ``config`` when registered)."""
    config: ClassVar[type[SystemConfigBase]]
    """Its config model (``kind: Literal["<name>"] = "<name>"``)."""
    uses_generator: ClassVar[bool] = False
    """It answers with the run's generator engine."""
    prepares_early: ClassVar[bool] = False
    """Its preparation runs before the first stage (a failure writes nothing)."""
    path_fields: ClassVar[tuple[str, ...]] = ()
    """Config fields naming a file or folder it reads."""

    def build(
        self,
        system: Any,
        *,
        documents_path: str,
        generator: EngineConfig | None,
        answer_template: str,
        nonce: str | None,
        engine_factory: Callable[[EngineConfig], Engine] | None,
    ) -> SystemUnderTest:
        """The live system (see :func:`cube_ray.systems.build_system`)."""
        raise NotImplementedError

    def check(self, system: Any) -> None:
        """Driver-side checks before anything is written."""

    def check_rows(self, system: Any) -> None:
        """The dry run's check of every row of its input, if it has one."""

    def prepare(self, system: Any, *, run_dir: Path) -> Preparation | None:
        """Its one-off set-up task, if any."""
        return None

    def set_up(self, system: Any, *, documents_path: str) -> None:
        """The one-off set-up's work (see :func:`cube_ray.systems.prepare_system`)."""

    def fingerprint_parts(
        self, system: Any, *, generator_fp: str, corpus_fp: str
    ) -> list[str]:
        """Inputs of its answers beyond its config and the answer template."""
        return []

    def env_uses(self, system: Any) -> list[EnvUse]:
        """The environment variables it reads, and where each value goes."""
        return []

    def endpoints(self, system: Any) -> list[Endpoint]:
        """Model endpoints it calls (probed by the preflight)."""
        return []

    def destination(self, system: Any, *, generator: str) -> str | None:
        """Where it sends the questions (``--dry-run``'s file list), if anywhere."""
        return None

    def plan(
        self, system: Any, *, questions: int, prompt_tokens: int, doc_tokens: float
    ) -> PlanCounts:
        """Its dry-run row (``prompt_tokens``: answer template + question)."""
        return PlanCounts(system.kind, 0, 0)


_KINDS: dict[str, SystemKind] = {}
"""Registered kinds by name, in registration order."""


def register_system_kind(kind: SystemKind) -> SystemKind:
    """Register a kind under the one value of its config's ``kind`` field.

    Raises:
        ValueError: Its config has no one-value ``kind``, or another kind has
            that name.
    """
    field = kind.config.model_fields.get("kind")
    name = field.default if field is not None else None
    if not isinstance(name, str) or not name:
        msg = (
            f"{type(kind).__name__}.config ({kind.config.__name__}) needs a field "
            'kind: Literal["<name>"] = "<name>"'
        )
        raise ValueError(msg)
    known = _KINDS.get(name)
    if known is not None and known is not kind:
        msg = f"system kind {name!r} is already registered ({type(known).__name__})"
        raise ValueError(msg)
    type(kind).name = name
    _KINDS[name] = kind
    return kind


def kind_names() -> list[str]:
    """The registered kinds' names."""
    return list(_KINDS)


def kind_named(name: Any) -> SystemKind | None:
    """The kind registered as ``name``, or None."""
    return _KINDS.get(name) if isinstance(name, str) else None


def system_kind(system: Any) -> SystemKind:
    """The kind of a system config.

    Raises:
        ConfigError: Its kind is not registered.
    """
    kind = kind_named(system.kind)
    if kind is None:
        msg = (
            f"system {system.name!r} has kind {system.kind!r}, which is not a "
            f"registered system kind ({kind_names()}); use one of those, or "
            "register the kind (docs/systems.md, Adding a system kind)"
        )
        raise ConfigError(msg)
    return kind
