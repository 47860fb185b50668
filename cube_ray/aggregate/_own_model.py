"""The headline without the judges that score their own model's answers (§12).

Judges prefer text their own model wrote. A judge whose model is the
generator's (which writes the bounds of every system, and the built-in RAG's
answers) or a system's declared model gets the flag "judges its own model's
answers" (:func:`cube_ray.qualification.own_model_flags`); the summary then
carries, per system, the across-judge CuBE without those judges beside the
headline (``across_judges.<system>.without_own_model``), so the report shows
both and the reader sees how much the family preference could move the result.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Collection, Iterable, Mapping, Sequence
from typing import Any

__all__ = ["GENERATOR", "own_model_judges", "without_own_model"]

GENERATOR = "generator"
"""The writer name of the generator in an own-model flag."""


def own_model_judges(flags: Iterable[Mapping[str, Any]], system: str) -> set[str]:
    """The judges flagged as own-model judges for ``system``.

    A flag names the judge and the writer: the system itself, or the
    generator. The generator wrote the zero and full bounds every system is
    normalised by, so its judges count for every system.

    Args:
        flags: The own-model flags (``{"judge", "system", ...}``).
        system: A RAG system.

    >>> flags = [{"judge": "q", "system": "generator"},
    ...          {"judge": "g", "system": "rag@x"}]
    >>> sorted(own_model_judges(flags, "rag")), sorted(own_model_judges(flags, "rag@x"))
    (['q'], ['g', 'q'])
    """
    return {str(f["judge"]) for f in flags if f.get("system") in (system, GENERATOR)}


def without_own_model(
    cube: Mapping[str, float | None],
    headline: Sequence[str],
    own: Collection[str],
) -> dict[str, Any] | None:
    """The across-judge CuBE of ``headline`` without the ``own`` judges.

    The same figure as the headline (mean and sample SD, ddof = 1, over the
    judges whose CuBE is defined) over fewer judges.

    Args:
        cube: Judge -> its CuBE of the system (None or NaN: undefined).
        headline: The judges the headline averages (``across_judges.<s>.judges``).
        own: The judges flagged for the system (:func:`own_model_judges`).

    Returns:
        ``{mean, sd, n_judges, judges}``, or None when no headline judge with a
        defined CuBE is flagged (the headline already is without them).

    Examples:
        Four judges, q of the generator's model: the headline averages 40, 50,
        60 and 90 (mean 60); without q, 40, 50 and 60.

        >>> without_own_model({"a": 40.0, "b": 50.0, "c": 60.0, "q": 90.0},
        ...                   ["a", "b", "c", "q"], {"q"})
        {'mean': 50.0, 'sd': 10.0, 'n_judges': 3, 'judges': ['a', 'b', 'c']}

        Every judge flagged: no figure is left.

        >>> without_own_model({"q": 90.0}, ["q"], {"q"})
        {'mean': None, 'sd': None, 'n_judges': 0, 'judges': []}

        A flagged judge that the headline does not average changes nothing.

        >>> without_own_model({"a": 40.0, "q": 90.0}, ["a"], {"q"}) is None
        True
    """
    used = {
        j: v for j in headline if (v := cube.get(j)) is not None and not math.isnan(v)
    }
    if not used.keys() & set(own):
        return None
    kept = [j for j in used if j not in own]
    values = [used[j] for j in kept]
    return {
        "mean": statistics.fmean(values) if values else None,
        "sd": statistics.stdev(values) if len(values) >= 2 else None,
        "n_judges": len(kept),
        "judges": kept,
    }
