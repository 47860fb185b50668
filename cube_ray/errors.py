"""The exceptions cube_ray raises.

Every error a user can cause derives from :class:`CubeRayError`; the CLI prints
its message without a traceback and exits with code 2. Messages say what was
received, what was expected, and how to fix it.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = [
    "INCOMPLETE_EXIT_CODE",
    "ClusterError",
    "ConfigError",
    "CubeRayError",
    "EngineError",
    "InputError",
    "MissingDependencyError",
    "Place",
    "ResourceWaitError",
    "RunDirError",
]

INCOMPLETE_EXIT_CODE = 4
"""Exit code of a run (or ``cube-ray aggregate``) that finished and wrote its
summary, but a bound or system had no usable answer, so some system has no
verdict (CUBE_METHOD.md section 10). Not 0 (the result is incomplete), not 2
(nothing is wrong with the input), not 3 (no resource wait): fix what made the
answers fail and rerun with ``--retry-failed``."""


class CubeRayError(Exception):
    """Base class of every error cube_ray raises on purpose."""

    exit_code: int = 2


class ConfigError(CubeRayError):
    """A configuration file or option is invalid."""


class ClusterError(CubeRayError):
    """The cluster cannot run the config.

    A pool no node can host, a run dir not shared by every node, a model path
    or an endpoint missing.
    """


class ResourceWaitError(ClusterError):
    """The autoscaler did not add the nodes a pool needs in time.

    Not a mistake in the config: resubmitting later resumes the run, so the
    exit code (3) differs from that of a bad config or cluster (2).
    """

    exit_code = 3


class RunDirError(CubeRayError):
    """The run dir cannot be written now, or not safely.

    Another cube-ray process holds its lock (``cube_ray.run_lock``), or one of
    its folders is a symlink leading outside it (``cube_ray.files``).
    """


@dataclass(frozen=True, slots=True)
class Place:
    """Where a record sits in its input file, as a user finds it there.

    Text files (JSON Lines, CSV/TSV) are located by the 1-based line an editor
    shows (for CSV the header is line 1, so with one line per record data row
    ``i`` is line ``i + 2``, the row number a spreadsheet shows too); other
    files (Parquet, a JSON array) by the 1-based record number.

    >>> str(Place(0, line=3))
    'line 3'
    >>> str(Place(0))
    'row 1 (1-based)'
    """

    row: int
    """0-based position of the record among the file's records."""
    line: int | None = None
    """1-based line where the record starts, for a text file."""

    def __str__(self) -> str:
        if self.line is not None:
            return f"line {self.line}"
        return f"row {self.row + 1} (1-based)"


class InputError(CubeRayError):
    """An input file (corpus, question set, answers, scores) is invalid.

    The message starts with where: ``file F, line N`` (text files) or
    ``file F, row N (1-based)`` (Parquet and other tables), then the field.

    Args:
        message: What is wrong, what was expected and how to fix it.
        path: The offending file, if any.
        row: The record: a :class:`Place`, or its 0-based position (shown
            1-based), if known.
        field: The offending column or field, if known.
        line: 1-based line of a text file, shown as ``line N`` as an editor
            numbers it; given instead of ``row``.
    """

    def __init__(
        self,
        message: str,
        *,
        path: str | None = None,
        row: int | Place | None = None,
        field: str | None = None,
        line: int | None = None,
    ) -> None:
        if line is not None:
            row = Place(line - 1, line=line)
        elif isinstance(row, int):
            row = Place(row)
        self.path = path
        self.place = row
        self.row = None if row is None else row.row
        self.field = field
        self.line = None if row is None else row.line
        where = []
        if path is not None:
            where.append(f"file {path}")
        if row is not None:
            where.append(str(row))
        if field is not None:
            where.append(f"field {field!r}")
        prefix = (", ".join(where) + ": ") if where else ""
        super().__init__(prefix + message)


class EngineError(CubeRayError):
    """An LLM engine failed in a way that no retry can fix (fatal for a run)."""


class MissingDependencyError(CubeRayError):
    """An optional dependency is not installed.

    Args:
        package: The import name that failed.
        extra: The cube-ray extra that provides it.
        purpose: What it is needed for.
    """

    def __init__(self, package: str, *, extra: str, purpose: str) -> None:
        self.package = package
        self.extra = extra
        super().__init__(
            f"{purpose} needs the Python package {package!r}, which is not "
            f"installed. Install it with: pip install 'cube-ray[{extra}]'"
        )
