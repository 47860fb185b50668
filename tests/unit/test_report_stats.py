"""Agreement statistics, text baselines and the human-ratings reader."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import polars as pl
import pytest
from scipy import stats

from cube_ray import schema
from cube_ray.errors import InputError
from cube_ray.report import (
    bleu,
    judge_agreement,
    krippendorff_alpha_interval,
    lcs_length,
    pair_stats,
    read_human_ratings,
    rouge_l,
    tokenize,
)


def test_krippendorff_alpha_matches_reference_package() -> None:
    krippendorff = pytest.importorskip("krippendorff", reason="report extra")
    rng = np.random.default_rng(0)
    for _ in range(20):
        coders, units = int(rng.integers(2, 5)), int(rng.integers(5, 60))
        truth = rng.integers(0, 11, units)
        data = (truth + rng.integers(-2, 3, (coders, units))).clip(0, 10).astype(float)
        data[rng.random(data.shape) < 0.15] = np.nan
        expected = krippendorff.alpha(
            reliability_data=data, level_of_measurement="interval"
        )
        assert krippendorff_alpha_interval(data) == pytest.approx(expected, abs=1e-9)


def test_krippendorff_alpha_undefined() -> None:
    assert krippendorff_alpha_interval(np.array([[1.0, np.nan], [np.nan, 2.0]])) is None
    assert krippendorff_alpha_interval(np.full((2, 3), 5.0)) is None


def test_pair_stats_matches_scipy() -> None:
    rng = np.random.default_rng(1)
    x = rng.normal(size=50)
    y = x + rng.normal(size=50)
    y[[3, 9]] = np.nan
    got = pair_stats(x, y)
    ok = ~np.isnan(y)
    assert got.n == 48
    assert got.pearson == pytest.approx(stats.pearsonr(x[ok], y[ok]).statistic)
    assert got.spearman == pytest.approx(stats.spearmanr(x[ok], y[ok]).statistic)
    assert got.mae == pytest.approx(np.abs(x[ok] - y[ok]).mean())
    flat = pair_stats(np.ones(4), np.arange(4.0))
    assert flat.pearson is None
    assert flat.mae == pytest.approx(1.0)


def test_judge_agreement_pairs_and_alpha() -> None:
    rows = []
    for q in range(30):
        for judge, offset in (("a", 0), ("b", 1), ("c", q % 3)):
            rows.append(
                {
                    schema.QUESTION_ID: f"q{q}",
                    schema.SYSTEM: "rag",
                    schema.JUDGE: judge,
                    schema.DIMENSION: "relevance",
                    schema.SCORE: float(q % 10 + offset) if q != 5 else None,
                }
            )
    scores = pl.DataFrame(rows)
    pairs, alpha = judge_agreement(
        scores, judges=["a", "b", "c"], dimensions=["relevance"]
    )
    assert pairs.height == 3
    ab = pairs.filter((pl.col("judge_a") == "a") & (pl.col("judge_b") == "b"))
    assert ab["spearman"][0] == pytest.approx(1.0)
    assert ab["n"][0] == 29
    assert alpha["units"][0] == 29
    assert 0 < alpha["alpha"][0] < 1


def _lcs_dp(a: str, b: str) -> int:
    table = [[0] * (len(b) + 1) for _ in range(len(a) + 1)]
    for i, ca in enumerate(a):
        for j, cb in enumerate(b):
            table[i + 1][j + 1] = (
                table[i][j] + 1 if ca == cb else max(table[i][j + 1], table[i + 1][j])
            )
    return table[-1][-1]


def test_lcs_matches_dynamic_programming() -> None:
    rng = np.random.default_rng(2)
    alphabet = list("办理材料时限ab")
    for _ in range(200):
        a = "".join(rng.choice(alphabet, int(rng.integers(0, 30))))
        b = "".join(rng.choice(alphabet, int(rng.integers(0, 30))))
        assert lcs_length(a, b) == _lcs_dp(a, b)


def test_text_baselines() -> None:
    ref = "申请人需提交身份证原件和申请表，承诺时限为5个工作日。"
    assert tokenize("ABC 12，办理")[:2] == ["ABC", "12"]
    assert rouge_l(ref, ref) == pytest.approx(1.0)
    assert bleu(ref, ref) == pytest.approx(1.0)
    partial = "申请人需提交身份证。"
    assert 0 < rouge_l(partial, ref) < 1
    assert 0 < bleu(partial, ref) < rouge_l(partial, ref)
    assert rouge_l(None, ref) == 0.0
    assert bleu("完全无关的话", ref) == 0.0


def test_read_human_ratings(tmp_path: Path) -> None:
    good = tmp_path / "good.csv"
    good.write_text(
        "question_id,system,dimension,score\nq1,rag,relevance,7\nq1,zero,relevance,3.5\n"
    )
    frame = read_human_ratings(good)
    assert frame[schema.SCORE].to_list() == [7.0, 3.5]
    assert frame["rater"].to_list() == ["rater-1", "rater-1"]

    bad = tmp_path / "bad.csv"
    bad.write_text("question_id,system,dimension,score\nq1,rag,relevance,seven\n")
    with pytest.raises(InputError, match=r"row 0.*'seven' is not a number"):
        read_human_ratings(bad)

    missing = tmp_path / "missing.csv"
    missing.write_text("question_id,system,score\nq1,rag,7\n")
    with pytest.raises(InputError, match="dimension"):
        read_human_ratings(missing)

    with pytest.raises(InputError, match="cannot read"):
        read_human_ratings(tmp_path / "absent.csv")
