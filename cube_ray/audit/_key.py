"""The audit key: which question and set each worksheet row is (not for the rater)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Final, Literal

from pydantic import Field, ValidationError

from cube_ray.errors import InputError
from cube_ray.files import write_atomic as _write_file
from cube_ray.pydantic_base import StrictModel

ROW: Final = "row"
"""Heading of the worksheet's row-id column, the one column the import matches rows by
(the key's rows carry the same ids)."""

__all__ = ["KEY_FORMAT", "ROW", "AuditKey", "KeyDimension", "KeyRow", "write_atomic"]

KEY_FORMAT: Final = "cube-ray audit key"


class KeyRow(StrictModel):
    """One worksheet row."""

    row: str
    """The row id shown in the sheet (``Q003-A2``)."""
    question_no: int = Field(ge=1)
    """The audit question (1-based, in draw order)."""
    question_id: str
    system: str
    """The answer set: ``zero``, ``full`` or a system under test."""
    stratum: str
    """The question's stratum (``all`` for a run without a sample)."""


class KeyDimension(StrictModel):
    """One score column."""

    name: str
    """The dimension in the scores table."""
    column: str
    """The column's heading in the sheet."""


class AuditKey(StrictModel):
    """``audit-<m>.key.json``; the format changes only with ``version``."""

    format: Literal["cube-ray audit key"] = KEY_FORMAT
    version: Literal[1] = 1
    sheet: str
    """File name of the worksheet this key belongs to."""
    size: int = Field(ge=1)
    """The audit size asked for (``--size``)."""
    questions: int = Field(ge=0)
    """Questions drawn: ``size``, or the whole population when smaller."""
    population: int = Field(ge=0)
    """Questions the audit was drawn from (the run's current sample)."""
    seed: int
    stratified_by: list[str]
    """The run sample's strata fields (empty: one stratum)."""
    strata: dict[str, dict[str, int]]
    """Per stratum: ``population`` and ``size`` (questions drawn)."""
    dimensions: list[KeyDimension]
    rows: list[KeyRow]

    def write(self, path: Path) -> None:
        """Write the key as indented UTF-8 JSON, atomically."""
        text = json.dumps(self.model_dump(mode="json"), ensure_ascii=False, indent=1)
        write_atomic(path, text + "\n")

    @classmethod
    def read(cls, path: Path) -> AuditKey:
        """Read a key file.

        Raises:
            InputError: Not readable, not JSON, or not an audit key.
        """
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
            return cls.model_validate(data)
        except (OSError, ValueError, ValidationError) as exc:
            first = str(exc).splitlines()[0]
            msg = (
                f"not a readable audit key ({first}); use the .key.json that "
                "`cube-ray audit RUN_DIR --size m` wrote beside the sheet"
            )
            raise InputError(msg, path=str(path)) from None


def write_atomic(path: Path, text: str, *, encoding: str = "utf-8") -> None:
    """Write an audit file through ``cube_ray.files`` (no newline translation)."""
    _write_file(path, text, encoding=encoding, newline="")
