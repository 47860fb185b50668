"""Which answer sets have no usable answer at all (CUBE_METHOD.md section 10).

A failed answer (status not ``ok``) is left out of its set, counted and
flagged; when every answer of a bound (or of a system under test) failed, the
set is *unavailable*: its trimmed means do not exist, the normalised figures of
every judge are undefined for the systems that need it, and the run has no
verdict for them. That is an incomplete run, not an input error: the tables
are as the run wrote them, and ``cube-ray run ... --retry-failed`` completes
them once the cause (often an engine's ``timeout_s``) is fixed.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import polars as pl

from cube_ray import schema

__all__ = [
    "BOUND_UNAVAILABLE",
    "SYSTEM_UNAVAILABLE",
    "UNAVAILABLE_CODES",
    "incomplete_reasons",
    "unavailable_sets",
    "verdict_reasons",
]

BOUND_UNAVAILABLE = "bound_unavailable"
"""Reason code: every answer of a bound (``zero`` or ``full``) failed."""
SYSTEM_UNAVAILABLE = "system_unavailable"
"""Reason code: every answer of a system under test failed."""
UNAVAILABLE_CODES = (BOUND_UNAVAILABLE, SYSTEM_UNAVAILABLE)

_COUNT = "_n"


def unavailable_sets(answers: pl.DataFrame) -> dict[str, tuple[str, str]]:
    """Answer sets whose every answer failed: ``set -> (code, reason in words)``.

    A table without a ``status`` column has no failures (section 10); a null
    status counts as answered. A set with no rows at all is not here: a
    missing set is an input error, not a failed one.

    Args:
        answers: The answers table (``system`` and, when it has one,
            ``status``; String or Categorical).

    Returns:
        Per unavailable set, its reason code (:data:`BOUND_UNAVAILABLE`,
        :data:`SYSTEM_UNAVAILABLE`) and the reason as the summary and the
        headline say it, with the failed statuses counted.

    Examples:
        >>> answers = pl.DataFrame(
        ...     {
        ...         "system": ["zero"] * 3 + ["full"] * 3 + ["rag"] * 3,
        ...         "status": ["timeout"] * 3 + ["ok", "timeout", "timeout"]
        ...         + ["http_error", "timeout", "http_error"],
        ...     }
        ... )
        >>> for name, (code, text) in unavailable_sets(answers).items():
        ...     print(name, code, text, sep=" | ")
        rag | system_unavailable | system rag unavailable: 3 of 3 answers failed (2 http_error, 1 timeout)
        zero | bound_unavailable | zero bound unavailable: 3 of 3 answers failed (timeout)
    """  # noqa: E501
    if schema.STATUS not in answers.columns:
        return {}
    status = pl.col(schema.STATUS).cast(pl.String)
    counts = (
        answers.lazy()
        .group_by(
            pl.col(schema.SYSTEM).cast(pl.String),
            pl.when(status.is_null()).then(pl.lit(schema.STATUS_OK)).otherwise(status),
        )
        .agg(pl.len().alias(_COUNT))
        .collect()
    )
    per_set: dict[str, dict[str, int]] = {}
    for system, stat, n in counts.iter_rows():
        per_set.setdefault(str(system), {})[str(stat)] = int(n)
    out: dict[str, tuple[str, str]] = {}
    for name in sorted(per_set):
        statuses = per_set[name]
        if statuses.get(schema.STATUS_OK, 0):
            continue
        total = sum(statuses.values())
        # Most frequent first, then by name: the same words on every run.
        ranked = sorted(statuses.items(), key=lambda kv: (-kv[1], kv[0]))
        why = (
            ranked[0][0]
            if len(ranked) == 1
            else ", ".join(f"{n} {s}" for s, n in ranked)
        )
        if name in schema.BOUND_SYSTEMS:
            code, what = BOUND_UNAVAILABLE, f"{name} bound"
        else:
            code, what = SYSTEM_UNAVAILABLE, f"system {name}"
        out[name] = (
            code,
            f"{what} unavailable: {total} of {total} answers failed ({why})",
        )
    return out


def verdict_reasons(
    unavailable: Mapping[str, tuple[str, str]], systems: list[str]
) -> dict[str, str]:
    """Per system under test, why it has no verdict (its sets that failed).

    A system needs both bounds and its own answers.

    >>> sets = {"zero": ("bound_unavailable", "zero bound unavailable: ...")}
    >>> verdict_reasons(sets, ["rag", "rag@b"])
    {'rag': 'zero bound unavailable: ...', 'rag@b': 'zero bound unavailable: ...'}
    """
    out = {}
    for s in systems:
        needed = (*schema.BOUND_SYSTEMS, s)
        texts = [unavailable[n][1] for n in needed if n in unavailable]
        if texts:
            out[s] = "; ".join(texts)
    return out


def incomplete_reasons(summary: Any) -> dict[str, str]:
    """Systems with no verdict because a set had no usable answer, and why.

    Read from a summary: its flags with code :data:`BOUND_UNAVAILABLE` or
    :data:`SYSTEM_UNAVAILABLE` name the failed sets; a system needs both
    bounds and its own answers, and its reason is ``across_judges``'. Empty
    for a complete run; otherwise ``cube-ray run`` and ``cube-ray aggregate``
    exit with ``INCOMPLETE_EXIT_CODE``.

    >>> why = "zero bound unavailable: 3 of 3 answers failed (timeout)"
    >>> incomplete_reasons({
    ...     "systems": ["rag"],
    ...     "flags": [{"code": "bound_unavailable", "system": "zero", "reason": why}],
    ...     "across_judges": {"rag": {"reason": why}},
    ... })
    {'rag': 'zero bound unavailable: 3 of 3 answers failed (timeout)'}
    """
    if hasattr(summary, "model_dump"):  # a typed Summary
        summary = summary.model_dump(mode="json")
    flags = summary.get("flags")
    failed = {
        str(f.get("system")): str(f.get("reason"))
        for f in (flags if isinstance(flags, list) else [])
        if isinstance(f, Mapping) and f.get("code") in UNAVAILABLE_CODES
    }
    if not failed:
        return {}
    across = summary.get("across_judges")
    out: dict[str, str] = {}
    for s in summary.get("systems") or []:
        if not any(n in failed for n in (*schema.BOUND_SYSTEMS, s)):
            continue
        block = across.get(s) if isinstance(across, Mapping) else None
        reason = block.get("reason") if isinstance(block, Mapping) else None
        if isinstance(reason, Mapping):  # a structured reason: {code, text}
            reason = reason.get("text")
        out[str(s)] = str(reason) if reason else "; ".join(failed.values())
    return out
