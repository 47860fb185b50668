"""Options of the CuBE aggregation."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator

from cube_ray._pydantic import StrictModel
from cube_ray.errors import ConfigError

__all__ = ["DEFAULT_K", "AggregateOptions", "BoundsOptions", "WeightsError"]

DEFAULT_K = 8
"""Retrieval depth when none is given: a system's ``k`` (rank scores, recall@k)
and the aggregation's ``k`` without a run config."""

WeightsSpec = (
    Literal["pearson", "equal"] | dict[str, float] | dict[str, dict[str, float]]
)


class WeightsError(ConfigError):
    """Fixed weights that do not fit the data (unknown judge or dimension, ...).

    Args:
        message: What is wrong, what was expected and how to fix it.
        key: The offending key of the weights mapping, if any.
    """

    def __init__(self, message: str, *, key: str | None = None) -> None:
        self.key = key
        super().__init__(message)


class BoundsOptions(StrictModel):
    """Trimming, bounds and validity guards (CUBE_METHOD.md sections 7 and 10).

    Declared once here and shared by :class:`AggregateOptions` and the run
    config's ``aggregate`` section, which differ only in how ``k`` and
    ``weights`` may be given.
    """

    trim: float = Field(default=0.1, ge=0.0, lt=0.5)
    """Proportion cut from each end before averaging (``scipy.stats.trim_mean``)."""

    bounds_on: Literal["all", "paired"] = "all"
    """``all``: the zero/full bounds use every question; ``paired``: only the
    questions the variant retrieved (rank >= 1)."""

    min_gap: float = Field(default=0.5, ge=0.0, le=10.0)
    """Smallest ``full - zero`` gap (points on the 0-10 scale) for a judge's
    bounds to count as separated (section 10). The paper's weakest judge has a
    weighted gap of 0.62."""

    alpha: float = Field(default=0.05, gt=0.0, lt=1.0)
    """Largest one-sided Wilcoxon signed-rank p-value of ``full - zero > 0`` for
    a judge's bounds to count as separated (section 10)."""

    require_separation: bool = True
    """Leave judges whose weighted bounds are not separated out of the
    across-judge figures (the flags stay either way)."""

    require_qualification: bool = False
    """Leave judges that miss an expected fault kind on the weighted total
    (CUBE_METHOD.md section 12, run config ``qualification``) out of the
    across-judge figures (the flags stay either way)."""


class AggregateOptions(BoundsOptions):
    """How summary figures are computed (CUBE_METHOD.md sections 5 to 8 and 10)."""

    k: int | dict[str, int] = DEFAULT_K
    """Retrieval depth for ``rank_score = k + 2 - rank``: one for every system
    variant, or one per variant name (e.g. ``{"rag@k4": 4, "rag@k8": 8}``)."""

    weights: WeightsSpec = "pearson"
    """``pearson`` (correlation with rank_score, per judge and variant), ``equal``,
    one ``{dimension: weight}`` map for every judge, or ``{judge: {dimension:
    weight}}``. Fixed weights are rescaled to sum to 1; dimensions left out
    weigh 0."""

    @field_validator("k")
    @classmethod
    def _k_positive(cls, value: int | dict[str, int]) -> int | dict[str, int]:
        values = value.values() if isinstance(value, dict) else [value]
        bad = [v for v in values if v < 1]
        if bad:
            raise ValueError(f"k must be >= 1, got {bad[0]}")
        return value

    @field_validator("weights")
    @classmethod
    def _weights_non_negative(cls, value: WeightsSpec) -> WeightsSpec:
        if isinstance(value, str):
            return value
        for key, item in value.items():
            inner = item if isinstance(item, dict) else {key: item}
            for dim, w in inner.items():
                if not w >= 0:
                    raise ValueError(
                        f"weight of {dim!r} must be a number >= 0, got {w}"
                    )
            if isinstance(item, dict) and sum(item.values()) <= 0:
                raise ValueError(f"the weights of judge {key!r} sum to 0")
        if not any(isinstance(v, dict) for v in value.values()) and (
            sum(v for v in value.values() if not isinstance(v, dict)) <= 0
        ):
            raise ValueError("the weights sum to 0; give at least one positive")
        return value
