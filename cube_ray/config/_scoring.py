"""The scoring sections of a run config: dimensions, qualification, aggregation."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from cube_ray.errors import ConfigError
from cube_ray.language import Language
from cube_ray.prompts import DEFAULT_DIMENSIONS, default_rubric
from cube_ray.pydantic_base import StrictModel
from cube_ray.qualification import KINDS, FaultKind
from cube_ray.systems.kinds.base import DEFAULT_K

__all__ = [
    "DEFAULT_DETECTS",
    "AggregateConfig",
    "AggregateOptions",
    "BoundsOptions",
    "DimensionConfig",
    "QualificationConfig",
    "WeightsError",
    "default_dimensions",
]

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


class DimensionConfig(StrictModel):
    """One scoring dimension."""

    name: str = Field(min_length=1, pattern=r"^[A-Za-z0-9_\-]+$")
    """Name in the scores table (letters, digits, ``_``, ``-``)."""
    rubric: str | None = None
    """Rubric text appended to the judge prompt."""
    rubric_file: str | None = None
    """File holding the rubric (instead of ``rubric``)."""
    weight: float | None = Field(default=None, ge=0)
    """Fixed weight; used when ``aggregate.weights`` is ``fixed``."""
    detects: list[FaultKind] | None = None
    """Fault kinds a judge must notice on this dimension (CUBE_METHOD.md section
    12); None: the default of the method for the four default dimensions
    (:data:`DEFAULT_DETECTS`), none for another dimension."""

    def expected_faults(self) -> list[str]:
        """The fault kinds this dimension must detect (``detects`` or the default).

        >>> DimensionConfig(name="relevance").expected_faults()
        ['number', 'entity', 'negation', 'unsupported']
        >>> DimensionConfig(name="quality", detects=["omission"]).expected_faults()
        ['omission']
        """
        if self.detects is not None:
            return list(self.detects)
        return list(DEFAULT_DETECTS.get(self.name, ()))

    @model_validator(mode="after")
    def _one_rubric(self) -> DimensionConfig:
        if self.rubric is not None and self.rubric_file is not None:
            msg = (
                f"dimension {self.name!r} sets both rubric and rubric_file "
                f"({self.rubric_file!r}); keep one"
            )
            raise ValueError(msg)
        return self

    def rubric_text(self, language: Language = "en") -> str:
        """The rubric: inline text, the file's text, or the packaged default.

        Args:
            language: Prompt set of the packaged default rubric.
        """
        if self.rubric is not None:
            return self.rubric.strip()
        if self.rubric_file is not None:
            try:
                return Path(self.rubric_file).read_text(encoding="utf-8").strip()
            except OSError as exc:
                msg = (
                    f"dimension {self.name!r}: cannot read rubric_file "
                    f"{self.rubric_file!r} ({exc}); fix the path"
                )
                raise ConfigError(msg) from exc
        if self.name in DEFAULT_DIMENSIONS:
            return default_rubric(self.name, language)
        msg = (
            f"dimension {self.name!r} has no rubric and is not one of the defaults "
            f"{list(DEFAULT_DIMENSIONS)}; set rubric or rubric_file"
        )
        raise ConfigError(msg)


DEFAULT_DETECTS: dict[str, tuple[str, ...]] = {
    "relevance": ("number", "entity", "negation", "unsupported"),
    "completeness": ("omission",),
    "specificity": ("omission",),
    "quality": (),
}
"""The fault kinds each default dimension must detect (CUBE_METHOD.md section 12)."""


class QualificationConfig(StrictModel):
    """Qualify each judge with controlled faults (CUBE_METHOD.md section 12).

    After the bounds, ``questions`` full-bound answers (the first questions in
    the seeded order of section 11) get one faulted copy per kind; every judge
    scores them with the run's prompts, and the summary says per judge, kind
    and dimension whether it noticed (``judges.<j>.qualification``).
    """

    questions: int = Field(default=50, ge=1)
    """How many full-bound answers are faulted (the first ``questions``
    questions in the order ``sha256(f"{seed}:{doc_id}")``)."""
    kinds: list[FaultKind] = Field(default_factory=lambda: list(KINDS), min_length=1)
    """The fault kinds to build: ``number``, ``entity``, ``negation``,
    ``omission``, ``unsupported``."""
    seed: int = 0
    """Seed of the question order and of every fault (deterministic from
    (seed, question_id, kind))."""
    min_drop: float = Field(default=0.5, ge=0.0, le=10.0)
    """Smallest mean drop ``score(original) - score(faulted)`` (points on the
    0-10 scale) for a fault to count as detected; with ``p < aggregate.alpha``
    (one-sided Wilcoxon signed-rank)."""
    judges: list[str] | None = Field(default=None, min_length=1)
    """The judges qualified (names of ``judges``); None: every judge. A judge
    left out scores no faulted answer and holds no certificate, so with
    ``aggregate.require_qualification`` it is left out of the headline. The
    reference judge's qualification costs no engine call; an LLM judge's costs
    ``2 x questions x kinds x dimensions`` calls (more under ``checklist``)."""
    certify_on: Literal["weighted", "dimensions"] = "weighted"
    """What a judge must detect to hold its certificate (CUBE_METHOD.md section
    12): ``weighted``, every expected kind on the weighted total (the method's
    rule); ``dimensions``, each dimension its own expected kinds
    (``dimensions[].detects``), so a judge whose relevance catches a changed
    number is certified although its completeness measure, which no number
    can move, halves the drop on the weighted total."""

    @field_validator("kinds")
    @classmethod
    def _unique_kinds(cls, kinds: list[FaultKind]) -> list[FaultKind]:
        dupes = sorted({k for k in kinds if kinds.count(k) > 1})
        if dupes:
            msg = f"qualification.kinds lists {dupes} more than once; list each once"
            raise ValueError(msg)
        return kinds

    @field_validator("judges")
    @classmethod
    def _unique_judges(cls, judges: list[str] | None) -> list[str] | None:
        if judges is None:
            return None
        dupes = sorted({j for j in judges if judges.count(j) > 1})
        if dupes:
            msg = f"qualification.judges lists {dupes} more than once; list each once"
            raise ValueError(msg)
        return judges

    def qualified(self, judges: Sequence[str]) -> list[str]:
        """The run's judges that are qualified, in the run's order.

        >>> QualificationConfig(judges=["ref"]).qualified(["llm", "ref"])
        ['ref']
        >>> QualificationConfig().qualified(["llm", "ref"])
        ['llm', 'ref']
        """
        chosen = set(judges if self.judges is None else self.judges)
        return [j for j in judges if j in chosen]


def default_dimensions() -> list[DimensionConfig]:
    """The four default dimensions of CUBE_METHOD.md section 4."""
    return [DimensionConfig(name=name) for name in DEFAULT_DIMENSIONS]


class AggregateConfig(BoundsOptions):
    """Options of the aggregation (CUBE_METHOD.md sections 5-8 and 10).

    ``trim``, ``bounds_on`` and the validity guards (``min_gap``, ``alpha``,
    ``require_separation``) are declared once, in :class:`BoundsOptions`;
    :meth:`options` turns this section into the aggregation's
    :class:`AggregateOptions`.
    """

    k: int | dict[str, int] | None = None
    """Retrieval depth for rank scores; one number, per system, or None to use
    each system's own ``k``."""
    weights: Literal["pearson", "equal", "fixed"] | dict[str, Any] = "pearson"
    """``pearson`` (the method), ``equal``, ``fixed`` (the dimensions' ``weight``)
    or an explicit mapping dimension -> weight (optionally judge -> mapping)."""

    def options(
        self,
        *,
        system_k: dict[str, int],
        dimension_weights: dict[str, float | None],
    ) -> AggregateOptions:
        """The aggregation options of a run.

        Args:
            system_k: Each system's own retrieval depth (used when ``k`` is
                None; with no system, ``DEFAULT_K``).
            dimension_weights: The dimensions' ``weight`` (used by ``fixed``).

        Returns:
            The options :func:`cube_ray.aggregate.summarize` takes.
        """
        k: int | dict[str, int] = (
            self.k
            if self.k is not None
            else (dict(system_k) if system_k else DEFAULT_K)
        )
        weights: Any = self.weights
        if weights == "fixed":
            weights = dict(dimension_weights)
        shared = BoundsOptions.model_fields
        return AggregateOptions(
            k=k,
            weights=weights,
            **{name: getattr(self, name) for name in shared},
        )
