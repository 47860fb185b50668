"""Validity study: does CuBE remove judge differences, and do its intervals cover?

Simulated studies with a known truth (CUBE_METHOD.md section 10, issue 11):
a jury of four judges that differ in leniency (offset), scale (slope) and noise
scores zero, full and system answers whose latent quality is known, so the true
CuBE of the system is known exactly. The study measures

(a) the cross-judge SD of the raw weighted score, the bounded (normalised)
    score and CuBE (target: normalisation cuts the SD by >= 50 %);
(b) how often the 95 % bootstrap interval of the across-judge CuBE covers the
    true CuBE, for the percentile and the BCa interval (target 93-97 %);
(c) how often a blind judge (scores independent of the answer set) is wrongly
    found to separate the bounds, and the power to detect a 1.5-point gap
    (separation rule of section 10: gap >= min_gap and one-sided Wilcoxon
    p < alpha).

Every figure is computed by the code the headline's interval runs
(:func:`cube_ray.aggregate.evaluate_replicates`, :func:`percentile_interval`,
:func:`bca_interval`, :func:`jackknife_indices`), on Polars tables in the
answers/scores schema.

The model. Question q has a difficulty ``u_q ~ N(0, 0.8)``; the latent quality of
the answer of set s on dimension d is ``mu_s + off_d + u_q + N(0, 1)``, with
``mu_zero = 3``, ``mu_full = 7`` and, for the system's answers, ``mu_zero +
SHARE * (mu_full - mu_zero)`` when it retrieved the gold document (probability
RECALL, rank uniform in 1..k) and ``mu_zero`` when it missed. Judge j scores
``offset_j + slope_j * latent + noise_j * N(0, 1)`` (continuous, unclipped, so
every trimmed mean estimates its distribution's mean exactly and every judge's
normalised score estimates ``100 * SHARE`` whatever its offset, slope, noise or
weights). True CuBE = ``100 * SHARE * RECALL`` = 45.

Usage::

    PYTHONPATH=. .venv/bin/python benchmarks/validity.py
    PYTHONPATH=. .venv/bin/python benchmarks/validity.py --studies 40 --resamples 200

The first is the command of BENCHMARKS.md; ``tests/unit/test_validity.py``
runs a small version of each part.
"""

from __future__ import annotations

import argparse
import math
import os
import platform
import time
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import polars as pl
from scipy import stats

from cube_ray import schema
from cube_ray.aggregate import (
    AggregateOptions,
    bca_interval,
    evaluate_replicates,
    jackknife_indices,
    percentile_interval,
    resample_indices,
    separated,
    wilcoxon_greater,
)

DIMS = ("relevance", "completeness", "quality")
DIM_OFFSETS = (0.0, -0.5, 0.4)
MU_ZERO = 3.0
MU_FULL = 7.0
SHARE = 0.6
"""The system's answers sit this far from zero to full (normalised 60)."""
RECALL = 0.75
K = 8
QUESTION_SD = 0.8
ANSWER_SD = 1.0
TRUE_CUBE = 100.0 * SHARE * RECALL


@dataclass(frozen=True)
class Judge:
    """A simulated judge: ``score = offset + slope * latent + noise * N(0, 1)``."""

    name: str
    offset: float
    slope: float
    noise: float


JURY = (
    Judge("lenient", offset=1.5, slope=0.8, noise=0.8),
    Judge("strict", offset=-1.2, slope=1.1, noise=1.0),
    Judge("wide", offset=-0.6, slope=1.4, noise=1.2),
    Judge("noisy", offset=0.8, slope=0.9, noise=1.6),
)


def simulate_tables(
    rng: np.random.Generator,
    n: int,
    *,
    jury: Sequence[Judge] = JURY,
    share: float = SHARE,
    recall: float = RECALL,
    integer: bool = False,
) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Answers and scores tables of one simulated study of ``n`` questions.

    With ``integer`` the judges give integer scores 0..10 (rounded, clipped),
    as real judges do; each judge's CuBE then estimates its own limit, no
    longer exactly ``TRUE_CUBE`` (see :func:`true_cube`).
    """
    qids = np.array([f"q{i:05d}" for i in range(n)])
    hit = rng.random(n) < recall
    rank = np.where(hit, rng.integers(1, K + 1, n), 0).astype(np.int32)
    u = rng.normal(0.0, QUESTION_SD, n)
    mu_rag = np.where(hit, MU_ZERO + share * (MU_FULL - MU_ZERO), MU_ZERO)
    means = {schema.ZERO: np.full(n, MU_ZERO), schema.FULL: np.full(n, MU_FULL)}
    means["rag"] = mu_rag
    answers = pl.concat(
        [
            pl.DataFrame(
                {
                    schema.QUESTION_ID: qids,
                    schema.SYSTEM: [system] * n,
                    schema.RANK: rank if system == "rag" else [None] * n,
                },
                schema_overrides={schema.RANK: pl.Int32},
            )
            for system in means
        ]
    )
    frames = []
    for system, mu in means.items():
        for d, off in zip(DIMS, DIM_OFFSETS, strict=True):
            latent = mu + off + u + rng.normal(0.0, ANSWER_SD, n)
            for judge in jury:
                score = (
                    judge.offset
                    + judge.slope * latent
                    + rng.normal(0.0, judge.noise, n)
                )
                if integer:
                    score = np.clip(np.rint(score), 0.0, 10.0)
                frames.append(
                    pl.DataFrame(
                        {
                            schema.QUESTION_ID: qids,
                            schema.SYSTEM: [system] * n,
                            schema.JUDGE: [judge.name] * n,
                            schema.DIMENSION: [d] * n,
                            schema.SCORE: score,
                            schema.STATUS: ["ok"] * n,
                        }
                    )
                )
    return answers, pl.concat(frames)


def true_cube(*, integer: bool = False, n: int = 200_000, seed: int = 99) -> float:
    """The across-judge CuBE the estimator converges to.

    ``TRUE_CUBE`` for continuous scores (exact); for integer scores the value
    on one study of ``n`` questions (its own sampling error is about 0.1).
    """
    if not integer:
        return TRUE_CUBE
    answers, scores = simulate_tables(np.random.default_rng(seed), n, integer=True)
    return float(evaluate_replicates(answers, scores).cube_mean[0, 0])


# --------------------------------------------------------------------------
# (a) cross-judge spread
# --------------------------------------------------------------------------


@dataclass(frozen=True)
class Spread:
    """Mean over studies of the cross-judge SD (0-100 scale) of each figure."""

    n: int
    studies: int
    raw: float
    """SD of the raw weighted trimmed mean of the system's answers, x 10."""
    normalised: float
    cube: float

    @property
    def cut(self) -> float:
        """How much normalisation cuts the raw SD (share)."""
        return 1.0 - self.normalised / self.raw


def spread(n: int, studies: int, *, seed: int = 0) -> Spread:
    """Cross-judge SDs of raw, normalised and CuBE figures over ``studies``."""
    rng = np.random.default_rng(seed)
    raw, norm, cube = [], [], []
    for _ in range(studies):
        answers, scores = simulate_tables(rng, n)
        rep = evaluate_replicates(answers, scores)
        raw.append(np.std(10.0 * rep.trimmed["system"][:, 0, 0, -1], ddof=1))
        norm.append(np.std(rep.normalized[:, 0, 0, -1], ddof=1))
        cube.append(np.std(rep.cube[:, 0, 0], ddof=1))
    return Spread(
        n, studies, float(np.mean(raw)), float(np.mean(norm)), float(np.mean(cube))
    )


# --------------------------------------------------------------------------
# (b) coverage
# --------------------------------------------------------------------------


@dataclass(frozen=True)
class Coverage:
    """Share of studies whose interval covers the true CuBE, per method."""

    n: int
    studies: int
    resamples: int
    covered: dict[str, float]
    width: dict[str, float]
    """Mean interval width per method."""
    below: dict[str, float]
    """Share of studies whose interval lies wholly below the truth."""
    mean_estimate: float

    def stderr(self, method: str) -> float:
        """Binomial standard error of the coverage estimate."""
        p = self.covered[method]
        return math.sqrt(p * (1 - p) / self.studies)


def coverage(
    n: int,
    studies: int,
    *,
    resamples: int = 1000,
    confidence: float = 0.95,
    seed: int = 0,
    integer: bool = False,
    truth: float = TRUE_CUBE,
) -> Coverage:
    """Coverage of the percentile and BCa intervals over simulated studies."""
    rng = np.random.default_rng(seed)
    methods = ("percentile", "bca")
    hits = dict.fromkeys(methods, 0)
    lows = dict.fromkeys(methods, 0)
    widths: dict[str, list[float]] = {m: [] for m in methods}
    estimates = []
    options = AggregateOptions()
    for s in range(studies):
        answers, scores = simulate_tables(rng, n, integer=integer)
        point = evaluate_replicates(answers, scores, options=options)
        boot = evaluate_replicates(
            answers,
            scores,
            options=options,
            indices=resample_indices(n, resamples, seed=seed * 100_003 + s),
        )
        jack = evaluate_replicates(
            answers, scores, options=options, indices=jackknife_indices(n)
        )
        estimate = float(point.cube_mean[0, 0])
        estimates.append(estimate)
        intervals = {
            "percentile": percentile_interval(boot.cube_mean[0], confidence),
            "bca": bca_interval(
                boot.cube_mean[0], estimate, jack.cube_mean[0], confidence
            ),
        }
        for m, (lo, hi) in intervals.items():
            assert lo is not None
            assert hi is not None
            hits[m] += int(lo <= truth <= hi)
            lows[m] += int(hi < truth)
            widths[m].append(hi - lo)
    return Coverage(
        n,
        studies,
        resamples,
        {m: hits[m] / studies for m in methods},
        {m: float(np.mean(widths[m])) for m in methods},
        {m: lows[m] / studies for m in methods},
        float(np.mean(estimates)),
    )


# --------------------------------------------------------------------------
# (c) bound separation
# --------------------------------------------------------------------------


def separation(
    full: np.ndarray,
    zero: np.ndarray,
    *,
    trim: float = 0.1,
    min_gap: float = 0.5,
    alpha: float = 0.05,
) -> tuple[float, float, bool]:
    """Section 10's rule on paired weighted totals: ``(gap, p, separated)``.

    ``gap`` = trimmed mean of full - trimmed mean of zero; ``p`` = the
    aggregation's one-sided Wilcoxon signed-rank p-value of ``full - zero > 0``
    (scipy's, zero differences dropped, 1 below 6 non-zero differences);
    ``separated`` is the aggregation's own rule.
    """
    gap = float(stats.trim_mean(full, trim) - stats.trim_mean(zero, trim))
    p = wilcoxon_greater(full - zero)
    return gap, p, separated(gap, p, min_gap=min_gap, alpha=alpha)


def judge_scores(
    rng: np.random.Generator, n: int, *, gap: float, noise: float
) -> tuple[np.ndarray, np.ndarray]:
    """Weighted totals (equal weights over DIMS) of zero and full answers.

    A judge giving integer scores 0..10 (rounded, clipped) to answers whose
    latent quality differs by ``gap`` points between full and zero (0: a blind
    judge, whose scores do not depend on the set).
    """
    u = rng.normal(0.0, QUESTION_SD, (n, 1))
    out = []
    for mu in (5.0, 5.0 + gap):
        latent = mu + u + rng.normal(0.0, noise, (n, len(DIMS)))
        out.append(np.clip(np.rint(latent), 0, 10).mean(axis=1))
    zero, full = out
    return full, zero


def separation_rates(
    n: int, studies: int, *, gap: float, noise: float, seed: int = 0
) -> float:
    """Share of studies in which the judge is found to separate the bounds."""
    rng = np.random.default_rng(seed)
    found = 0
    for _ in range(studies):
        full, zero = judge_scores(rng, n, gap=gap, noise=noise)
        found += int(separation(full, zero)[2])
    return found / studies


# --------------------------------------------------------------------------
# main
# --------------------------------------------------------------------------


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--studies", type=int, default=300)
    parser.add_argument("--resamples", type=int, default=1000)
    parser.add_argument("--sizes", type=int, nargs="+", default=[100, 400])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--parts",
        nargs="+",
        default=["a", "b", "b-int", "c"],
        help="a: spread; b: coverage (continuous scores); b-int: coverage with "
        "integer scores 0-10; c: separation",
    )
    args = parser.parse_args()
    print(
        f"# validity study: {platform.node()} {platform.processor()} "
        f"cpus={os.cpu_count()} studies={args.studies} resamples={args.resamples}"
    )
    print(
        "jury: "
        + "; ".join(
            f"{j.name} offset {j.offset:+.1f} slope {j.slope} noise {j.noise}"
            for j in JURY
        )
        + f"; true CuBE {TRUE_CUBE:.1f}"
    )
    t0 = time.perf_counter()
    if "a" in args.parts:
        part_a(args)
    if "b" in args.parts:
        part_b(args, integer=False)
    if "b-int" in args.parts:
        part_b(args, integer=True)
    if "c" in args.parts:
        part_c(args)
    print(f"total {time.perf_counter() - t0:.0f} s")


def part_a(args: argparse.Namespace) -> None:
    """(a) cross-judge SD of raw, normalised and CuBE figures."""
    t0 = time.perf_counter()
    print("\n(a) cross-judge SD (0-100 scale), mean over studies")
    print("| questions | studies | raw weighted | normalised | CuBE | cut by norm. |")
    print("|---:|---:|---:|---:|---:|---:|")
    for n in args.sizes:
        sp = spread(n, min(args.studies, 100), seed=args.seed + n)
        print(
            f"| {n} | {sp.studies} | {sp.raw:.2f} | {sp.normalised:.2f} | "
            f"{sp.cube:.2f} | {100 * sp.cut:.0f} % |"
        )
    print(f"({time.perf_counter() - t0:.0f} s)")


def part_b(args: argparse.Namespace, *, integer: bool) -> None:
    """(b) coverage of the percentile and BCa intervals."""
    t0 = time.perf_counter()
    truth = true_cube(integer=integer)
    kind = "integer scores 0-10" if integer else "continuous scores"
    print(
        "\n(b) coverage of the 95 % interval of the across-judge CuBE, "
        f"{kind}; true CuBE {truth:.2f}"
    )
    print(
        "| questions | studies | resamples | method | coverage (± s.e.) | "
        "wholly below truth | mean width | mean estimate |"
    )
    print("|---:|---:|---:|---|---:|---:|---:|---:|")
    for n in args.sizes:
        cov = coverage(
            n,
            args.studies,
            resamples=args.resamples,
            seed=args.seed + n + (7 if integer else 0),
            integer=integer,
            truth=truth,
        )
        for m in ("percentile", "bca"):
            print(
                f"| {n} | {cov.studies} | {cov.resamples} | {m} | "
                f"{100 * cov.covered[m]:.1f} % (± {100 * cov.stderr(m):.1f}) | "
                f"{100 * cov.below[m]:.1f} % | {cov.width[m]:.2f} | "
                f"{cov.mean_estimate:.2f} |"
            )
        print(f"({time.perf_counter() - t0:.0f} s)")


def part_c(args: argparse.Namespace) -> None:
    """(c) false separation of a blind judge, power at a 1.5-point gap."""
    t0 = time.perf_counter()
    studies_c = max(args.studies, 1000)
    print(
        f"\n(c) separation rule (gap >= 0.5 and Wilcoxon p < 0.05), {studies_c} "
        "studies each; integer scores 0-10, 3 dimensions, equal weights"
    )
    print("| judge | per-score noise SD | n = 30 | n = 100 | n = 400 |")
    print("|---|---:|---:|---:|---:|")
    for gap, label in ((0.0, "blind (gap 0)"), (1.5, "1.5-point gap")):
        for noise in (1.5, 3.0):
            rates = [
                separation_rates(n, studies_c, gap=gap, noise=noise, seed=args.seed + n)
                for n in (30, 100, 400)
            ]
            print(
                f"| {label} | {noise} | "
                + " | ".join(f"{100 * r:.1f} %" for r in rates)
                + " |"
            )
    print(f"({time.perf_counter() - t0:.0f} s)")


if __name__ == "__main__":
    main()
