"""``summarize``: the whole CuBE aggregation of answers + scores into summary.json.

Size: about 610 lines, one module on purpose: ``_Aggregation.run`` is the method's
steps in order (sections 3 to 10) and ``_assemble`` writes each of their frames
into its block of the summary; split, each half would only be read with the other.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import polars as pl

from cube_ray import schema
from cube_ray.aggregate._availability import (
    BOUND_UNAVAILABLE,
    unavailable_sets,
    verdict_reasons,
)
from cube_ray.aggregate._math import (
    COUNT,
    FALLBACK,
    MEAN,
    N_QUESTIONS,
    N_RETRIEVED,
    RECALL,
    SD,
    TRIMMED_MEAN,
    WEIGHT,
    N,
    R,
    cross_judge,
    normalise,
    recall_at_k,
    weighted_totals,
)
from cube_ray.aggregate._model import (
    DEGENERATE_BOUNDS,
    MISSING_SCORES,
    NO_JUDGE_SEPARATES,
    NO_RETRIEVED_QUESTIONS,
    SCHEMA_VERSION,
    UNQUALIFIED_JUDGE,
    Sample,
    Summary,
)
from cube_ray.aggregate._options import AggregateOptions
from cube_ray.aggregate._own_model import own_model_judges, without_own_model
from cube_ray.aggregate._parts import (
    _ANSWER_COLUMNS,
    _FIGURE,
    _FLAG_ORDER,
    _SCORE_COLUMNS,
    _SET,
    _STREAMING_ROWS,
    CUBE,
    DEGENERATE,
    MIN_SPAN,
    NO_SEPARATED_JUDGE,
    OUTSIDE,
    UNAVAILABLE,
    WEIGHTED,
    _finite,
    _require,
)
from cube_ray.aggregate._parts_weights import _JudgeSeparation
from cube_ray.aggregate._qualification import (
    UNQUALIFIED,
    QualificationInput,
    QualificationResult,
    qualify,
)
from cube_ray.aggregate._separation import NOT_SEPARATED

__all__ = [
    "DEGENERATE",
    "NO_SEPARATED_JUDGE",
    "OUTSIDE",
    "UNAVAILABLE",
    "WEIGHTED",
    "summarize",
]


_NULL_CODES = {
    "missing scores": MISSING_SCORES,
    DEGENERATE: DEGENERATE_BOUNDS,
    "no retrieved questions": NO_RETRIEVED_QUESTIONS,
}
"""Reason code of each (flag) text of an undefined normalised figure (any
other text gets its words joined by underscores)."""


def summarize(
    answers: pl.DataFrame,
    scores: pl.DataFrame,
    *,
    options: AggregateOptions,
    sources: Mapping[str, str] | None = None,
    sample: Mapping[str, Any] | None = None,
    qualification: QualificationInput | None = None,
    own_model: Sequence[Mapping[str, Any]] = (),
) -> Summary:
    """Aggregate an answers and a scores table into the summary (summary.json).

    Key columns (``question_id``, ``system``, ``judge``, ``dimension``,
    ``status``) may be String, Categorical or Enum; ``question_id`` may also be
    an integer. Categorical keys make very large studies faster. The tables
    are expected to be validated already (see :mod:`cube_ray.tables`); this
    function re-checks only what it can check cheaply. Question ids must be
    unique per system (give bootstrap resamples fresh ids).

    Args:
        answers: Answers table (CUBE_METHOD.md section 9); ``rag`` rows need
            ``rank``; ``retrieved_doc_ids`` is optional (only-document bonus).
        scores: Scores table; a null ``score`` is a missing score.
        options: k, trim, weights and bounds.
        sources: Where the tables came from (``{"answers": path, "scores":
            path}``), named in error messages.
        sample: The run's ``sample`` block (``cube_ray.sample.sample_block``),
            copied into the summary as ``sample``.
        qualification: The run's faulted answers and their scores (CUBE_METHOD.md
            section 12): adds ``judges.<judge>.qualification``, the "misses
            faults" flags, and with ``require_qualification`` leaves judges
            that miss an expected kind on the weighted total out of
            ``across_judges``.
        own_model: The run's "judges its own model's answers" flags
            (:func:`cube_ray.qualification.own_model_flags`, CUBE_METHOD.md
            section 12): added to ``flags``; each system whose headline
            averages such a judge gets ``across_judges.<system>.
            without_own_model``, the CuBE without it.

    Returns:
        The typed summary (undefined figures are None): ``judges.<judge>.
        {weights, trimmed_means, normalized, recall_at_k, cube, ...}``,
        ``across_judges.<system>.<figure>.{mean, sd, n_judges}``, ``flags``,
        ``notes``, ``parameters`` and ``counts``; no ``intervals`` (see
        :func:`cube_ray.aggregate.headline_intervals`).

    Raises:
        InputError: The tables do not allow the aggregation.
        ConfigError: The options do not fit the data (``WeightsError`` for
            weights).

    Examples:
        Three questions, one judge, one dimension, no trimming. zero scores 2, 4,
        6 (mean 4); full scores 8, 8, 8 (mean 8); the system retrieves the gold
        document of the first two questions at ranks 1 and 2 and scores 7 and 6
        there (mean 6.5). Normalised: 100 * (6.5 - 4) / (8 - 4) = 62.5;
        recall@k = 2/3; CuBE = 62.5 * 2/3.

        >>> answers = pl.DataFrame(
        ...     {
        ...         "question_id": ["q1", "q2", "q3"] * 3,
        ...         "system": ["zero"] * 3 + ["full"] * 3 + ["rag"] * 3,
        ...         "rank": [None] * 6 + [1, 2, 0],
        ...     }
        ... )
        >>> scores = answers.select("question_id", "system").with_columns(
        ...     judge=pl.lit("j"),
        ...     dimension=pl.lit("relevance"),
        ...     score=pl.Series([2.0, 4, 6, 8, 8, 8, 7, 6, 3]),
        ...     status=pl.lit("ok"),
        ... )
        >>> out = summarize(answers, scores, options=AggregateOptions(trim=0.0))
        >>> tm = out.judges["j"].trimmed_means["rag"]
        >>> [(s, v["relevance"], v["weighted"]) for s, v in tm.items()]
        [('zero', 4.0, 4.0), ('full', 8.0, 8.0), ('rag', 6.5, 6.5)]
        >>> out.judges["j"].normalized["rag"]
        {'relevance': 62.5, 'weighted': 62.5}
        >>> out.judges["j"].recall_at_k["rag"], out.judges["j"].cube["rag"]
        (0.6666666666666666, 41.666666666666664)
    """
    out = _Aggregation(
        answers, scores, options, sources or {}, qualification, own_model
    ).run()
    if sample is None:
        return out
    return out.model_copy(update={"sample": Sample.model_validate(dict(sample))})


class _Aggregation(_JudgeSeparation):
    def __init__(
        self,
        answers: pl.DataFrame,
        scores: pl.DataFrame,
        options: AggregateOptions,
        sources: Mapping[str, str],
        qualification: QualificationInput | None = None,
        own_model: Sequence[Mapping[str, Any]] = (),
    ) -> None:
        self.qualification = qualification
        self.own_model = [dict(f) for f in own_model]
        self.a_src = sources.get("answers", "answers table")
        self.s_src = sources.get("scores", "scores table")
        _require(answers, _ANSWER_COLUMNS, "answers", self.a_src)
        _require(scores, _SCORE_COLUMNS, "scores", self.s_src)
        self.answers = answers
        self.scores = scores
        self.options = options
        self.notes: list[str] = []
        self.flags: list[dict[str, Any]] = [dict(f) for f in self.own_model]
        self.engine: Any = (
            "streaming" if scores.height > _STREAMING_ROWS else "in-memory"
        )

    # --- assembly --------------------------------------------------------
    def run(self) -> Summary:
        self.failed_sets = unavailable_sets(self.answers)
        ranked = self._rag_answers()
        self._passes(ranked)
        self._check_scores()
        weights = self._weights()
        trimmed = self._trimmed()
        recall = (
            pl.DataFrame({schema.SYSTEM: self.rag_systems})
            .join(
                recall_at_k(ranked.with_columns(pl.col(schema.SYSTEM).cast(pl.String))),
                on=schema.SYSTEM,
                how="left",
            )
            .with_columns(pl.col(N_QUESTIONS, N_RETRIEVED).fill_null(0))
        )

        jsd = [schema.JUDGE, schema.SYSTEM, _SET]
        w = weights.select(schema.JUDGE, schema.SYSTEM, schema.DIMENSION, WEIGHT)
        totals = weighted_totals(
            trimmed.join(w, on=[schema.JUDGE, schema.SYSTEM, schema.DIMENSION]),
            by=jsd,
        ).with_columns(pl.lit(WEIGHTED).alias(_FIGURE))
        figures = pl.concat(
            [
                trimmed.select(
                    *jsd, pl.col(schema.DIMENSION).alias(_FIGURE), TRIMMED_MEAN
                ),
                totals.select(*jsd, _FIGURE, TRIMMED_MEAN),
            ]
        )
        wide = figures.pivot(
            on=_SET, index=[schema.JUDGE, schema.SYSTEM, _FIGURE], values=TRIMMED_MEAN
        )
        for s in ("zero", "full", "rag"):
            if s not in wide.columns:
                wide = wide.with_columns(pl.lit(None, dtype=pl.Float64).alias(s))
        z, f, r = pl.col("zero"), pl.col("full"), pl.col("rag")
        norm = wide.with_columns(
            normalise(r, z, f, min_span=MIN_SPAN).alias("normalized"),
            pl.when(z.is_null() | f.is_null() | r.is_null())
            .then(pl.lit("missing scores"))
            .when((f - z) <= MIN_SPAN)
            .then(pl.lit(DEGENERATE))
            .otherwise(None)
            .alias("reason"),
        )
        cube = (
            norm.filter(pl.col(_FIGURE) == WEIGHTED)
            .join(recall, on=schema.SYSTEM)
            .with_columns((pl.col("normalized") * pl.col(RECALL)).alias(CUBE))
        )
        per_judge = pl.concat(
            [
                norm.select(schema.SYSTEM, _FIGURE, schema.JUDGE, "normalized"),
                cube.select(
                    schema.SYSTEM,
                    pl.lit(CUBE).alias(_FIGURE),
                    schema.JUDGE,
                    pl.col(CUBE).alias("normalized"),
                ),
            ]
        )
        separation = self._separation(weights, wide)
        used = self._used_judges(separation)
        qual = self._qualify()
        separated_judges = used
        if qual is not None and self.options.require_qualification:
            used = {
                s: [j for j in js if j not in qual.unqualified]
                for s, js in used.items()
            }
        used_pairs = pl.DataFrame(
            [(s, j) for s, judges in used.items() for j in judges],
            schema={schema.SYSTEM: pl.String, schema.JUDGE: pl.String},
            orient="row",
        )
        across = cross_judge(
            per_judge.join(used_pairs, on=[schema.SYSTEM, schema.JUDGE], how="semi"),
            by=[schema.SYSTEM, _FIGURE],
            value="normalized",
        )
        out = self._assemble(
            weights,
            trimmed,
            figures,
            norm,
            cube,
            recall,
            across,
            separation=separation,
            used=used,
        )
        if not self.failed_sets and qual is None and not self.own_model:
            return out
        data = out.model_dump(mode="json")
        if qual is not None:  # CUBE_METHOD.md section 12
            self._add_qualification(data, qual, separated_judges)
        self._no_verdict_for_failed_sets(data)
        self._add_without_own_model(data)
        return Summary.model_validate(data)

    def _add_without_own_model(self, out: dict[str, Any]) -> None:
        """Beside each headline, the CuBE without its own-model judges (§12).

        From the final jury (after every exclusion), so it differs from the
        headline only by the flagged judges.
        """
        for s, across in out["across_judges"].items():
            block = without_own_model(
                {j: out["judges"][j]["cube"].get(s) for j in self.judges},
                across["judges"],
                own_model_judges(self.own_model, s),
            )
            if block is not None:
                across["without_own_model"] = block

    @staticmethod
    def _add_qualification(
        out: dict[str, Any],
        qual: QualificationResult,
        separated_judges: Mapping[str, list[str]],
    ) -> None:
        """Each judge's qualification block; who is left out for its faults."""
        for j, block in qual.block.items():
            out["judges"][j]["qualification"] = block
        why = {"code": UNQUALIFIED_JUDGE, "text": UNQUALIFIED}
        for s, across in out["across_judges"].items():
            for j in set(across["excluded"]) & qual.unqualified:
                if j in separated_judges[s]:  # left out for its faults only
                    across["excluded"][j] = dict(why)

    def _no_verdict_for_failed_sets(self, out: dict[str, Any]) -> None:
        """Sets with no usable answer (section 10): no verdict, and why.

        Their figures are already null (a bound without a trimmed mean); this
        gives them the reason in words instead of "missing scores", puts it
        on ``across_judges``, and flags each failed set with its reason code.
        The bound-separation flags of those systems are dropped: with a bound
        missing there was nothing to test.
        """
        reasons = verdict_reasons(self.failed_sets, self.rag_systems)
        if not reasons:
            return
        superseded = {"missing scores", "no retrieved questions", NOT_SEPARATED}

        def superseded_by_reason(flag: dict[str, Any]) -> bool:
            s = flag.get("system")
            if s not in reasons:
                return False
            # A system with no answer has no correlations to weigh by.
            fallback = flag["flag"] == "equal-weight fallback" and s in self.failed_sets
            return fallback or flag["flag"] in superseded

        flags = [f for f in out["flags"] if not superseded_by_reason(f)]
        for name, (code, text) in self.failed_sets.items():
            flags.append(
                {
                    "flag": code.replace("_", " "),
                    "code": code,
                    "system": name,
                    "reason": text,
                }
            )
        out["flags"] = sorted(
            flags, key=lambda f: tuple(str(f.get(k, "")) for k in _FLAG_ORDER)
        )
        for s, text in reasons.items():
            code = self.failed_sets.get(s, (BOUND_UNAVAILABLE, ""))[0]
            why = {"code": code, "text": text}
            for block in out["judges"].values():
                block["null_reasons"][s] = {
                    f: dict(why) for f in block["normalized"][s]
                }
            across = out["across_judges"][s]
            across.update(
                judges=[],
                excluded={j: dict(why) for j in self.judges},
                reason=dict(why),
            )

    def _qualify(self) -> QualificationResult | None:
        """The qualification block and its flags (None without qualification)."""
        if self.qualification is None:
            return None
        qual = qualify(
            self.scores,
            self.qualification,
            judges=self.judges,
            dimensions=self.dimensions,
            weights=self.options.weights,
            alpha=self.options.alpha,
        )
        self.flags.extend(qual.flags)
        return qual

    def _assemble(
        self,
        weights: pl.DataFrame,
        trimmed: pl.DataFrame,
        figures: pl.DataFrame,
        norm: pl.DataFrame,
        cube: pl.DataFrame,
        recall: pl.DataFrame,
        across: pl.DataFrame,
        *,
        separation: Mapping[tuple[str, str, str], dict[str, Any]],
        used: Mapping[str, list[str]],
    ) -> Summary:
        figure_names = [*self.dimensions, WEIGHTED]
        judges: dict[str, dict[str, Any]] = {}
        for j in self.judges:
            judges[j] = {
                "weights": {s: {} for s in self.rag_systems},
                "weight_method": {},
                "correlations": {s: {} for s in self.rag_systems},
                "n_pairs": {s: {} for s in self.rag_systems},
                "trimmed_means": {
                    s: {"zero": {}, "full": {}, s: {}} for s in self.rag_systems
                },
                "n_scores": {
                    s: {"zero": {}, "full": {}, s: {}} for s in self.rag_systems
                },
                "normalized": {s: {} for s in self.rag_systems},
                "null_reasons": {},
                "recall_at_k": {},
                "cube": {},
                "missing": {},
                "bound_separation": {
                    s: {
                        fig: separation[(j, s, fig)]
                        for fig in figure_names
                        if (j, s, fig) in separation
                    }
                    for s in self.rag_systems
                },
            }
        method = (
            self.options.weights if isinstance(self.options.weights, str) else "fixed"
        )
        for row in weights.iter_rows(named=True):
            jd = judges[row[schema.JUDGE]]
            s, d = row[schema.SYSTEM], row[schema.DIMENSION]
            jd["weights"][s][d] = _finite(row[WEIGHT])
            if R in row:
                jd["correlations"][s][d] = _finite(row[R])
                jd["n_pairs"][s][d] = row[N]
            jd["weight_method"][s] = (
                "equal (fallback: every r_d <= 0 or undefined)"
                if row[FALLBACK]
                else method
            )
        for j in self.judges:
            if self.options.weights != "pearson":
                del judges[j]["correlations"], judges[j]["n_pairs"]
        sorted_fig = {name: i for i, name in enumerate(figure_names)}
        for row in sorted(
            figures.iter_rows(named=True), key=lambda r: sorted_fig[r[_FIGURE]]
        ):
            s = row[schema.SYSTEM]
            set_name = s if row[_SET] == "rag" else row[_SET]
            judges[row[schema.JUDGE]]["trimmed_means"][s][set_name][row[_FIGURE]] = (
                _finite(row[TRIMMED_MEAN])
            )
        for row in trimmed.iter_rows(named=True):
            s = row[schema.SYSTEM]
            set_name = s if row[_SET] == "rag" else row[_SET]
            judges[row[schema.JUDGE]]["n_scores"][s][set_name][
                row[schema.DIMENSION]
            ] = row[N]
        no_hits = {
            row[schema.SYSTEM]: row[N_RETRIEVED] == 0
            for row in recall.iter_rows(named=True)
        }
        for row in sorted(
            norm.iter_rows(named=True), key=lambda r: sorted_fig[r[_FIGURE]]
        ):
            jd = judges[row[schema.JUDGE]]
            s, fig, value = row[schema.SYSTEM], row[_FIGURE], _finite(row["normalized"])
            jd["normalized"][s][fig] = value
            reason = row["reason"]
            if reason == "missing scores" and row["rag"] is None and no_hits.get(s):
                reason = "no retrieved questions"
            if reason is not None:
                jd["null_reasons"].setdefault(s, {})[fig] = {
                    "code": _NULL_CODES.get(reason, reason.replace(" ", "_")),
                    "text": reason,
                }
                self.flags.append(
                    {
                        "flag": reason,
                        "judge": row[schema.JUDGE],
                        "system": s,
                        "figure": f"normalized.{fig}",
                    }
                )
            elif value is not None and not 0.0 <= value <= 100.0:
                self.flags.append(
                    {
                        "flag": OUTSIDE,
                        "judge": row[schema.JUDGE],
                        "system": s,
                        "figure": f"normalized.{fig}",
                        "value": value,
                    }
                )
        recall_map = {row[schema.SYSTEM]: row for row in recall.iter_rows(named=True)}
        for j in self.judges:
            for s in self.rag_systems:
                judges[j]["recall_at_k"][s] = recall_map[s][RECALL]
                judges[j]["cube"][s] = None
        for row in cube.iter_rows(named=True):
            judges[row[schema.JUDGE]]["cube"][row[schema.SYSTEM]] = _finite(row[CUBE])
        for row in (
            self.frames["missing"]
            .group_by(schema.JUDGE, schema.SYSTEM, schema.DIMENSION, schema.STATUS)
            .agg(pl.col(COUNT).sum())
            .sort(pl.all())
            .iter_rows(named=True)
        ):
            (
                judges[row[schema.JUDGE]]["missing"]
                .setdefault(row[schema.SYSTEM], {})
                .setdefault(row[schema.DIMENSION], {})
            )[row[schema.STATUS]] = row[COUNT]

        self._separation_flags(separation)
        across_out = self._across(across, separation, used, [*figure_names, CUBE])
        return Summary.model_validate(
            {
                "schema_version": SCHEMA_VERSION,
                "parameters": {
                    **self.options.model_dump(mode="json"),
                    "min_span": MIN_SPAN,
                },
                "systems": list(self.rag_systems),
                "judge_names": list(self.judges),
                "dimensions": list(self.dimensions),
                "counts": self._counts(recall_map),
                "judges": judges,
                "across_judges": across_out,
                # Group iteration order is not deterministic; the summary must be.
                "flags": sorted(
                    self.flags,
                    key=lambda f: tuple(str(f.get(k, "")) for k in _FLAG_ORDER),
                ),
                "notes": self.notes,
            }
        )

    def _across(
        self,
        across: pl.DataFrame,
        separation: Mapping[tuple[str, str, str], Mapping[str, Any]],
        used: Mapping[str, list[str]],
        figures: Sequence[str],
    ) -> dict[str, dict[str, Any]]:
        """The ``across_judges`` block (section 10).

        Per system: the judges used, those left out and why, and each figure's
        mean, SD and number of judges.
        """
        out: dict[str, dict[str, Any]] = {}
        for s in self.rag_systems:
            judges = used[s]
            out[s] = {
                "judges": list(judges),
                "excluded": {
                    j: self._why_excluded(separation[(j, s, WEIGHTED)])
                    for j in self.judges
                    if j not in judges
                },
                "reason": None
                if judges
                else {"code": NO_JUDGE_SEPARATES, "text": NO_SEPARATED_JUDGE},
            }
            for fig in figures:
                out[s][fig] = {"mean": None, "sd": None, "n_judges": 0}
        for row in across.iter_rows(named=True):
            out[row[schema.SYSTEM]][row[_FIGURE]] = {
                "mean": _finite(row[MEAN]),
                "sd": _finite(row[SD]),
                "n_judges": row[N],
            }
        return out

    def _counts(self, recall_map: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
        rows_by_system = {
            row[schema.SYSTEM]: row[COUNT]
            for row in self.frames["stats"]
            .group_by(schema.SYSTEM)
            .agg(pl.col(COUNT).sum())
            .iter_rows(named=True)
        }
        n_missing = self.frames["missing"][COUNT].sum()
        return {
            "questions": self.answers.get_column(schema.QUESTION_ID).n_unique(),
            "answer_rows": self.answers.height,
            "score_rows": self.scores.height,
            "score_rows_by_system": rows_by_system,
            "missing_scores": int(n_missing),
            "retrieved": {s: recall_map[s][N_RETRIEVED] for s in self.rag_systems},
            "questions_by_system": {
                s: recall_map[s][N_QUESTIONS] for s in self.rag_systems
            },
            "unavailable": {
                s: self.unavailable.get(s, 0)
                for s in [*schema.BOUND_SYSTEMS, *self.rag_systems]
            },
        }
