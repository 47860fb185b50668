"""The bootstrap's replicates (``cube_ray.aggregate.evaluate_replicates``).

Checked against the worked example's expected summary (computed by an
independent numpy/scipy implementation), against a direct per-resample scipy
computation written here, against ``summarize`` on the resampled tables, and
against the replicate values of the numpy implementation the report held
before (frozen in ``data/numpy_replicates.json``, same resample indices).
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
import pytest
from scipy import stats

from cube_ray import schema
from cube_ray.aggregate import (
    AggregateOptions,
    CubeReplicates,
    bootstrap_cube,
    evaluate_replicates,
    headline_intervals,
    resample_indices,
    summarize,
    with_intervals,
)
from cube_ray.errors import InputError

WORKED = Path(__file__).resolve().parents[2] / "examples" / "worked"
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


def _judge_summary(rep: CubeReplicates, b: int = 0) -> dict[str, Any]:
    """Replicate ``b`` in the layout of summary.json's ``judges`` block."""

    def floats(xs: np.ndarray) -> list[float | None]:
        return [None if np.isnan(x) else float(x) for x in xs]

    keys = [*rep.dimensions, "weighted"]
    out: dict[str, Any] = {}
    for ji, judge in enumerate(rep.judges):
        entry: dict[str, Any] = {
            "weights": {},
            "trimmed_means": {},
            "normalized": {},
            "recall_at_k": {},
            "cube": {},
        }
        for si, system in enumerate(rep.systems):
            entry["weights"][system] = dict(
                zip(rep.dimensions, floats(rep.weights[ji, si, b]), strict=True)
            )
            entry["trimmed_means"][system] = {
                name: dict(zip(keys, floats(rep.trimmed[key][ji, si, b]), strict=True))
                for name, key in (
                    ("zero", "zero"),
                    ("full", "full"),
                    (system, "system"),
                )
            }
            entry["normalized"][system] = dict(
                zip(keys, floats(rep.normalized[ji, si, b]), strict=True)
            )
            entry["recall_at_k"][system] = floats(rep.recall[si, b : b + 1])[0]
            entry["cube"][system] = floats(rep.cube[ji, si, b : b + 1])[0]
        out[judge] = entry
    return out


@needs_worked
def test_identity_resample_reproduces_expected_summary(
    worked: tuple[pl.DataFrame, pl.DataFrame, dict[str, Any]],
) -> None:
    answers, scores, expected = worked
    rep = evaluate_replicates(answers, scores)
    assert _max_diff(expected["judges"], _judge_summary(rep)) < 1e-9
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


@needs_worked
def test_bootstrap_replicates_match_summarize(
    worked: tuple[pl.DataFrame, pl.DataFrame, dict[str, Any]],
) -> None:
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

        result = summarize(redraw(answers), redraw(scores), options=AggregateOptions())
        for ji, judge in enumerate(rep.judges):
            for si, system in enumerate(rep.systems):
                assert rep.cube[ji, si, b] == pytest.approx(
                    result.judges[judge].cube[system], abs=1e-9
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
    assert _judge_summary(rep)["j"]["cube"]["rag"] is None


# --- the numpy implementation this replaced (frozen replicate values) --------

FROZEN = Path(__file__).with_name("data") / "numpy_replicates.json"


def _frozen_cases() -> dict[str, tuple[pl.DataFrame, pl.DataFrame, AggregateOptions]]:
    """The tables the frozen values were computed on (as /tmp/method_freeze.py)."""
    import importlib.util
    import sys

    bench = Path(__file__).resolve().parents[2] / "benchmarks" / "validity.py"
    spec = importlib.util.spec_from_file_location("validity_frozen", bench)
    assert spec is not None
    assert spec.loader is not None
    validity = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = validity
    spec.loader.exec_module(validity)
    wa = pl.read_parquet(WORKED / "answers.parquet")
    ws = pl.read_parquet(WORKED / "scores.parquet")
    ia, isc = validity.simulate_tables(np.random.default_rng(5), 80, integer=True)
    return {
        "worked_default": (wa, ws, AggregateOptions()),
        "worked_paired_trim0": (
            wa,
            ws,
            AggregateOptions(bounds_on="paired", trim=0.0),
        ),
        "worked_equal": (wa, ws, AggregateOptions(weights="equal")),
        "sim_integer": (ia, isc, AggregateOptions()),
    }


@needs_worked
def test_same_resamples_give_the_numpy_replicates() -> None:
    """The report's former numpy bootstrap, frozen on the same resample indices:
    every replicate of every figure agrees to 1e-9 (and undefined where it was
    undefined); its intervals agree too."""
    frozen = json.loads(FROZEN.read_text(encoding="utf-8"))
    for name, (answers, scores, options) in _frozen_cases().items():
        ref = frozen[name]
        idx = np.array(ref["indices"], dtype=np.int64)
        assert np.array_equal(idx, resample_indices(idx.shape[1], 12, seed=11))
        rep = evaluate_replicates(answers, scores, indices=idx, options=options)
        assert [rep.judges, rep.systems, rep.dimensions] == [
            ref["judges"],
            ref["systems"],
            ref["dimensions"],
        ]
        got = {
            "cube": rep.cube,
            "recall": rep.recall,
            "normalized": rep.normalized,
            "weights": rep.weights,
            "correlations": rep.correlations,
            "trimmed_system": rep.trimmed["system"],
            "trimmed_zero": rep.trimmed["zero"],
            "trimmed_full": rep.trimmed["full"],
            "cube_mean": rep.cube_mean,
        }
        for key, values in got.items():
            want = np.array([np.nan if v is None else v for v in ref[key]])
            have = values.ravel()
            assert np.array_equal(np.isnan(want), np.isnan(have)), (name, key)
            assert np.nanmax(np.abs(want - have)) < 1e-9, (name, key)
        boot = bootstrap_cube(answers, scores, n_resamples=200, seed=3, options=options)
        for system, result in boot.items():
            old = ref["bootstrap_200_seed3_bca"][system]
            assert result.cube == pytest.approx(tuple(old["cube"]), abs=1e-9)
            assert result.recall == pytest.approx(tuple(old["recall"]), abs=1e-9)
            assert result.n_defined == old["n_defined"]
        boot = bootstrap_cube(
            answers,
            scores,
            n_resamples=200,
            seed=3,
            options=options,
            method="percentile",
        )
        for system, result in boot.items():
            old = ref["bootstrap_200_seed3_percentile"][system]
            assert result.cube == pytest.approx(tuple(old["cube"]), abs=1e-9)


@needs_worked
def test_counts_and_indices_are_the_same_resamples(
    worked: tuple[pl.DataFrame, pl.DataFrame, dict[str, Any]],
) -> None:
    answers, scores, _ = worked
    idx = resample_indices(120, 6, seed=4)
    counts = np.stack([np.bincount(row, minlength=120) for row in idx])
    a = evaluate_replicates(answers, scores, indices=idx)
    b = evaluate_replicates(answers, scores, counts=counts)
    np.testing.assert_allclose(a.cube, b.cube, atol=1e-9)
    # A zero count leaves a question out: the identity minus question 0.
    drop = np.ones((1, 120), dtype=np.int64)
    drop[0, 0] = 0
    c = evaluate_replicates(answers, scores, counts=drop)
    d = evaluate_replicates(answers, scores, indices=np.arange(1, 120)[None, :])
    np.testing.assert_allclose(c.cube, d.cube, atol=1e-12)
    with pytest.raises(Exception, match="one count per question"):
        evaluate_replicates(answers, scores, counts=np.ones((2, 5)))


@needs_worked
def test_resampling_within_strata(
    worked: tuple[pl.DataFrame, pl.DataFrame, dict[str, Any]],
) -> None:
    """CUBE_METHOD.md section 11: n_h fixed per stratum. A stratum of one
    question draws it in every resample; a design whose strata are the systems'
    hits and misses keeps recall fixed, so its interval is a point."""
    answers, scores, _ = worked
    questions = sorted(answers[schema.QUESTION_ID].unique().to_list())
    one = {q: ("alone" if i == 0 else "rest") for i, q in enumerate(questions)}
    strata = pl.DataFrame(
        {schema.QUESTION_ID: list(one), "stratum": list(one.values())}
    )
    from cube_ray.aggregate import strata_positions

    layers = strata_positions(pl.Series(questions), strata)
    idx = resample_indices(len(questions), 300, seed=1, strata=layers)
    counts = np.stack([np.bincount(row, minlength=len(questions)) for row in idx])
    assert (counts[:, 0] == 1).all()  # the stratum of one never varies
    assert counts.sum(axis=1).tolist() == [len(questions)] * 300
    # Strata = whether rag@bm25 retrieved the gold document: its recall is the
    # same in every resample.
    bm25 = answers.filter(pl.col(schema.SYSTEM) == "rag@bm25")
    hit = bm25.select(
        schema.QUESTION_ID,
        (pl.col(schema.RANK) >= 1).cast(pl.String).alias("stratum"),
    )
    boot = bootstrap_cube(
        answers, scores, n_resamples=100, seed=2, method="percentile", strata=hit
    )
    lo, hi = boot["rag@bm25"].recall
    assert lo == pytest.approx(hi, abs=1e-12)
    plain = bootstrap_cube(answers, scores, n_resamples=100, seed=2)
    lo, hi = plain["rag@bm25"].recall
    assert hi - lo > 0.05
    # A question without a stratum is an error that names the fix.
    with pytest.raises(InputError, match="have no stratum"):
        bootstrap_cube(answers, scores, n_resamples=5, strata=hit.head(3))


@needs_worked
def test_headline_intervals_in_the_summary(
    worked: tuple[pl.DataFrame, pl.DataFrame, dict[str, Any]],
) -> None:
    answers, scores, expected = worked
    summary = summarize(answers, scores, options=AggregateOptions())
    with_iv = with_intervals(summary, answers, scores, n_resamples=200, seed=5)
    assert with_iv.intervals is not None
    assert with_iv.intervals.n_resamples == 200
    assert with_iv.intervals.method == "bca"
    for system, cell in with_iv.intervals.systems.items():
        mean = expected["across_judges"][system]["cube"]["mean"]
        assert cell.cube.low is not None
        assert cell.cube.high is not None
        assert cell.cube.low < mean < cell.cube.high
        assert cell.cube.half_width == pytest.approx(
            (cell.cube.high - cell.cube.low) / 2
        )
        assert cell.judges == summary.across_judges[system].judges
        assert cell.n_defined == 200
    direct = bootstrap_cube(
        answers,
        scores,
        n_resamples=200,
        seed=5,
        judges={s: summary.across_judges[s].judges for s in summary.systems},
    )
    for system, cell in with_iv.intervals.systems.items():
        assert (cell.cube.low, cell.cube.high) == pytest.approx(
            direct[system].cube, abs=1e-9
        )
    assert with_intervals(summary, answers, scores, n_resamples=0).intervals is None
    # Tables that are not the summary's: refused, naming the command.
    other = scores.with_columns(
        pl.when(pl.col(schema.SYSTEM) == "rag@bm25")
        .then(pl.col(schema.SCORE) * 0.5)
        .otherwise(pl.col(schema.SCORE))
        .alias(schema.SCORE)
    )
    with pytest.raises(InputError, match="cube-ray aggregate RUN_DIR"):
        headline_intervals(answers, other, summary, n_resamples=10)
