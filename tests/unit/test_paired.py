"""Paired comparison of two systems (issue 28, item 3): pure math on crafted tables."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest

from cube_ray import schema
from cube_ray.aggregate import (
    NO_SHARED_JURY,
    AggregateOptions,
    FigureInterval,
    JudgeDifference,
    PairedComparison,
    RunsComparison,
    RunTables,
    Summary,
    compare_runs,
    evaluate_replicates,
    percentile_interval,
    resample_indices,
    shared_questions,
    summarize,
    with_intervals,
)
from cube_ray.report._compare_paired import question_sets_text
from cube_ray.report._paired import comparison_sentence

JUDGES = ("j1", "j2")
DIMS = ("relevance", "quality")


def tables(
    n: int = 60,
    *,
    seed: int = 0,
    shift: float = 1.0,
    own_noise: float = 0.3,
    question_sd: float = 1.0,
) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Two systems asked the same ``n`` questions, judged by two judges.

    Each question has a difficulty shared by every answer to it (SD
    ``question_sd``); ``rag@b`` answers ``shift`` points below ``rag@a`` plus
    its own noise (``own_noise``), so the two systems are strongly correlated
    when ``own_noise`` is small. Scores are clipped to 0..10. Both retrieve
    the gold document of the same questions (rank 1..3, a miss every fifth).
    """
    rng = np.random.default_rng(seed)
    qids = [f"q{i:03d}" for i in range(n)]
    difficulty = rng.normal(0.0, question_sd, n)
    rank = np.where(np.arange(n) % 5 == 4, 0, 1 + np.arange(n) % 3)
    latent = {
        schema.ZERO: 2.5 + difficulty,
        schema.FULL: 8.5 + difficulty,
        "rag@a": 6.0 + difficulty + rng.normal(0.0, 0.3, n),
    }
    latent["rag@b"] = latent["rag@a"] - shift + rng.normal(0.0, own_noise, n)
    answers = pl.concat(
        [
            pl.DataFrame(
                {
                    schema.QUESTION_ID: qids,
                    schema.SYSTEM: [system] * n,
                    schema.RANK: rank if system.startswith("rag") else [None] * n,
                },
                schema_overrides={schema.RANK: pl.Int32},
            )
            for system in latent
        ]
    )
    frames = []
    for system, mu in latent.items():
        for judge_i, judge in enumerate(JUDGES):
            for dim in DIMS:
                frames.append(
                    pl.DataFrame(
                        {
                            schema.QUESTION_ID: qids,
                            schema.SYSTEM: [system] * n,
                            schema.JUDGE: [judge] * n,
                            schema.DIMENSION: [dim] * n,
                            schema.SCORE: np.clip(
                                mu + 0.5 * judge_i + rng.normal(0.0, 0.2, n), 0, 10
                            ),
                            schema.STATUS: ["ok"] * n,
                        }
                    )
                )
    return answers, pl.concat(frames)


def summary_of(
    answers: pl.DataFrame,
    scores: pl.DataFrame,
    *,
    n_resamples: int = 200,
    method: str = "percentile",
) -> Summary:
    options = AggregateOptions(k=3)
    return with_intervals(
        summarize(answers, scores, options=options),
        answers,
        scores,
        n_resamples=n_resamples,
        method=method,  # type: ignore[arg-type]
    )


def cube(summary: Summary, system: str) -> float:
    value = summary.across_judges[system].figures["cube"].mean
    assert value is not None
    return value


def test_difference_is_exactly_the_difference_of_the_headlines() -> None:
    answers, scores = tables()
    summary = summary_of(answers, scores)
    assert summary.intervals is not None
    (c,) = summary.intervals.comparisons
    assert (c.first, c.second) == ("rag@a", "rag@b")
    assert c.difference is not None
    assert c.difference == pytest.approx(
        cube(summary, "rag@a") - cube(summary, "rag@b"), abs=1e-9
    )
    assert c.difference > 0
    assert c.judges == list(JUDGES)
    assert c.n_questions == 60
    assert c.n_defined == 200
    # Each judge's difference is that judge's own CuBE difference.
    for judge in JUDGES:
        own = summary.judges[judge].cube
        a, b = own["rag@a"], own["rag@b"]
        assert a is not None
        assert b is not None
        assert c.per_judge[judge].difference == pytest.approx(a - b, abs=1e-9)
    low, high = c.interval.low, c.interval.high
    assert low is not None
    assert high is not None
    assert low < c.difference < high
    assert low > 0  # a 1-point shift on 60 correlated questions is resolved


def test_interval_is_read_off_the_same_resamples_for_both_systems() -> None:
    """The comparison reuses the headline bootstrap's replicates: its
    percentile interval is the one of replicate-wise differences on the
    headline's own resample indices (seed 0), for each judge."""
    answers, scores = tables(n=40, seed=3)
    summary = summary_of(answers, scores, n_resamples=150)
    assert summary.intervals is not None
    (c,) = summary.intervals.comparisons
    rep = evaluate_replicates(
        answers,
        scores,
        indices=resample_indices(40, 150, seed=0),
        options=summary.options(),
    )
    for ji, judge in enumerate(rep.judges):
        expected = percentile_interval(rep.cube[ji, 0] - rep.cube[ji, 1], 0.95)
        got = c.per_judge[judge].interval
        assert (got.low, got.high) == pytest.approx(expected, abs=1e-9)
    mean = rep.cube_mean[0] - rep.cube_mean[1]
    assert (c.interval.low, c.interval.high) == pytest.approx(
        percentile_interval(mean, 0.95), abs=1e-9
    )


def test_pairing_is_narrower_than_unpaired_when_systems_are_correlated() -> None:
    answers, scores = tables(n=50, seed=1, own_noise=0.2, question_sd=1.5)
    summary = summary_of(answers, scores, n_resamples=300)
    assert summary.intervals is not None
    (c,) = summary.intervals.comparisons
    paired = c.interval.half_width
    assert paired is not None
    own = [summary.intervals.systems[s].cube.half_width for s in ("rag@a", "rag@b")]
    assert None not in own
    # Unpaired: the two systems from independent resamples (b's replicates
    # shuffled), the same replicates otherwise.
    rep = evaluate_replicates(
        answers,
        scores,
        indices=resample_indices(50, 300, seed=0),
        options=summary.options(),
    )
    shuffled = np.random.default_rng(5).permutation(300)
    lo, hi = percentile_interval(rep.cube_mean[0] - rep.cube_mean[1][shuffled], 0.95)
    assert lo is not None
    assert hi is not None
    unpaired = (hi - lo) / 2
    assert paired < 0.5 * unpaired, (paired, unpaired)
    assert paired < min(h for h in own if h is not None)


def test_bca_is_the_headline_method_and_covers_the_estimate() -> None:
    answers, scores = tables(n=40, seed=2, shift=0.0)
    summary = summary_of(answers, scores, n_resamples=200, method="bca")
    assert summary.intervals is not None
    assert summary.intervals.method == "bca"
    (c,) = summary.intervals.comparisons
    assert c.difference is not None
    low, high = c.interval.low, c.interval.high
    assert low is not None
    assert high is not None
    assert low <= c.difference <= high
    assert low < 0 < high  # no shift: not resolved
    assert "is not resolved" in comparison_sentence(c)


def test_the_comparison_is_stored_in_the_typed_summary() -> None:
    answers, scores = tables(n=30)
    summary = summary_of(answers, scores, n_resamples=50)
    again = Summary.model_validate_json(summary.to_json())
    assert again.intervals is not None
    assert again.intervals.comparisons == summary.intervals.comparisons  # type: ignore[union-attr]


def test_a_system_without_a_jury_is_not_compared() -> None:
    answers, scores = tables(n=30)
    summary = summary_of(answers, scores, n_resamples=30)
    # rag@b's headline averages no judge (as when none separates its bounds).
    across = dict(summary.across_judges)
    across["rag@b"] = across["rag@b"].model_copy(update={"judges": []})
    blind = summary.model_copy(update={"across_judges": across, "intervals": None})
    redone = with_intervals(blind, answers, scores, n_resamples=30)
    assert redone.intervals is not None
    (c,) = redone.intervals.comparisons
    assert c.difference is None
    assert c.reason is not None
    assert c.reason.code == NO_SHARED_JURY
    assert comparison_sentence(c).startswith("rag@a and rag@b are not compared:")


def test_shared_questions_leave_out_outages() -> None:
    answers = pl.DataFrame(
        {
            schema.QUESTION_ID: ["q1", "q1", "q2", "q2", "q3"],
            schema.SYSTEM: ["rag@a", "rag@b", "rag@a", "rag@b", "rag@a"],
            schema.STATUS: ["ok", "ok", "ok", "timeout", "ok"],
        }
    )
    assert shared_questions(answers, "rag@a", "rag@b") == 1


def _judge(d: float | None) -> JudgeDifference:
    return JudgeDifference(difference=d, interval=FigureInterval.of(None, None))


def _comparison(
    difference: float, low: float, high: float, per_judge: dict[str, float | None]
) -> PairedComparison:
    return PairedComparison(
        first="bm25",
        second="hybrid",
        difference=difference,
        interval=FigureInterval.of(low, high),
        n_defined=1000,
        n_questions=1262,
        judges=list(per_judge),
        per_judge={j: _judge(d) for j, d in per_judge.items()},
    )


@pytest.mark.parametrize(
    ("comparison", "expected"),
    [
        (
            _comparison(-3.1, -5.4, -0.8, {"a": -2.0, "b": -4.0}),
            "hybrid is ahead of bm25 by 3.1 points, 95 % interval [0.8, 5.4], on "
            "the 1,262 shared questions; both judges agree",
        ),
        (
            _comparison(2.25, 0.5, 4.0, {"a": 2.0, "b": 3.0, "c": -1.0}),
            "bm25 is ahead of hybrid by 2.2 points, 95 % interval [0.5, 4.0], on "
            "the 1,262 shared questions; 2 of 3 judges agree (c puts hybrid ahead)",
        ),
        (
            _comparison(1.0, -0.4, 2.5, {"a": 1.0}),
            "The difference between bm25 and hybrid is not resolved: bm25 is ahead "
            "by 1.0 points, but the 95 % interval [-0.4, 2.5] includes 0, on the "
            "1,262 shared questions; one judge",
        ),
        (
            _comparison(0.0, -1.0, 1.0, {"a": 0.0, "b": 0.0}),
            "The difference between bm25 and hybrid is not resolved: they are "
            "level, and the 95 % interval [-1.0, 1.0] includes 0, on the 1,262 "
            "shared questions; no judge sees a difference",
        ),
        (
            _comparison(-1.0, -2.0, 0.5, {"a": -1.0, "b": None, "c": -0.5}),
            "The difference between hybrid and bm25 is not resolved: hybrid is "
            "ahead by 1.0 points, but the 95 % interval [-0.5, 2.0] includes 0, "
            "on the 1,262 shared questions; 2 of 3 judges agree (b has no figure)",
        ),
    ],
)
def test_sentence(comparison: PairedComparison, expected: str) -> None:
    text = comparison_sentence(comparison)
    assert text == expected
    for word in ("bca", "held fixed", "judge(s)"):  # the reader's words only
        assert word not in text.lower()


def test_compare_runs_on_shared_questions() -> None:
    answers, scores = tables(n=50, seed=4)
    summary = summarize(answers, scores, options=AggregateOptions(k=3))
    first = RunTables("old", summary, answers, scores)
    ids = [f"q{i:03d}" for i in range(10, 50)]  # 40 of the 50
    sub_a = answers.filter(pl.col(schema.QUESTION_ID).is_in(ids))
    sub_s = scores.filter(pl.col(schema.QUESTION_ID).is_in(ids))
    sub = summarize(sub_a, sub_s, options=AggregateOptions(k=3))
    second = RunTables("new", sub, sub_a, sub_s)
    result = compare_runs(first, second, n_resamples=100, method="percentile")
    assert (result.first_questions, result.second_questions, result.shared) == (
        50,
        40,
        40,
    )
    by_pair = {(c.first, c.second): c for c in result.comparisons}
    assert len(by_pair) == 4
    # The same system on the same shared questions: exactly no difference.
    same = by_pair["old:rag@a", "new:rag@a"]
    assert same.difference == pytest.approx(0.0, abs=1e-12)
    assert (same.interval.low, same.interval.high) == pytest.approx((0.0, 0.0))
    assert same.n_questions == 40
    # Across systems: the difference of the two CuBEs on the shared questions.
    cross = by_pair["old:rag@a", "new:rag@b"]
    assert cross.difference == pytest.approx(
        cube(sub, "rag@a") - cube(sub, "rag@b"), abs=1e-9
    )
    assert question_sets_text("old", "new", result) == (
        "The question sets differ: old has 50 questions, new has 40, and 40 are "
        "shared; the paired differences use the 40 shared questions only."
    )


def test_question_sets_in_words() -> None:
    assert question_sets_text("a", "b", RunsComparison(5, 7, 0, [])).startswith(
        "a and b share no question"
    )
