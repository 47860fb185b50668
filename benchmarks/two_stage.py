"""The planned two-stage design in simulation (CUBE_METHOD.md section 11).

A pilot of n0 questions measures the bootstrap half-width h0 of the
across-judge CuBE; ``cube-ray plan``'s formula (:func:`cube_ray.sizing.required_n`)
gives n = ceil(n0 * (h0 / H)^2); the final study is the pilot plus n - n0 new
questions (nested; the pilot alone when n <= n0), and its interval is measured
again. Over simulated studies with a known true CuBE (the model of
``benchmarks/validity.py``: four judges differing in leniency, scale and
noise; true CuBE 45), this reports

- coverage of the final 95 % interval (target 93-97 %);
- the share of studies whose final half-width is within +-20 % of H (target
  >= 80 %), and the mean final n.

``--fixed-n N ...`` adds single-stage studies of N questions (no plan): the
interval's own coverage and half-width at N. ``--strata`` compares (at each
``--strata-n``, default 300) a
stratified sample (proportional allocation by
:func:`cube_ray.sample.allocation_sequence`, the bootstrap resampling within
strata) with a simple random sample (strata counts multinomial, the plain
bootstrap) of the same n, on a population of four strata that differ in
difficulty (retrieval recall and the answers' share of the way from the
zero-context to the full-context bound); its true CuBE is that of a
proportional sample of 200,000 questions.

Intervals are the report's (``--interval``, default the report's default,
BCa; its jackknife costs n evaluations per interval) over ``--resamples``
resamples.

    PYTHONPATH=. .venv/bin/python benchmarks/two_stage.py --studies 60 --resamples 200
    PYTHONPATH=. .venv/bin/python benchmarks/two_stage.py --pilots --strata \
        --studies 100
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Sequence

import numpy as np
import polars as pl

from benchmarks.validity import TRUE_CUBE, simulate_tables
from cube_ray import schema
from cube_ray.aggregate import DEFAULT_INTERVAL, bootstrap_cube
from cube_ray.sample import allocation_sequence
from cube_ray.sizing import required_n

STRATA = {
    # name: (population share, recall, share of the way zero -> full bound)
    "easy": (0.4, 0.95, 0.8),
    "usual": (0.3, 0.8, 0.6),
    "hard": (0.2, 0.5, 0.45),
    "obscure": (0.1, 0.2, 0.3),
}
"""A corpus whose strata differ in difficulty (``--strata``)."""


def _interval(
    answers: pl.DataFrame,
    scores: pl.DataFrame,
    *,
    resamples: int,
    seed: int,
    method: str,
    strata: pl.DataFrame | None = None,
) -> tuple[float, float]:
    result = bootstrap_cube(
        answers,
        scores,
        n_resamples=resamples,
        seed=seed,
        method=method,  # type: ignore[arg-type]
        strata=strata,
    )["rag"]
    lo, hi = result.cube
    assert lo is not None
    assert hi is not None
    return lo, hi


def _renamed(frame: pl.DataFrame, prefix: str) -> pl.DataFrame:
    return frame.with_columns(
        (pl.lit(prefix) + pl.col(schema.QUESTION_ID)).alias(schema.QUESTION_ID)
    )


def study(
    n0: int, target: float, *, seed: int, resamples: int, method: str
) -> tuple[bool, float, int]:
    """One two-stage study: (covered, final half-width, final n)."""
    rng = np.random.default_rng(seed)
    answers, scores = simulate_tables(rng, n0)
    lo, hi = _interval(answers, scores, resamples=resamples, seed=seed, method=method)
    n = max(n0, required_n(n0, (hi - lo) / 2.0, target))
    if n > n0:
        more_a, more_s = simulate_tables(rng, n - n0)
        answers = pl.concat([answers, _renamed(more_a, "b")])
        scores = pl.concat([scores, _renamed(more_s, "b")])
    lo, hi = _interval(
        answers, scores, resamples=resamples, seed=seed + 7, method=method
    )
    return lo <= TRUE_CUBE <= hi, (hi - lo) / 2.0, n


def fixed_study(
    n: int, *, seed: int, resamples: int, method: str
) -> tuple[bool, float, int]:
    """One single-stage study of n questions: (covered, half-width, n)."""
    rng = np.random.default_rng(seed)
    answers, scores = simulate_tables(rng, n)
    lo, hi = _interval(answers, scores, resamples=resamples, seed=seed, method=method)
    return lo <= TRUE_CUBE <= hi, (hi - lo) / 2.0, n


def _strata_tables(
    rng: np.random.Generator, counts: dict[str, int]
) -> tuple[pl.DataFrame, pl.DataFrame, pl.DataFrame]:
    """Answers, scores and ``question_id, stratum`` of a sample with these
    per-stratum counts."""
    answers, scores, strata = [], [], []
    for name, n_h in counts.items():
        if n_h == 0:
            continue
        _, recall, share = STRATA[name]
        a, s = simulate_tables(rng, n_h, recall=recall, share=share)
        answers.append(_renamed(a, f"{name}-"))
        scores.append(_renamed(s, f"{name}-"))
        ids = answers[-1].get_column(schema.QUESTION_ID).unique()
        strata.append(pl.DataFrame({"question_id": ids, "stratum": [name] * len(ids)}))
    return pl.concat(answers), pl.concat(scores), pl.concat(strata)


def proportional(n: int) -> dict[str, int]:
    """The stratified sample's counts: the first n of the quota sequence."""
    population = {h: round(10_000 * p) for h, (p, _, _) in STRATA.items()}
    sequence = allocation_sequence(population, seed=0)[:n]
    return {h: sequence.count(h) for h in STRATA}


def true_strata_cube(n: int = 200_000) -> float:
    """The CuBE of a proportional sample of n questions (the population's)."""
    answers, scores, _ = _strata_tables(np.random.default_rng(12345), proportional(n))
    result = bootstrap_cube(answers, scores, n_resamples=1, method="percentile")
    estimate = result["rag"].estimate
    assert estimate is not None
    return estimate


def strata_study(
    n: int, *, seed: int, resamples: int, method: str, truth: float
) -> dict[str, tuple[bool, float]]:
    """One study of n questions drawn both ways: design -> (covered, half)."""
    rng = np.random.default_rng(seed)
    out: dict[str, tuple[bool, float]] = {}
    answers, scores, layers = _strata_tables(rng, proportional(n))
    lo, hi = _interval(
        answers, scores, resamples=resamples, seed=seed, method=method, strata=layers
    )
    out["stratified"] = (lo <= truth <= hi, (hi - lo) / 2.0)
    shares = [p for p, _, _ in STRATA.values()]
    drawn = rng.multinomial(n, shares)
    counts = dict(zip(STRATA, (int(c) for c in drawn), strict=True))
    answers, scores, _ = _strata_tables(rng, counts)
    lo, hi = _interval(answers, scores, resamples=resamples, seed=seed, method=method)
    out["simple random"] = (lo <= truth <= hi, (hi - lo) / 2.0)
    return out


def _row(
    label: str, runs: Sequence[tuple[bool, float, int]], target: float | None
) -> str:
    covered = float(np.mean([c for c, _, _ in runs]))
    se = float(np.sqrt(covered * (1 - covered) / len(runs)))
    near = (
        f"{np.mean([abs(h / target - 1.0) <= 0.2 for _, h, _ in runs]):>10.1%}"
        if target
        else f"{'-':>10s}"
    )
    return (
        f"{label:<22s}{len(runs):>8d}{covered:>10.1%} (±{se:.1%}){near}"
        f"{np.mean([n for _, _, n in runs]):>8.0f}"
        f"{np.mean([h for _, h, _ in runs]):>11.2f}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--studies", type=int, default=60)
    parser.add_argument("--resamples", type=int, default=200)
    parser.add_argument(
        "--interval", choices=["bca", "percentile"], default=DEFAULT_INTERVAL
    )
    parser.add_argument("--pilots", type=int, nargs="*", default=[100, 300])
    parser.add_argument("--targets", type=float, nargs="+", default=[2.0, 5.0])
    parser.add_argument(
        "--fixed-n", type=int, nargs="*", default=[], help="single-stage studies of N"
    )
    parser.add_argument(
        "--strata",
        action="store_true",
        help="stratified vs simple random sampling (at each --strata-n)",
    )
    parser.add_argument("--strata-n", type=int, nargs="+", default=[300])
    args = parser.parse_args()
    method = args.interval
    print(f"interval: {method}, {args.resamples} resamples")
    print(f"{'design':<22s} studies  coverage (± s.e.)  within20%  mean_n  mean_half")
    for n0 in args.pilots:
        for target in args.targets:
            t0 = time.perf_counter()
            runs = [
                study(
                    n0,
                    target,
                    seed=1000 * n0 + s,
                    resamples=args.resamples,
                    method=method,
                )
                for s in range(args.studies)
            ]
            print(
                _row(f"two-stage n0={n0} H={target:g}", runs, target)
                + f"   {time.perf_counter() - t0:.0f} s",
                flush=True,
            )
    for n in args.fixed_n:
        t0 = time.perf_counter()
        runs = [
            fixed_study(
                n, seed=7000 + 13 * n + s, resamples=args.resamples, method=method
            )
            for s in range(args.studies)
        ]
        print(_row(f"fixed n={n}", runs, None) + f"   {time.perf_counter() - t0:.0f} s")
    if args.strata:
        truth = true_strata_cube()
        print(f"strata {STRATA}: true CuBE {truth:.3f}")
        for n in args.strata_n:
            t0 = time.perf_counter()
            studies = [
                strata_study(
                    n,
                    seed=9000 + s,
                    resamples=args.resamples,
                    method=method,
                    truth=truth,
                )
                for s in range(args.studies)
            ]
            halves = {}
            for design in ("stratified", "simple random"):
                runs = [(st[design][0], st[design][1], n) for st in studies]
                halves[design] = float(np.mean([h for _, h, _ in runs]))
                print(_row(f"{design} n={n}", runs, None), flush=True)
            gain = halves["simple random"] / halves["stratified"]
            print(
                f"width gain n={n}: simple random / stratified half-width = "
                f"{gain:.3f} (same width from {1 / gain**2:.1%} of the questions)"
                f"   {time.perf_counter() - t0:.0f} s",
                flush=True,
            )


if __name__ == "__main__":
    main()
