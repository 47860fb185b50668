"""Parts of one aggregation: weights, trimmed means, which judges separate.

The later bases of ``_summary._Aggregation`` (see ``_parts``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import polars as pl

from cube_ray import schema
from cube_ray.aggregate._math import (
    COUNT,
    FALLBACK,
    TRIMMED_MEAN,
    WEIGHT,
    N,
    pearson_weights,
)
from cube_ray.aggregate._model import BOUNDS_NOT_SEPARATED
from cube_ray.aggregate._options import WeightsError
from cube_ray.aggregate._parts import (
    _FIGURE,
    _SET,
    _VARIANT,
    UNAVAILABLE,
    WEIGHTED,
    _aligned_totals,
    _finite,
    _Passes,
)
from cube_ray.aggregate._separation import (
    CODE_SPAN,
    DELTA,
    JUDGE_SPAN,
    NOT_SEPARATED,
    PAIR_KEY,
    QUESTION_SPAN,
    PairCodes,
    packed_key,
    paired_differences,
    separated,
    wilcoxon_greater,
)


class _Weighting(_Passes):
    """Weights per (judge, dimension) and trimmed means."""

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
        # Blocks of one (judge, dimension) each, in table order: when a judge's
        # blocks list the same questions in the same order (a study written
        # set by set and dimension by dimension), its weighted differences are
        # a weighted sum of aligned columns, with no grouping by question.
        blocks = (
            {}
            if variant
            else {
                int(k[0]): frame
                for k, frame in pairs.with_columns(jd.alias("_jd"))
                .partition_by("_jd", as_dict=True, include_key=False)
                .items()
            }
        )
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
            for judge, total_delta in _aligned_totals(blocks, by_code).items():
                totals.append(
                    total_delta.round(10)
                    .value_counts(name=COUNT)
                    .select(
                        pl.lit(system).alias(_VARIANT),
                        codes.judge_of(pl.lit(judge)).alias(schema.JUDGE),
                        pl.col(total_delta.name).alias(DELTA),
                        pl.col(COUNT).cast(pl.UInt32),
                    )
                )
                by_code = {c: v for c, v in by_code.items() if c % CODE_SPAN != judge}
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
                    pl.col(COUNT).cast(pl.UInt32),
                )
            )
        return per_dim, pl.concat(totals)


class _JudgeSeparation(_Weighting):
    """Which judges separate the bounds (CUBE_METHOD.md section 10)."""

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

    def _why_excluded(self, test: Mapping[str, Any]) -> dict[str, Any]:
        """Why a judge's bounds are not separated: a reason (code, words, numbers)."""
        gap, p = test["gap"], test["p_value"]
        opts = self.options
        numbers = {
            "code": BOUNDS_NOT_SEPARATED,
            "gap": gap,
            "p_value": p,
            "n_pairs": test["n_pairs"],
            "min_gap": opts.min_gap,
            "alpha": opts.alpha,
        }
        if gap is None:
            return {
                **numbers,
                "text": f"{NOT_SEPARATED}: its zero or full bound has no scores to"
                " compare, so its scores cannot be placed between the bounds",
            }
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
        return {**numbers, "text": f"{NOT_SEPARATED}: " + "; ".join(reasons)}
