"""Benchmark: cube_ray's Polars aggregation vs a straightforward pandas + scipy one.

Both compute the figures of CUBE_METHOD.md sections 5-8 and the bound separation
of section 10 (paired full - zero differences, one-sided Wilcoxon signed-rank
test per judge, dimension and weighted total; the headline over separated
judges only).

Builds a synthetic study (QUESTIONS questions x JUDGES judges x {zero, full, rag}
x DIMS dimensions score rows; the default 2 million questions give 96 million
rows), runs ``cube_ray.aggregate.summarize`` and a plain pandas + scipy
implementation of the same figures in the same process, checks that every figure
agrees to 1e-9, and prints wall times, their ratio and peak RSS.

Usage::

    .venv/bin/python benchmarks/aggregate.py --questions 2000000
    .venv/bin/python benchmarks/aggregate.py --questions 200000 --fractional

Both implementations get the same columnar data: integer question ids and
categorical (Polars Enum / pandas category) system, judge, dimension and status
columns, float64 scores (integers 0..10 by default, as judges give; with
``--fractional`` continuous values, the worst case for cube_ray's histograms).
"""

from __future__ import annotations

import argparse
import gc
import math
import os
import resource
import threading
import time
from typing import Any

import numpy as np
import pandas as pd
import polars as pl
import psutil
from scipy import stats

from cube_ray.aggregate import AggregateOptions, _summary, summarize

SYSTEMS = ["zero", "full", "rag"]
DIMS = ["relevance", "specificity", "completeness", "quality"]


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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--questions", type=int, default=2_000_000)
    parser.add_argument("--judges", type=int, default=4)
    parser.add_argument("--trim", type=float, default=0.1)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--fractional", action="store_true")
    parser.add_argument("--repeat", type=int, default=1, help="cube_ray runs (best)")
    parser.add_argument(
        "--path",
        choices=("auto", "histogram", "rows"),
        default="auto",
        help="force cube_ray's computation path (default: chosen from the data)",
    )
    args = parser.parse_args()
    if args.path != "auto":
        limit = 2**62 if args.path == "histogram" else -1
        _summary._HISTOGRAM_MAX_DISTINCT = limit  # type: ignore[attr-defined]

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
        ours = summarize(answers, scores, options=options)
        times.append(time.perf_counter() - t0)
        cpu_times.append(time.process_time() - c0)
    t_ours, c_ours = min(times), min(cpu_times)
    peak_ours = rss.peak
    print(
        f"cube_ray summarize: {t_ours:.2f}s (runs {[round(t, 2) for t in times]}), "
        f"CPU {c_ours:.2f}s, "
        f"peak RSS {peak_ours / 2**30:.2f} GiB (+{(peak_ours - base) / 2**30:.2f})"
    )

    t0 = time.perf_counter()
    answers_pd, scores_pd = answers.to_pandas(), scores.to_pandas()
    t_convert = time.perf_counter() - t0
    del answers, scores
    gc.collect()
    rss.reset()
    base = rss.peak
    t0, c0 = time.perf_counter(), time.process_time()
    theirs = pandas_summary(answers_pd, scores_pd, k=8, trim=args.trim)
    t_pandas, c_pandas = time.perf_counter() - t0, time.process_time() - c0
    peak_pandas = rss.peak
    print(
        f"pandas+scipy:       {t_pandas:.2f}s, CPU {c_pandas:.2f}s (to_pandas "
        f"{t_convert:.1f}s not "
        f"counted), peak RSS {peak_pandas / 2**30:.2f} GiB "
        f"(+{(peak_pandas - base) / 2**30:.2f})"
    )
    rss.stop()

    n, worst = compare(theirs, ours)
    ru_peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    print(f"agree: {n} figures, max |diff| {worst:.2e} (tolerance 1e-9)")
    print(
        f"speed-up {t_pandas / t_ours:.1f}x wall, {c_pandas / c_ours:.1f}x CPU time;"
        f" process peak RSS {ru_peak / 2**30:.2f} GiB"
    )
    cube = ours["across_judges"]["rag"]["cube"]
    print(f"CuBE(rag) = {cube['mean']:.3f} +- {cube['sd']:.3f}")
    assert math.isfinite(t_ours)


if __name__ == "__main__":
    main()
