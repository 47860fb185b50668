"""Benchmark: cube_ray's Polars aggregation vs DuckDB SQL and pandas + scipy.

All three compute the figures of CUBE_METHOD.md sections 5-8 and the bound
separation of section 10 (paired full - zero differences, one-sided Wilcoxon
signed-rank test per judge, dimension and weighted total; the headline over
separated judges only).

Builds a synthetic study (QUESTIONS questions x JUDGES judges x {zero, full, rag}
x DIMS dimensions score rows; the default 2 million questions give 96 million
rows), runs ``cube_ray.aggregate.summarize`` and, in the same process, the
baselines: a SQL implementation run by DuckDB on the Arrow tables and a plain
pandas + scipy one. It checks that every figure of each baseline agrees with
cube_ray's to 1e-9 and prints wall and CPU times, their ratios and peak RSS.

Usage::

    .venv/bin/python benchmarks/aggregate.py --questions 2000000
    .venv/bin/python benchmarks/aggregate.py --questions 200000 --fractional
    .venv/bin/python benchmarks/aggregate.py --questions 200000 --baselines duckdb

All implementations get the same columnar data: integer question ids and
categorical (Polars Enum / Arrow dictionary / pandas category) system, judge,
dimension and status columns, float64 scores (integers 0..10 by default, as
judges give; with ``--fractional`` continuous values, the worst case for
histograms).
"""

from __future__ import annotations

import argparse
import gc
import math
import os
import resource
import threading
import time
from collections.abc import Callable
from typing import Any

import duckdb
import numpy as np
import pandas as pd
import polars as pl
import psutil
import pyarrow as pa
from scipy import stats
from scipy.special import ndtr

from cube_ray.aggregate import AggregateOptions, _passes, summarize

SYSTEMS = ["zero", "full", "rag"]
DIMS = ["relevance", "specificity", "completeness", "quality"]
BASELINES = ("duckdb", "pandas")
_SCIPY_EXACT_MAX = 50
"""scipy's wilcoxon tests exactly up to this many differences, asymptotically above."""


class PeakRss:
    """Samples this process's RSS in a thread; ``peak`` since the last reset."""

    def __init__(self, interval: float = 0.02) -> None:
        self._proc = psutil.Process()
        self._interval = interval
        self.peak = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            self.peak = max(self.peak, self._proc.memory_info().rss)
            time.sleep(self._interval)

    def reset(self) -> None:
        self.peak = self._proc.memory_info().rss

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()


def build(
    n_questions: int, *, n_judges: int, seed: int, fractional: bool
) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Synthetic answers (rag rows) and scores tables."""
    rng = np.random.default_rng(seed)
    judges = [f"judge-{i}" for i in range(n_judges)]
    rank = rng.integers(1, 9, n_questions).astype(np.int32)
    rank[rng.random(n_questions) < 0.25] = 0
    answers = pl.DataFrame(
        {
            "question_id": np.arange(n_questions, dtype=np.int32),
            "system": pl.Series(np.full(n_questions, 2, np.uint8)).cat.to(
                pl.Enum(SYSTEMS)
            ),
            "rank": rank,
        }
    )
    ns, nj, nd = len(SYSTEMS), n_judges, len(DIMS)
    per_system = n_questions * nj * nd
    q = np.tile(np.arange(n_questions, dtype=np.int32), ns * nj * nd)
    system = np.repeat(np.arange(ns, dtype=np.uint8), per_system)
    judge = np.tile(np.repeat(np.arange(nj, dtype=np.uint8), n_questions * nd), ns)
    dim = np.tile(np.repeat(np.arange(nd, dtype=np.uint8), n_questions), ns * nj)
    score = np.empty(len(q))
    for s, centre in enumerate((4.0, 8.5, 6.0)):
        part = slice(s * per_system, (s + 1) * per_system)
        noise = rng.normal(0.0, 2.0, per_system)
        if s == 2:  # rag answers get better when the gold doc ranks higher
            hit = np.tile(rank, nj * nd)
            noise += np.where(hit >= 1, 3.0 - 0.3 * hit, -2.0)
        score[part] = np.clip(centre + noise, 0.0, 10.0)
        del noise
    if not fractional:
        np.round(score, out=score)
    missing = rng.random(len(q)) < 0.01
    score[missing] = np.nan
    scores = pl.DataFrame(
        {
            "question_id": q,
            "system": pl.Series(system).cat.to(pl.Enum(SYSTEMS)),
            "judge": pl.Series(judge).cat.to(pl.Enum(judges)),
            "dimension": pl.Series(dim).cat.to(pl.Enum(DIMS)),
            "score": pl.Series(score).fill_nan(None),
            "status": pl.Series(missing.astype(np.uint8)).cat.to(
                pl.Enum(["ok", "parse_error"])
            ),
        }
    )
    return answers, scores


def pandas_summary(
    answers: pd.DataFrame, scores: pd.DataFrame, *, k: int, trim: float
) -> dict[str, Any]:
    """The same figures, written plainly with pandas and scipy."""
    key = ["judge", "system", "dimension"]
    rag_systems = sorted(
        str(s) for s in answers["system"].unique() if str(s).startswith("rag")
    )
    cols = ["question_id", "system", "rank"]
    ans = answers[answers["system"].isin(rag_systems)][cols]
    ans = ans.assign(rank_score=np.where(ans["rank"] >= 1, k + 2 - ans["rank"], 0))
    recall = ans.groupby("system", observed=True)["rank"].apply(
        lambda r: float((r >= 1).mean())
    )
    rag = scores[scores["system"].isin(rag_systems)].merge(
        ans, on=["question_id", "system"]
    )
    rag = rag.dropna(subset=["score"])

    def corr(g: pd.DataFrame) -> float:
        x, y = g["rank_score"].to_numpy(), g["score"].to_numpy()
        if len(x) < 2 or x.min() == x.max() or y.min() == y.max():
            return 0.0
        return float(stats.pearsonr(x, y).statistic)

    r = rag.groupby(key, observed=True)[["rank_score", "score"]].apply(corr)
    tm_rag = (
        rag[rag["rank"] >= 1]
        .groupby(key, observed=True)["score"]
        .apply(lambda s: float(stats.trim_mean(s.to_numpy(), trim)))
    )
    bounds = scores[scores["system"].isin(["zero", "full"])].dropna(subset=["score"])
    tm_bounds = bounds.groupby(key, observed=True)["score"].apply(
        lambda s: float(stats.trim_mean(s.to_numpy(), trim))
    )
    judges = sorted(str(j) for j in scores["judge"].unique())
    dims = sorted(str(d) for d in scores["dimension"].unique())
    # Bound separation (section 10): paired full - zero per judge, dimension and
    # question; one-sided Wilcoxon signed-rank test per group.
    index = ["judge", "dimension", "question_id"]
    zero = bounds[bounds["system"] == "zero"].set_index(index)["score"]
    full = bounds[bounds["system"] == "full"].set_index(index)["score"]
    delta = (full - zero).dropna().unstack("dimension")

    def wilcoxon(d: np.ndarray[Any, Any]) -> float:
        if np.count_nonzero(d) < 6:
            return 1.0
        return float(stats.wilcoxon(d, alternative="greater").pvalue)

    out: dict[str, Any] = {"judges": {}, "across_judges": {}}
    per_fig: dict[tuple[str, str], list[float]] = {}
    for j in judges:
        jd: dict[str, Any] = {
            "weights": {},
            "trimmed_means": {},
            "normalized": {},
            "recall_at_k": {},
            "cube": {},
            "bound_separation": {},
        }
        for s in rag_systems:
            pos = {d: max(r.get((j, s, d), 0.0), 0.0) for d in dims}
            total = sum(pos.values())
            w = {d: (pos[d] / total if total > 0 else 1 / len(dims)) for d in dims}
            sets = {
                "zero": {d: tm_bounds[(j, "zero", d)] for d in dims},
                "full": {d: tm_bounds[(j, "full", d)] for d in dims},
                s: {d: tm_rag[(j, s, d)] for d in dims},
            }
            for v in sets.values():
                v["weighted"] = sum(w[d] * v[d] for d in dims)
            norm = {}
            for fig in [*dims, "weighted"]:
                z, f, x = sets["zero"][fig], sets["full"][fig], sets[s][fig]
                norm[fig] = 100 * (x - z) / (f - z) if f - z > 1e-9 else None
            jdelta = delta.loc[j]
            tests = {}
            for d in dims:
                col = jdelta[d].dropna().to_numpy()
                tests[d] = (wilcoxon(col), len(col))
            used = [d for d in dims if w[d] > 0]
            total_delta = (jdelta[used].dropna() * pd.Series(w)[used]).sum(axis=1)
            tests["weighted"] = (
                wilcoxon(total_delta.round(10).to_numpy()),
                len(total_delta),
            )
            jd["bound_separation"][s] = {
                fig: {
                    "gap": sets["full"][fig] - sets["zero"][fig],
                    "p_value": p,
                    "n_pairs": n,
                }
                for fig, (p, n) in tests.items()
            }
            jd["weights"][s] = w
            jd["trimmed_means"][s] = sets
            jd["normalized"][s] = norm
            jd["recall_at_k"][s] = recall[s]
            weighted = norm["weighted"]
            jd["cube"][s] = None if weighted is None else weighted * recall[s]
            test = jd["bound_separation"][s]["weighted"]
            if not (test["gap"] >= 0.5 and test["p_value"] < 0.05):
                continue  # left out of the headline (section 10)
            for fig, value in [*norm.items(), ("cube", jd["cube"][s])]:
                if value is not None:
                    per_fig.setdefault((s, fig), []).append(value)
        out["judges"][j] = jd
    for (s, fig), values in per_fig.items():
        arr = np.asarray(values)
        out["across_judges"].setdefault(s, {})[fig] = {
            "mean": float(arr.mean()),
            "sd": float(arr.std(ddof=1)) if len(arr) > 1 else None,
        }
    return out


def _sql_trimmed(hist: str, keys: str, *, trim: float) -> str:
    """SQL: trimmed mean per ``keys`` group of a histogram ``hist(keys, v, c)``.

    ``int(trim * n)`` values are cut from each end of the sorted values (scipy's
    ``trim_mean``); a running count over the distinct values (a window ordered
    by value) says how many copies of each value lie in the kept positions.
    """
    return f"""
        WITH h AS (
            SELECT {keys}, v, c,
                   sum(c) OVER g AS n,
                   sum(c) OVER (g ORDER BY v ROWS UNBOUNDED PRECEDING) AS e
            FROM {hist}
            WINDOW g AS (PARTITION BY {keys})
        ), t AS (
            SELECT *, floor(n::DOUBLE * {trim!r}::DOUBLE)::BIGINT AS cut FROM h
        )
        SELECT {keys},
               sum(v * greatest(least(e, n - cut) - greatest(e - c, cut), 0))
                   / (any_value(n) - 2 * any_value(cut)) AS value
        FROM t GROUP BY {keys}
    """


def _sql_wilcoxon(hist: str, keys: str) -> str:
    """SQL: the inputs of the signed-rank test per ``keys`` group of ``hist``.

    ``hist(keys, delta, c)`` is a histogram of paired differences. Per group:
    ``n_pairs`` (zeros included), ``n`` (non-zero differences), ``r_plus`` (sum
    of the average ranks of ``|delta|`` over positive differences), ``var``
    (the tie-corrected variance times 24, scipy's asymptotic branch) and, for
    samples scipy tests exactly (at most 50), the differences themselves.
    """
    return f"""
        WITH a AS (
            SELECT {keys}, abs(delta) AS v,
                   sum(c)::DOUBLE AS t,
                   (sum(c) FILTER (WHERE delta > 0))::DOUBLE AS pos
            FROM {hist} WHERE delta <> 0 GROUP BY {keys}, abs(delta)
        ), ranked AS (
            SELECT *, sum(t) OVER (PARTITION BY {keys} ORDER BY v
                                   ROWS UNBOUNDED PRECEDING) - t AS below
            FROM a
        ), tests AS (
            SELECT {keys}, sum(t) AS n,
                   sum(coalesce(pos, 0) * (below + (t + 1) / 2)) AS r_plus,
                   sum(t * t * t - t) AS ties
            FROM ranked GROUP BY {keys}
        ), totals AS (
            SELECT {keys}, sum(c)::BIGINT AS n_pairs,
                   CASE WHEN sum(c) <= {_SCIPY_EXACT_MAX}
                        THEN list(delta ORDER BY delta) END AS deltas,
                   CASE WHEN sum(c) <= {_SCIPY_EXACT_MAX}
                        THEN list(c ORDER BY delta) END AS counts
            FROM {hist} GROUP BY {keys}
        )
        SELECT {keys}, n_pairs, coalesce(n, 0) AS n, r_plus,
               n * (n + 1) * (2 * n + 1) - ties / 2 AS var, deltas, counts
        FROM totals LEFT JOIN tests USING ({keys})
    """


def _p_value(row: dict[str, Any]) -> float:
    """scipy's one-sided Wilcoxon p-value from the SQL aggregates of one test."""
    if row["n"] < 6:
        return 1.0
    if row["deltas"] is not None:  # scipy's exact / permutation branch
        d = np.repeat(np.asarray(row["deltas"]), np.asarray(row["counts"]))
        return float(np.clip(stats.wilcoxon(d, alternative="greater").pvalue, 0, 1))
    n, var = float(row["n"]), float(row["var"])
    if var <= 0:
        return 1.0
    z = (row["r_plus"] - n * (n + 1) * 0.25) / math.sqrt(var / 24.0)
    return float(ndtr(-z))


def duckdb_summary(
    answers: pa.Table, scores: pa.Table, *, k: int, trim: float
) -> dict[str, Any]:
    """The same figures as SQL run by DuckDB on the Arrow tables (zero copy).

    Every figure is computed in SQL: rank scores and recall@k; histograms of
    the scores per group (one row per distinct value with its count), from
    which window functions give exact trimmed means and weighted sums give
    Pearson r; weights, weighted totals, normalised figures and CuBE; the
    paired ``full - zero`` differences (a join on judge, dimension and
    question), their per-question weighted totals, gaps, pair counts and the
    rank sums of the signed-rank test. Only the last step of each p-value
    (the normal tail ``ndtr``, or scipy's exact test on at most 50 pairs) runs
    in Python, from those SQL aggregates; the separated judges' mean and SD
    across judges are SQL again.
    """
    con = duckdb.connect()
    con.execute(f"SET threads = {os.cpu_count() or 1}")
    con.register("answers", answers)
    con.register("scores", scores)
    sql = con.execute
    sql(f"""
        CREATE TEMP TABLE ans AS
        SELECT question_id, system, rank >= 1 AS hit,
               CASE WHEN rank >= 1 THEN {k} + 2 - rank ELSE 0 END AS rank_score
        FROM answers WHERE starts_with(system, 'rag')
    """)
    sql("""
        CREATE TEMP TABLE recall AS
        SELECT system, avg(hit::DOUBLE) AS recall FROM ans GROUP BY system
    """)
    # One row per group, retrieval outcome, rank score and distinct score.
    sql("""
        CREATE TEMP TABLE rag_hist AS
        SELECT s.judge, s.system, s.dimension, a.hit, a.rank_score::DOUBLE AS x,
               s.score AS v, count(*) AS c
        FROM scores s JOIN ans a USING (question_id, system)
        WHERE s.score IS NOT NULL
        GROUP BY ALL
    """)
    sql("""
        CREATE TEMP TABLE bound_hist AS
        SELECT judge, system, dimension, score AS v, count(*) AS c
        FROM scores WHERE system IN ('zero', 'full') AND score IS NOT NULL
        GROUP BY ALL
    """)
    keys = "judge, system, dimension"
    hit = f"(SELECT {keys}, v, sum(c) AS c FROM rag_hist WHERE hit GROUP BY ALL)"
    bounds_tm = _sql_trimmed("bound_hist", keys, trim=trim)
    rag_tm = _sql_trimmed(hit, keys, trim=trim)
    sql(f"""
        CREATE TEMP TABLE tm AS
        SELECT * FROM ({bounds_tm}) UNION ALL SELECT * FROM ({rag_tm})
    """)
    # Pearson r of rank score and score from the histogram (centred sums); an
    # undefined r (fewer than two pairs, a constant column) counts as 0.
    sql(f"""
        CREATE TEMP TABLE weights AS
        WITH m AS (
            SELECT {keys}, sum(c) AS n, sum(c * x) / sum(c) AS mx,
                   sum(c * v) / sum(c) AS my, min(x) < max(x) AND min(v) < max(v) AS var
            FROM rag_hist GROUP BY ALL
        ), s AS (
            SELECT {keys}, any_value(n) AS n, any_value(var) AS var,
                   sum(c * (x - mx) * (v - my)) AS sxy,
                   sum(c * (x - mx) * (x - mx)) AS sxx,
                   sum(c * (v - my) * (v - my)) AS syy
            FROM rag_hist JOIN m USING ({keys}) GROUP BY ALL
        ), r AS (
            SELECT {keys},
                   CASE WHEN n >= 2 AND var AND sxx > 0 AND syy > 0
                        THEN greatest(least(sxy / (sqrt(sxx) * sqrt(syy)), 1), -1)
                        ELSE 0 END AS r
            FROM s
        ), p AS (
            SELECT *, sum(greatest(r, 0)) OVER j AS total, count(*) OVER j AS nd
            FROM r WINDOW j AS (PARTITION BY judge, system)
        )
        SELECT {keys}, CASE WHEN total > 0 THEN greatest(r, 0) / total
                            ELSE 1 / nd END AS weight
        FROM p
    """)
    # Per judge, variant, set (zero, full, the variant) and figure.
    sql("""
        CREATE TEMP TABLE sets AS
        WITH d AS (
            SELECT w.judge, w.system AS variant, t.system AS answer_set,
                   w.dimension AS fig, t.value, w.weight
            FROM weights w JOIN tm t ON t.judge = w.judge
                 AND t.dimension = w.dimension
                 AND t.system IN ('zero', 'full', w.system)
        )
        SELECT judge, variant, answer_set, fig, value FROM d
        UNION ALL
        SELECT judge, variant, answer_set, 'weighted', sum(weight * value)
        FROM d GROUP BY ALL
    """)
    sql("""
        CREATE TEMP TABLE norm AS
        WITH b AS (
            SELECT judge, variant, fig,
                   any_value(value) FILTER (WHERE answer_set = 'zero') AS z,
                   any_value(value) FILTER (WHERE answer_set = 'full') AS f,
                   any_value(value) FILTER (WHERE answer_set = variant) AS x
            FROM sets GROUP BY ALL
        )
        SELECT judge, variant, fig, f - z AS gap,
               CASE WHEN f - z > 1e-9 THEN 100 * (x - z) / (f - z) END AS value
        FROM b
    """)
    sql("""
        CREATE TEMP TABLE cube AS
        SELECT n.judge, n.variant, n.value * r.recall AS value
        FROM norm n JOIN recall r ON r.system = n.variant WHERE n.fig = 'weighted'
    """)
    # Bound separation: paired differences per judge, dimension and question.
    sql("""
        CREATE TEMP TABLE pairs AS
        SELECT z.judge, z.dimension, z.question_id, f.score - z.score AS delta
        FROM scores z JOIN scores f
             ON f.judge = z.judge AND f.dimension = z.dimension
             AND f.question_id = z.question_id
        WHERE z.system = 'zero' AND f.system = 'full'
              AND z.score IS NOT NULL AND f.score IS NOT NULL
    """)
    # Weighted totals per question scored on every positive-weight dimension;
    # sums in any order, rounded to 10 decimals as the other implementations.
    sql("""
        CREATE TEMP TABLE delta_hist AS
        SELECT judge, variant, dimension AS fig, delta, count(*) AS c
        FROM pairs CROSS JOIN (SELECT system AS variant FROM recall) GROUP BY ALL
        UNION ALL
        SELECT judge, variant, 'weighted', delta, count(*) FROM (
            SELECT p.judge, w.system AS variant,
                   round(sum(w.weight * p.delta), 10) AS delta,
                   count(*) AS used, any_value(u.used) AS needed
            FROM pairs p
            JOIN weights w ON w.judge = p.judge AND w.dimension = p.dimension
            JOIN (SELECT judge, system, count(*) AS used FROM weights
                  WHERE weight > 0 GROUP BY ALL) u
                 ON u.judge = w.judge AND u.system = w.system
            WHERE w.weight > 0
            GROUP BY p.judge, w.system, p.question_id
        ) WHERE used = needed GROUP BY ALL
    """)
    tests = con.sql(_sql_wilcoxon("delta_hist", "judge, variant, fig")).to_arrow_table()
    pvalues = pa.table(
        {
            "judge": tests["judge"],
            "variant": tests["variant"],
            "fig": tests["fig"],
            "n_pairs": tests["n_pairs"],
            "p": [_p_value(row) for row in tests.to_pylist()],
        }
    )
    con.register("pvalues", pvalues)
    across = sql("""
        WITH sep AS (
            SELECT n.judge, n.variant
            FROM norm n JOIN pvalues p USING (judge, variant, fig)
            WHERE n.fig = 'weighted' AND n.gap >= 0.5 AND p.p < 0.05
        ), figs AS (
            SELECT judge, variant, fig, value FROM norm
            UNION ALL SELECT judge, variant, 'cube', value FROM cube
        )
        SELECT variant, fig, avg(value) AS mean, stddev_samp(value) AS sd
        FROM figs SEMI JOIN sep USING (judge, variant)
        WHERE value IS NOT NULL GROUP BY ALL
    """).fetchall()
    # Reshape the result tables into the nested summary.
    judges: dict[str, dict[str, Any]] = {}
    out: dict[str, Any] = {"judges": judges, "across_judges": {}}

    def judge(j: str) -> dict[str, Any]:
        return judges.setdefault(j, {})

    def put(j: str, section: str, s: str) -> dict[str, Any]:
        by_system: dict[str, dict[str, Any]] = judge(j).setdefault(section, {})
        return by_system.setdefault(s, {})

    for j, s, d, w in sql(
        "SELECT judge, system, dimension, weight FROM weights"
    ).fetchall():
        put(j, "weights", s)[d] = w
    for j, s, st, fig, v in sql("SELECT * FROM sets").fetchall():
        put(j, "trimmed_means", s).setdefault(st, {})[fig] = v
    for j, s, fig, gap, v in sql("SELECT * FROM norm").fetchall():
        put(j, "normalized", s)[fig] = v
        put(j, "bound_separation", s)[fig] = {"gap": gap}
    recall = dict(sql("SELECT * FROM recall").fetchall())
    for j, s, v in sql("SELECT * FROM cube").fetchall():
        judge(j).setdefault("cube", {})[s] = v
        judge(j).setdefault("recall_at_k", {})[s] = recall[s]
    for row in pvalues.to_pylist():
        test = put(row["judge"], "bound_separation", row["variant"])[row["fig"]]
        test.update(p_value=row["p"], n_pairs=row["n_pairs"])
    for s, fig, mean, sd in across:
        out["across_judges"].setdefault(s, {})[fig] = {"mean": mean, "sd": sd}
    con.close()
    return out


def compare(expected: Any, got: Any, path: str = "") -> tuple[int, float]:
    """Leaves of ``expected`` checked in ``got``: (number compared, max abs diff)."""
    if isinstance(expected, dict):
        n, worst = 0, 0.0
        for key, value in expected.items():
            if key not in got:
                raise AssertionError(f"{path}.{key} missing from cube_ray's summary")
            dn, dw = compare(value, got[key], f"{path}.{key}")
            n, worst = n + dn, max(worst, dw)
        return n, worst
    if expected is None or got is None:
        if expected is not got:
            raise AssertionError(f"{path}: {expected} vs {got}")
        return 1, 0.0
    diff = abs(float(expected) - float(got))
    if not diff <= 1e-9:
        raise AssertionError(f"{path}: {expected} vs {got} (diff {diff})")
    return 1, diff


def _baselines(text: str) -> list[str]:
    """``--baselines`` value: a comma-separated subset of :data:`BASELINES`."""
    names = [b for b in text.split(",") if b]
    unknown = sorted(set(names) - set(BASELINES))
    if unknown:
        raise argparse.ArgumentTypeError(
            f"unknown baseline(s) {unknown}; choose from {list(BASELINES)}"
        )
    return names


def _timed(
    rss: PeakRss, run: Callable[[], dict[str, Any]]
) -> tuple[float, float, dict[str, Any], str]:
    """Wall and CPU seconds of ``run()``, its figures, and its peak RSS in words."""
    rss.reset()
    base = rss.peak
    t0, c0 = time.perf_counter(), time.process_time()
    figures = run()
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    memory = f"peak RSS {rss.peak / 2**30:.2f} GiB (+{(rss.peak - base) / 2**30:.2f})"
    return wall, cpu, figures, memory


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--questions", type=int, default=2_000_000)
    parser.add_argument("--judges", type=int, default=4)
    parser.add_argument("--trim", type=float, default=0.1)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--fractional", action="store_true")
    parser.add_argument("--repeat", type=int, default=1, help="cube_ray runs (best)")
    parser.add_argument(
        "--baselines",
        type=_baselines,
        default=list(BASELINES),
        help="comma-separated baselines to run beside cube_ray "
        f"(default: {','.join(BASELINES)})",
    )
    parser.add_argument(
        "--path",
        choices=("auto", "histogram", "rows"),
        default="auto",
        help="force cube_ray's computation path (default: chosen from the data)",
    )
    args = parser.parse_args()
    if args.path != "auto":
        limit = 2**62 if args.path == "histogram" else -1
        _passes._HISTOGRAM_MAX_DISTINCT = limit

    rss = PeakRss()
    t0 = time.perf_counter()
    answers, scores = build(
        args.questions, n_judges=args.judges, seed=args.seed, fractional=args.fractional
    )
    t_build = time.perf_counter() - t0
    print(
        f"questions={args.questions:,} score_rows={scores.height:,} "
        f"data={scores.estimated_size() / 2**30:.2f} GiB build={t_build:.1f}s "
        f"threads={pl.thread_pool_size()} cpus={os.cpu_count()} path={args.path}"
    )

    options = AggregateOptions(k=8, trim=args.trim)
    times = []
    rss.reset()
    base = rss.peak
    cpu_times = []
    for _ in range(args.repeat):
        t0, c0 = time.perf_counter(), time.process_time()
        typed = summarize(answers, scores, options=options)
        times.append(time.perf_counter() - t0)
        cpu_times.append(time.process_time() - c0)
    t_ours, c_ours = min(times), min(cpu_times)
    ours = typed.model_dump(mode="json")  # the JSON of summary.json
    peak_ours = rss.peak
    print(
        f"cube_ray summarize: {t_ours:.2f}s (runs {[round(t, 2) for t in times]}), "
        f"CPU {c_ours:.2f}s, "
        f"peak RSS {peak_ours / 2**30:.2f} GiB (+{(peak_ours - base) / 2**30:.2f})"
    )

    # name -> (wall, CPU, figures); each baseline runs on the same columnar data.
    results: dict[str, tuple[float, float, dict[str, Any]]] = {}
    if "duckdb" in args.baselines:
        t0 = time.perf_counter()
        answers_pa, scores_pa = answers.to_arrow(), scores.to_arrow()
        t_convert = time.perf_counter() - t0
        wall, cpu, figures, memory = _timed(
            rss, lambda: duckdb_summary(answers_pa, scores_pa, k=8, trim=args.trim)
        )
        results["duckdb"] = (wall, cpu, figures)
        del answers_pa, scores_pa
        print(
            f"duckdb {duckdb.__version__} SQL:  {wall:.2f}s, CPU {cpu:.2f}s (to_arrow "
            f"{t_convert:.2f}s not counted), {memory}"
        )
    if "pandas" in args.baselines:
        t0 = time.perf_counter()
        answers_pd, scores_pd = answers.to_pandas(), scores.to_pandas()
        t_convert = time.perf_counter() - t0
        del answers, scores
        gc.collect()
        wall, cpu, figures, memory = _timed(
            rss, lambda: pandas_summary(answers_pd, scores_pd, k=8, trim=args.trim)
        )
        results["pandas"] = (wall, cpu, figures)
        del answers_pd, scores_pd
        print(
            f"pandas+scipy:       {wall:.2f}s, CPU {cpu:.2f}s (to_pandas "
            f"{t_convert:.1f}s not counted), {memory}"
        )
    rss.stop()

    ru_peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    print(f"process peak RSS {ru_peak / 2**30:.2f} GiB")
    print("| baseline | wall | CPU | cube_ray speed-up wall | CPU | figures agree |")
    print("|---|---|---|---|---|---|")
    print(f"| cube_ray | {t_ours:.2f} s | {c_ours:.2f} s | 1.0x | 1.0x | - |")
    for name, (wall, cpu, figures) in results.items():
        n, worst = compare(figures, ours)
        print(
            f"| {name} | {wall:.2f} s | {cpu:.2f} s | {wall / t_ours:.2f}x "
            f"| {cpu / c_ours:.2f}x | {n}, max diff {worst:.1e} (tol 1e-9) |"
        )
    cube = ours["across_judges"]["rag"]["cube"]
    print(f"CuBE(rag) = {cube['mean']:.3f} +- {cube['sd']:.3f}")
    assert math.isfinite(t_ours)


if __name__ == "__main__":
    main()
