"""What a stage's rows came to, in the words of its console lines (no Ray here).

Each stage's line counts its rows by status (``6 rows written (1 ok, 5
timeout), 0 skipped``). When the stage's own failures pass
:data:`FAILURE_WARN_SHARE` of the rows it wrote, one warning line names the
config section that did the work, the statuses, and the fix: the setting to
change (``timeout_s`` for timeouts) and the rerun that redoes only the failed
rows (``--retry-failed``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from cube_ray import schema
from cube_ray.stages.generate import STATUS_NO_QUESTION
from cube_ray.stages.judge import STATUS_NO_ANSWER

__all__ = [
    "FAILURE_WARN_SHARE",
    "STATUS_TIMEOUT",
    "UPSTREAM_STATUSES",
    "failure_warning",
    "outcome_counts",
]

FAILURE_WARN_SHARE = 0.2
"""A stage whose own failed rows are more than this share of the rows it wrote
gets a warning line (a few failures are expected and flagged in the summary)."""

UPSTREAM_STATUSES = frozenset({STATUS_NO_ANSWER, STATUS_NO_QUESTION})
"""Statuses that say an earlier stage failed (no question, no answer to judge):
counted, but not this stage's failures; the earlier stage's warning names the
cause."""

NOT_APPLICABLE_STATUSES = frozenset({"skipped", "no_control"})
"""A controlled fault whose kind does not apply to an answer, or that has no
control (CUBE_METHOD.md section 12, ``cube_ray.qualification``): counted,
never a failure."""

STATUS_TIMEOUT = "timeout"
"""The status HTTP engines and systems give a request that ran out of its
``timeout_s``: the one failure whose fix is a setting this line can name."""

Owner = tuple[str, Any]
"""A config section that does a stage's work: its path (``generator``,
``judges.j1``, ``systems[rag]``) and its config model."""


def _ranked(statuses: Mapping[str, int]) -> list[tuple[str, int]]:
    """``ok`` first, then by count (descending), then by name."""
    return sorted(
        ((s, n) for s, n in statuses.items() if n),
        key=lambda kv: (kv[0] != schema.STATUS_OK, -kv[1], kv[0]),
    )


def outcome_counts(statuses: Mapping[str, int]) -> str:
    """The rows of a stage counted by status, as its console line shows them.

    >>> outcome_counts({"timeout": 5, "ok": 1})
    '1 ok, 5 timeout'
    >>> outcome_counts({"ok": 3, "no_answer": 2, "parse_error": 2})
    '3 ok, 2 no_answer, 2 parse_error'
    >>> outcome_counts({})
    ''
    """
    return ", ".join(f"{n} {s}" for s, n in _ranked(statuses))


def _own_failures(statuses: Mapping[str, int]) -> dict[str, int]:
    return {
        s: n
        for s, n in statuses.items()
        if n
        and s != schema.STATUS_OK
        and s not in UPSTREAM_STATUSES | NOT_APPLICABLE_STATUSES
    }


def _owner_words(path: str, config: Any) -> str:
    """``generator (openai_http, http://127.0.0.1:8000/v1)``."""
    kind = getattr(config, "backend", None) or getattr(config, "kind", None)
    url = getattr(config, "base_url", None) or getattr(config, "url", None)
    details = ", ".join(str(x) for x in (kind, url) if x)
    return f"{path} ({details})" if details else path


def failure_warning(
    label: str,
    statuses: Mapping[str, int],
    *,
    owners: Sequence[Owner],
    table: str,
    rerun: str,
) -> str | None:
    """The warning line for a stage whose own failures pass the threshold.

    Args:
        label: The stage as the console names it (``answers:bounds``).
        statuses: Its rows written, counted by status.
        owners: The config sections that did its work (engines, a system).
        table: The table its rows went to (named where the raw texts are).
        rerun: The command that redoes the failed rows.

    Returns:
        None when the failures are few (at most ``FAILURE_WARN_SHARE``).

    Examples:
        >>> from types import SimpleNamespace as NS
        >>> gen = NS(backend="openai_http", base_url="http://h/v1", timeout_s=60.0)
        >>> print(failure_warning(
        ...     "answers:bounds", {"ok": 1, "timeout": 5},
        ...     owners=[("generator", gen)], table="answers",
        ...     rerun="cube-ray run run.yaml --out runs/x --retry-failed",
        ... ))  # doctest: +NORMALIZE_WHITESPACE
        answers:bounds: 5 of 6 rows failed (5 timeout) in generator (openai_http,
        http://h/v1). Fix: raise generator.timeout_s (now 60 s; it bounds one
        request, each retry gets its own), then rerun the failed rows: cube-ray
        run run.yaml --out runs/x --retry-failed
        >>> failure_warning("scores:j1", {"ok": 9, "no_answer": 5},
        ...     owners=[], table="scores", rerun="") is None
        True
    """
    failed = _own_failures(statuses)
    total = sum(statuses.values())
    n_failed = sum(failed.values())
    if not total or n_failed / total <= FAILURE_WARN_SHARE:
        return None
    counted = outcome_counts(failed)
    where = ", ".join(_owner_words(p, c) for p, c in owners) or "the stage"
    fixes = []
    if STATUS_TIMEOUT in failed:
        fixes += [
            f"raise {path}.timeout_s (now {config.timeout_s:g} s; it bounds one "
            "request, each retry gets its own)"
            for path, config in owners
            if isinstance(getattr(config, "timeout_s", None), int | float)
        ]
    if set(failed) - {STATUS_TIMEOUT} or not fixes:
        fixes.append(
            f"read the failed rows' status and raw text in the {table} table and "
            "the run's log, and fix their cause"
        )
    return (
        f"{label}: {n_failed} of {total} rows failed ({counted}) in {where}. "
        f"Fix: {'; '.join(fixes)}, then rerun the failed rows: {rerun}"
    )
