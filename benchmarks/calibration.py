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
``--truth-questions`` questions, default 1,000,000, computed with
:func:`evaluate_replicates`). Reported per setting and judge: coverage of the
calibrated interval (and how many of its misses lie above / below the truth),
the calibrated estimate's error (mean and SD over studies), coverage of the
human-only interval and of the judge's own interval; mean widths; the gain
``(width_human_only / width_calibrated)^2``; mean lambda.

Each study's seeds derive from ``(--seed, n, m, study)`` alone, so ``--workers``
(processes, one thread each) changes the wall time, never the figures.
``--out FILE.json`` keeps every study's intervals and each row's summary. The
script imports numpy, scipy, polars, pydantic, pyarrow and cube_ray (through
``cube_ray.aggregate``), not ray or vllm.

Usage::

    PYTHONPATH=. .venv/bin/python benchmarks/calibration.py --workers 16 \\
        --sizes 1000 --studies 400 --out calibration-1000.json
    PYTHONPATH=. .venv/bin/python benchmarks/calibration.py --studies 20 \\
        --sizes 1000 --audits 50
"""

from __future__ import annotations

import argparse
import json
import math
import multiprocessing
import os
import platform
import time
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

from cube_ray import schema
from cube_ray.aggregate import (
    DEFAULT_INTERVAL,
    HUMAN_JUDGE,
    AggregateOptions,
    bootstrap_cube,
    calibrate,
    evaluate_replicates,
)
from cube_ray.aggregate._calibrated import CALIBRATED_INTERVAL

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


KINDS = ("calibrated", "human only", "judge only")
"""The intervals each study gives per figure."""


@dataclass(frozen=True)
class StudySpec:
    """One study: its setting and the settings of the whole benchmark."""

    n: int
    m: int
    index: int
    seed: int
    resamples: int
    judge_resamples: int
    method: str


Record = dict[str, dict[str, Any]]
"""Per figure (judge or ``jury``): each kind's ``[low, high]``, the calibrated
estimate, the judge's own CuBE, gain and lambda."""


def study_seeds(spec: StudySpec) -> tuple[int, int]:
    """(data seed, resampling seed) of one study, from its setting alone.

    The seeds depend on ``(seed, n, m, index)`` only, never on the order the
    studies run in, so the results do not depend on ``--workers`` (to the last
    bit with one Polars thread in every process, ``POLARS_MAX_THREADS=1``; a
    one-worker run with Polars' default threads may sum in another order).

    >>> spec = StudySpec(1000, 150, 3, 0, 400, 200, "bca")
    >>> study_seeds(spec) == study_seeds(spec)
    True
    >>> study_seeds(spec) != study_seeds(StudySpec(1000, 150, 4, 0, 400, 200, "bca"))
    True
    """
    data, boot = np.random.SeedSequence(
        [spec.seed, spec.n, spec.m, spec.index]
    ).generate_state(2)
    return int(data), int(boot) % 2**31


def study(spec: StudySpec) -> Record:
    """One study: per judge (and the jury) its intervals and figures."""
    data_seed, boot_seed = study_seeds(spec)
    answers, scores, human = simulate(np.random.default_rng(data_seed), spec.n)
    audited = human.filter(
        pl.col(schema.QUESTION_ID).is_in([f"q{i:06d}" for i in range(spec.m)])
    )
    options = AggregateOptions()
    cal = calibrate(
        answers,
        scores,
        audited,
        options=options,
        n_resamples=spec.resamples,
        seed=boot_seed,
        method=spec.method,  # type: ignore[arg-type]
    )
    own = bootstrap_cube(
        answers,
        scores,
        n_resamples=spec.judge_resamples,
        seed=boot_seed + 7,
        method=DEFAULT_INTERVAL,  # the headline's
        options=options,
    )["rag"]
    figures = {j: f["rag"] for j, f in cal.calibrated.items()}
    figures["jury"] = cal.block.across_judges["rag"]
    out: Record = {}
    for name, fig in figures.items():
        judge_ci = own.per_judge.get(name, own.cube)
        out[name] = {
            "calibrated": [fig.interval.low, fig.interval.high],
            "human only": [fig.human_only_interval.low, fig.human_only_interval.high],
            "judge only": list(judge_ci),
            "estimate": fig.cube,
            "human_estimate": fig.human_only,
            "judge": fig.judge_cube,
            "gain": fig.gain,
            "lambda": fig.lambda_,
        }
    return out


def _covers(ci: Sequence[float | None], truth: float) -> bool:
    lo, hi = ci
    return lo is not None and hi is not None and lo <= truth <= hi


def summarise(records: Sequence[Record], truth: float) -> dict[str, dict[str, Any]]:
    """Per figure: coverage of each kind (with its standard error), mean widths,
    the calibrated estimate's error (mean, SD) and misses above/below the truth,
    median gain, mean lambda, the judge's own error."""
    rows: dict[str, dict[str, Any]] = {}
    names = list(records[0]) if records else []
    for name in names:
        per = [r[name] for r in records]
        k = len(per)
        row: dict[str, Any] = {"studies": k}
        for kind in KINDS:
            hits = sum(_covers(p[kind], truth) for p in per)
            cov = hits / k
            widths = [p[kind][1] - p[kind][0] for p in per if None not in p[kind]]
            row[kind] = {
                "coverage": cov,
                "se": math.sqrt(cov * (1 - cov) / k),
                "width": float(np.mean(widths)) if widths else None,
            }
        cal = [p["calibrated"] for p in per]
        row["calibrated"]["misses_above"] = sum(
            c[0] is not None and c[0] > truth for c in cal
        )
        row["calibrated"]["misses_below"] = sum(
            c[1] is not None and c[1] < truth for c in cal
        )
        errors = [p["estimate"] - truth for p in per if p["estimate"] is not None]
        row["calibrated"]["error_mean"] = float(np.mean(errors))
        row["calibrated"]["error_sd"] = float(np.std(errors))
        gains = [p["gain"] for p in per if p["gain"] is not None]
        row["gain_median"] = float(np.median(gains)) if gains else None
        row["lambda_mean"] = float(np.mean([p["lambda"] or 0.0 for p in per]))
        own = [p["judge"] - truth for p in per if p["judge"] is not None]
        row["judge_error_mean"] = float(np.mean(own)) if own else None
        rows[name] = row
    return rows


def _line(n: int, m: int, name: str, r: dict[str, Any]) -> str:
    cal = r["calibrated"]
    return (
        f"| {n:,} | {m} | {name} | {r['judge_error_mean']:+.2f} | "
        f"{100 * r['judge only']['coverage']:.1f} % | "
        f"{100 * cal['coverage']:.1f} % (± {100 * cal['se']:.1f}) | "
        f"{cal['misses_above']}/{cal['misses_below']} | "
        f"{cal['error_mean']:+.2f} ± {cal['error_sd']:.2f} | "
        f"{100 * r['human only']['coverage']:.1f} % | "
        f"{cal['width']:.2f} | {r['human only']['width']:.2f} | "
        f"{r['gain_median']:.1f} | {r['lambda_mean']:.2f} |"
    )


def _limit_threads() -> None:
    """One thread per worker process: the processes are the parallelism."""
    for var in ("POLARS_MAX_THREADS", "OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        os.environ[var] = "1"


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
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
    parser.add_argument(
        "--method",
        choices=["percentile", "bca"],
        default=CALIBRATED_INTERVAL,
        help="interval of the calibrated and people-only figures (default: the "
        "tool's, %(default)s); the judges' own intervals are the headline's (BCa)",
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--truth-questions",
        type=int,
        default=1_000_000,
        help="questions of the population whose people's CuBE is the truth",
    )
    parser.add_argument(
        "--workers",
        type=int,
        default=1,
        help="processes running studies at once (one thread each); the results "
        "do not depend on it",
    )
    parser.add_argument("--out", type=Path, help="write every figure to this JSON")
    args = parser.parse_args()
    print(
        f"# calibration study: {platform.node()} cpus={os.cpu_count()} "
        f"workers={args.workers} studies={args.studies} "
        f"resamples={args.resamples} method={args.method} seed={args.seed}",
        flush=True,
    )
    t0 = time.perf_counter()
    truth = human_truth(args.truth_questions)
    print(
        f"human truth ({args.truth_questions:,} questions): {truth:.3f}  "
        f"({time.perf_counter() - t0:.0f} s)",
        flush=True,
    )
    print(
        "| n | m | judge | judge's own error | judge-only covers | calibrated covers "
        "(± s.e.) | misses above/below | calibrated − truth (mean ± SD) | "
        "human-only covers | width calibrated | width human-only | gain | lambda |"
    )
    print("|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    settings = [(n, m) for n in args.sizes for m in args.audits]
    specs = {
        (n, m): [
            StudySpec(
                n, m, s, args.seed, args.resamples, args.judge_resamples, args.method
            )
            for s in range(args.studies)
        ]
        for n, m in settings
    }
    results: dict[str, Any] = {
        "meta": {
            "host": platform.node(),
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "args": {
                k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()
            },
            "truth": truth,
        },
        "rows": [],
    }
    # Studies always run in spawned processes of one thread each (also with
    # --workers 1): Polars' multithreaded sums may differ in the last bit with
    # the thread count, and the figures must not depend on --workers.
    _limit_threads()  # inherited by the spawned workers
    with ProcessPoolExecutor(
        max_workers=args.workers, mp_context=multiprocessing.get_context("spawn")
    ) as pool:
        # Every study is submitted at once (long and short settings balance
        # across the workers); each setting is read back in study order.
        pending = {
            key: pool.map(study, batch, chunksize=1) for key, batch in specs.items()
        }
        for (n, m), it in pending.items():
            t1 = time.perf_counter()
            records = list(it)
            wall = time.perf_counter() - t1
            rows = summarise(records, truth)
            for name, row in rows.items():
                print(_line(n, m, name, row), flush=True)
            print(f"<!-- n={n} m={m}: {wall:.0f} s -->", flush=True)
            results["rows"].append(
                {"n": n, "m": m, "figures": rows, "studies": records}
            )
    total = time.perf_counter() - t0
    results["meta"]["wall_s"] = total
    print(f"total {total:.0f} s", flush=True)
    if args.out is not None:
        args.out.write_text(json.dumps(results, indent=1), encoding="utf-8")
        print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
