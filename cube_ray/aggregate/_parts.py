"""Parts of one aggregation: shared names, the answers, the pass frames.

``_summary._Aggregation`` is built from parts, each a base of the next
(``_AnswerFrames`` -> ``_Passes`` -> ``_Weighting`` -> ``_JudgeSeparation``),
so that no class holds the whole aggregation.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import polars as pl

from cube_ray import schema
from cube_ray.aggregate._math import (
    COUNT,
    RANK_SCORE,
    TRIMMED_MEAN,
    N,
    R,
    pearson,
    pearson_exprs,
    rank_scores,
    trimmed_mean_exprs,
    trimmed_means,
)
from cube_ray.aggregate._options import AggregateOptions
from cube_ray.aggregate._separation import (
    CODE_SPAN,
    DELTA,
    PAIR_KEY,
    QUESTION_SPAN,
    pair_codes,
)
from cube_ray.errors import ConfigError, InputError

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


def _aligned_totals(
    blocks: Mapping[int, pl.DataFrame], weights: Mapping[int, float]
) -> dict[int, pl.Series]:
    """Weighted paired differences of the judges whose blocks are aligned.

    Args:
        blocks: ``pair_key // QUESTION_SPAN`` code -> that (judge, dimension)'s
            ``pair_key`` and ``delta`` columns, in table order.
        weights: Codes of the positive-weight (judge, dimension) pairs -> weight.

    Returns:
        Judge code -> ``sum_d w_d * delta_d`` per question, for each judge whose
        positive-weight blocks all list the same questions in the same order
        (the others are left to the grouping path).
    """
    by_judge: dict[int, list[int]] = {}
    for code in weights:
        by_judge.setdefault(code % CODE_SPAN, []).append(code)
    out: dict[int, pl.Series] = {}
    for judge, codes in by_judge.items():
        if any(c not in blocks for c in codes):
            continue
        first = blocks[codes[0]].get_column(PAIR_KEY) % QUESTION_SPAN
        if not all(
            blocks[c].height == first.len()
            and (blocks[c].get_column(PAIR_KEY) % QUESTION_SPAN).equals(first)
            for c in codes[1:]
        ):
            continue
        ordered = sorted(codes)
        total = weights[ordered[0]] * blocks[ordered[0]].get_column(DELTA)
        for c in ordered[1:]:
            total = total + weights[c] * blocks[c].get_column(DELTA)
        out[judge] = total.alias(DELTA)
    return out


def _strings(series: pl.Series) -> list[str]:
    return [str(v) for v in series.cast(pl.String).to_list()]


def _finite(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


_FLAG_ORDER = ("judge", "system", "figure", "flag")
"""Sort key of the summary's flags list."""


class _State:
    """What every part of one aggregation reads: set in ``_Aggregation.__init__``."""

    a_src: str
    s_src: str
    answers: pl.DataFrame
    scores: pl.DataFrame
    options: AggregateOptions
    notes: list[str]
    flags: list[dict[str, Any]]
    engine: Any
    failed_sets: Mapping[str, tuple[str, str]]
    """Answer sets none of whose answers is usable (``_availability``)."""


class _AnswerFrames(_State):
    """The answers: RAG systems, availability, k, the histogram path."""

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


class _Passes(_AnswerFrames):
    """The ranked pass frames and the checks of the scores table."""

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
            # A bound whose answers all failed is an incomplete run, reported
            # as such; only a bound never produced is an input error.
            if bound not in systems and bound not in self.failed_sets:
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
        # Every answer failed: no score row is usable, but the judges and
        # dimensions are still those the table names (each gets its reason).
        named = self.scores if stats.height == 0 else stats
        self.judges = _strings(
            named.get_column(schema.JUDGE).unique(maintain_order=True)
        )
        self.dimensions = _strings(
            named.get_column(schema.DIMENSION).unique(maintain_order=True)
        )
