"""The weights setting (CUBE_METHOD.md section 6), read in one place.

``aggregate.weights`` is ``pearson``, ``equal``, one ``{dimension: weight}``
map for every judge, or ``{judge: {dimension: weight}}``.
:func:`resolve_weights` turns it into each judge's fixed weights, checked
against the judges and dimensions that have scores; Pearson weights are not
fixed but computed per judge, system and replicate from the correlations
(:func:`~cube_ray.aggregate._math.pearson_weights`, in the figures' kernel
:func:`~cube_ray.aggregate._figures.replicate_figures`). The summary, the
bootstrap, the qualification and the calibration all read the setting here.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from cube_ray.config import WeightsError

__all__ = ["ResolvedWeights", "resolve_weights"]

WeightsSetting = str | Mapping[str, Any]
"""``pearson``, ``equal``, ``{dimension: weight}`` or ``{judge: {dimension:
weight}}`` (``AggregateOptions.weights``)."""


@dataclass(frozen=True)
class ResolvedWeights:
    """The weights setting of one study, resolved."""

    fixed: dict[str, dict[str, float]] | None
    """``judge -> dimension -> weight`` over every dimension, summing to 1 (a
    dimension left out weighs 0); None for Pearson weights."""
    notes: tuple[str, ...] = ()
    """One note per judge (or one for all) whose fixed weights leave out a
    dimension."""


def _fixed_tables(
    spec: Mapping[str, Any], judges: list[str], dimensions: list[str]
) -> tuple[dict[str, Mapping[str, Any]], list[str]]:
    """Judge -> its raw ``{dimension: weight}`` map; notes of dimensions left out.

    Raises:
        WeightsError: See :func:`resolve_weights`.
    """
    per_judge = any(isinstance(v, Mapping) for v in spec.values())
    tables: dict[str, Mapping[str, Any]]
    if per_judge:
        tables = {}
        for judge, table in spec.items():
            if judge not in judges:
                raise WeightsError(
                    f"weights name judge {judge!r}, which has no scores (judges:"
                    f" {judges}). Use the judges' names as keys.",
                    key=judge,
                )
            assert isinstance(table, Mapping)
            tables[judge] = table
        missing = [j for j in judges if j not in tables]
        if missing:
            raise WeightsError(
                f"weights are given per judge but not for judge {missing[0]!r}."
                " Give every judge a {dimension: weight} map, or give one map for"
                " all judges.",
                key=missing[0],
            )
    else:
        flat = {str(k): float(v) for k, v in spec.items()}
        tables = {j: flat for j in judges}
    notes: list[str] = []
    for judge, table in tables.items():
        for dim in table:
            if dim not in dimensions:
                raise WeightsError(
                    f"weights name dimension {dim!r}"
                    + (f" (judge {judge!r})" if per_judge else "")
                    + f", which has no scores (dimensions: {dimensions}).",
                    key=dim,
                )
        left_out = [d for d in dimensions if d not in table]
        note = f"fixed weights leave out {left_out}: weight 0" + (
            f" (judge {judge})" if per_judge else ""
        )
        if left_out and note not in notes:
            notes.append(note)
    return tables, notes


def resolve_weights(
    spec: WeightsSetting,
    judges: Sequence[str],
    dimensions: Sequence[str],
    *,
    scored: Mapping[str, Sequence[str]] | None = None,
) -> ResolvedWeights:
    """Each judge's fixed weights under the setting ``spec`` (section 6).

    Fixed weights are rescaled to sum to 1 and a dimension they leave out
    weighs 0 (noted); ``equal`` weighs every dimension a judge scored alike.

    Args:
        spec: The weights setting (``AggregateOptions.weights``).
        judges: The judges with scores.
        dimensions: The dimensions with scores, in their order.
        scored: Per judge, the dimensions it scored (``equal`` weighs only
            those); default every dimension.

    Returns:
        The weights; ``fixed`` is None for ``pearson``.

    Raises:
        WeightsError: Fixed weights name a judge or dimension without scores,
            or are given per judge but not for every judge.

    Examples:
        >>> resolve_weights("pearson", ["j"], ["a", "b"]).fixed is None
        True
        >>> resolve_weights("equal", ["j"], ["a", "b"]).fixed
        {'j': {'a': 0.5, 'b': 0.5}}
        >>> resolve_weights("equal", ["j"], ["a", "b"], scored={"j": ["b"]}).fixed
        {'j': {'a': 0.0, 'b': 1.0}}
        >>> w = resolve_weights({"a": 3, "b": 1}, ["j", "k"], ["a", "b", "c"])
        >>> w.fixed["k"], w.notes
        ({'a': 0.75, 'b': 0.25, 'c': 0.0}, ("fixed weights leave out ['c']: weight 0",))
        >>> try:
        ...     resolve_weights({"j": {"a": 1}}, ["j", "k"], ["a"])
        ... except WeightsError as exc:
        ...     exc.key
        'k'
    """
    if spec == "pearson":
        return ResolvedWeights(None)
    judges, dimensions = list(judges), list(dimensions)
    notes: list[str] = []
    tables: Mapping[str, Mapping[str, Any]]
    if spec == "equal":
        tables = {
            j: {d: 1.0 for d in ((scored or {}).get(j) or dimensions)} for j in judges
        }
    elif isinstance(spec, Mapping):
        tables, notes = _fixed_tables(spec, judges, dimensions)
    else:
        raise WeightsError(
            f"weights {spec!r} is not a setting. Give pearson, equal, one"
            " {dimension: weight} map or one per judge.",
        )
    fixed = {
        j: {d: tables[j].get(d, 0.0) / sum(tables[j].values()) for d in dimensions}
        for j in judges
    }
    return ResolvedWeights(fixed, tuple(notes))
