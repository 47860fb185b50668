"""``manifest.json`` as one typed, versioned model: :class:`Manifest`.

The manifest says how a run dir was made: the config (as written, masked), its
fingerprints, the prompt nonce, the package versions, and, once the run ends,
its status, rows, stage and engine statistics. The pipeline writes it with
:meth:`Manifest.write` (atomically); everyone else (resume and ownership checks,
``aggregate``, ``plan``, the report, the audit) reads it with
:meth:`Manifest.read` and its attributes, never as a dict. Only this module
knows the JSON keys.

A manifest of an older cube-ray (no ``schema_version``) reads as version 1 with
the fields it has; a key this version does not know is kept when the manifest
is rewritten, so a newer version's fields survive a resume by an older one.

>>> m = Manifest(status="running", config_hash="abc", prompt_nonce="n1")
>>> m.schema_version, m.status, m.corpus_fingerprint
(1, 'running', None)
>>> Manifest.model_validate_json('{"status": "complete", "future": 1}').extra()
{'future': 1}
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from cube_ray.errors import InputError
from cube_ray.files import write_atomic

__all__ = ["MANIFEST", "MANIFEST_VERSION", "EngineRecord", "Manifest", "StageRecord"]

MANIFEST = "manifest.json"
"""The manifest's file name in a run dir."""

MANIFEST_VERSION = 1
"""Version of the manifest format (a manifest without one is version 1)."""


class _Record(BaseModel):
    """A block of the manifest: known fields typed, unknown ones kept."""

    model_config = ConfigDict(extra="allow", use_attribute_docstrings=True)

    def extra(self) -> dict[str, Any]:
        """The keys this version does not declare (kept on rewrite)."""
        return dict(self.model_extra or {})


class StageRecord(_Record):
    """One stage's statistics (``manifest.stages.<stage>``)."""

    expected_rows: int = 0
    rows_written: int = 0
    rows_skipped: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    statuses: dict[str, int] = Field(default_factory=dict)
    """Rows written per row status (``ok``, ``timeout``, ...)."""
    nodes: dict[str, int] = Field(default_factory=dict)
    seconds: float = 0.0
    retries: list[Any] = Field(default_factory=list)
    secrets_redacted: dict[str, int] = Field(default_factory=dict)
    """Cells in which a secret was masked as they were written, per system."""

    @property
    def tokens(self) -> int:
        """Prompt and completion tokens the stage's engine processed."""
        return self.prompt_tokens + self.completion_tokens


class EngineRecord(_Record):
    """One shared engine's statistics (``manifest.engines.<engine id>``).

    The stages it served, start-ups, start-up and busy seconds, calls.
    """

    stages: list[str] = Field(default_factory=list)
    busy_s: float | None = None
    """Seconds the engine spent on calls (None: not measured)."""
    error: str | None = None
    """Why the statistics are missing (a lost dispatcher)."""


class Manifest(_Record):
    """The content of ``manifest.json``; every field is optional on read."""

    schema_version: int = MANIFEST_VERSION
    status: str | None = None
    """``running``, ``complete``, ``incomplete``, ``failed`` or
    ``resource_timeout``."""
    config: dict[str, Any] | None = None
    """The run config as written (secrets masked); ``RunConfig.from_dict`` of it
    is the run's config."""
    config_hash: str | None = None
    corpus_fingerprint: str | None = None
    prompt_nonce: str | None = None
    """The prompt-tag nonce, kept from the first run so prompts (and the prefix
    cache) stay the same on resume."""
    limit: int | None = None
    versions: dict[str, str] = Field(default_factory=dict)
    started: str | None = None
    run_stamp: str | None = None
    finished: str | None = None
    stopped: str | None = None
    error: str | None = None
    """What stopped a run that did not finish."""
    incomplete: dict[str, str] = Field(default_factory=dict)
    """Why a set had no usable answer (status ``incomplete``)."""
    stages: dict[str, StageRecord] = Field(default_factory=dict)
    rows: dict[str, int] = Field(default_factory=dict)
    failures: dict[str, dict[str, int]] = Field(default_factory=dict)
    secrets_redacted: dict[str, dict[str, int]] = Field(default_factory=dict)
    """``table -> system -> cells`` in which a value cube_ray holds as a secret
    was masked (``***``) as the rows were written, over every run of the dir:
    a system (or judge) echoed a key."""
    summary: str | None = None
    report_error: str | None = None
    engines: dict[str, EngineRecord] = Field(default_factory=dict)
    batches: dict[str, dict[str, Any]] = Field(default_factory=dict)
    """Batch API batches submitted and not yet read into the tables (still
    running when the run stopped): batch id -> stage, engine, status, counts.
    Rerunning the same command re-attaches to them."""
    wall_s: float | None = None

    @classmethod
    def read(cls, run_dir: str | Path) -> Manifest | None:
        """The run dir's manifest; None when there is none or it is unreadable.

        The manifest is a record: a damaged one never stops a rerun.
        """
        try:
            return cls.load(run_dir)
        except InputError:
            return None

    @classmethod
    def load(cls, run_dir: str | Path) -> Manifest:
        """The run dir's manifest, or :class:`InputError` naming the file.

        Raised when the file is missing, not JSON, or not a manifest.
        """
        path = Path(run_dir) / MANIFEST
        try:
            text = path.read_text(encoding="utf-8")
        except OSError as exc:
            msg = f"{MANIFEST} is missing or unreadable ({exc}); give a run dir"
            raise InputError(msg, path=str(path)) from exc
        try:
            data = json.loads(text)
        except ValueError as exc:
            msg = f"{MANIFEST} is not JSON ({exc})"
            raise InputError(msg, path=str(path)) from exc
        if not isinstance(data, dict):
            raise InputError(f"{MANIFEST} must hold a JSON object", path=str(path))
        try:
            return cls.model_validate(data)
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(p) for p in first["loc"])
            msg = f"{MANIFEST}: {where}: {first['msg']}"
            raise InputError(msg, path=str(path)) from exc

    def updated(self, **fields: Any) -> Manifest:
        """A copy with ``fields`` set, validated like a read.

        Stage and engine statistics may be given as plain dicts.

        >>> m = Manifest(status="running").updated(
        ...     status="complete", stages={"questions": {"prompt_tokens": 5}}
        ... )
        >>> m.status, m.stages["questions"].tokens
        ('complete', 5)
        """
        return Manifest.model_validate(
            {**self.model_dump(mode="json", exclude_unset=True), **fields}
        )

    def recorded(self) -> dict[str, Any]:
        """What the file holds (fields never set left out), for display."""
        return self.model_dump(mode="json", exclude_unset=True)

    def to_json(self) -> str:
        """The file's text: indented, non-ASCII kept, one trailing newline."""
        data = self.model_dump(mode="json", exclude_unset=False)
        return json.dumps(data, ensure_ascii=False, indent=2, default=str) + "\n"

    def write(self, run_dir: str | Path) -> Path:
        """Write ``RUN_DIR/manifest.json`` atomically.

        A reader, or a run killed mid-write, never sees half a file.
        """
        target = Path(run_dir) / MANIFEST
        target.parent.mkdir(parents=True, exist_ok=True)
        return write_atomic(target, self.to_json())
