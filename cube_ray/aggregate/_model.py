"""``summary.json`` as one typed, versioned model: :class:`Summary`.

:func:`cube_ray.aggregate.summarize` returns a :class:`Summary`; the aggregate
command and the pipeline write it with :meth:`Summary.write`, and everyone
(report, compare, plan, benchmarks) reads it with :meth:`Summary.read`. The
format changes only with :data:`SCHEMA_VERSION`; a summary of another version is
refused with one error naming the version and the command that rewrites it.

Why a figure is undefined or a judge left out is a :class:`Reason`: a stable
``code`` (the constants below) with the plain-words ``text`` and the numbers it
rests on, so readers never parse prose.

The JSON layout of the figures is the one of CUBE_METHOD.md and of the worked
example (``judges.<judge>.cube.<system>``, ``across_judges.<system>.<figure>``
...); :class:`AcrossJudges` keeps its figures beside ``judges``/``excluded``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    model_serializer,
    model_validator,
)

from cube_ray.config import AggregateOptions
from cube_ray.errors import InputError
from cube_ray.files import write_atomic

__all__ = [
    "BOUNDS_NOT_SEPARATED",
    "DEGENERATE_BOUNDS",
    "MISSING_SCORES",
    "NO_CERTIFICATE",
    "NO_CERTIFIED_JUDGE",
    "NO_JUDGE_SEPARATES",
    "NO_RETRIEVED_QUESTIONS",
    "NO_SHARED_JURY",
    "SCHEMA_VERSION",
    "UNQUALIFIED_JUDGE",
    "AcrossJudges",
    "CalibratedAcross",
    "CalibratedFigure",
    "Calibration",
    "Counts",
    "CrossJudgeFigure",
    "FigureInterval",
    "Flag",
    "Intervals",
    "JudgeDifference",
    "JudgeFigures",
    "PairedComparison",
    "Qualification",
    "RaterAgreement",
    "Reason",
    "Sample",
    "SampleStratum",
    "Separation",
    "Summary",
    "SystemInterval",
    "WithoutOwnModel",
]

SCHEMA_VERSION = 2
"""Version of the summary format. 1 (implicit: no ``schema_version``) was the
untyped dict with prose reasons and no intervals."""

# --- reason codes ---------------------------------------------------------------
BOUNDS_NOT_SEPARATED = "bounds_not_separated"
"""A judge left out: its full - zero gap is too small or not significant (§10)."""
NO_JUDGE_SEPARATES = "no_judge_separates"
"""A system has no across-judge figure: every judge was left out (§10)."""
DEGENERATE_BOUNDS = "degenerate_bounds"
"""A normalised figure is undefined: ``full - zero <= min_span`` (§7)."""
MISSING_SCORES = "missing_scores"
"""A normalised figure is undefined: a bound or the system has no score."""
NO_RETRIEVED_QUESTIONS = "no_retrieved_questions"
"""A normalised figure is undefined: the system retrieved no gold document."""
UNQUALIFIED_JUDGE = "misses_faults"
"""A judge left out: it misses an expected fault kind on the weighted total (§12,
``aggregate.require_qualification``)."""
NO_CERTIFICATE = "no_certificate"
"""A judge left out: it was not qualified in the run (``qualification.judges``),
so it holds no certificate (§12, ``aggregate.require_qualification``)."""
NO_CERTIFIED_JUDGE = "no_certified_judge"
"""A system has no across-judge figure: judges separate the bounds, but none
holds a certificate (§12, ``aggregate.require_qualification``)."""
NO_SHARED_JURY = "no_shared_jury"
"""Two systems are not compared: no judge enters both headlines."""
# ``bound_unavailable`` / ``system_unavailable``: cube_ray.aggregate._availability.


class _Model(BaseModel):
    """Frozen, strict: unknown keys are errors (a misspelt key is not data)."""

    model_config = ConfigDict(extra="forbid", frozen=True)


class Reason(BaseModel):
    """Why a figure is undefined or a judge is left out."""

    model_config = ConfigDict(extra="allow", frozen=True)

    code: str
    """A stable code (``bounds_not_separated``, ``no_judge_separates``, ...)."""
    text: str
    """The same in plain words, for the report."""
    gap: float | None = None
    """``full - zero`` of the trimmed means (points), where it applies."""
    p_value: float | None = None
    """One-sided Wilcoxon p-value of ``full > zero``, where it applies."""
    n_pairs: int | None = None
    """Questions in the test."""
    min_gap: float | None = None
    """The ``min_gap`` the gap was held against."""
    alpha: float | None = None
    """The ``alpha`` the p-value was held against."""

    @model_serializer(mode="wrap")
    def _drop_unset(self, handler: Any) -> dict[str, Any]:
        # Only the numbers a reason rests on: no key of a number it lacks.
        out: dict[str, Any] = handler(self)
        return {k: v for k, v in out.items() if v is not None}


class FigureInterval(_Model):
    """A bootstrap interval; all three None when it is undefined."""

    low: float | None
    high: float | None
    half_width: float | None
    """``(high - low) / 2``: what ``cube-ray plan`` extrapolates (§11)."""

    @classmethod
    def of(cls, low: float | None, high: float | None) -> FigureInterval:
        """The interval ``[low, high]``.

        >>> FigureInterval.of(40.0, 50.0).half_width
        5.0
        """
        if low is None or high is None:
            return cls(low=None, high=None, half_width=None)
        return cls(low=low, high=high, half_width=(high - low) / 2.0)


class Separation(_Model):
    """Bound separation of one judge, system and figure (§10)."""

    gap: float | None
    p_value: float
    n_pairs: int
    separated: bool


class Qualification(_Model):
    """Controlled-fault detection of one kind and dimension (§12).

    ``detected`` is the test net of the control (``net_drop``, ``net_p``);
    ``false_alarm`` the test of the control alone. Summaries written before
    controls lack the control fields (None): their ``detected`` was the fault's
    own test.
    """

    n: int
    """Questions whose original, faulted copy and control were all scored."""
    skipped: int
    """Sampled questions with no pair (the kind does not apply, no answer, or
    no control)."""
    drop: float | None
    """Mean ``score(original) - score(faulted)``."""
    p_value: float | None
    detected: bool
    """``net_drop >= min_drop`` and ``net_p < alpha``."""
    no_control: int | None = None
    """Faults built without a control (in ``skipped``)."""
    control_drop: float | None = None
    """Mean ``score(original) - score(control)``."""
    control_p: float | None = None
    net_drop: float | None = None
    """Mean of ``(original - faulted) - (original - control)``."""
    net_p: float | None = None
    false_alarm: bool | None = None
    """``control_drop >= min_drop`` and ``control_p < alpha``."""
    drop_interval: FigureInterval | None = None
    """95 % bootstrap interval of ``drop`` over the questions."""
    control_drop_interval: FigureInterval | None = None
    net_drop_interval: FigureInterval | None = None


class JudgeFigures(_Model):
    """``judges.<judge>``: every figure of one judge, keyed by system."""

    weights: dict[str, dict[str, float | None]]
    weight_method: dict[str, str]
    correlations: dict[str, dict[str, float | None]] | None = None
    """Pearson r(rank_score, score) per system and dimension (Pearson weights)."""
    n_pairs: dict[str, dict[str, int]] | None = None
    trimmed_means: dict[str, dict[str, dict[str, float | None]]]
    """``system -> set (zero, full, the system) -> figure -> trimmed mean``."""
    n_scores: dict[str, dict[str, dict[str, int]]]
    normalized: dict[str, dict[str, float | None]]
    null_reasons: dict[str, dict[str, Reason]]
    """``system -> figure -> why the normalised figure is undefined``."""
    recall_at_k: dict[str, float | None]
    cube: dict[str, float | None]
    missing: dict[str, dict[str, dict[str, int]]]
    """``system -> dimension -> status -> missing scores``."""
    bound_separation: dict[str, dict[str, Separation]]
    qualification: dict[str, dict[str, Qualification]] | None = None
    """``<kind> -> <dimension|weighted> -> detection`` (§12), when run."""
    certified: bool | None = None
    """Whether the judge holds a certificate (§12): qualified in this run
    (``qualification.judges``) and detecting every expected fault kind, net of
    its control, as ``qualification.certify_on`` asks; None when the run has
    no qualification."""


class CrossJudgeFigure(_Model):
    """Mean and SD across the judges used of one figure."""

    mean: float | None
    sd: float | None
    n_judges: int


class WithoutOwnModel(_Model):
    """The across-judge CuBE without the judges of a writer's model (§12).

    Beside the headline when a judge it averages has the flag "judges its own
    model's answers" for the system (or for the generator, which writes every
    system's bounds).
    """

    mean: float | None
    """Mean CuBE of the other headline judges (None: no such judge)."""
    sd: float | None
    """Their sample SD (ddof = 1; None with fewer than two)."""
    n_judges: int
    judges: list[str]
    """The headline judges kept (CuBE defined, not flagged)."""


_ACROSS_KEYS = ("judges", "excluded", "reason", "without_own_model")


class AcrossJudges(_Model):
    """``across_judges.<system>``: the headline's jury and its figures (§10).

    In JSON the figures (each dimension, ``weighted``, ``cube``) sit beside
    ``judges``, ``excluded`` and ``reason``.
    """

    judges: list[str]
    """The judges whose figures are averaged (held fixed by the interval)."""
    excluded: dict[str, Reason]
    """Judges left out, and why."""
    reason: Reason | None
    """Why there is no across-judge figure at all, if so."""
    figures: dict[str, CrossJudgeFigure]
    without_own_model: WithoutOwnModel | None = None
    """The CuBE without the judges that score their own model's answers (§12);
    None when no headline judge has that flag for the system."""

    @model_validator(mode="before")
    @classmethod
    def _gather_figures(cls, data: Any) -> Any:
        if isinstance(data, dict) and "figures" not in data:
            figures = {k: v for k, v in data.items() if k not in _ACROSS_KEYS}
            data = {k: v for k, v in data.items() if k in _ACROSS_KEYS}
            data["figures"] = figures
        return data

    @model_serializer(mode="wrap")
    def _flatten(self, handler: Any) -> dict[str, Any]:
        out: dict[str, Any] = handler(self)
        out.update(out.pop("figures"))
        if out.get("without_own_model") is None:  # only when a judge is flagged
            out.pop("without_own_model", None)
        return out


class Counts(_Model):
    """Row and question counts of the tables."""

    questions: int
    answer_rows: int
    score_rows: int
    score_rows_by_system: dict[str, int]
    missing_scores: int
    retrieved: dict[str, int]
    questions_by_system: dict[str, int]
    unavailable: dict[str, int]


class Flag(BaseModel):
    """One flag of the aggregation; the details depend on the flag."""

    model_config = ConfigDict(extra="allow", frozen=True)

    flag: str
    judge: str | None = None
    system: str | None = None
    figure: str | None = None


class SystemInterval(_Model):
    """``intervals.systems.<system>``."""

    judges: list[str]
    """The judges held fixed in every replicate (the headline's)."""
    n_defined: int
    """Replicates in which every judge used had a defined CuBE."""
    cube: FigureInterval
    """The headline: the across-judge CuBE."""
    weighted: FigureInterval
    recall: FigureInterval
    per_judge: dict[str, FigureInterval]
    """Each judge's CuBE (every judge, used or not)."""


class JudgeDifference(_Model):
    """One judge's CuBE difference of two systems, with its paired interval."""

    difference: float | None
    """First system's CuBE minus the second's on the questions as drawn."""
    interval: FigureInterval


class PairedComparison(_Model):
    """``intervals.comparisons[i]``: two systems on the same questions.

    The difference of their across-judge CuBE, with the interval read off the
    headline's own resamples: each resample draws the same questions for both
    systems and keeps the same judges, so what the questions share (their
    difficulty, the bounds) cancels in the difference.
    """

    first: str
    second: str
    difference: float | None
    """CuBE of ``first`` minus CuBE of ``second`` (points), both averaged over
    :attr:`judges`; None when there is none (see :attr:`reason`)."""
    interval: FigureInterval
    n_defined: int
    """Resamples in which every judge of :attr:`judges` had both CuBEs."""
    n_questions: int
    """Shared questions: both systems have an answer to them."""
    judges: list[str]
    """The judges that enter both headlines, the same in every resample."""
    per_judge: dict[str, JudgeDifference]
    """The difference seen by each judge of :attr:`judges`."""
    reason: Reason | None = None
    """Why there is no difference (no judge enters both headlines)."""


class Intervals(_Model):
    """``intervals``: bootstrap intervals of the headline (§10, §11)."""

    n_resamples: int
    seed: int
    method: Literal["percentile", "bca"]
    confidence: float
    resampling: Literal["questions", "strata"]
    """``strata``: within strata, ``n_h`` fixed (§11)."""
    systems: dict[str, SystemInterval]
    comparisons: list[PairedComparison] = []
    """Every pair of systems, compared on the same resamples (issue 28)."""


class CalibratedFigure(_Model):
    """``calibrated.<judge>.<system>``: a CuBE calibrated by a human audit (§13).

    ``cube = f_H(L) + lambda (f_J(U) - f_J(L))``: the humans' CuBE on the
    audited questions L, corrected by how far the judge's CuBE on the other
    questions U lies from its CuBE on L.
    """

    model_config = ConfigDict(
        extra="forbid",
        frozen=True,
        serialize_by_alias=True,
        validate_by_name=True,
        validate_by_alias=True,
    )

    cube: float | None
    """The calibrated CuBE (human scale)."""
    interval: FigureInterval
    """Its bootstrap interval (L and U resampled independently)."""
    n_labeled: int
    """Audited questions (L)."""
    lambda_: float = Field(alias="lambda")
    """The power-tuned weight of the judge's figures, in [0, 1] (0: the
    human-only figure)."""
    human_only: float | None
    """The humans' CuBE on the audited questions alone (lambda = 0)."""
    human_only_interval: FigureInterval
    judge_cube: float | None
    """The judge's own CuBE on every question (``judges.<judge>.cube``;
    for the jury, the headline)."""
    gain: float | None
    """``(width_human_only / width_calibrated)^2``: the audit counts as
    ``gain`` times as many human-scored questions."""
    equivalent_labeled: int | None
    """``round(gain * n_labeled)``: human-scored questions that would give an
    interval this narrow without the judge."""
    n_defined: int
    """Replicates in which the calibrated figure was defined."""


class CalibratedAcross(CalibratedFigure):
    """``calibration.across_judges.<system>``: the headline, calibrated.

    The predictor is the headline's mean over its judges.
    """

    judges: list[str]


class RaterAgreement(_Model):
    """``calibration.raters[]``: how far the human raters agree on one dimension."""

    dimension: str
    raters: int
    units: int
    """Answers (question x set) rated by two raters or more."""
    alpha: float | None
    """Krippendorff's alpha, interval metric (None: undefined)."""
    mean_abs_difference: float | None
    """Mean absolute difference of two raters' scores of one answer (0-10)."""


class Calibration(_Model):
    """``calibration``: the human audit and how the calibration resampled (§13)."""

    source: str | None
    """The human-ratings file."""
    n_labeled: int
    """Audited questions (L)."""
    n_unlabeled: int
    """Questions scored by the judges only (U)."""
    n_ratings: int
    """Rows of the ratings file (several raters of one item are averaged)."""
    n_resamples: int
    seed: int
    method: Literal["percentile", "bca"]
    confidence: float
    resampling: Literal["questions", "strata"]
    across_judges: dict[str, CalibratedAcross]
    """The headline (across-judge CuBE) calibrated, per system."""
    people_separation: dict[str, Separation] = {}
    """Per system, whether the people's scores on the audit separate the bounds
    (section 10 on the audit, weighted total)."""
    reasons: dict[str, Reason] = {}
    """Per system whose calibrated figures are not a result, why
    (``people_bounds_not_separated``); the figures stay in ``calibrated``."""
    raters: list[RaterAgreement] = []
    """Per dimension, the agreement of the human raters when the ratings name
    two or more (a ``rater`` column); their scores of an answer are averaged."""


class SampleStratum(_Model):
    """One stratum of the sample (§11)."""

    population: int
    size: int


class Sample(_Model):
    """``sample``: the planned sample the questions are (§11)."""

    size: int
    population: int
    seed: int
    fields: list[str]
    strata: dict[str, SampleStratum]


class Parameters(AggregateOptions):
    """The options the summary was computed with, and the smallest span."""

    min_span: float


class Summary(_Model):
    """The content of ``summary.json``."""

    schema_version: Literal[2] = 2
    """The format version (:data:`SCHEMA_VERSION`)."""
    parameters: Parameters
    systems: list[str]
    judge_names: list[str]
    dimensions: list[str]
    counts: Counts
    judges: dict[str, JudgeFigures]
    across_judges: dict[str, AcrossJudges]
    flags: list[Flag]
    notes: list[str]
    inputs: dict[str, str] | None = None
    """Where the tables were read from (``answers``, ``scores``)."""
    intervals: Intervals | None = None
    """The headline's bootstrap intervals (None: not computed)."""
    sample: Sample | None = None
    """The sample design (§11), when the questions are a planned sample."""
    calibrated: dict[str, dict[str, CalibratedFigure]] | None = None
    """``judge -> system ->`` CuBE calibrated by a human audit (§13), when
    aggregated with ``--human``."""
    calibration: Calibration | None = None
    """The audit behind ``calibrated`` and the calibrated headline (§13)."""

    def options(self) -> AggregateOptions:
        """The aggregation options the summary was computed with."""
        return AggregateOptions.model_validate(
            self.parameters.model_dump(exclude={"min_span"})
        )

    def headline_judges(self, system: str) -> list[str]:
        """The judges the across-judge figures of ``system`` average.

        Those listed in ``across_judges.<system>.judges`` whose CuBE of the
        system is defined (the cross-judge mean skips the others).
        """
        across = self.across_judges.get(system)
        if across is None:
            return []
        return [
            j
            for j in self.judge_names
            if j in across.judges and self.judges[j].cube.get(system) is not None
        ]

    def to_json(self) -> str:
        """The JSON text of ``summary.json`` (no NaN: undefined is null)."""
        data = self.model_dump(mode="json")
        return json.dumps(data, indent=2, ensure_ascii=False, allow_nan=False) + "\n"

    def write(self, path: str | Path) -> Path:
        """Write ``summary.json`` atomically (a reader never sees half a file)."""
        return write_atomic(path, self.to_json())

    @classmethod
    def from_json(cls, data: Any, *, path: str | Path | None = None) -> Summary:
        """Validate parsed JSON; one clear error for another schema version.

        Raises:
            InputError: Not a summary of :data:`SCHEMA_VERSION`, or invalid.
        """
        where = str(path) if path is not None else None
        rewrite = f"cube-ray aggregate {Path(path).parent if path else 'RUN_DIR'}"
        if not isinstance(data, dict):
            raise InputError(
                f"summary.json must hold a JSON object, got {type(data).__name__}",
                path=where,
            )
        version = data.get("schema_version")
        if version != SCHEMA_VERSION:
            shown = (
                "absent (a summary written before versions)"
                if version is None
                else repr(version)
            )
            raise InputError(
                f"summary.json has schema_version {shown}; this cube-ray reads "
                f"version {SCHEMA_VERSION}. Rewrite it from the run's tables with "
                f"`{rewrite}`.",
                path=where,
                field="schema_version",
            )
        try:
            return cls.model_validate(data)
        except ValidationError as exc:
            err = exc.errors()[0]
            loc = ".".join(str(p) for p in err["loc"])
            raise InputError(
                f"summary.json is not a valid version-{SCHEMA_VERSION} summary: "
                f"{loc}: {err['msg']}. Rewrite it with `{rewrite}`.",
                path=where,
                field=loc or None,
            ) from None

    @classmethod
    def read(cls, path: str | Path) -> Summary:
        """Read and validate ``summary.json``.

        Raises:
            InputError: Missing, not JSON, or not a valid summary.
        """
        p = Path(path)
        try:
            data = json.loads(p.read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise InputError(
                "summary.json is missing; create it with `cube-ray aggregate "
                f"{p.parent}` (or finish `cube-ray run`)",
                path=str(p),
            ) from None
        except (OSError, ValueError) as exc:
            raise InputError(
                f"summary.json is not valid JSON: {exc}", path=str(p)
            ) from exc
        return cls.from_json(data, path=p)
