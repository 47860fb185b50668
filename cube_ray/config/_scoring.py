"""The scoring sections of a run config: dimensions, qualification, aggregation."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from cube_ray._pydantic import StrictModel
from cube_ray.aggregate._options import DEFAULT_K, AggregateOptions, BoundsOptions
from cube_ray.errors import ConfigError
from cube_ray.language import Language
from cube_ray.prompts import DEFAULT_DIMENSIONS, default_rubric
from cube_ray.qualification import KINDS, FaultKind

__all__ = [
    "DEFAULT_DETECTS",
    "AggregateConfig",
    "DimensionConfig",
    "QualificationConfig",
    "default_dimensions",
]


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

    @field_validator("kinds")
    @classmethod
    def _unique_kinds(cls, kinds: list[FaultKind]) -> list[FaultKind]:
        dupes = sorted({k for k in kinds if kinds.count(k) > 1})
        if dupes:
            msg = f"qualification.kinds lists {dupes} more than once; list each once"
            raise ValueError(msg)
        return kinds


def default_dimensions() -> list[DimensionConfig]:
    """The four default dimensions of CUBE_METHOD.md section 4."""
    return [DimensionConfig(name=name) for name in DEFAULT_DIMENSIONS]


class AggregateConfig(BoundsOptions):
    """Options of the aggregation (CUBE_METHOD.md sections 5-8 and 10).

    ``trim``, ``bounds_on`` and the validity guards (``min_gap``, ``alpha``,
    ``require_separation``) are declared once, in
    :class:`cube_ray.aggregate.BoundsOptions`; :meth:`options` turns this
    section into the aggregation's :class:`cube_ray.aggregate.AggregateOptions`.
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
