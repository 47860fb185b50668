"""Agreement statistics, text baselines and the human-ratings reader."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import polars as pl
import pytest
from scipy import stats

from cube_ray import schema
from cube_ray.aggregate import (
    bleu,
    judge_agreement,
    krippendorff_alpha_interval,
    lcs_length,
    pair_stats,
    rank_correlations,
    recall_curve,
    rouge_l,
    text_baselines,
    tokenize,
)
from cube_ray.errors import InputError
from cube_ray.report import read_human_ratings


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
    with pytest.raises(
        InputError,
        match=r"bad\.csv, line 2, field 'score': score 'seven' is not a number",
    ):
        read_human_ratings(bad)

    missing = tmp_path / "missing.csv"
    missing.write_text("question_id,system,score\nq1,rag,7\n")
    with pytest.raises(InputError, match="dimension"):
        read_human_ratings(missing)

    with pytest.raises(InputError, match="cannot read"):
        read_human_ratings(tmp_path / "absent.csv")


def test_text_baselines_against_the_full_answers() -> None:
    answers = pl.DataFrame(
        {
            schema.QUESTION_ID: ["q1", "q2"] * 3,
            schema.SYSTEM: ["full"] * 2 + ["zero"] * 2 + ["rag"] * 2,
            schema.ANSWER: ["申请人需提交身份证", "办理时限30个工作日"] * 2
            + ["申请人需提交身份证", "不知道"],
        }
    )
    scores = answers.select(schema.QUESTION_ID, schema.SYSTEM).with_columns(
        pl.Series(schema.SCORE, [9.0, 8.0, 9.0, 8.0, 9.0, 1.0])
    )
    table = text_baselines(answers, scores, sets=["zero", "rag"])
    zero, rag = table.rows(named=True)
    assert zero["bleu"] == pytest.approx(100.0)  # the same texts
    assert zero["rouge_l"] == pytest.approx(100.0)
    assert rag["n"] == 2
    assert rag["rouge_l"] == pytest.approx(50.0)  # one identical, one disjoint
    assert rag["jury"] == pytest.approx(5.0)
    assert rag["spearman"] == pytest.approx(1.0)  # ROUGE-L follows the jury


def test_rank_correlations_and_recall_curve() -> None:
    ranks = [1, 2, 0, 5, 0, 1]
    answers = pl.DataFrame(
        {
            schema.QUESTION_ID: [f"q{i}" for i in range(6)],
            schema.SYSTEM: "rag",
            schema.RANK: ranks,
        }
    )
    values = [9.0, 8.0, 2.0, None, 3.0, 7.0]
    scores = answers.select(schema.QUESTION_ID, schema.SYSTEM).with_columns(
        pl.lit("j").alias(schema.JUDGE),
        pl.lit("d").alias(schema.DIMENSION),
        pl.Series(schema.SCORE, values),
    )
    got = rank_correlations(answers, scores, k=8, systems=["rag"]).row(0, named=True)
    rs = np.array([9.0, 8.0, 0.0, 5.0, 0.0, 9.0])  # k + 2 - rank, 0 when missed
    ok = np.array([v is not None for v in values])
    y = np.array([np.nan if v is None else v for v in values])
    assert got["r_all"] == pytest.approx(stats.pearsonr(rs[ok], y[ok]).statistic)
    hit = ok & (np.array(ranks) >= 1)
    assert got["r_retrieved"] == pytest.approx(
        stats.pearsonr(rs[hit], y[hit]).statistic
    )
    curve = recall_curve(answers, systems=["rag"], k_max=5)
    assert curve["recall"].to_list() == pytest.approx(
        [2 / 6, 3 / 6, 3 / 6, 3 / 6, 4 / 6]
    )
