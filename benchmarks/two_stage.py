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
BCa; its jackknife costs min(n, 200) evaluations per interval, left out within
strata for the stratified design) over ``--resamples`` resamples.

``--workers N`` runs the studies over N processes; a study's result depends on
its own seed only, not on N (to the last bit when the one-worker run also has one
Polars thread, ``POLARS_MAX_THREADS=1``; otherwise its sums may run in another
order, and half-widths agree to about 1e-15). ``--out FILE.json`` writes every
row and every study (with its CPU seconds), and ``FILE.jsonl`` each study as it
ends. The benchmark imports numpy, scipy, polars, pydantic, yaml and cube_ray (whose
``schema`` needs pyarrow), never ray, vllm or torch.

    PYTHONPATH=. .venv/bin/python benchmarks/two_stage.py --studies 60 --resamples 200
    PYTHONPATH=. python benchmarks/two_stage.py --studies 300 --pilots 100 300 \
        --targets 2 5 --strata --workers 16 --out two_stage.json
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import platform
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

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


POPULATION = 10_000
"""The corpus the stratified samples are drawn from (shares as in ``STRATA``)."""


def proportional(n: int) -> dict[str, int]:
    """The stratified sample's counts: the first n of the quota sequence."""
    population = {h: round(POPULATION * p) for h, (p, _, _) in STRATA.items()}
    if n > sum(population.values()):
        msg = f"a sample of {n} from a corpus of {POPULATION}: at most {POPULATION}"
        raise ValueError(msg)
    sequence = allocation_sequence(population, seed=0)[:n]
    return {h: sequence.count(h) for h in STRATA}


def true_strata_cube(n: int = 200_000) -> float:
    """The population's CuBE: that of n questions in the exact shares.

    (Before 2026-12-04 16:00 this took ``proportional(n)``, which stops at the
    corpus's 10,000 questions: a truth with a standard error of about 0.3
    CuBE points, 0.55 below the stratified studies' mean.)
    """
    counts = {h: round(n * p) for h, (p, _, _) in STRATA.items()}
    answers, scores, _ = _strata_tables(np.random.default_rng(12345), counts)
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


@dataclass(frozen=True)
class Job:
    """One study of one row: what :func:`run_job` computes in a worker."""

    row: str
    """The table row (``two-stage n0=100 H=2``, ``fixed n=300``, ``strata n=300``)."""
    kind: str
    """``two-stage``, ``fixed`` or ``strata``."""
    seed: int
    """The study's own seed: its result does not depend on the other studies,
    the order they run in or the number of workers."""
    n: int
    target: float | None = None
    truth: float | None = None


def jobs(args: argparse.Namespace, truth: float | None) -> list[Job]:
    """Every study of the table, row by row (seeds as in the earlier runs)."""
    out: list[Job] = []
    for n0 in args.pilots:
        for target in args.targets:
            row = f"two-stage n0={n0} H={target:g}"
            out += [
                Job(row, "two-stage", 1000 * n0 + s, n0, target)
                for s in range(args.studies)
            ]
    for n in args.fixed_n:
        out += [
            Job(f"fixed n={n}", "fixed", 7000 + 13 * n + s, n)
            for s in range(args.studies)
        ]
    if args.strata:
        for n in args.strata_n:
            out += [
                Job(f"strata n={n}", "strata", 9000 + s, n, truth=truth)
                for s in range(args.studies)
            ]
    return out


def run_job(job: Job, *, resamples: int, method: str) -> list[dict[str, Any]]:
    """One study: one record per design it measures (two for ``strata``)."""
    t0, c0 = time.perf_counter(), time.process_time()
    records: list[dict[str, Any]] = []
    if job.kind == "two-stage":
        assert job.target is not None
        covered, half, n = study(
            job.n, job.target, seed=job.seed, resamples=resamples, method=method
        )
        records.append({"row": job.row, "covered": covered, "half": half, "n": n})
    elif job.kind == "fixed":
        covered, half, n = fixed_study(
            job.n, seed=job.seed, resamples=resamples, method=method
        )
        records.append({"row": job.row, "covered": covered, "half": half, "n": n})
    else:
        assert job.truth is not None
        both = strata_study(
            job.n, seed=job.seed, resamples=resamples, method=method, truth=job.truth
        )
        for design, (covered, half) in both.items():
            row = f"{design} n={job.n}"
            records.append({"row": row, "covered": covered, "half": half, "n": job.n})
    cpu, wall = time.process_time() - c0, time.perf_counter() - t0
    for r in records:
        r.update(
            seed=job.seed,
            target=job.target,
            covered=bool(r["covered"]),
            half=float(r["half"]),
            cpu_s=cpu,
            wall_s=wall,
        )
    return records


def _call(payload: tuple[int, Job, int, str]) -> tuple[int, list[dict[str, Any]]]:
    i, job, resamples, method = payload
    return i, run_job(job, resamples=resamples, method=method)


def run_all(
    todo: Sequence[Job],
    *,
    resamples: int,
    method: str,
    workers: int,
    stream: IO[str] | None = None,
) -> list[dict[str, Any]]:
    """Every job's records, in the order of ``todo``, over ``workers`` processes.

    Each study's records are also written to ``stream`` (JSON lines) as it
    ends, so a run cut short keeps what it measured.
    """
    payloads = [(i, job, resamples, method) for i, job in enumerate(todo)]
    done: dict[int, list[dict[str, Any]]] = {}

    def keep(i: int, records: list[dict[str, Any]]) -> None:
        done[i] = records
        if stream is not None:
            stream.writelines(json.dumps(r) + "\n" for r in records)
            stream.flush()

    if workers <= 1:
        for p in payloads:
            keep(*_call(p))
        return [r for i in sorted(done) for r in done[i]]
    # Spawned (not forked: Polars' thread pool does not survive a fork)
    # workers, each with one Polars thread (the workers are the parallelism);
    # a child reads the environment when it first imports Polars.
    env = {"POLARS_MAX_THREADS": "1", "OMP_NUM_THREADS": "1"}
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        ctx = multiprocessing.get_context("spawn")
        with ctx.Pool(workers) as pool:
            for i, records in pool.imap_unordered(_call, payloads, chunksize=1):
                keep(i, records)
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    return [r for i in sorted(done) for r in done[i]]


def summarise(records: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """One entry per row: coverage (and its s.e.), the share within +-20 % of H,
    mean final n and half-width, CPU seconds per study."""
    rows: dict[str, list[dict[str, Any]]] = {}
    for r in records:
        rows.setdefault(r["row"], []).append(r)
    out = []
    for label, runs in rows.items():
        covered = float(np.mean([r["covered"] for r in runs]))
        target = runs[0]["target"] if runs[0]["row"].startswith("two-stage") else None
        halves = np.array([r["half"] for r in runs])
        out.append(
            {
                "row": label,
                "studies": len(runs),
                "covered": int(sum(r["covered"] for r in runs)),
                "coverage": covered,
                "coverage_se": float(np.sqrt(covered * (1 - covered) / len(runs))),
                "within_20pct": (
                    float(np.mean(np.abs(halves / target - 1.0) <= 0.2))
                    if target
                    else None
                ),
                "mean_n": float(np.mean([r["n"] for r in runs])),
                "mean_half_width": float(halves.mean()),
                "cpu_s_per_study": float(np.mean([r["cpu_s"] for r in runs])),
                "wall_s_per_study": float(np.mean([r["wall_s"] for r in runs])),
            }
        )
    return out


def _line(row: dict[str, Any]) -> str:
    near = row["within_20pct"]
    return (
        f"{row['row']:<26s}{row['studies']:>8d}{row['coverage']:>10.1%}"
        f" (±{row['coverage_se']:.1%})"
        f"{'-' if near is None else f'{near:.1%}':>10s}"
        f"{row['mean_n']:>8.0f}{row['mean_half_width']:>11.2f}"
        f"{row['cpu_s_per_study']:>10.1f}"
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
    parser.add_argument(
        "--workers",
        type=int,
        default=1,
        help="processes running studies in parallel (results do not depend on it)",
    )
    parser.add_argument(
        "--out",
        type=Path,
        help="write the rows and every study's result as JSON (and each study "
        "as it ends to the same name with .jsonl)",
    )
    args = parser.parse_args()
    method = args.interval
    started = time.perf_counter()
    truth = true_strata_cube() if args.strata else None
    todo = jobs(args, truth)
    print(
        f"interval: {method}, {args.resamples} resamples; {len(todo)} studies on "
        f"{args.workers} worker(s); {os.cpu_count()} CPUs, load "
        f"{' '.join(f'{x:.1f}' for x in os.getloadavg())}",
        flush=True,
    )
    if truth is not None:
        print(f"strata {STRATA}: true CuBE {truth:.3f}")
    stream = None
    if args.out is not None:
        stream = args.out.with_suffix(".jsonl").open("w", encoding="utf-8")
    try:
        records = run_all(
            todo,
            resamples=args.resamples,
            method=method,
            workers=args.workers,
            stream=stream,
        )
    finally:
        if stream is not None:
            stream.close()
    rows = summarise(records)
    print(
        f"{'design':<26s} studies  coverage (± s.e.)  within20%  mean_n  mean_half"
        "  cpu_s/study"
    )
    for row in rows:
        print(_line(row))
    halves = {r["row"]: r["mean_half_width"] for r in rows}
    for n in args.strata_n if args.strata else []:
        gain = halves[f"simple random n={n}"] / halves[f"stratified n={n}"]
        print(
            f"width gain n={n}: simple random / stratified half-width = "
            f"{gain:.3f} (same width from {1 / gain**2:.1%} of the questions)"
        )
    wall = time.perf_counter() - started
    print(f"wall {wall:.0f} s", flush=True)
    if args.out is not None:
        report = {
            "command": " ".join(sys.argv),
            "interval": method,
            "resamples": args.resamples,
            "workers": args.workers,
            "cpus": os.cpu_count(),
            "load_at_start": list(os.getloadavg()),
            "python": platform.python_version(),
            "machine": platform.machine(),
            "true_strata_cube": truth,
            "wall_s": wall,
            "rows": rows,
            "studies": records,
        }
        args.out.write_text(json.dumps(report, indent=1) + "\n")
        print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
