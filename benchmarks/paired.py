"""Coverage of the paired interval of a CuBE difference (issue 28, item 3).

Simulated studies with a known truth, built on the validity study's model
(``benchmarks/validity.py``: the same four-judge jury, three dimensions, zero
and full answers, question difficulty, integer scores 0..10 as real judges
give). Two systems, ``rag@a`` and ``rag@b``, answer the same questions:

- their retrieval agrees on a question with probability ``SAME_HIT`` (else
  ``rag@b`` draws its own hit), recall ``RECALL`` each;
- the latent quality of their answers shares the question's difficulty and,
  per dimension, a common part of the answer noise (``SHARED_NOISE`` of its
  variance), as two variants of one RAG pipeline do; the judges' own noise is
  independent per answer.

Scenarios: **equal** (both systems place their answers 0.6 of the way from zero
to full: true difference 0 by symmetry) and **ahead** (``rag@a`` at 0.6,
``rag@b`` at 0.5; the true difference is the estimator's large-sample limit,
from one study of ``--truth-n`` questions).

Each study computes the report's own comparison
(:func:`cube_ray.aggregate.paired_comparison` on the replicates of
:func:`cube_ray.aggregate.evaluate_replicates`: the same resamples for both
systems, the jury the same in every resample) with the bias-corrected (BCa) and
the percentile interval, and an unpaired percentile interval from the same
replicates with ``rag@b``'s shuffled (two independent resamples). It reports
the coverage of the true difference (target 93-97 %), the mean widths, and how
often the difference is resolved (interval leaves out 0).

Usage::

    PYTHONPATH=. .venv/bin/python benchmarks/paired.py
    PYTHONPATH=. .venv/bin/python benchmarks/paired.py --studies 20 --resamples 200
"""

from __future__ import annotations

import argparse
import math
import os
import platform
import time
from dataclasses import dataclass

import numpy as np
import polars as pl

from benchmarks.validity import (
    ANSWER_SD,
    DIM_OFFSETS,
    DIMS,
    JURY,
    MU_FULL,
    MU_ZERO,
    QUESTION_SD,
    RECALL,
    K,
)
from cube_ray import schema
from cube_ray.aggregate import (
    AggregateOptions,
    Replicates,
    evaluate_replicates,
    jackknife_indices,
    paired_comparison,
    percentile_interval,
    resample_indices,
)

SAME_HIT = 0.9
"""Probability that rag@b retrieves the gold document exactly when rag@a does."""
SHARED_NOISE = 0.7
"""Share of the answer noise's variance the two systems' answers have in common."""
SCENARIOS = {"equal": (0.6, 0.6), "ahead": (0.6, 0.5)}
"""Scenario -> (share of rag@a, share of rag@b) of the way from zero to full."""
SYSTEMS = ("rag@a", "rag@b")


def simulate_pair(
    rng: np.random.Generator, n: int, *, shares: tuple[float, float]
) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Answers and scores of one study: two systems on the same ``n`` questions."""
    qids = np.array([f"q{i:06d}" for i in range(n)])
    u = rng.normal(0.0, QUESTION_SD, n)
    hit_a = rng.random(n) < RECALL
    hit_b = np.where(rng.random(n) < SAME_HIT, hit_a, rng.random(n) < RECALL)
    hits = {"rag@a": hit_a, "rag@b": hit_b}
    ranks = {s: np.where(h, rng.integers(1, K + 1, n), 0) for s, h in hits.items()}
    means = {schema.ZERO: np.full(n, MU_ZERO), schema.FULL: np.full(n, MU_FULL)}
    for system, share in zip(SYSTEMS, shares, strict=True):
        means[system] = np.where(
            hits[system], MU_ZERO + share * (MU_FULL - MU_ZERO), MU_ZERO
        )
    answers = pl.concat(
        [
            pl.DataFrame(
                {
                    schema.QUESTION_ID: qids,
                    schema.SYSTEM: [system] * n,
                    schema.RANK: ranks.get(system, [None] * n),
                },
                schema_overrides={schema.RANK: pl.Int32},
            )
            for system in means
        ]
    )
    frames = []
    for d, off in zip(DIMS, DIM_OFFSETS, strict=True):
        common = rng.normal(0.0, ANSWER_SD, n)
        for system, mu in means.items():
            own = rng.normal(0.0, ANSWER_SD, n)
            noise = (
                math.sqrt(SHARED_NOISE) * common + math.sqrt(1 - SHARED_NOISE) * own
                if system in SYSTEMS
                else own
            )
            latent = mu + off + u + noise
            for judge in JURY:
                score = judge.offset + judge.slope * latent
                score = score + rng.normal(0.0, judge.noise, n)
                frames.append(
                    pl.DataFrame(
                        {
                            schema.QUESTION_ID: qids,
                            schema.SYSTEM: [system] * n,
                            schema.JUDGE: [judge.name] * n,
                            schema.DIMENSION: [d] * n,
                            schema.SCORE: np.clip(np.rint(score), 0.0, 10.0),
                            schema.STATUS: ["ok"] * n,
                        }
                    )
                )
    return answers, pl.concat(frames)


def true_difference(scenario: str, *, n: int, seed: int = 99) -> float:
    """CuBE(rag@a) - CuBE(rag@b) in the large-sample limit (0 when equal)."""
    if SCENARIOS[scenario][0] == SCENARIOS[scenario][1]:
        return 0.0  # exchangeable systems
    answers, scores = simulate_pair(
        np.random.default_rng(seed), n, shares=SCENARIOS[scenario]
    )
    point = evaluate_replicates(answers, scores)
    return float(point.cube_mean[0, 0] - point.cube_mean[1, 0])


@dataclass(frozen=True)
class Result:
    """One scenario and size over all studies."""

    studies: int
    covered: dict[str, float]
    width: dict[str, float]
    resolved: dict[str, float]
    mean_difference: float

    def stderr(self, kind: str) -> float:
        """Binomial standard error of a coverage."""
        p = self.covered[kind]
        return math.sqrt(p * (1 - p) / self.studies)


KINDS = ("paired BCa", "paired percentile", "unpaired percentile")


def study(
    scenario: str,
    n: int,
    studies: int,
    *,
    resamples: int,
    truth: float,
    seed: int,
) -> Result:
    """Coverage, widths and resolution of the three intervals over ``studies``."""
    rng = np.random.default_rng(seed)
    options = AggregateOptions()
    hits = dict.fromkeys(KINDS, 0)
    resolved = dict.fromkeys(KINDS, 0)
    widths: dict[str, list[float]] = {k: [] for k in KINDS}
    diffs = []
    for s in range(studies):
        answers, scores = simulate_pair(rng, n, shares=SCENARIOS[scenario])
        reps = Replicates(
            evaluate_replicates(
                answers,
                scores,
                options=options,
                indices=resample_indices(n, resamples, seed=seed * 1009 + s),
            ),
            evaluate_replicates(answers, scores, options=options),
            evaluate_replicates(
                answers, scores, options=options, indices=jackknife_indices(n)
            ),
        )
        judges = [j.name for j in JURY]
        intervals = {}
        for kind, method in (("paired BCa", "bca"), ("paired percentile", "pct")):
            c = paired_comparison(
                reps,
                "rag@a",
                reps,
                "rag@b",
                judges=judges,
                n_questions=n,
                method="bca" if method == "bca" else "percentile",
                confidence=0.95,
            )
            intervals[kind] = (c.interval.low, c.interval.high)
            if kind == "paired BCa":
                assert c.difference is not None
                diffs.append(c.difference)
        shuffled = np.random.default_rng(seed + s).permutation(resamples)
        unpaired = reps.boot.cube_mean[0] - reps.boot.cube_mean[1][shuffled]
        intervals["unpaired percentile"] = percentile_interval(unpaired, 0.95)
        for kind, (lo, hi) in intervals.items():
            assert lo is not None
            assert hi is not None
            hits[kind] += int(lo <= truth <= hi)
            resolved[kind] += int(lo > 0 or hi < 0)
            widths[kind].append(hi - lo)
    return Result(
        studies,
        {k: hits[k] / studies for k in KINDS},
        {k: float(np.mean(widths[k])) for k in KINDS},
        {k: resolved[k] / studies for k in KINDS},
        float(np.mean(diffs)),
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--studies", type=int, default=200)
    parser.add_argument("--resamples", type=int, default=1000)
    parser.add_argument("--sizes", type=int, nargs="+", default=[100])
    parser.add_argument("--scenarios", nargs="+", default=list(SCENARIOS))
    parser.add_argument("--truth-n", type=int, default=100_000)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    print(
        f"# paired interval study: {platform.node()} cpus={os.cpu_count()} "
        f"load={os.getloadavg()[0]:.1f} studies={args.studies} "
        f"resamples={args.resamples}; same hit {SAME_HIT}, shared answer noise "
        f"{SHARED_NOISE}, recall {RECALL}, integer scores 0-10"
    )
    print(
        "| scenario | questions | true difference | interval | coverage (± s.e.) "
        "| mean width | resolved | mean estimate |"
    )
    print("|---|---:|---:|---|---:|---:|---:|---:|")
    t0 = time.perf_counter()
    for scenario in args.scenarios:
        truth = true_difference(scenario, n=args.truth_n)
        for n in args.sizes:
            r = study(
                scenario,
                n,
                args.studies,
                resamples=args.resamples,
                truth=truth,
                seed=args.seed + n + (0 if scenario == "equal" else 7),
            )
            for kind in KINDS:
                print(
                    f"| {scenario} | {n} | {truth:.2f} | {kind} | "
                    f"{100 * r.covered[kind]:.1f} % (± {100 * r.stderr(kind):.1f}) | "
                    f"{r.width[kind]:.2f} | {100 * r.resolved[kind]:.1f} % | "
                    f"{r.mean_difference:.2f} |",
                    flush=True,
                )
        print(f"({time.perf_counter() - t0:.0f} s)", flush=True)


if __name__ == "__main__":
    main()
