"""BCa's acceleration under a stratified design (CUBE_METHOD.md sections 10, 11).

The stratified bootstrap holds each stratum's size fixed, so the jackknife
behind BCa's acceleration leaves questions out within strata and centres each
stratum's deviations on its own mean (the multi-sample acceleration). Checked
against the closed form of a stratified mean, and end to end through
``bootstrap_cube`` and the paired comparison on the worked example.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import polars as pl
import pytest

from cube_ray import schema
from cube_ray.aggregate import (
    bca_interval,
    compare_systems,
    evaluate_replicates,
    jackknife_indices,
    resample_indices,
    strata_positions,
)
from cube_ray.aggregate._intervals import _bootstrap
from cube_ray.aggregate._resample import stratified_jackknife, within_strata

WORKED = Path(__file__).resolve().parents[2] / "examples" / "worked"


def _acceleration(jackknife: np.ndarray) -> float:
    """The acceleration ``bca_interval`` computes from jackknife values."""
    dev = jackknife.mean() - jackknife
    return float(np.sum(dev**3) / (6.0 * np.sum(dev**2) ** 1.5))


def test_each_question_is_left_out_once_within_its_stratum() -> None:
    rng = np.random.default_rng(3)
    labels = rng.integers(0, 4, 1000)
    labels[17] = 9  # a stratum of one question
    order = np.argsort(labels, kind="stable")
    strata = [order[labels[order] == h] for h in np.unique(labels)]
    counts, layer = stratified_jackknife(strata, 1000)
    left = counts == 0
    # Every question once, but the stratum of one (never resampled) never.
    assert left.sum(axis=0).tolist() == [0 if q == 17 else 1 for q in range(1000)]
    # Each row leaves out questions of its own stratum only.
    for row, h in zip(left, layer, strict=True):
        assert set(labels[row]) == {np.unique(labels)[h]}
    # About 200 rows, shared in proportion to the strata's sizes.
    assert 195 <= counts.shape[0] <= 205
    sizes = np.array([s.size for s in strata[:4]])
    rows = np.bincount(layer, minlength=5)[:4]
    np.testing.assert_allclose(rows / rows.sum(), sizes / sizes.sum(), atol=0.01)
    # Small strata: delete-one.
    counts, layer = stratified_jackknife([np.arange(3), np.arange(3, 5)], 5)
    assert counts.shape == (5, 5)
    assert layer.tolist() == [0, 0, 0, 1, 1]


def test_acceleration_is_the_stratified_skewness_of_a_stratified_mean() -> None:
    """For a stratified sample's mean (equal n_h) the BCa acceleration is
    ``sum e^3 / (6 (sum e^2)^1.5)`` with e = x - mean of x's stratum: the
    skewness of the estimator's stratified-bootstrap distribution. The strata
    differ in level and in size of spread only; the plain jackknife also counts
    the differences between strata, which the design holds fixed."""
    rng = np.random.default_rng(11)
    n_h = 50
    x = np.concatenate(
        [
            rng.exponential(1.0, n_h),  # skewed within its stratum
            10.0 + rng.normal(0.0, 0.5, n_h),
            30.0 + rng.normal(0.0, 0.5, n_h),
            31.0 + rng.normal(0.0, 0.5, n_h),
        ]
    )
    layers = [np.arange(h * n_h, (h + 1) * n_h) for h in range(4)]
    e = np.concatenate([x[p] - x[p].mean() for p in layers])
    exact = float(np.sum(e**3) / (6.0 * np.sum(e**2) ** 1.5))

    counts, layer = stratified_jackknife(layers, x.size)
    jack = (counts @ x) / counts.sum(axis=1)  # the mean with one question out
    ours = _acceleration(within_strata(jack, layer))
    assert ours == pytest.approx(exact, rel=1e-9)

    plain = np.array([np.delete(x, i).mean() for i in range(x.size)])
    assert abs(_acceleration(plain) - exact) > 0.5 * abs(exact)


def test_within_strata_leaves_out_undefined_values_and_lone_rows() -> None:
    jack = np.array([1.0, np.nan, 3.0, 5.0, 7.0])
    out = within_strata(jack, np.array([0, 0, 0, 1, 2]))
    # Stratum 0 keeps its two finite values (times 1/2); 1 and 2 add nothing.
    assert out.tolist() == [-0.5, 0.5]
    assert within_strata(np.array([np.nan]), np.array([0])).size == 0


@pytest.fixture(scope="module")
def worked() -> tuple[pl.DataFrame, pl.DataFrame, pl.DataFrame]:
    if not WORKED.is_dir():
        pytest.skip(f"worked example not found at {WORKED}")
    answers = pl.read_parquet(WORKED / "answers.parquet")
    scores = pl.read_parquet(WORKED / "scores.parquet")
    # Strata = whether rag@hybrid retrieved the gold document: they differ a
    # lot in CuBE, which is what the plain jackknife mistakes for skewness.
    strata = answers.filter(pl.col(schema.SYSTEM) == "rag@hybrid").select(
        schema.QUESTION_ID,
        (pl.col(schema.RANK) >= 1).cast(pl.String).alias("stratum"),
    )
    return answers, scores, strata


def test_bootstrap_cube_bca_reads_the_stratified_jackknife(
    worked: tuple[pl.DataFrame, pl.DataFrame, pl.DataFrame],
) -> None:
    answers, scores, strata = worked
    kw = {"n_resamples": 400, "seed": 3, "confidence": 0.95, "method": "bca"}
    results, reps = _bootstrap(
        answers,
        scores,
        options=None,
        fixed_weights=None,
        dimensions=None,
        judges=None,
        strata=strata,
        **kw,  # type: ignore[arg-type]
    )
    # The same interval computed step by step from the public pieces.
    questions = answers[schema.QUESTION_ID].unique().sort()
    layers = strata_positions(questions, strata)
    n = questions.len()
    boot = evaluate_replicates(
        answers, scores, indices=resample_indices(n, 400, seed=3, strata=layers)
    )
    point = evaluate_replicates(answers, scores)
    counts, layer = stratified_jackknife(layers, n)
    jack = evaluate_replicates(answers, scores, counts=counts)
    plain = evaluate_replicates(answers, scores, indices=jackknife_indices(n))
    assert reps.jack_strata is not None
    assert reps.jack_strata.tolist() == layer.tolist()
    moved = 0.0
    for si, system in enumerate(boot.systems):
        est = float(point.cube_mean[si, 0])
        want = bca_interval(
            boot.cube_mean[si], est, within_strata(jack.cube_mean[si], layer), 0.95
        )
        assert results[system].cube == pytest.approx(want, abs=1e-9)
        before = bca_interval(boot.cube_mean[si], est, plain.cube_mean[si], 0.95)
        moved = max(moved, abs(want[0] - before[0]) + abs(want[1] - before[1]))  # type: ignore[operator]
    # The plain jackknife's acceleration is not the design's (for rag@hybrid,
    # whose hits and misses are the strata: -0.006 against +0.001); the
    # intervals differ by more than rounding (0.06 CuBE points).
    assert moved > 0.01

    # The paired comparison of the two systems reads the same acceleration.
    (pair,) = compare_systems(
        reps,
        answers=answers,
        judges={s: boot.judges for s in boot.systems},
        method="bca",
        confidence=0.95,
    )
    diff = boot.cube_mean[0] - boot.cube_mean[1]
    want = bca_interval(
        diff,
        float(point.cube_mean[0, 0] - point.cube_mean[1, 0]),
        within_strata(jack.cube_mean[0] - jack.cube_mean[1], layer),
        0.95,
    )
    assert (pair.interval.low, pair.interval.high) == pytest.approx(want, abs=1e-9)


def test_without_strata_the_jackknife_is_unchanged(
    worked: tuple[pl.DataFrame, pl.DataFrame, pl.DataFrame],
) -> None:
    answers, scores, _ = worked
    _, reps = _bootstrap(
        answers,
        scores,
        n_resamples=50,
        seed=1,
        confidence=0.95,
        method="bca",
        options=None,
        fixed_weights=None,
        dimensions=None,
        judges=None,
        strata=None,
    )
    assert reps.jack_strata is None
    assert reps.jack is not None
    assert reps.jack.cube.shape[2] == 120  # delete-one over all questions


def test_strata_of_one_question_each_give_a_point(
    worked: tuple[pl.DataFrame, pl.DataFrame, pl.DataFrame],
) -> None:
    """Every stratum one question: the design never varies, there is nothing
    to leave out, and the BCa interval is the estimate itself."""
    answers, scores, _ = worked
    ids = answers[schema.QUESTION_ID].unique()
    alone = pl.DataFrame({schema.QUESTION_ID: ids, "stratum": ids})
    results, reps = _bootstrap(
        answers,
        scores,
        n_resamples=20,
        seed=1,
        confidence=0.95,
        method="bca",
        options=None,
        fixed_weights=None,
        dimensions=None,
        judges=None,
        strata=alone,
    )
    assert reps.jack is None
    for result in results.values():
        assert result.estimate is not None
        assert result.cube == pytest.approx((result.estimate, result.estimate))
