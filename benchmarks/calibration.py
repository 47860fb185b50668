"""Calibrating a jury against a human audit: coverage and gain (issue 27, §13).

Simulated studies with a human truth. Question q has a difficulty ``u_q ~ N(0,
0.8)``; the humans' score of the answer of set s on dimension d is the latent
quality ``mu_s + off_d + u_q + N(0, 1)``, rounded and clipped to 0..10, with
``mu_zero = 3``, ``mu_full = 7`` and, for the system's answers, ``3 + 0.6 * 4``
when it retrieved the gold document (probability 0.75, rank uniform in 1..8),
3 when it missed. Three judges see the same latent quality with their own
noise and distortion, then round and clip:

* ``lenient``: latent + 2.5 (many answers hit the ceiling of 10: full answers
  are squeezed, the judge's CuBE moves up);
* ``harsh``: latent - 2.5 (zero answers hit the floor of 0);
* ``biased``: latent + 1.5 on the system's answers only (the judge prefers
  the system under test).

Each study draws n questions, audits the first m (a uniform sample), and runs
the aggregation's own :func:`cube_ray.aggregate.calibrate` (the code
``cube-ray aggregate --human`` runs) and :func:`bootstrap_cube` (the judges'
own intervals). The truth is the humans' CuBE of the population (one study of
200,000 questions computed with :func:`evaluate_replicates`). Reported per
setting and judge: coverage of the calibrated interval, of the human-only
interval and of the judge's own interval; mean widths; the gain
``(width_human_only / width_calibrated)^2``; mean lambda.

Usage::

    PYTHONPATH=. .venv/bin/python benchmarks/calibration.py
    PYTHONPATH=. .venv/bin/python benchmarks/calibration.py --studies 20 \\
        --sizes 1000 --audits 50
"""

from __future__ import annotations

import argparse
import math
import os
import platform
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import polars as pl

from cube_ray import schema
from cube_ray.aggregate import (
    HUMAN_JUDGE,
    AggregateOptions,
    bootstrap_cube,
    calibrate,
    evaluate_replicates,
)

DIMS = ("relevance", "completeness")
DIM_OFFSETS = (0.0, -0.5)
MU_ZERO = 3.0
MU_FULL = 7.0
SHARE = 0.6
RECALL = 0.75
K = 8
QUESTION_SD = 0.8
ANSWER_SD = 1.0


@dataclass(frozen=True)
class Judge:
    """A simulated judge: ``round(latent + shift + noise * N(0, 1))``."""

    name: str
    shift: float
    """Added to the latent quality of every answer."""
    system_shift: float
    """Added to the system's answers only."""
    noise: float


JURY = (
    Judge("lenient", shift=2.5, system_shift=0.0, noise=0.8),
    Judge("harsh", shift=-2.5, system_shift=0.0, noise=0.8),
    Judge("biased", shift=0.0, system_shift=1.5, noise=0.8),
)


def _score(x: np.ndarray) -> np.ndarray:
    out: np.ndarray = np.clip(np.rint(x), 0.0, 10.0)
    return out


def simulate(
    rng: np.random.Generator,
    n: int,
    *,
    jury: Sequence[Judge] = JURY,
    system: str = "rag",
) -> tuple[pl.DataFrame, pl.DataFrame, pl.DataFrame]:
    """Answers, judges' scores and human scores of every answer of a study."""
    qids = np.array([f"q{i:06d}" for i in range(n)])
    hit = rng.random(n) < RECALL
    rank = np.where(hit, rng.integers(1, K + 1, n), 0).astype(np.int32)
    u = rng.normal(0.0, QUESTION_SD, n)
    means = {
        schema.ZERO: np.full(n, MU_ZERO),
        schema.FULL: np.full(n, MU_FULL),
        system: np.where(hit, MU_ZERO + SHARE * (MU_FULL - MU_ZERO), MU_ZERO),
    }
    answers = pl.concat(
        [
            pl.DataFrame(
                {
                    schema.QUESTION_ID: qids,
                    schema.SYSTEM: [s] * n,
                    schema.RANK: rank if s == system else [None] * n,
                },
                schema_overrides={schema.RANK: pl.Int32},
            )
            for s in means
        ]
    )
    judged, human = [], []
    for s, mu in means.items():
        for d, off in zip(DIMS, DIM_OFFSETS, strict=True):
            latent = mu + off + u + rng.normal(0.0, ANSWER_SD, n)
            base = {
                schema.QUESTION_ID: qids,
                schema.SYSTEM: [s] * n,
                schema.DIMENSION: [d] * n,
            }
            human.append(pl.DataFrame({**base, schema.SCORE: _score(latent)}))
            for j in jury:
                shift = j.shift + (j.system_shift if s == system else 0.0)
                noisy = latent + shift + rng.normal(0.0, j.noise, n)
                judged.append(
                    pl.DataFrame(
                        {
                            **base,
                            schema.JUDGE: [j.name] * n,
                            schema.SCORE: _score(noisy),
                            schema.STATUS: ["ok"] * n,
                        }
                    )
                )
    if not judged:
        judged.append(
            human[0]
            .clear()
            .with_columns(
                pl.lit(None, dtype=pl.String).alias(schema.JUDGE),
                pl.lit(None, dtype=pl.String).alias(schema.STATUS),
            )
        )
    scores = pl.concat(judged).select(
        schema.QUESTION_ID,
        schema.SYSTEM,
        schema.JUDGE,
        schema.DIMENSION,
        schema.SCORE,
        schema.STATUS,
    )
    return answers, scores, pl.concat(human)


def human_truth(n: int = 200_000, seed: int = 99) -> float:
    """The humans' CuBE of the population (its own sampling error about 0.1)."""
    answers, _, human = simulate(np.random.default_rng(seed), n, jury=())
    humans = human.with_columns(
        pl.lit(HUMAN_JUDGE).alias(schema.JUDGE), pl.lit("ok").alias(schema.STATUS)
    )
    return float(evaluate_replicates(answers, humans).cube[0, 0, 0])


@dataclass
class Tally:
    """Running counts of one (setting, judge)."""

    hits: dict[str, int] = field(default_factory=dict)
    widths: dict[str, list[float]] = field(default_factory=dict)
    gains: list[float] = field(default_factory=list)
    lambdas: list[float] = field(default_factory=list)
    errors: list[float] = field(default_factory=list)
    """Judge's own CuBE minus the truth."""
    studies: int = 0

    def add(
        self, kind: str, low: float | None, high: float | None, truth: float
    ) -> None:
        ok = low is not None and high is not None and low <= truth <= high
        self.hits[kind] = self.hits.get(kind, 0) + int(ok)
        if low is not None and high is not None:
            self.widths.setdefault(kind, []).append(high - low)

    def coverage(self, kind: str) -> tuple[float, float]:
        p = self.hits.get(kind, 0) / max(1, self.studies)
        return p, math.sqrt(p * (1 - p) / max(1, self.studies))


def study(
    rng: np.random.Generator,
    n: int,
    m: int,
    *,
    resamples: int,
    judge_resamples: int,
    method: str,
    seed: int,
) -> dict[str, dict[str, tuple[float | None, ...]]]:
    """One study: per judge (and the jury) its intervals and figures."""
    answers, scores, human = simulate(rng, n)
    audited = human.filter(
        pl.col(schema.QUESTION_ID).is_in([f"q{i:06d}" for i in range(m)])
    )
    options = AggregateOptions()
    cal = calibrate(
        answers,
        scores,
        audited,
        options=options,
        n_resamples=resamples,
        seed=seed,
        method=method,  # type: ignore[arg-type]
    )
    own = bootstrap_cube(
        answers,
        scores,
        n_resamples=judge_resamples,
        seed=seed + 7,
        method=method,  # type: ignore[arg-type]
        options=options,
    )["rag"]
    out: dict[str, dict[str, tuple[float | None, ...]]] = {}
    figures = {**{j: f["rag"] for j, f in cal.calibrated.items()}}
    figures["jury"] = cal.block.across_judges["rag"]
    for name, fig in figures.items():
        judge_ci = own.per_judge.get(name, own.cube)
        out[name] = {
            "calibrated": (fig.interval.low, fig.interval.high),
            "human only": (fig.human_only_interval.low, fig.human_only_interval.high),
            "judge only": judge_ci,
            "gain": (fig.gain,),
            "lambda": (fig.lambda_,),
            "judge": (fig.judge_cube,),
        }
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--studies", type=int, default=200)
    parser.add_argument("--resamples", type=int, default=400)
    parser.add_argument("--sizes", type=int, nargs="+", default=[1000, 10000])
    parser.add_argument("--audits", type=int, nargs="+", default=[50, 150, 400])
    parser.add_argument(
        "--judge-resamples",
        type=int,
        default=200,
        help="resamples of the judges' own intervals (their coverage is far "
        "from 95 %%: no precision needed)",
    )
    parser.add_argument("--method", choices=["percentile", "bca"], default="percentile")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    print(
        f"# calibration study: {platform.node()} cpus={os.cpu_count()} "
        f"studies={args.studies} resamples={args.resamples} method={args.method}"
    )
    t0 = time.perf_counter()
    truth = human_truth()
    took = time.perf_counter() - t0
    print(f"human truth (200,000 questions): {truth:.2f}  ({took:.0f} s)")
    print(
        "| n | m | judge | judge's own error | judge-only covers | calibrated covers "
        "(± s.e.) | human-only covers | width calibrated | width human-only | "
        "gain | lambda |"
    )
    print("|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for n in args.sizes:
        for m in args.audits:
            t1 = time.perf_counter()
            rng = np.random.default_rng(args.seed + 1000 * n + m)
            tallies: dict[str, Tally] = {}
            for s in range(args.studies):
                res = study(
                    rng,
                    n,
                    m,
                    resamples=args.resamples,
                    judge_resamples=args.judge_resamples,
                    method=args.method,
                    seed=args.seed * 100_003 + s,
                )
                for name, r in res.items():
                    t = tallies.setdefault(name, Tally())
                    t.studies += 1
                    for kind in ("calibrated", "human only", "judge only"):
                        lo, hi = r[kind][0], r[kind][1]
                        t.add(kind, lo, hi, truth)
                    if r["gain"][0] is not None:
                        t.gains.append(float(r["gain"][0]))
                    t.lambdas.append(float(r["lambda"][0] or 0.0))
                    if r["judge"][0] is not None:
                        t.errors.append(float(r["judge"][0]) - truth)
            for name, t in tallies.items():
                cal, se = t.coverage("calibrated")
                print(
                    f"| {n} | {m} | {name} | {np.mean(t.errors):+.2f} | "
                    f"{100 * t.coverage('judge only')[0]:.1f} % | "
                    f"{100 * cal:.1f} % (± {100 * se:.1f}) | "
                    f"{100 * t.coverage('human only')[0]:.1f} % | "
                    f"{np.mean(t.widths.get('calibrated', [np.nan])):.2f} | "
                    f"{np.mean(t.widths.get('human only', [np.nan])):.2f} | "
                    f"{np.median(t.gains) if t.gains else float('nan'):.2f} | "
                    f"{np.mean(t.lambdas):.2f} |",
                    flush=True,
                )
            print(f"<!-- n={n} m={m}: {time.perf_counter() - t1:.0f} s -->", flush=True)
    print(f"total {time.perf_counter() - t0:.0f} s")


if __name__ == "__main__":
    main()
