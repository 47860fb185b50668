"""What every stage shares: column checks, the call log, output tables."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Sequence
from typing import Any, ClassVar

import pyarrow as pa

from cube_ray.engines.base import Engine
from cube_ray.errors import InputError

__all__ = [
    "ANSWER_MAX_CHARS",
    "INPUT_HASH",
    "NODE_ID",
    "RAW_MAX_CHARS",
    "EngineFactory",
    "Stage",
    "capped",
    "empty_table",
]

INPUT_HASH = "_input_hash"
"""Internal column: hash of everything that determines a row's output (document
text, question, answer, prompt template, engine config). Written to the output
tables as ``content_hash``; resume compares it."""
NODE_ID = "_node_id"
"""Internal column the pipeline adds: the Ray node that produced a row."""

ANSWER_MAX_CHARS = 32_000
"""Longest answer stored (and judged); a longer one is cut, with a note."""
RAW_MAX_CHARS = 4_000
"""Longest judge ``raw`` text stored; a longer one is cut, with a note."""


def capped(text: str | None, limit: int) -> str | None:
    """``text`` cut to ``limit`` characters plus a note saying so.

    A system or engine may return megabytes; the tables (and the judges'
    prompts) keep a bounded, clearly marked start.

    >>> capped("abcdef", 3), capped("abc", 3), capped(None, 3)
    ('abc [cut: 6 characters, 3 kept]', 'abc', None)
    """
    if text is None or len(text) <= limit:
        return text
    return f"{text[:limit]} [cut: {len(text)} characters, {limit} kept]"


EngineFactory = Callable[[Any], Engine]
"""Builds an engine from its config (``cube_ray.engines.build_engine``)."""


def empty_table(schema: pa.Schema) -> pa.Table:
    """A zero-row table with the given schema."""
    return schema.empty_table()


class Stage:
    """Base of the plain callable stage classes (no Ray here).

    Subclasses set :attr:`name`, :attr:`required` and :attr:`output_schema`; do
    their heavy set-up (engine construction) in ``__init__``, once per Ray actor;
    and implement ``__call__(batch) -> batch`` on Arrow tables.
    """

    name: ClassVar[str] = "stage"
    required: ClassVar[tuple[str, ...]] = ()
    output_schema: ClassVar[pa.Schema]

    def __init__(self, *, call_log: str | None = None) -> None:
        self._call_log = call_log

    @classmethod
    def check_columns(cls, columns: Sequence[str]) -> None:
        """Fail up front when an input lacks a needed column.

        Raises:
            InputError: Listing the missing and the present columns.
        """
        missing = [c for c in cls.required if c not in columns]
        if missing:
            msg = (
                f"the {cls.name} stage needs columns {missing}, which its input "
                f"lacks (present: {list(columns)})"
            )
            raise InputError(msg)

    def _log_calls(self, keys: Sequence[str]) -> None:
        """Append one line per engine call to the call log (tests, audits).

        An engine that names its requests (the Batch API's ``custom_id``:
        ``OpenAIHttpEngine.name_requests``) is told the keys too.
        """
        name_requests = getattr(getattr(self, "_engine", None), "name_requests", None)
        if callable(name_requests):
            name_requests(list(keys))
        if not self._call_log or not keys:
            return
        data = "".join(f"{self.name}\t{k}\n" for k in keys).encode()
        fd = os.open(self._call_log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, data)
        finally:
            os.close(fd)

    def close(self) -> None:
        """Release the engine or system; idempotent."""

    def __del__(self) -> None:
        # At interpreter shutdown there is nobody to report a failure to.
        with contextlib.suppress(Exception):
            self.close()
