"""The calibrated CuBE of CUBE_METHOD.md section 13 on crafted data.

An exact small case by hand, lambda = 0 giving the humans' own CuBE (as the
report's independent comparison computes it), power tuning that trusts a judge
that agrees with the humans and ignores one that does not, and clear errors.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import polars as pl
import pytest

from cube_ray import schema
from cube_ray.aggregate import (
    AggregateOptions,
    calibrate,
    calibrated_value,
    compare_with_humans,
    power_tuned_lambda,
    summarize,
    with_calibration,
    with_intervals,
)
from cube_ray.aggregate._calibrated_checks import PEOPLE_NOT_SEPARATED
from cube_ray.config import RunConfig
from cube_ray.errors import InputError
from cube_ray.pipeline.calibration import calibrate_run
from cube_ray.report._calibrated import calibrated_section
from cube_ray.report._data import RunData
from cube_ray.report._render import Para, Table

REL = "relevance"
CONF = Path(__file__).resolve().parents[2] / "conf"


def _answers(qids: list[str], rank: list[int]) -> pl.DataFrame:
    n = len(qids)
    return pl.DataFrame(
        {
            schema.QUESTION_ID: qids * 3,
            schema.SYSTEM: ["zero"] * n + ["full"] * n + ["rag"] * n,
            schema.RANK: [None] * (2 * n) + rank,
        },
        schema_overrides={schema.RANK: pl.Int32},
    )


def _rows(
    qids: list[str], by_set: dict[str, list[float]], judge: str | None
) -> pl.DataFrame:
    frames = []
    for system, values in by_set.items():
        cols: dict[str, object] = {
            schema.QUESTION_ID: qids,
            schema.SYSTEM: [system] * len(qids),
            schema.DIMENSION: [REL] * len(qids),
            schema.SCORE: [float(v) for v in values],
        }
        if judge is not None:
            cols[schema.JUDGE] = [judge] * len(qids)
            cols[schema.STATUS] = ["ok"] * len(qids)
        frames.append(pl.DataFrame(cols))
    out = pl.concat(frames)
    if judge is None:
        return out
    return out.select(
        schema.QUESTION_ID,
        schema.SYSTEM,
        schema.JUDGE,
        schema.DIMENSION,
        schema.SCORE,
        schema.STATUS,
    )


QIDS = ["q1", "q2", "q3", "q4"]
ANSWERS = _answers(QIDS, [1, 1, 1, 1])
JUDGE = _rows(
    QIDS,
    {"zero": [3, 3, 2, 2], "full": [9, 7, 8, 8], "rag": [7, 7, 7, 5]},
    "a",
)
HUMANS = _rows(QIDS[:2], {"zero": [2, 4], "full": [8, 8], "rag": [6, 5]}, None)
OPTIONS = AggregateOptions(trim=0.0)


def test_small_case_by_hand() -> None:
    # L = q1, q2; U = q3, q4; one dimension, no trimming, every rank 1.
    # humans on L: zero 3, full 8, rag 5.5 -> 100 * 2.5 / 5 = 50
    # judge on L:  zero 3, full 8, rag 7   -> 100 * 4 / 5   = 80
    # judge on U:  zero 2, full 8, rag 6   -> 100 * 4 / 6   = 66.67
    # judge on all: zero 2.5, full 8, rag 6.5 -> 100 * 4 / 5.5 = 72.73
    result = calibrate(
        ANSWERS, JUDGE, HUMANS, options=OPTIONS, n_resamples=200, method="percentile"
    )
    fig = result.calibrated["a"]["rag"]
    assert fig.human_only == pytest.approx(50.0)
    assert fig.judge_cube == pytest.approx(400.0 / 5.5)
    assert 0.0 <= fig.lambda_ <= 1.0
    assert fig.cube == pytest.approx(50.0 + fig.lambda_ * (400.0 / 6.0 - 80.0))
    assert fig.n_labeled == 2
    assert result.block.n_labeled == 2
    assert result.block.n_unlabeled == 2
    # The jury of one judge is that judge.
    assert result.block.across_judges["rag"].cube == pytest.approx(fig.cube)
    assert result.block.across_judges["rag"].judges == ["a"]


def test_everything_audited_is_the_human_figure() -> None:
    humans = _rows(
        QIDS, {"zero": [2, 4, 3, 3], "full": [8, 8, 7, 9], "rag": [6, 5, 4, 5]}, None
    )
    fig = calibrate(
        ANSWERS, JUDGE, humans, options=OPTIONS, n_resamples=50, method="percentile"
    ).calibrated["a"]["rag"]
    # zero 3, full 8, rag 5 -> 40; no unlabeled question: lambda 0.
    assert fig.lambda_ == 0.0
    assert fig.cube == pytest.approx(40.0)
    assert fig.human_only == pytest.approx(40.0)
    assert fig.interval == fig.human_only_interval


def _study(
    seed: int, n: int, m: int
) -> tuple[pl.DataFrame, pl.DataFrame, pl.DataFrame, pl.DataFrame]:
    """Answers, scores of a judge that mirrors the humans and of a random
    judge, the audit's human scores and the humans' scores of every answer."""
    rng = np.random.default_rng(seed)
    qids = [f"q{i:04d}" for i in range(n)]
    hit = rng.random(n) < 0.8
    rank = np.where(hit, rng.integers(1, 9, n), 0).tolist()
    u = rng.normal(0.0, 0.8, n)
    means = {"zero": np.full(n, 3.0), "full": np.full(n, 7.0)}
    means["rag"] = np.where(hit, 5.5, 3.0)
    human = {
        s: np.clip(np.rint(mu + u + rng.normal(0, 1, n)), 0, 10)
        for s, mu in means.items()
    }
    noise = {s: rng.integers(0, 11, n).astype(float) for s in means}
    scores = pl.concat(
        [
            _rows(qids, {s: list(v) for s, v in human.items()}, "mirror"),
            _rows(qids, {s: list(v) for s, v in noise.items()}, "random"),
        ]
    )
    everyone = _rows(qids, {s: list(v) for s, v in human.items()}, None)
    audit = everyone.filter(pl.col(schema.QUESTION_ID).is_in(qids[:m]))
    return _answers(qids, rank), scores, audit, everyone


def test_lambda_zero_is_the_human_only_figure() -> None:
    answers, scores, audit, _ = _study(3, 200, 40)
    result = calibrate(answers, scores, audit, n_resamples=100, method="percentile")
    fig = result.calibrated["random"]["rag"]
    # The report's own comparison computes the humans' CuBE independently.
    comp = compare_with_humans(
        audit.with_columns(pl.lit("r1").alias("rater")),
        answers=answers,
        scores=scores,
        judges=["mirror", "random"],
        dimensions=[REL],
        options=AggregateOptions(),
    )
    human_cube = comp.cube.row(0, named=True)["human_cube"]
    assert fig.human_only == pytest.approx(human_cube)
    assert float(calibrated_value(fig.human_only, 80.0, 30.0, 0.0)) == fig.human_only


def test_power_tuning_trusts_an_agreeing_judge_only() -> None:
    answers, scores, audit, _ = _study(5, 400, 60)
    result = calibrate(answers, scores, audit, n_resamples=300, method="percentile")
    mirror = result.calibrated["mirror"]["rag"]
    random = result.calibrated["random"]["rag"]
    # A judge identical to the humans: lambda = var(H) / (var(H) + var(U)),
    # about 340 / 400; the interval narrows by about that factor's root.
    assert mirror.lambda_ > 0.7
    assert mirror.gain is not None
    assert mirror.gain > 2.5
    assert mirror.equivalent_labeled is not None
    assert mirror.equivalent_labeled > 150
    # A judge that scores at random carries no information about the humans.
    assert random.lambda_ < 0.3
    assert random.gain is not None
    assert random.gain < 1.3


def test_power_tuned_lambda_minimises_the_variance() -> None:
    rng = np.random.default_rng(0)
    h = rng.normal(50, 4, 500)
    jl = h + rng.normal(0, 2, 500) + 10.0
    ju = rng.normal(60, 1.5, 500)
    lam = power_tuned_lambda(h, jl, ju)
    best = np.var(calibrated_value(h, jl, ju, lam))
    for other in np.linspace(0.0, 1.0, 21):
        assert best <= np.var(calibrated_value(h, jl, ju, float(other))) + 1e-12
    assert 0.0 < lam < 1.0


def test_a_rating_of_an_unknown_answer_is_refused() -> None:
    bad = pl.concat(
        [
            HUMANS,
            pl.DataFrame(
                {
                    schema.QUESTION_ID: ["q9"],
                    schema.SYSTEM: ["rag"],
                    schema.DIMENSION: [REL],
                    schema.SCORE: [5.0],
                }
            ),
        ]
    )
    with pytest.raises(InputError) as info:
        calibrate(ANSWERS, JUDGE, bad, options=OPTIONS, source="human.csv")
    text = str(info.value)
    assert "human.csv" in text
    assert "row 7" in text
    assert "'q9'" in text
    assert info.value.field == schema.QUESTION_ID


def test_a_score_off_the_scale_and_an_unknown_dimension_are_refused() -> None:
    off = HUMANS.with_columns(
        pl.when(pl.int_range(pl.len()) == 1)
        .then(12.0)
        .otherwise(pl.col(schema.SCORE))
        .alias(schema.SCORE)
    )
    with pytest.raises(InputError, match="outside 0-10") as info:
        calibrate(ANSWERS, JUDGE, off, options=OPTIONS)
    assert info.value.row == 1
    odd = HUMANS.with_columns(pl.lit("tone").alias(schema.DIMENSION))
    with pytest.raises(InputError, match="'tone' is not one of"):
        calibrate(ANSWERS, JUDGE, odd, options=OPTIONS)


def test_the_run_adds_the_same_calibration(tmp_path: Path) -> None:
    """``cube-ray run --human``'s step gives what ``with_calibration`` gives."""
    answers, scores, audit, _ = _study(9, 120, 30)
    answers = answers.with_columns(
        pl.col(schema.QUESTION_ID).str.replace("q", "d").alias(schema.DOC_ID),
        pl.lit("...").alias(schema.ANSWER),
        pl.lit(None, dtype=pl.List(pl.String)).alias(schema.RETRIEVED_DOC_IDS),
    )
    scores = scores.with_columns(pl.lit(None, dtype=pl.String).alias(schema.RAW))
    for table, frame in (("answers", answers), ("scores", scores)):
        (tmp_path / table).mkdir()
        frame.write_parquet(tmp_path / table / "part-00000.parquet")
    human = tmp_path / "human.csv"
    audit.write_csv(human)
    summary = with_intervals(
        summarize(answers, scores, options=AggregateOptions()),
        answers,
        scores,
        n_resamples=40,
    )
    config = RunConfig.from_yaml(CONF / "demo.yaml")
    got = calibrate_run(config, tmp_path, summary, human)
    want = with_calibration(
        summary, answers, scores, audit, n_resamples=40, source=str(human)
    )
    assert got.calibrated == want.calibrated
    assert got.calibration == want.calibration


def test_people_who_do_not_separate_the_bounds_get_no_headline() -> None:
    """Section 10 on the audit: the people's own bounds must be apart."""
    answers, scores, audit, _ = _study(11, 200, 40)
    summary = summarize(answers, scores, options=AggregateOptions())
    good = with_calibration(summary, answers, scores, audit, n_resamples=60)
    assert good.calibration is not None
    sep = good.calibration.people_separation["rag"]
    # zero 3 against full 7 on 40 questions: 4 points apart, p tiny.
    assert sep.separated
    assert sep.gap is not None
    assert sep.gap > 3.0
    assert sep.n_pairs == 40
    assert good.calibration.reasons == {}
    # People who give the full answers what they give the zero answers
    # (give or take one point): no gap to divide by.
    rng = np.random.default_rng(4)
    zero = audit.filter(pl.col(schema.SYSTEM) == "zero")
    lazy = pl.concat(
        [
            audit.filter(pl.col(schema.SYSTEM) != "full"),
            zero.with_columns(
                pl.lit("full").alias(schema.SYSTEM),
                (pl.col(schema.SCORE) + rng.integers(-1, 2, zero.height))
                .clip(0.0, 10.0)
                .alias(schema.SCORE),
            ),
        ]
    )
    bad = with_calibration(summary, answers, scores, lazy, n_resamples=60)
    assert bad.calibration is not None
    assert not bad.calibration.people_separation["rag"].separated
    reason = bad.calibration.reasons["rag"]
    assert reason.code == PEOPLE_NOT_SEPARATED
    assert reason.n_pairs == 40
    assert reason.gap is not None
    assert abs(reason.gap) < 0.5
    assert reason.min_gap == 0.5
    assert "do not tell" in reason.text
    # Nothing is hidden in the summary: the figures stay.
    assert bad.calibrated is not None
    assert "rag" in bad.calibrated["mirror"]
    # The report gives the reason in plain words instead of the figures.
    section = calibrated_section(RunData(run_dir=Path("run"), summary=bad))
    assert section is not None
    assert not any(isinstance(b, Table) for b in section.blocks)
    assert any(isinstance(b, Para) and b.text == reason.text for b in section.blocks)
    shown = calibrated_section(RunData(run_dir=Path("run"), summary=good))
    assert shown is not None
    assert any(isinstance(b, Table) for b in shown.blocks)
