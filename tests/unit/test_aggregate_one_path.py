"""One path for every figure: the summary is replicate zero of the bootstrap's
kernel, and the weights setting is read by one function for every caller."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
import pytest

from cube_ray import schema
from cube_ray.aggregate import (
    HUMAN_JUDGE,
    AggregateOptions,
    WeightsError,
    calibrate,
    evaluate_replicates,
    resolve_weights,
    summarize,
)
from cube_ray.aggregate._agreement import people_weights
from cube_ray.aggregate._qualification import fixed_weights

WORKED = Path(__file__).resolve().parents[2] / "examples" / "worked"


@pytest.fixture(scope="module")
def worked() -> tuple[pl.DataFrame, pl.DataFrame]:
    return (
        pl.read_parquet(WORKED / "answers.parquet"),
        pl.read_parquet(WORKED / "scores.parquet"),
    )


def _recorded(summary: Any) -> dict[str, Any] | None:
    if summary.options().weights == "pearson":
        return None
    return {j: block.weights for j, block in summary.judges.items()}


def _assert_replicate_zero(summary: Any, rep: Any) -> int:
    """Every judge figure of ``summary`` is replicate zero of ``rep``."""
    checked = 0
    for ji, judge in enumerate(rep.judges):
        block = summary.judges[judge]
        for si, system in enumerate(rep.systems):
            figures = [*rep.dimensions, "weighted"]
            for fi, fig in enumerate(figures):
                want = block.normalized[system][fig]
                got = rep.normalized[ji, si, 0, fi]
                if want is None:
                    assert np.isnan(got), (judge, system, fig)
                else:
                    assert got == pytest.approx(want, abs=1e-9), (judge, system, fig)
                checked += 1
            for di, dim in enumerate(rep.dimensions):
                assert rep.weights[ji, si, 0, di] == pytest.approx(
                    block.weights[system][dim], abs=1e-12
                )
            want_cube = block.cube[system]
            if want_cube is None:
                assert np.isnan(rep.cube[ji, si, 0])
            else:
                assert rep.cube[ji, si, 0] == pytest.approx(want_cube, abs=1e-9)
    return checked


@pytest.mark.parametrize(
    "options",
    [
        AggregateOptions(),
        AggregateOptions(bounds_on="paired", trim=0.0),
        AggregateOptions(weights="equal"),
        AggregateOptions(weights={"relevance": 3.0, "quality": 1.0}),
        AggregateOptions(
            weights={
                "judge-a": {"relevance": 1.0},
                "judge-b": {"quality": 2.0, "completeness": 1.0},
                "judge-c": {"specificity": 1.0, "relevance": 1.0},
            }
        ),
    ],
    ids=["pearson", "paired", "equal", "fixed", "per-judge"],
)
def test_the_summary_is_replicate_zero_of_the_bootstrap(
    worked: tuple[pl.DataFrame, pl.DataFrame], options: AggregateOptions
) -> None:
    answers, scores = worked
    summary = summarize(answers, scores, options=options)
    for recorded in (_recorded(summary), None):  # the summary's, or the setting's
        rep = evaluate_replicates(
            answers,
            scores,
            options=options,
            fixed_weights=recorded,
            dimensions=summary.dimensions,
        )
        assert _assert_replicate_zero(summary, rep) == 3 * 2 * 5


def test_equal_weights_weigh_the_dimensions_each_judge_scored(
    worked: tuple[pl.DataFrame, pl.DataFrame],
) -> None:
    """A judge that never scored a dimension: the summary and the bootstrap
    both weigh its three others 1/3 (the bootstrap used to weigh all four 1/4,
    and its weighted total was then undefined)."""
    answers, scores = worked
    scores = scores.filter(
        ~((pl.col(schema.JUDGE) == "judge-b") & (pl.col(schema.DIMENSION) == "quality"))
    )
    options = AggregateOptions(weights="equal")
    summary = summarize(answers, scores, options=options)
    weights = summary.judges["judge-b"].weights["rag@bm25"]
    assert weights["quality"] == 0.0
    assert weights["relevance"] == pytest.approx(1 / 3)
    assert summary.judges["judge-b"].cube["rag@bm25"] is not None
    rep = evaluate_replicates(
        answers, scores, options=options, dimensions=summary.dimensions
    )
    assert _assert_replicate_zero(summary, rep) == 30


def test_resolve_weights_names_the_key_that_does_not_fit() -> None:
    judges, dims = ["a", "b"], ["relevance", "quality"]
    for spec, key in [
        ({"nobody": {"relevance": 1.0}, "a": {"relevance": 1.0}}, "nobody"),
        ({"a": {"relevance": 1.0}}, "b"),
        ({"a": {"relevance": 1.0}, "b": {"style": 1.0}}, "style"),
        ({"style": 1.0}, "style"),
    ]:
        with pytest.raises(WeightsError) as err:
            resolve_weights(spec, judges, dims)
        assert err.value.key == key
    resolved = resolve_weights(
        {"a": {"relevance": 1.0}, "b": {"quality": 4.0}}, judges, dims
    )
    assert resolved.fixed == {
        "a": {"relevance": 1.0, "quality": 0.0},
        "b": {"relevance": 0.0, "quality": 1.0},
    }
    assert resolved.notes == (
        "fixed weights leave out ['quality']: weight 0 (judge a)",
        "fixed weights leave out ['relevance']: weight 0 (judge b)",
    )
    # The qualification weighs a faulted answer by the fixed weights, and
    # alike under Pearson weights (a faulted answer is no system).
    assert (
        fixed_weights("pearson", judges, dims)
        == resolve_weights("equal", judges, dims).fixed
    )
    assert fixed_weights({"relevance": 1.0}, judges, dims)["b"] == {
        "relevance": 1.0,
        "quality": 0.0,
    }


def test_the_people_get_the_one_map_else_equal_weights() -> None:
    dims, systems = ["relevance", "quality"], ["rag", "zero"]
    assert people_weights("pearson", dims, systems) is None
    one_map = people_weights({"relevance": 3.0, "quality": 1.0}, dims, systems)
    assert one_map == {
        HUMAN_JUDGE: {s: {"relevance": 0.75, "quality": 0.25} for s in systems}
    }
    per_judge = people_weights({"j": {"relevance": 1.0}}, dims, systems)
    assert per_judge == {
        HUMAN_JUDGE: {s: {"relevance": 0.5, "quality": 0.5} for s in systems}
    }


def test_calibration_with_per_judge_weights_and_nothing_recorded() -> None:
    """Weights given per judge name no human: the people weigh alike, the
    judge by its own map (resolved here, no summary needed)."""
    qids = [f"q{i}" for i in range(6)]
    n = len(qids)
    answers = pl.DataFrame(
        {
            schema.QUESTION_ID: qids * 3,
            schema.SYSTEM: ["zero"] * n + ["full"] * n + ["rag"] * n,
            schema.RANK: [None] * (2 * n) + [1, 2, 1, 0, 3, 1],
        },
        schema_overrides={schema.RANK: pl.Int32},
    )
    rng = np.random.default_rng(0)
    rows = []
    for system, centre in (("zero", 2.0), ("full", 8.0), ("rag", 6.0)):
        for dim in ("relevance", "quality"):
            for q in qids:
                rows.append(
                    (
                        q,
                        system,
                        dim,
                        float(np.clip(centre + rng.integers(-1, 2), 0, 10)),
                    )
                )
    table = pl.DataFrame(
        rows,
        schema=[schema.QUESTION_ID, schema.SYSTEM, schema.DIMENSION, schema.SCORE],
        orient="row",
    )
    scores = table.with_columns(pl.lit("j").alias(schema.JUDGE))
    ratings = table.filter(pl.col(schema.QUESTION_ID).is_in(qids[:3]))
    options = AggregateOptions(trim=0.0, weights={"j": {"relevance": 1.0}})
    result = calibrate(
        answers, scores, ratings, options=options, n_resamples=20, method="percentile"
    )
    summary = summarize(answers, scores, options=options)
    fig = result.calibrated["j"]["rag"]
    assert fig.judge_cube == pytest.approx(summary.judges["j"].cube["rag"], abs=1e-9)
    # The people's figure on the audit, by hand: equal weights on both
    # dimensions (their ratings are the judge's scores of those questions).
    audit = evaluate_replicates(
        answers.filter(pl.col(schema.QUESTION_ID).is_in(qids[:3])),
        ratings.with_columns(pl.lit(HUMAN_JUDGE).alias(schema.JUDGE)),
        options=options.model_copy(update={"weights": "equal"}),
    )
    assert fig.human_only == pytest.approx(float(audit.cube[0, 0, 0]), abs=1e-9)
