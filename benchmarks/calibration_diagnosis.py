"""Why a calibrated interval misses: the diagnosis behind CALIBRATED_INTERVAL.

Three steps on the simulation of ``benchmarks/calibration.py`` (same judges,
same people):

``dump``: per study, the pieces of the calibrated estimate
``theta = f_H(L) + lambda (f_J(U) - f_J(L))`` as the calibration computes them
(:func:`cube_ray.aggregate.evaluate_replicates` on L with the people as one
more judge, and on U): point values, bootstrap replicates (L and U resampled
independently) and jackknife values, written to an ``.npz``.

``analyse``: from a dump, per judge: the estimate's error (mean, SD) against
the bootstrap SD, misses above/below, and the coverage of the percentile
interval, BCa, BCa without its bias correction ``z0`` (acceleration only), BC
(``z0`` only, no acceleration) and the normal interval ``theta +- 1.96 SD*``,
with the power-tuned lambda and with lambda fixed at its mean over studies
(is re-tuning lambda per replicate needed?); the mean ``z0`` and acceleration.

``bias``: the small-sample bias of each judge's and the people's CuBE on m
questions: the mean over ``--reps`` samples of m questions drawn from one
population of ``--population`` questions, minus the population's figure.

Usage::

    PYTHONPATH=. .venv/bin/python benchmarks/calibration_diagnosis.py dump \\
        --n 1000 --m 50 --studies 600 --seed 3 --out d50.npz
    PYTHONPATH=. .venv/bin/python benchmarks/calibration_diagnosis.py analyse \\
        d50.npz --truth 44.92
    PYTHONPATH=. .venv/bin/python benchmarks/calibration_diagnosis.py bias \\
        --m 150 --population 20000 --reps 2000
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from statistics import NormalDist
from typing import Any

import numpy as np
import polars as pl

sys.path.insert(0, str(Path(__file__).resolve().parent))
import calibration as sim

from cube_ray import schema
from cube_ray.aggregate import (
    HUMAN_JUDGE,
    AggregateOptions,
    evaluate_replicates,
)
from cube_ray.aggregate._bootstrap import fixed_judge_mean
from cube_ray.aggregate._ppi import (
    power_tuned_lambda,
    two_sample_jackknife,
)
from cube_ray.aggregate._resample import (
    jackknife_indices,
    percentile_interval,
    resample_indices,
)

FIGURES = ("lenient", "harsh", "biased", "jury")
NORMAL = NormalDist()


def _people(human: pl.DataFrame, columns: list[str]) -> pl.DataFrame:
    return human.with_columns(
        pl.lit(HUMAN_JUDGE).alias(schema.JUDGE), pl.lit("ok").alias(schema.STATUS)
    ).select(columns)


def dump(args: argparse.Namespace) -> None:
    """Per-study pieces of the calibrated estimate, to an ``.npz``."""
    n, m, b = args.n, args.m, args.resamples
    kw: dict[str, Any] = {"options": AggregateOptions(), "dimensions": list(sim.DIMS)}
    rec: dict[str, list[np.ndarray]] = {}
    t0 = time.perf_counter()
    for s in range(args.studies):
        answers, scores, human = sim.simulate(
            np.random.default_rng([args.seed, n, m, s]), n
        )
        audit = human.filter(
            pl.col(schema.QUESTION_ID).is_in([f"q{i:06d}" for i in range(m)])
        )
        both = pl.concat([scores, _people(audit, scores.columns)])
        pos_l, pos_u = np.arange(m), np.arange(m, n)

        lab = {
            "b": resample_indices(m, b, seed=s, strata=[pos_l]),
            "p": pos_l[None],
            "j": pos_l[jackknife_indices(m)],
        }
        unl = {
            "b": resample_indices(n - m, b, seed=s + 10**6, strata=[pos_u]),
            "p": pos_u[None],
            "j": pos_u[jackknife_indices(n - m)],
        }
        for kind, idx in lab.items():
            rep = evaluate_replicates(answers, both, indices=idx, **kw)
            h = rep.judges.index(HUMAN_JUDGE)
            mask = np.array([[j != HUMAN_JUDGE] for j in rep.judges])
            four = [rep.cube[rep.judges.index(j), 0] for j in FIGURES[:3]]
            four.append(fixed_judge_mean(rep.cube[:, :1], mask)[0])
            rec.setdefault("h" + kind, []).append(rep.cube[h, 0])
            rec.setdefault("jl" + kind, []).append(np.stack(four))
        for kind, idx in unl.items():
            rep = evaluate_replicates(answers, scores, indices=idx, **kw)
            four = [rep.cube[rep.judges.index(j), 0] for j in FIGURES[:3]]
            four.append(rep.cube_mean[0])
            rec.setdefault("u" + kind, []).append(np.stack(four))
        if s % 50 == 0:
            print(f"study {s}: {time.perf_counter() - t0:.0f} s", flush=True)
    arrays = {k: np.array(v) for k, v in rec.items()}
    np.savez(args.out, n=np.array(n), m=np.array(m), **arrays)
    print(f"wrote {args.out}")


def _bca(
    values: np.ndarray, est: float, jack: np.ndarray, *, z0_on: bool, a_on: bool
) -> tuple[float, float, float, float]:
    """(low, high, z0, a) of the 95 % BCa interval with either part switched off."""
    share = (np.sum(values < est) + 0.5 * np.sum(values == est)) / values.size
    z0 = NORMAL.inv_cdf(float(share)) if z0_on else 0.0
    dev = jack.mean() - jack
    a = float(np.sum(dev**3) / (6 * np.sum(dev**2) ** 1.5)) if a_on else 0.0
    levels = []
    for tail in (0.025, 0.975):
        z = z0 + NORMAL.inv_cdf(tail)
        levels.append(NORMAL.cdf(z0 + z / (1 - a * z)))
    lo, hi = np.quantile(values, levels)
    return float(lo), float(hi), z0, a


def _group_counts(idx: np.ndarray, size: int, groups: int) -> np.ndarray:
    """``[B, G]`` draws of each jackknife group (``jackknife_indices`` layout)."""
    gid = np.where(idx < groups * size, idx // size, groups)
    rows = np.arange(idx.shape[0])[:, None] * (groups + 1)
    flat = np.bincount((rows + gid).ravel(), minlength=idx.shape[0] * (groups + 1))
    return flat.reshape(idx.shape[0], groups + 1)[:, :groups].astype(np.float64)


def _influence_lambda(
    ifs: tuple[np.ndarray, np.ndarray, np.ndarray],
    weights: tuple[np.ndarray, np.ndarray],
    scales: tuple[float, float],
) -> np.ndarray:
    """lambda = cov(H_L, J_L) / (var(J_L) + var(J_U)) from influence values.

    Each row of ``weights`` (L's, U's) weighs the groups (1: the sample as
    drawn; the draws of a replicate: lambda re-tuned inside that replicate).
    """
    ih, il, iu = ifs
    wl = weights[0] / weights[0].sum(axis=1, keepdims=True)
    wu = weights[1] / weights[1].sum(axis=1, keepdims=True)
    cov = wl @ (ih * il) - (wl @ ih) * (wl @ il)
    var_l = wl @ (il * il) - (wl @ il) ** 2
    var_u = wu @ (iu * iu) - (wu @ iu) ** 2
    den = var_l * scales[0] + var_u * scales[1]
    with np.errstate(invalid="ignore", divide="ignore"):
        lam = np.where(den > 0, cov * scales[0] / den, 0.0)
    out: np.ndarray = np.clip(lam, 0.0, 1.0)
    return out


def analyse(args: argparse.Namespace) -> None:
    """Coverage of each interval variant, per judge, from a dump."""
    d = np.load(args.dump)
    truth = args.truth
    n = int(d["n"]) if "n" in d else args.n
    m = int(d["m"]) if "m" in d else args.m
    g_l, g_u = d["hj"].shape[1], d["uj"].shape[2]
    size_l, size_u = m // g_l, (n - m) // g_u
    hb, hp, hj = d["hb"], d["hp"][:, 0], d["hj"]
    studies = hb.shape[0]
    pct = [percentile_interval(hb[s], 0.95) for s in range(studies)]
    hit = np.mean([lo <= truth <= hi for lo, hi in pct])
    print(
        f"{studies} studies; people only: error {np.mean(hp - truth):+.3f} "
        f"SD {np.std(hp):.3f}, bootstrap SD {np.sqrt(np.mean(hb.var(1))):.3f}, "
        f"percentile covers {100 * hit:.1f} %"
    )
    for f, name in enumerate(FIGURES):
        jlb, jlp, jlj = d["jlb"][:, f], d["jlp"][:, f, 0], d["jlj"][:, f]
        ub, up, uj = d["ub"][:, f], d["up"][:, f, 0], d["uj"][:, f]
        retuned: list[bool] = []
        lam_points: list[float] = []
        lams = np.array(
            [power_tuned_lambda(hb[s], jlb[s], ub[s]) for s in range(studies)]
        )
        cov: dict[str, list[bool]] = {}
        err, sd, z0s, accs, above, below = [], [], [], [], 0, 0
        for s in range(studies):
            # lambda from jackknife influence values, re-tuned in each replicate
            # from its draws (the resamples are regenerated from dump's seeds).
            ifs = tuple(
                (j.size - 1) * (j.mean() - j) / size
                for j, size in (
                    (hj[s], size_l),
                    (jlj[s], size_l),
                    (uj[s], size_u),
                )
            )
            draws_l = resample_indices(m, hb.shape[1], seed=s, strata=[np.arange(m)])
            draws_u = resample_indices(
                n - m, hb.shape[1], seed=s + 10**6, strata=[np.arange(n - m)]
            )
            scales = (size_l / m, size_u / (n - m))
            lam_point = _influence_lambda(
                ifs, (np.ones((1, g_l)), np.ones((1, g_u))), scales
            )[0]
            lam_b = _influence_lambda(
                ifs,
                (
                    _group_counts(draws_l, size_l, g_l),
                    _group_counts(draws_u, size_u, g_u),
                ),
                scales,
            )
            lo, hi = percentile_interval(hb[s] + lam_b * (ub[s] - jlb[s]), 0.95)
            retuned.append(lo <= truth <= hi)  # type: ignore[operator]
            lam_points.append(float(lam_point))
            for tag, lam in (("", lams[s]), (" fixed lambda", float(lams.mean()))):
                tb = hb[s] + lam * (ub[s] - jlb[s])
                th = float(hp[s] + lam * (up[s] - jlp[s]))
                jack = two_sample_jackknife(
                    hj[s] + lam * (up[s] - jlj[s]), hp[s] + lam * (uj[s] - jlp[s])
                )
                p = percentile_interval(tb, 0.95)
                variants = {
                    "percentile": p,
                    "BCa": _bca(tb, th, jack, z0_on=True, a_on=True)[:2],
                    "BCa without z0": _bca(tb, th, jack, z0_on=False, a_on=True)[:2],
                    "BC (z0 only)": _bca(tb, th, jack, z0_on=True, a_on=False)[:2],
                    "normal": (th - 1.96 * tb.std(), th + 1.96 * tb.std()),
                }
                for k, (lo, hi) in variants.items():
                    cov.setdefault(k + tag, []).append(lo <= truth <= hi)
                if not tag:
                    _, _, z0, a = _bca(tb, th, jack, z0_on=True, a_on=True)
                    z0s.append(z0)
                    accs.append(a)
                    err.append(th - truth)
                    sd.append(tb.std())
                    above += p[0] > truth
                    below += p[1] < truth
        e = np.array(err)
        print(
            f"{name}: lambda {lams.mean():.2f}; error {e.mean():+.3f} "
            f"(± {e.std() / np.sqrt(studies):.3f}) SD {e.std():.3f} against "
            f"bootstrap SD {np.sqrt(np.mean(np.square(sd))):.3f}; percentile misses "
            f"above/below {above}/{below}; z0 {np.mean(z0s):+.3f} (SD "
            f"{np.std(z0s):.3f}), a {np.mean(accs):+.4f}; influence lambda "
            f"{np.mean(lam_points):.2f}"
        )
        cov["percentile, lambda re-tuned per replicate"] = retuned
        print(
            "    covers: "
            + "; ".join(f"{k} {100 * np.mean(v):.1f} %" for k, v in cov.items())
        )


def bias(args: argparse.Namespace) -> None:
    """Small-sample bias of every judge's and the people's CuBE on m questions."""
    rng = np.random.default_rng(args.seed)
    answers, scores, human = sim.simulate(rng, args.population)
    both = pl.concat([scores, _people(human, scores.columns)])
    kw: dict[str, Any] = {"options": AggregateOptions(), "dimensions": list(sim.DIMS)}
    pop = evaluate_replicates(answers, both, **kw)
    values = []
    for start in range(0, args.reps, 500):
        idx = rng.integers(
            0, args.population, size=(min(500, args.reps - start), args.m)
        )
        values.append(evaluate_replicates(answers, both, indices=idx, **kw).cube[:, 0])
    v = np.concatenate(values, axis=1)
    h = pop.judges.index(HUMAN_JUDGE)
    for j, name in enumerate(pop.judges):
        d = v[j] - pop.cube[j, 0, 0]
        rel = d - (v[h] - pop.cube[h, 0, 0])  # minus the people's (paired)
        print(
            f"{name}: population {pop.cube[j, 0, 0]:.3f}; bias on {args.m} "
            f"questions {np.nanmean(d):+.3f} ± {np.nanstd(d) / np.sqrt(d.size):.3f}"
            f"; minus the people's {np.nanmean(rel):+.3f} ± "
            f"{np.nanstd(rel) / np.sqrt(rel.size):.3f}"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    sub = parser.add_subparsers(dest="step", required=True)
    p = sub.add_parser("dump")
    p.add_argument("--n", type=int, default=1000)
    p.add_argument("--m", type=int, default=150)
    p.add_argument("--studies", type=int, default=200)
    p.add_argument("--resamples", type=int, default=400)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--out", type=Path, required=True)
    p = sub.add_parser("analyse")
    p.add_argument("dump", type=Path)
    p.add_argument("--truth", type=float, required=True)
    p.add_argument("--n", type=int, default=1000, help="if the dump lacks it")
    p.add_argument("--m", type=int, default=150, help="if the dump lacks it")
    p = sub.add_parser("bias")
    p.add_argument("--m", type=int, default=150)
    p.add_argument("--population", type=int, default=20_000)
    p.add_argument("--reps", type=int, default=2000)
    p.add_argument("--seed", type=int, default=5)
    args = parser.parse_args()
    {"dump": dump, "analyse": analyse, "bias": bias}[args.step](args)


if __name__ == "__main__":
    main()
