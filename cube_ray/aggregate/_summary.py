"""``summarize``: the whole CuBE aggregation of answers + scores into summary.json."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import polars as pl

from cube_ray import schema
from cube_ray.aggregate._math import (
    COUNT,
    FALLBACK,
    MEAN,
    N_QUESTIONS,
    N_RETRIEVED,
    RANK_SCORE,
    RECALL,
    SD,
    TRIMMED_MEAN,
    WEIGHT,
    N,
    R,
    cross_judge,
    normalise,
    pearson,
    pearson_exprs,
    pearson_weights,
    rank_scores,
    recall_at_k,
    trimmed_mean_exprs,
    trimmed_means,
)
from cube_ray.aggregate._options import AggregateOptions, WeightsError
from cube_ray.aggregate._separation import (
    DELTA,
    JUDGE_SPAN,
    NOT_SEPARATED,
    PAIR_KEY,
    QUESTION_SPAN,
    PairCodes,
    packed_key,
    pair_codes,
    paired_differences,
    separated,
    wilcoxon_greater,
)
from cube_ray.errors import ConfigError, InputError

__all__ = [
    "DEGENERATE",
    "NO_SEPARATED_JUDGE",
    "OUTSIDE",
    "UNAVAILABLE",
    "WEIGHTED",
    "summarize",
]

WEIGHTED = "weighted"
"""Figure name of the weighted total, beside the dimension names."""
CUBE = "cube"
DEGENERATE = "degenerate bounds"
OUTSIDE = "outside bounds"
UNAVAILABLE = "unavailable answers"
"""Flag of a system (or bound) whose answer rows have a status other than ok."""
NO_SEPARATED_JUDGE = "no judge separates the bounds"
"""Reason of an across-judge figure left null because every judge was excluded."""
MIN_SPAN = 1e-9

_SET = "set"
_VARIANT = "variant"
_FIGURE = "figure"
_STREAMING_ROWS = 2_000_000
_HISTOGRAM_MAX_DISTINCT = 2048

_ANSWER_COLUMNS = (schema.QUESTION_ID, schema.SYSTEM, schema.RANK)
_SCORE_COLUMNS = (
    schema.QUESTION_ID,
    schema.SYSTEM,
    schema.JUDGE,
    schema.DIMENSION,
    schema.SCORE,
)


def summarize(
    answers: pl.DataFrame,
    scores: pl.DataFrame,
    *,
    options: AggregateOptions,
    sources: Mapping[str, str] | None = None,
) -> dict[str, Any]:
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

    Returns:
        A JSON-ready dict (no NaN: undefined figures are None) with the keys
        ``judges.<judge>.{weights, trimmed_means, normalized, recall_at_k, cube,
        ...}``, ``across_judges.<system>.<figure>.{mean, sd, n}``, ``flags``,
        ``notes``, ``parameters`` and ``counts``.

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
        >>> tm = out["judges"]["j"]["trimmed_means"]["rag"]
        >>> [(s, v["relevance"], v["weighted"]) for s, v in tm.items()]
        [('zero', 4.0, 4.0), ('full', 8.0, 8.0), ('rag', 6.5, 6.5)]
        >>> out["judges"]["j"]["normalized"]["rag"]
        {'relevance': 62.5, 'weighted': 62.5}
        >>> out["judges"]["j"]["recall_at_k"]["rag"], out["judges"]["j"]["cube"]["rag"]
        (0.6666666666666666, 41.666666666666664)
    """
    return _Aggregation(answers, scores, options, sources or {}).run()


def _require(
    frame: pl.DataFrame, columns: Sequence[str], table: str, source: str
) -> None:
    missing = [c for c in columns if c not in frame.columns]
    if missing:
        raise InputError(
            f"the {table} table lacks column(s) {missing}; it has {frame.columns}. "
            "Expected the columns of CUBE_METHOD.md section 9.",
            path=source,
            field=missing[0],
        )


def _strings(series: pl.Series) -> list[str]:
    return [str(v) for v in series.cast(pl.String).to_list()]


def _finite(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


_FLAG_ORDER = ("judge", "system", "figure", "flag")
"""Sort key of the summary's flags list."""


class _Aggregation:
    """One run of :func:`summarize` (keeps the intermediate frames together)."""

    def __init__(
        self,
        answers: pl.DataFrame,
        scores: pl.DataFrame,
        options: AggregateOptions,
        sources: Mapping[str, str],
    ) -> None:
        self.a_src = sources.get("answers", "answers table")
        self.s_src = sources.get("scores", "scores table")
        _require(answers, _ANSWER_COLUMNS, "answers", self.a_src)
        _require(scores, _SCORE_COLUMNS, "scores", self.s_src)
        self.answers = answers
        self.scores = scores
        self.options = options
        self.notes: list[str] = []
        self.flags: list[dict[str, Any]] = []
        self.engine: Any = (
            "streaming" if scores.height > _STREAMING_ROWS else "in-memory"
        )

    # --- answers ---------------------------------------------------------
    def _rag_answers(self) -> pl.DataFrame:
        systems = _strings(self.answers.get_column(schema.SYSTEM).unique())
        self.rag_systems = sorted(s for s in systems if schema.is_rag_system(s))
        if not self.rag_systems:
            raise InputError(
                "the answers table has no system under test: systems"
                f" {sorted(systems)}. Expected rows whose system is 'rag' or"
                " 'rag@<variant>'.",
                path=self.a_src,
                field=schema.SYSTEM,
            )
        cols = [
            c
            for c in (*_ANSWER_COLUMNS, schema.RETRIEVED_DOC_IDS)
            if c in self.answers.columns
        ]
        down = self._availability()
        rag = (
            self.answers.lazy()
            .filter(pl.col(schema.SYSTEM).cast(pl.String).is_in(self.rag_systems))
            .filter(~down)
            .select(cols)
        )
        if schema.RETRIEVED_DOC_IDS not in self.answers.columns:
            self.notes.append(
                "answers have no retrieved_doc_ids column: no only-document bonus "
                "was given to rank_score"
            )
        k = self._k()
        bad = rag.filter(pl.col(schema.RANK).is_null()).head(1).collect()
        if bad.height:
            row = bad.row(0, named=True)
            raise InputError(
                f"rag answer row without rank: question_id={row[schema.QUESTION_ID]!r},"
                f" system={row[schema.SYSTEM]!r}. Expected the 1-based rank of the gold"
                " document in retrieved_doc_ids, or 0 when it is absent.",
                path=self.a_src,
                field=schema.RANK,
            )
        ranked = rank_scores(rag, k=k).collect()
        too_big = ranked.filter(
            (pl.col(schema.RANK) < 0)
            | (pl.col(RANK_SCORE) < 0)
            | ((pl.col(schema.RANK) >= 1) & (pl.col(RANK_SCORE) < 2))
        )
        if too_big.height:
            row = too_big.row(0, named=True)
            system = str(row[schema.SYSTEM])
            k_sys = k[system] if isinstance(k, Mapping) else k
            raise InputError(
                f"rank {row[schema.RANK]} of question_id={row[schema.QUESTION_ID]!r},"
                f" system={system!r} is outside 0..k (k={k_sys}). Pass the retrieval"
                " depth the system used (--k, per system as name=k).",
                path=self.a_src,
                field=schema.RANK,
            )
        dup = ranked.select(
            pl.struct(schema.QUESTION_ID, schema.SYSTEM).is_duplicated().any()
        ).item()
        if dup:
            row = ranked.filter(
                pl.struct(schema.QUESTION_ID, schema.SYSTEM).is_duplicated()
            ).row(0, named=True)
            raise InputError(
                f"duplicate answer rows for question_id={row[schema.QUESTION_ID]!r},"
                f" system={row[schema.SYSTEM]!r}. Expected one answer per question and "
                "system (resamples need fresh question ids).",
                path=self.a_src,
                field=schema.QUESTION_ID,
            )
        return ranked

    def _availability(self) -> pl.Expr:
        """Answer rows whose status says the system did not answer (section 10).

        An outage is not a miss: such rows (and their scores) are left out of
        recall@k, rank scores, weights and trimmed means, and counted per
        system. A table without a ``status`` column has no outages; a null
        status counts as answered.

        Returns:
            The expression that is true on unavailable answer rows.
        """
        if schema.STATUS not in self.answers.columns:
            self.unavailable, self.answer_rows = {}, {}
            self.unavailable_keys = None
            return pl.lit(False)
        status = pl.col(schema.STATUS).cast(pl.String)
        down = status.is_not_null() & (status != schema.STATUS_OK)
        per_system = (
            self.answers.lazy()
            .group_by(pl.col(schema.SYSTEM).cast(pl.String))
            .agg(pl.len().alias(COUNT), down.sum().alias("down"))
            .sort(schema.SYSTEM)
            .collect()
        )
        self.answer_rows = dict(
            zip(per_system[schema.SYSTEM], per_system[COUNT], strict=True)
        )
        self.unavailable = {
            str(s): int(n)
            for s, n in zip(per_system[schema.SYSTEM], per_system["down"], strict=True)
        }
        self.unavailable_keys = (
            self.answers.lazy()
            .filter(down)
            .select(schema.QUESTION_ID, schema.SYSTEM)
            .collect()
            if any(self.unavailable.values())
            else None
        )
        return down

    def _k(self) -> int | dict[str, int]:
        k = self.options.k
        if isinstance(k, int):
            return k
        unknown = sorted(set(k) - set(self.rag_systems))
        missing = sorted(set(self.rag_systems) - set(k))
        if missing:
            raise ConfigError(
                f"k is given per system but not for {missing} (systems under test:"
                f" {self.rag_systems}). Give one k per system, or a single k for all."
            )
        if unknown:
            self.notes.append(f"k given for systems without answers: {unknown}")
        return {name: k[name] for name in self.rag_systems}

    # --- the heavy passes over the score rows ------------------------------
    def _use_histograms(self) -> bool:
        """Whether scores take few distinct values (judges' integer scores).

        Then the score rows are first compressed into histograms; otherwise
        (continuous expected-value scores) the trimmed ends of each group are
        found by partial selection. Both give the same figures; this only picks
        the faster way. A strided sample of the score column decides.
        """
        column = self.scores.get_column(schema.SCORE)
        step = max(1, column.len() // 100_000)
        return column.gather_every(step).n_unique() <= _HISTOGRAM_MAX_DISTINCT

    def _passes(self, ranked: pl.DataFrame) -> None:
        opts = self.options
        sc_schema = self.scores.schema
        cols = [*_SCORE_COLUMNS]
        has_status = schema.STATUS in sc_schema
        if has_status:
            cols.append(schema.STATUS)
        sc = (
            self.scores.lazy()
            .select(cols)
            .with_columns(pl.col(schema.SCORE).cast(pl.Float64))
        )
        if not has_status:
            sc = sc.with_columns(pl.lit("missing").alias(schema.STATUS))
        if self.unavailable_keys is not None:
            sc = sc.join(
                self.unavailable_keys.lazy().select(
                    pl.col(schema.QUESTION_ID).cast(sc_schema[schema.QUESTION_ID]),
                    pl.col(schema.SYSTEM).cast(sc_schema[schema.SYSTEM]),
                ),
                on=[schema.QUESTION_ID, schema.SYSTEM],
                how="anti",
            )
        try:
            keys = (
                ranked.lazy()
                .select(
                    pl.col(schema.QUESTION_ID).cast(sc_schema[schema.QUESTION_ID]),
                    pl.col(schema.SYSTEM).cast(sc_schema[schema.SYSTEM]),
                    pl.col(RANK_SCORE),
                )
                .collect()
            )
        except pl.exceptions.PolarsError as exc:
            raise InputError(
                "the answers' question_id/system values do not fit the scores'"
                f" column types ({sc_schema[schema.QUESTION_ID]},"
                f" {sc_schema[schema.SYSTEM]}): {exc}. Give both tables the same"
                " column types.",
                path=self.a_src,
                field=schema.SYSTEM,
            ) from None
        by = [schema.SYSTEM, schema.JUDGE, schema.DIMENSION]
        score = pl.col(schema.SCORE)
        rag = sc.filter(pl.col(schema.SYSTEM).is_in(self.rag_systems)).join(
            keys.lazy(), on=[schema.QUESTION_ID, schema.SYSTEM], how="inner"
        )
        bounds = sc.filter(pl.col(schema.SYSTEM).is_in(schema.BOUND_SYSTEMS))
        bounds_by = by
        self.hits = (
            keys.lazy()
            .filter(pl.col(RANK_SCORE) > 0)
            .select(
                pl.col(schema.QUESTION_ID),
                pl.col(schema.SYSTEM).cast(pl.String).alias(_VARIANT),
            )
        )
        if opts.bounds_on == "paired":
            bounds = bounds.join(self.hits, on=schema.QUESTION_ID, how="inner")
            bounds_by = [_VARIANT, *by]
        plans = {
            "stats": sc.group_by(by).agg(
                pl.len().alias(COUNT),
                score.min().alias("min"),
                score.max().alias("max"),
                score.is_nan().any().alias("nan"),
                *(
                    [
                        pl.col(schema.QUESTION_ID).min().alias("qid_min"),
                        pl.col(schema.QUESTION_ID).max().alias("qid_max"),
                    ]
                    if sc_schema[schema.QUESTION_ID].is_integer()
                    else []
                ),
            ),
            "missing": sc.filter(score.is_null())
            .group_by([*by, schema.STATUS])
            .agg(pl.len().alias(COUNT)),
        }
        if self._use_histograms():
            rag = rag.group_by([*by, RANK_SCORE, schema.SCORE]).agg(
                pl.len().alias(COUNT)
            )
            bounds = bounds.group_by([*bounds_by, schema.SCORE]).agg(
                pl.len().alias(COUNT)
            )
            plans["rag_rows"] = rag.group_by(schema.SYSTEM).agg(pl.col(COUNT).sum())
            plans["corr"] = pearson(
                rag, by=by, x=RANK_SCORE, y=schema.SCORE, count=COUNT
            )
            plans["tm_rag"] = trimmed_means(
                rag.filter(pl.col(RANK_SCORE) > 0), by=by, trim=opts.trim, count=COUNT
            )
            plans["tm_bounds"] = trimmed_means(
                bounds, by=bounds_by, trim=opts.trim, count=COUNT
            )
        else:
            # One pass over the joined rag rows for all three figures.
            n_tm, tm = trimmed_mean_exprs(
                score.filter(pl.col(RANK_SCORE) > 0), trim=opts.trim
            )
            rag_figures = rag.group_by(by).agg(
                pl.len().alias(COUNT),
                *pearson_exprs(pl.col(RANK_SCORE), score),
                n_tm.alias("n_tm"),
                tm,
            )
            plans["rag_figures"] = rag_figures
            plans["tm_bounds"] = trimmed_means(bounds, by=bounds_by, trim=opts.trim)
        frames = pl.collect_all(list(plans.values()), engine=self.engine)
        self.pair_codes = pair_codes(frames[0], sc_schema)
        self.frames: dict[str, pl.DataFrame] = {}
        for name, frame in zip(plans, frames, strict=True):
            self.frames[name] = frame.with_columns(
                pl.col(c).cast(pl.String)
                for c in (*by, schema.STATUS)
                if c in frame.columns
            ).sort(pl.exclude(COUNT, N, R, TRIMMED_MEAN, "min", "max", "nan"))
        if "rag_figures" in self.frames:
            figures = self.frames.pop("rag_figures")
            self.frames["rag_rows"] = figures.group_by(schema.SYSTEM).agg(
                pl.col(COUNT).sum()
            )
            self.frames["corr"] = figures.select(*by, N, R)
            self.frames["tm_rag"] = figures.filter(pl.col("n_tm") > 0).select(
                *by, pl.col("n_tm").alias(N), TRIMMED_MEAN
            )
        self.sc = sc
        self.keys = keys

    def _check_scores(self) -> None:
        stats = self.frames["stats"]
        systems = _strings(stats.get_column(schema.SYSTEM).unique(maintain_order=True))
        for bound in schema.BOUND_SYSTEMS:
            if bound not in systems:
                raise InputError(
                    f"the scores table has no rows of system {bound!r} (systems:"
                    f" {systems}). Expected scores of the zero- and full-score bound"
                    " answers: run the 'zero' and 'full' answer sets and judge them.",
                    path=self.s_src,
                    field=schema.SYSTEM,
                )
        odd = sorted(
            s
            for s in systems
            if s not in schema.BOUND_SYSTEMS and not schema.is_rag_system(s)
        )
        if odd:
            raise InputError(
                f"unknown system {odd[0]!r} in the scores table. Expected 'zero',"
                " 'full', 'rag' or 'rag@<variant>'.",
                path=self.s_src,
                field=schema.SYSTEM,
            )
        no_answers = sorted(
            s for s in systems if schema.is_rag_system(s) and s not in self.rag_systems
        )
        if no_answers:
            raise InputError(
                f"the scores table has rows of system {no_answers[0]!r} but the answers"
                " table has none. Give the answers of every scored system.",
                path=self.s_src,
                field=schema.SYSTEM,
            )
        score = pl.col(schema.SCORE)
        if (
            stats.select((pl.col("min") < 0) | (pl.col("max") > 10) | pl.col("nan"))
            .to_series()
            .any()
        ):
            row = (
                self.sc.filter(score.is_nan() | ~score.is_between(0.0, 10.0))
                .head(1)
                .collect()
                .row(0, named=True)
            )
            raise InputError(
                f"score {row[schema.SCORE]} outside 0..10 (question_id="
                f"{row[schema.QUESTION_ID]!r}, system={row[schema.SYSTEM]!r}, judge="
                f"{row[schema.JUDGE]!r}, dimension={row[schema.DIMENSION]!r}). Expected"
                " a number from 0 to 10, or null for a missing score.",
                path=self.s_src,
                field=schema.SCORE,
            )
        n_rag_rows = stats.filter(pl.col(schema.SYSTEM).is_in(self.rag_systems))[
            COUNT
        ].sum()
        if n_rag_rows != self.frames["rag_rows"][COUNT].sum():
            row = (
                self.sc.filter(pl.col(schema.SYSTEM).is_in(self.rag_systems))
                .join(
                    self.keys.lazy(),
                    on=[schema.QUESTION_ID, schema.SYSTEM],
                    how="anti",
                )
                .head(1)
                .collect()
                .row(0, named=True)
            )
            raise InputError(
                f"score row without an answer row: question_id="
                f"{row[schema.QUESTION_ID]!r}, system={row[schema.SYSTEM]!r}. Expected"
                " every scored rag answer in the answers table.",
                path=self.s_src,
                field=schema.QUESTION_ID,
            )
        self.judges = _strings(
            stats.get_column(schema.JUDGE).unique(maintain_order=True)
        )
        self.dimensions = _strings(
            stats.get_column(schema.DIMENSION).unique(maintain_order=True)
        )

    # --- weights ---------------------------------------------------------
    def _grid(self) -> pl.DataFrame:
        return (
            pl.DataFrame({schema.JUDGE: self.judges})
            .join(pl.DataFrame({schema.SYSTEM: self.rag_systems}), how="cross")
            .join(pl.DataFrame({schema.DIMENSION: self.dimensions}), how="cross")
        )

    def _weights(self) -> pl.DataFrame:
        by = [schema.SYSTEM, schema.JUDGE, schema.DIMENSION]
        corr = self.frames["corr"]
        grid = (
            self._grid()
            .join(corr, on=by, how="left")
            .with_columns(pl.col(N).fill_null(0))
        )
        spec = self.options.weights
        if spec == "pearson":
            weighted = pearson_weights(grid, by=[schema.JUDGE, schema.SYSTEM])
            for row in (
                weighted.filter(pl.col(FALLBACK))
                .unique([schema.JUDGE, schema.SYSTEM], maintain_order=True)
                .iter_rows(named=True)
            ):
                self.flags.append(
                    {
                        "flag": "equal-weight fallback",
                        "judge": row[schema.JUDGE],
                        "system": row[schema.SYSTEM],
                        "reason": "every Pearson r_d is <= 0 or undefined",
                    }
                )
            return weighted
        if spec == "equal":
            # Over the dimensions each judge actually scored.
            scored = (
                self.frames["stats"]
                .group_by(schema.JUDGE)
                .agg(pl.col(schema.DIMENSION).unique())
            )
            fixed = {
                str(judge): {str(d): 1.0 for d in dims}
                for judge, dims in scored.iter_rows()
            }
        else:
            fixed = self._fixed_weights(spec)
        rows = [
            {
                schema.JUDGE: j,
                schema.DIMENSION: d,
                WEIGHT: fixed[j].get(d, 0.0) / sum(fixed[j].values()),
            }
            for j in self.judges
            for d in self.dimensions
        ]
        return grid.join(
            pl.DataFrame(rows), on=[schema.JUDGE, schema.DIMENSION], how="left"
        ).with_columns(pl.lit(False).alias(FALLBACK))

    def _fixed_weights(
        self, spec: dict[str, float] | dict[str, dict[str, float]]
    ) -> dict[str, dict[str, float]]:
        per_judge = any(isinstance(v, dict) for v in spec.values())
        if per_judge:
            tables: dict[str, dict[str, float]] = {}
            for judge, table in spec.items():
                if judge not in self.judges:
                    raise WeightsError(
                        f"weights name judge {judge!r}, which has no scores (judges:"
                        f" {self.judges}). Use the judges' names as keys.",
                        key=judge,
                    )
                assert isinstance(table, dict)
                tables[judge] = table
            missing = [j for j in self.judges if j not in tables]
            if missing:
                raise WeightsError(
                    f"weights are given per judge but not for judge {missing[0]!r}."
                    " Give every judge a {dimension: weight} map, or give one map for"
                    " all judges.",
                    key=missing[0],
                )
        else:
            flat = {
                str(k): float(v) for k, v in spec.items() if not isinstance(v, dict)
            }
            tables = {j: flat for j in self.judges}
        for judge, table in tables.items():
            for dim in table:
                if dim not in self.dimensions:
                    raise WeightsError(
                        f"weights name dimension {dim!r}"
                        + (f" (judge {judge!r})" if per_judge else "")
                        + f", which has no scores (dimensions: {self.dimensions}).",
                        key=dim,
                    )
            left_out = [d for d in self.dimensions if d not in table]
            note = f"fixed weights leave out {left_out}: weight 0" + (
                f" (judge {judge})" if per_judge else ""
            )
            if left_out and note not in self.notes:
                self.notes.append(note)
        return tables

    # --- trimmed means ---------------------------------------------------
    def _trimmed(self) -> pl.DataFrame:
        """One row per (judge, system, set, dimension): n and trimmed_mean."""
        rag = self.frames["tm_rag"].with_columns(pl.lit("rag").alias(_SET))
        bounds = self.frames["tm_bounds"]
        if _VARIANT in bounds.columns:
            bounds = bounds.rename({schema.SYSTEM: _SET, _VARIANT: schema.SYSTEM})
        else:
            bounds = bounds.rename({schema.SYSTEM: _SET}).join(
                pl.DataFrame({schema.SYSTEM: self.rag_systems}), how="cross"
            )
        cols = [schema.JUDGE, schema.SYSTEM, _SET, schema.DIMENSION, N, TRIMMED_MEAN]
        sets = pl.DataFrame({_SET: ["zero", "full", "rag"]})
        grid = self._grid().join(sets, how="cross")
        return grid.join(
            pl.concat([rag.select(cols), bounds.select(cols)]),
            on=[schema.JUDGE, schema.SYSTEM, _SET, schema.DIMENSION],
            how="left",
        ).with_columns(pl.col(N).fill_null(0))

    # --- bound separation (section 10) --------------------------------------
    def _paired_histograms(
        self, weights: pl.DataFrame
    ) -> tuple[pl.DataFrame, pl.DataFrame]:
        """Histograms of the paired differences ``full - zero``.

        Per dimension: ``[variant,] judge, dimension, delta, count``; for the
        weighted total (questions scored on every dimension of positive
        weight): ``variant, judge, delta, count``. ``variant`` is there only
        with ``bounds_on: paired`` for the per-dimension histogram (with
        ``all`` every variant shares the same pairs).
        """
        sc_schema = self.sc.collect_schema()
        judge_dim = [schema.JUDGE, schema.DIMENSION]
        bounds = self.sc.filter(pl.col(schema.SYSTEM).is_in(schema.BOUND_SYSTEMS))
        if self.pair_codes is not None:
            return self._packed_histograms(bounds, weights, self.pair_codes)
        pairs = paired_differences(bounds, by=judge_dim, engine=self.engine).lazy()
        variant: list[str] = []
        if self.options.bounds_on == "paired":
            pairs = pairs.join(self.hits, on=schema.QUESTION_ID, how="inner")
            variant = [_VARIANT]
        per_dim = pairs.group_by([*variant, *judge_dim, DELTA]).agg(
            pl.len().alias(COUNT)
        )
        positive = weights.lazy().filter(pl.col(WEIGHT) > 0)
        w = positive.select(
            pl.col(schema.SYSTEM).alias(_VARIANT),
            *(pl.col(c).cast(sc_schema[c]) for c in judge_dim),
            pl.col(WEIGHT),
        )
        n_positive = w.group_by(_VARIANT, schema.JUDGE).agg(pl.len().alias("_dims"))
        total = (
            pairs.join(w, on=[*variant, *judge_dim], how="inner")
            .group_by(_VARIANT, schema.JUDGE, schema.QUESTION_ID)
            .agg((pl.col(WEIGHT) * pl.col(DELTA)).sum().alias(DELTA), pl.len())
            .join(n_positive, on=[_VARIANT, schema.JUDGE], how="inner")
            .filter(pl.col("len") == pl.col("_dims"))
            # Sums of weighted differences in any order: round away the float
            # noise so that equal totals tie (ranks only need the order).
            .group_by(_VARIANT, schema.JUDGE, pl.col(DELTA).round(10))
            .agg(pl.len().alias(COUNT))
        )
        frames = pl.collect_all([per_dim, total], engine=self.engine)
        return tuple(  # type: ignore[return-value]
            f.with_columns(
                pl.col(c).cast(pl.String) for c in judge_dim if c in f.columns
            )
            for f in frames
        )

    def _packed_histograms(
        self, bounds: pl.LazyFrame, weights: pl.DataFrame, codes: PairCodes
    ) -> tuple[pl.DataFrame, pl.DataFrame]:
        """:meth:`_paired_histograms` on one packed integer key (fast path)."""
        pairs = paired_differences(bounds, by=[packed_key()], engine=self.engine)
        jd = pl.col(PAIR_KEY) // QUESTION_SPAN
        question = pl.col(PAIR_KEY) % QUESTION_SPAN
        variant: list[pl.Expr] = []
        if self.options.bounds_on == "paired":
            hits = self.hits.select(
                pl.col(schema.QUESTION_ID).cast(pl.UInt64).alias("_q"), _VARIANT
            )
            pairs = (
                pairs.lazy()
                .with_columns(question.alias("_q"))
                .join(hits, on="_q", how="inner")
                .drop("_q")
                .collect(engine=self.engine)
            )
            variant = [pl.col(_VARIANT)]
        per_dim = (
            pairs.lazy()
            .group_by(*variant, jd.alias("_jd"), DELTA)
            .agg(pl.len().alias(COUNT))
            .collect()
        )
        per_dim = per_dim.with_columns(
            codes.judge_of(pl.col("_jd")).alias(schema.JUDGE),
            codes.dimension_of(pl.col("_jd")).alias(schema.DIMENSION),
        ).drop("_jd")
        totals = []
        for system in self.rag_systems:
            w = weights.filter((pl.col(schema.SYSTEM) == system) & (pl.col(WEIGHT) > 0))
            by_code = {
                codes.code(row[schema.JUDGE], row[schema.DIMENSION]): row[WEIGHT]
                for row in w.iter_rows(named=True)
            }
            n_dims = w.group_by(schema.JUDGE).len()
            n_by_judge = {
                codes.judges[j]: n for j, n in n_dims.iter_rows() if j in codes.judges
            }
            rows = pairs.lazy()
            if variant:
                rows = rows.filter(pl.col(_VARIANT) == system)
            total = (
                rows.filter(jd.is_in(list(by_code)))
                .select(
                    (pl.col(PAIR_KEY) % JUDGE_SPAN).alias("_jq"),
                    (
                        jd.replace_strict(by_code, return_dtype=pl.Float64)
                        * pl.col(DELTA)
                    ).alias(DELTA),
                )
                .group_by("_jq")
                .agg(pl.col(DELTA).sum(), pl.len())
                .with_columns((pl.col("_jq") // QUESTION_SPAN).alias("_j"))
                .filter(
                    pl.col("len")
                    == pl.col("_j").replace_strict(
                        n_by_judge, default=-1, return_dtype=pl.Int64
                    )
                )
                .group_by("_j", pl.col(DELTA).round(10))
                .agg(pl.len().alias(COUNT))
                .collect()
            )
            totals.append(
                total.select(
                    pl.lit(system).alias(_VARIANT),
                    codes.judge_of(pl.col("_j")).alias(schema.JUDGE),
                    DELTA,
                    COUNT,
                )
            )
        return per_dim, pl.concat(totals)

    def _separation(
        self, weights: pl.DataFrame, wide: pl.DataFrame
    ) -> dict[tuple[str, str, str], dict[str, Any]]:
        """``(judge, system, figure) -> {gap, p_value, n_pairs, separated}``.

        ``gap`` is the section 7 denominator ``full - zero`` of the trimmed
        means (``wide``); the p-value is the one-sided Wilcoxon signed-rank test
        of the paired differences.
        """
        per_dim, total = self._paired_histograms(weights)
        tests: dict[tuple[str, str, str], tuple[float, int]] = {}

        def test(frame: pl.DataFrame, keys: list[str]) -> dict[Any, tuple[float, int]]:
            out: dict[Any, tuple[float, int]] = {}
            for key, group in frame.partition_by(keys, as_dict=True).items():
                counts = group.get_column(COUNT).to_numpy()
                p = wilcoxon_greater(group.get_column(DELTA).to_numpy(), counts)
                out[key] = (p, int(counts.sum()))
            return out

        if _VARIANT in per_dim.columns:
            for (s, j, d), value in test(
                per_dim, [_VARIANT, schema.JUDGE, schema.DIMENSION]
            ).items():
                tests[(str(j), str(s), str(d))] = value
        else:
            for (j, d), value in test(
                per_dim, [schema.JUDGE, schema.DIMENSION]
            ).items():
                for s in self.rag_systems:
                    tests[(str(j), s, str(d))] = value
        for (s, j), value in test(total, [_VARIANT, schema.JUDGE]).items():
            tests[(str(j), str(s), WEIGHTED)] = value

        opts = self.options
        result: dict[tuple[str, str, str], dict[str, Any]] = {}
        for row in wide.iter_rows(named=True):
            key = (row[schema.JUDGE], row[schema.SYSTEM], row[_FIGURE])
            z, f = row["zero"], row["full"]
            gap = _finite(f - z) if z is not None and f is not None else None
            p, n = tests.get(key, (1.0, 0))
            result[key] = {
                "gap": gap,
                "p_value": p,
                "n_pairs": n,
                "separated": separated(gap, p, min_gap=opts.min_gap, alpha=opts.alpha),
            }
        return result

    def _used_judges(
        self, separation: Mapping[tuple[str, str, str], Mapping[str, Any]]
    ) -> dict[str, list[str]]:
        """Per system the judges whose figures enter ``across_judges``."""
        return {
            s: [
                j
                for j in self.judges
                if not self.options.require_separation
                or separation[(j, s, WEIGHTED)]["separated"]
            ]
            for s in self.rag_systems
        }

    # --- assembly --------------------------------------------------------
    def run(self) -> dict[str, Any]:
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
        totals = (
            trimmed.join(w, on=[schema.JUDGE, schema.SYSTEM, schema.DIMENSION])
            .group_by(jsd)
            .agg(
                pl.when(((pl.col(WEIGHT) > 0) & pl.col(TRIMMED_MEAN).is_null()).any())
                .then(None)
                .otherwise((pl.col(WEIGHT) * pl.col(TRIMMED_MEAN)).sum())
                .alias(TRIMMED_MEAN)
            )
            .with_columns(pl.lit(WEIGHTED).alias(_FIGURE))
        )
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
        return self._assemble(
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
    ) -> dict[str, Any]:
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
                jd["null_reasons"].setdefault(s, {})[fig] = reason
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
        return {
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

    def _separation_flags(
        self, separation: Mapping[tuple[str, str, str], Mapping[str, Any]]
    ) -> None:
        for (j, s, fig), test in separation.items():
            if not test["separated"]:
                self.flags.append(
                    {
                        "flag": NOT_SEPARATED,
                        "judge": j,
                        "system": s,
                        "figure": f"bound_separation.{fig}",
                        "gap": test["gap"],
                        "p_value": test["p_value"],
                    }
                )
        for system, n in self.unavailable.items():
            if n:
                self.flags.append(
                    {
                        "flag": UNAVAILABLE,
                        "system": system,
                        "count": n,
                        "share": n / self.answer_rows[system],
                    }
                )

    def _why_excluded(self, test: Mapping[str, Any]) -> str:
        """Why a judge's bounds are not separated, in words."""
        gap, p = test["gap"], test["p_value"]
        opts = self.options
        if gap is None:
            return (
                f"{NOT_SEPARATED}: its zero or full bound has no scores to compare,"
                " so its scores cannot be placed between the bounds"
            )
        reasons = []
        if gap < opts.min_gap:
            reasons.append(
                f"answers written with the gold document scored only {gap:.2f}"
                f" points above answers written with no document (at least"
                f" {opts.min_gap:g} needed)"
            )
        if p >= opts.alpha:
            reasons.append(
                f"the difference is not consistent across questions (Wilcoxon"
                f" p = {p:.2g}, below {opts.alpha:g} needed, {test['n_pairs']}"
                " questions)"
            )
        return f"{NOT_SEPARATED}: " + "; ".join(reasons)

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
                "reason": None if judges else NO_SEPARATED_JUDGE,
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
