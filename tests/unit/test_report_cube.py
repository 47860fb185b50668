"""The report's vectorised CuBE recomputation and bootstrap.

Checked against the worked example's expected summary (computed by an
independent numpy/scipy implementation), against a direct per-resample scipy
computation written here, and against ``cube_ray.aggregate.summarize`` when it
is importable.
"""

from __future__ import annotations

import importlib
import json
import time
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
import pytest
from scipy import stats

from cube_ray import schema
from cube_ray.aggregate import AggregateOptions
from cube_ray.report import (
    bootstrap_cube,
    evaluate_replicates,
    masked_pearson,
    masked_trimmed_mean,
    resample_indices,
)

WORKED = Path(__file__).resolve().parents[3] / "shared" / "examples" / "worked"
needs_worked = pytest.mark.skipif(
    not WORKED.is_dir(), reason=f"worked example not found at {WORKED}"
)


@pytest.fixture(scope="module")
def worked() -> tuple[pl.DataFrame, pl.DataFrame, dict[str, Any]]:
    if not WORKED.is_dir():
        pytest.skip(f"worked example not found at {WORKED}")
    return (
        pl.read_parquet(WORKED / "answers.parquet"),
        pl.read_parquet(WORKED / "scores.parquet"),
        json.loads((WORKED / "expected_summary.json").read_text()),
    )


def _max_diff(expected: Any, got: Any, path: str = "") -> float:
    if isinstance(expected, dict):
        return max(
            (_max_diff(v, got[k], f"{path}.{k}") for k, v in expected.items()),
            default=0.0,
        )
    if expected is None or got is None:
        assert expected is None, path
        assert got is None, path
        return 0.0
    return abs(float(expected) - float(got))


@needs_worked
def test_identity_resample_reproduces_expected_summary(
    worked: tuple[pl.DataFrame, pl.DataFrame, dict[str, Any]],
) -> None:
    answers, scores, expected = worked
    rep = evaluate_replicates(answers, scores)
    assert _max_diff(expected["judges"], rep.judge_summary(0)) < 1e-9
    for si, system in enumerate(rep.systems):
        across = expected["across_judges"][system]
        assert rep.cube_mean[si, 0] == pytest.approx(across["cube"]["mean"], abs=1e-9)
        assert rep.weighted_mean[si, 0] == pytest.approx(
            across["weighted"]["mean"], abs=1e-9
        )


# --- a direct, loop-per-resample computation (independent of the report) ----


def _pearson(x: np.ndarray, y: np.ndarray) -> float:
    ok = ~(np.isnan(x) | np.isnan(y))
    x, y = x[ok], y[ok]
    if x.size < 2 or np.ptp(x) == 0 or np.ptp(y) == 0:
        return float("nan")
    return float(np.corrcoef(x, y)[0, 1])


def _trim(x: np.ndarray) -> float:
    x = x[~np.isnan(x)]
    return float(stats.trim_mean(x, 0.1)) if x.size else float("nan")


def _direct_cube(
    answers: pl.DataFrame, scores: pl.DataFrame, draw: list[str], *, k: int = 8
) -> dict[tuple[str, str], float]:
    """CuBE per (judge, system) for one resample, straight from CUBE_METHOD.md."""
    sel = pl.DataFrame({schema.QUESTION_ID: draw, "draw": range(len(draw))})
    ans = sel.join(answers, on=schema.QUESTION_ID)
    sc = sel.join(scores, on=schema.QUESTION_ID)
    dims = scores.get_column(schema.DIMENSION).unique(maintain_order=True).to_list()
    out = {}
    systems = [s for s in ans[schema.SYSTEM].unique() if schema.is_rag_system(s)]
    for system in systems:
        a = ans.filter(pl.col(schema.SYSTEM) == system).sort("draw")
        rank = a[schema.RANK].fill_null(0).to_numpy().astype(float)
        n_ret = a[schema.RETRIEVED_DOC_IDS].list.len().fill_null(0).to_numpy()
        rs = np.where(rank >= 1, k + 2 - rank, 0) + ((rank == 1) & (n_ret == 1))
        recall = float((rank >= 1).mean())
        for judge in scores[schema.JUDGE].unique():

            def col(set_name: str, dim: str, judge: str = judge) -> np.ndarray:
                part = sc.filter(
                    (pl.col(schema.SYSTEM) == set_name)
                    & (pl.col(schema.JUDGE) == judge)
                    & (pl.col(schema.DIMENSION) == dim)
                ).select("draw", schema.SCORE)
                full = sel.select("draw").join(part, on="draw", how="left").sort("draw")
                return full[schema.SCORE].cast(pl.Float64).fill_null(np.nan).to_numpy()

            r = np.array([_pearson(rs, col(system, d)) for d in dims])
            pos = np.maximum(np.nan_to_num(r), 0)
            w = pos / pos.sum() if pos.sum() > 0 else np.full(len(dims), 1 / len(dims))
            a_rows = a["draw"].to_numpy()
            retrieved = np.zeros(len(draw), bool)
            retrieved[a_rows] = rank >= 1
            t_sys = sum(
                wi * _trim(col(system, d)[retrieved])
                for wi, d in zip(w, dims, strict=True)
            )
            t_zero = sum(
                wi * _trim(col("zero", d)) for wi, d in zip(w, dims, strict=True)
            )
            t_full = sum(
                wi * _trim(col("full", d)) for wi, d in zip(w, dims, strict=True)
            )
            norm = 100 * (t_sys - t_zero) / (t_full - t_zero)
            out[(judge, system)] = norm * recall
    return out


@needs_worked
def test_bootstrap_replicates_match_direct_resampling(
    worked: tuple[pl.DataFrame, pl.DataFrame, dict[str, Any]],
) -> None:
    answers, scores, _ = worked
    questions = sorted(answers[schema.QUESTION_ID].unique().to_list())
    n_resamples, seed = 20, 7
    idx = resample_indices(len(questions), n_resamples, seed=seed)
    rep = evaluate_replicates(answers, scores, indices=idx)
    direct_means = {s: [] for s in rep.systems}
    for b in range(n_resamples):
        draw = [questions[i] for i in idx[b]]
        direct = _direct_cube(answers, scores, draw)
        for (judge, system), value in direct.items():
            ji, si = rep.judges.index(judge), rep.systems.index(system)
            assert rep.cube[ji, si, b] == pytest.approx(value, abs=1e-9)
        for system in rep.systems:
            direct_means[system].append(
                np.mean([v for (_, s), v in direct.items() if s == system])
            )
    # The interval is the percentile interval of exactly these replicates.
    boot = bootstrap_cube(
        answers, scores, n_resamples=n_resamples, seed=seed, method="percentile"
    )
    for system, values in direct_means.items():
        lo, hi = np.quantile(values, [0.025, 0.975])
        assert boot[system].cube == pytest.approx((lo, hi), abs=1e-9)
        assert boot[system].n_defined == n_resamples


def _summarize_or_skip() -> tuple[Any, Any]:
    try:
        agg = importlib.import_module("cube_ray.aggregate")
    except ModuleNotFoundError:
        pytest.skip("cube_ray.aggregate is not written yet")
    summarize = getattr(agg, "summarize", None)
    options = getattr(agg, "AggregateOptions", None)
    if summarize is None or options is None:
        pytest.skip("cube_ray.aggregate.summarize / AggregateOptions not available")
    return summarize, options


@needs_worked
def test_bootstrap_replicates_match_summarize(
    worked: tuple[pl.DataFrame, pl.DataFrame, dict[str, Any]],
) -> None:
    summarize, options_cls = _summarize_or_skip()
    answers, scores, _ = worked
    questions = sorted(answers[schema.QUESTION_ID].unique().to_list())
    idx = resample_indices(len(questions), 5, seed=3)
    rep = evaluate_replicates(answers, scores, indices=idx)
    for b in range(idx.shape[0]):
        # Draw ids made unique so a question drawn twice counts twice.
        sel = pl.DataFrame(
            {
                schema.QUESTION_ID: [questions[i] for i in idx[b]],
                "new_id": [f"b{j:04d}" for j in range(len(questions))],
            }
        )

        def redraw(frame: pl.DataFrame, sel: pl.DataFrame = sel) -> pl.DataFrame:
            return (
                sel.join(frame, on=schema.QUESTION_ID)
                .drop(schema.QUESTION_ID)
                .rename({"new_id": schema.QUESTION_ID})
                .select(frame.columns)
            )

        result = summarize(redraw(answers), redraw(scores), options=options_cls())
        for ji, judge in enumerate(rep.judges):
            for si, system in enumerate(rep.systems):
                assert rep.cube[ji, si, b] == pytest.approx(
                    result["judges"][judge]["cube"][system], abs=1e-9
                )


@needs_worked
def test_bootstrap_is_fast(
    worked: tuple[pl.DataFrame, pl.DataFrame, dict[str, Any]],
) -> None:
    answers, scores, expected = worked
    start = time.perf_counter()
    boot = bootstrap_cube(answers, scores, n_resamples=1000, seed=0)
    elapsed = time.perf_counter() - start
    assert elapsed < 20, f"1000 resamples took {elapsed:.1f} s"
    for system, result in boot.items():
        lo, hi = result.cube
        assert lo is not None
        assert hi is not None
        assert lo < expected["across_judges"][system]["cube"]["mean"] < hi


def test_masked_trimmed_mean_matches_scipy() -> None:
    rng = np.random.default_rng(0)
    for _ in range(50):
        n = int(rng.integers(1, 40))
        x = rng.integers(0, 11, n).astype(float)
        x[rng.random(n) < 0.2] = np.nan
        got = masked_trimmed_mean(x[None, :], 0.1)[0]
        kept = x[~np.isnan(x)]
        if kept.size == 0:
            assert np.isnan(got)
        else:
            assert got == pytest.approx(stats.trim_mean(kept, 0.1), abs=1e-12)


def test_masked_pearson_matches_numpy_and_undefined_cases() -> None:
    rng = np.random.default_rng(1)
    x = rng.normal(size=(20, 30))
    y = x + rng.normal(size=(20, 30))
    y[rng.random(y.shape) < 0.1] = np.nan
    got = masked_pearson(x, y)
    for i in range(20):
        ok = ~np.isnan(y[i])
        assert got[i] == pytest.approx(np.corrcoef(x[i, ok], y[i, ok])[0, 1])
    const = masked_pearson(np.array([[1.0, 1.0, 1.0]]), np.array([[1.0, 2.0, 3.0]]))
    single = masked_pearson(np.array([[1.0, 2.0]]), np.array([[1.0, np.nan]]))
    assert np.isnan(const[0])
    assert np.isnan(single[0])


def _tiny(
    ranks: list[int], n_retrieved: list[int], rag_scores: list[float]
) -> tuple[pl.DataFrame, pl.DataFrame]:
    qids = [f"q{i}" for i in range(len(ranks))]
    answers = pl.concat(
        [
            pl.DataFrame(
                {
                    schema.QUESTION_ID: qids,
                    schema.DOC_ID: [f"d{i}" for i in range(len(ranks))],
                    schema.SYSTEM: [system] * len(ranks),
                    schema.ANSWER: ["a"] * len(ranks),
                    schema.RETRIEVED_DOC_IDS: [
                        None if system != "rag" else ["x"] * n for n in n_retrieved
                    ],
                    schema.RANK: [None if system != "rag" else r for r in ranks],
                },
                schema_overrides={
                    schema.RETRIEVED_DOC_IDS: pl.List(pl.String),
                    schema.RANK: pl.Int32,
                },
            )
            for system in ("zero", "full", "rag")
        ]
    )
    set_scores = {"zero": [2.0] * len(ranks), "full": [9.0] * len(ranks)}
    set_scores["rag"] = rag_scores
    scores = pl.concat(
        [
            pl.DataFrame(
                {
                    schema.QUESTION_ID: qids,
                    schema.SYSTEM: [system] * len(ranks),
                    schema.JUDGE: ["j"] * len(ranks),
                    schema.DIMENSION: ["relevance"] * len(ranks),
                    schema.SCORE: values,
                    schema.STATUS: ["ok"] * len(ranks),
                    schema.RAW: ["x"] * len(ranks),
                }
            )
            for system, values in set_scores.items()
        ]
    )
    return answers, scores


def test_three_row_literal_frames() -> None:
    # rank 1 with only the gold document retrieved earns the +1 bonus (k=8: 10).
    answers, scores = _tiny([1, 3, 0], [1, 8, 8], [9.0, 7.0, 1.0])
    rep = evaluate_replicates(answers, scores, options=AggregateOptions(trim=0.0))
    expected_r = np.corrcoef([10.0, 7.0, 0.0], [9.0, 7.0, 1.0])[0, 1]
    assert rep.correlations[0, 0, 0, 0] == pytest.approx(expected_r)
    assert rep.recall[0, 0] == pytest.approx(2 / 3)
    # rag trimmed mean over retrieved only: (9 + 7) / 2 = 8 -> 100 * 6 / 7.
    assert rep.normalized[0, 0, 0, -1] == pytest.approx(100 * 6 / 7)
    assert rep.cube[0, 0, 0] == pytest.approx(100 * 6 / 7 * 2 / 3)
    assert not rep.equal_fallback[0, 0, 0]


def test_equal_weight_fallback_and_degenerate_bounds() -> None:
    answers, scores = _tiny([1, 3, 0], [8, 8, 8], [1.0, 7.0, 9.0])
    rep = evaluate_replicates(answers, scores)
    assert rep.equal_fallback[0, 0, 0]
    assert rep.weights[0, 0, 0, 0] == pytest.approx(1.0)
    flat = scores.with_columns(
        pl.when(pl.col(schema.SYSTEM) == "full")
        .then(2.0)
        .otherwise(pl.col(schema.SCORE))
        .alias(schema.SCORE)
    )
    rep = evaluate_replicates(answers, flat)
    assert np.isnan(rep.normalized[0, 0, 0, -1])
    assert np.isnan(rep.cube[0, 0, 0])
    assert rep.judge_summary()["j"]["cube"]["rag"] is None
