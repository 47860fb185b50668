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

Intervals are percentile bootstrap intervals (``--resamples`` resamples; the
report's default is BCa, whose jackknife costs n evaluations per study).

    PYTHONPATH=. .venv/bin/python benchmarks/two_stage.py --studies 60 --resamples 200
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import polars as pl

from benchmarks.validity import TRUE_CUBE, simulate_tables
from cube_ray import schema
from cube_ray.aggregate import AggregateOptions
from cube_ray.report import evaluate_replicates, percentile_interval, resample_indices
from cube_ray.sizing import required_n


def _interval(
    answers: pl.DataFrame, scores: pl.DataFrame, *, resamples: int, seed: int
) -> tuple[float, float]:
    n = answers.get_column(schema.QUESTION_ID).n_unique()
    boot = evaluate_replicates(
        answers,
        scores,
        options=AggregateOptions(),
        indices=resample_indices(n, resamples, seed=seed),
    )
    lo, hi = percentile_interval(boot.cube_mean[0], 0.95)
    assert lo is not None
    assert hi is not None
    return lo, hi


def _renamed(frame: pl.DataFrame, prefix: str) -> pl.DataFrame:
    return frame.with_columns(
        (pl.lit(prefix) + pl.col(schema.QUESTION_ID)).alias(schema.QUESTION_ID)
    )


def study(
    n0: int, target: float, *, seed: int, resamples: int
) -> tuple[bool, float, int]:
    """One two-stage study: (covered, final half-width, final n)."""
    rng = np.random.default_rng(seed)
    answers, scores = simulate_tables(rng, n0)
    lo, hi = _interval(answers, scores, resamples=resamples, seed=seed)
    n = max(n0, required_n(n0, (hi - lo) / 2.0, target))
    if n > n0:
        more_a, more_s = simulate_tables(rng, n - n0)
        answers = pl.concat([answers, _renamed(more_a, "b")])
        scores = pl.concat([scores, _renamed(more_s, "b")])
    lo, hi = _interval(answers, scores, resamples=resamples, seed=seed + 7)
    return lo <= TRUE_CUBE <= hi, (hi - lo) / 2.0, n


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--studies", type=int, default=60)
    parser.add_argument("--resamples", type=int, default=200)
    parser.add_argument("--pilots", type=int, nargs="+", default=[100, 300])
    parser.add_argument("--targets", type=float, nargs="+", default=[2.0, 5.0])
    args = parser.parse_args()
    print("n0  H  studies  coverage  within20%  mean_n  mean_half  seconds")
    for n0 in args.pilots:
        for target in args.targets:
            t0 = time.perf_counter()
            runs = [
                study(n0, target, seed=1000 * n0 + s, resamples=args.resamples)
                for s in range(args.studies)
            ]
            covered = np.mean([c for c, _, _ in runs])
            near = np.mean([abs(h / target - 1.0) <= 0.2 for _, h, _ in runs])
            print(
                f"{n0:<4d}{target:<3g}{args.studies:>8d}{covered:>10.1%}"
                f"{near:>11.1%}{np.mean([n for _, _, n in runs]):>8.0f}"
                f"{np.mean([h for _, h, _ in runs]):>11.2f}"
                f"{time.perf_counter() - t0:>9.0f}",
                flush=True,
            )


if __name__ == "__main__":
    main()
