"""CuBE aggregation: the worked example, and the method's special cases."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import polars as pl
import pytest

from cube_ray import schema
from cube_ray.aggregate import (
    SCHEMA_VERSION,
    AggregateOptions,
    Summary,
    WeightsError,
    _passes,
    cross_judge,
    pearson_weights,
    rank_scores,
    recall_at_k,
    summarize as _summarize,
    trimmed_means,
)
from cube_ray.errors import ConfigError, InputError

WORKED = Path(__file__).resolve().parents[2] / "examples" / "worked"
needs_worked = pytest.mark.skipif(
    not (WORKED / "expected_summary.json").exists(),
    reason=f"worked example not found at {WORKED}",
)


def summarize(*args: Any, **kwargs: Any) -> dict[str, Any]:
    """The summary as the JSON that summary.json holds."""
    return _summarize(*args, **kwargs).model_dump(mode="json")


def compare_leaves(expected: Any, got: Any, path: str = "") -> int:
    """Every leaf of ``expected`` is in ``got`` and equal to 1e-9."""
    if isinstance(expected, dict):
        assert isinstance(got, dict), path
        return sum(
            compare_leaves(v, got.get(k, KeyError(f"{path}.{k}")), f"{path}.{k}")
            for k, v in expected.items()
        )
    assert not isinstance(got, KeyError), f"missing {got}"
    if isinstance(expected, list):
        assert isinstance(got, list), path
        assert len(got) == len(expected), path
        return sum(
            compare_leaves(e, g, f"{path}[{i}]")
            for i, (e, g) in enumerate(zip(expected, got, strict=True))
        )
    if expected is None:
        assert got is None, path
    elif isinstance(expected, (str, bool)):
        assert expected == got, path
    else:
        assert got is not None, path
        assert abs(expected - got) <= 1e-9, f"{path}: {expected} != {got}"
    return 1


@pytest.fixture(scope="module")
def worked() -> tuple[pl.DataFrame, pl.DataFrame]:
    if not (WORKED / "answers.parquet").exists():
        pytest.skip(f"worked example not found at {WORKED}")
    return (
        pl.read_parquet(WORKED / "answers.parquet"),
        pl.read_parquet(WORKED / "scores.parquet"),
    )


@needs_worked
@pytest.mark.parametrize("histograms", [True, False])
def test_worked_example_every_figure(
    worked: tuple[pl.DataFrame, pl.DataFrame],
    histograms: bool,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Both computation paths: score histograms, and one sort per group.
    monkeypatch.setattr(_passes, "_HISTOGRAM_MAX_DISTINCT", 2048 if histograms else -1)
    answers, scores = worked
    out = summarize(answers, scores, options=AggregateOptions())
    expected = json.loads((WORKED / "expected_summary.json").read_text())
    n = compare_leaves(expected, out)
    assert n == 180
    json.dumps(out, allow_nan=False)  # valid JSON, no NaN
    assert out["flags"] == []
    assert out["counts"]["questions"] == 120
    assert out["counts"]["missing_scores"] == 41
    missing = out["judges"]["judge-a"]["missing"]["rag@bm25"]
    assert all(set(v) == {"parse_error"} for v in missing.values())


@needs_worked
def test_categorical_keys_give_the_same_summary(
    worked: tuple[pl.DataFrame, pl.DataFrame],
) -> None:
    answers, scores = worked
    keys = [schema.SYSTEM, schema.JUDGE, schema.DIMENSION, schema.STATUS]
    cat = scores.with_columns(pl.col(keys).cast(pl.Categorical))
    options = AggregateOptions()
    expected = summarize(answers, scores, options=options)
    got = summarize(answers, cat, options=options)
    compare_leaves(expected["judges"], got["judges"])
    compare_leaves(expected["across_judges"], got["across_judges"])


@needs_worked
def test_worked_example_options_run(worked: tuple[pl.DataFrame, pl.DataFrame]) -> None:
    answers, scores = worked
    for options in [
        AggregateOptions(weights="equal"),
        AggregateOptions(bounds_on="paired"),
        AggregateOptions(k={"rag@bm25": 8, "rag@hybrid": 9}, trim=0.0),
        AggregateOptions(weights={"relevance": 2, "quality": 1}),
    ]:
        out = summarize(answers, scores, options=options)
        json.dumps(out, allow_nan=False)
        w = out["judges"]["judge-b"]["weights"]["rag@hybrid"]
        assert math.isclose(sum(w.values()), 1.0)


def study(
    *,
    zero: list[float],
    full: list[float],
    rag: list[float | None],
    ranks: list[int],
    judges: tuple[str, ...] = ("j",),
    dims: tuple[str, ...] = ("relevance",),
    system: str = "rag",
) -> tuple[pl.DataFrame, pl.DataFrame]:
    """A tiny study: the same scores for every judge and dimension."""
    n = len(ranks)
    qs = [f"q{i}" for i in range(n)]
    answers = pl.DataFrame(
        {
            schema.QUESTION_ID: qs * 3,
            schema.SYSTEM: ["zero"] * n + ["full"] * n + [system] * n,
            schema.RANK: [None] * (2 * n) + ranks,
        },
        schema_overrides={schema.RANK: pl.Int32},
    )
    rows = []
    for j in judges:
        for d in dims:
            for sys_name, values in (("zero", zero), ("full", full), (system, rag)):
                for q, v in zip(qs, values, strict=True):
                    rows.append(
                        {
                            schema.QUESTION_ID: q,
                            schema.SYSTEM: sys_name,
                            schema.JUDGE: j,
                            schema.DIMENSION: d,
                            schema.SCORE: v,
                            schema.STATUS: "ok" if v is not None else "parse_error",
                        }
                    )
    return answers, pl.DataFrame(rows, schema_overrides={schema.SCORE: pl.Float64})


def test_three_questions_by_hand() -> None:
    answers, scores = study(
        zero=[2, 4, 6], full=[8, 8, 8], rag=[7, 6, 3], ranks=[1, 2, 0]
    )
    # Three questions cannot show separated bounds (section 10): the guard is
    # turned off to check the arithmetic of sections 5-8.
    options = AggregateOptions(trim=0.0, require_separation=False)
    out = summarize(answers, scores, options=options)
    j = out["judges"]["j"]
    assert j["weights"]["rag"] == {"relevance": 1.0}
    assert j["normalized"]["rag"]["relevance"] == pytest.approx(62.5)
    assert j["cube"]["rag"] == pytest.approx(62.5 * 2 / 3)
    across = out["across_judges"]["rag"]["cube"]
    assert across["mean"] == pytest.approx(62.5 * 2 / 3)
    assert across["sd"] is None  # one judge
    assert j["n_scores"]["rag"]["rag"]["relevance"] == 2
    guarded = summarize(answers, scores, options=AggregateOptions(trim=0.0))
    assert guarded["judges"]["j"]["cube"]["rag"] == pytest.approx(62.5 * 2 / 3)
    assert guarded["across_judges"]["rag"]["cube"]["mean"] is None
    assert guarded["across_judges"]["rag"]["reason"] == {
        "code": "no_judge_separates",
        "text": "no judge separates the bounds",
    }


def test_degenerate_bounds_are_null_with_reason() -> None:
    answers, scores = study(
        zero=[5, 5, 5], full=[5, 5, 5], rag=[7, 6, 3], ranks=[1, 2, 0]
    )
    out = summarize(answers, scores, options=AggregateOptions(trim=0.0))
    j = out["judges"]["j"]
    assert j["normalized"]["rag"]["relevance"] is None
    assert j["cube"]["rag"] is None
    assert j["null_reasons"]["rag"]["relevance"] == {
        "code": "degenerate_bounds",
        "text": "degenerate bounds",
    }
    assert {"flag": "degenerate bounds", "judge": "j", "system": "rag",
            "figure": "normalized.relevance"} in out["flags"]  # fmt: skip
    assert out["across_judges"]["rag"]["cube"] == {
        "mean": None,
        "sd": None,
        "n_judges": 0,
    }
    json.dumps(out, allow_nan=False)


def test_outside_bounds_kept_and_flagged() -> None:
    answers, scores = study(
        zero=[4, 4, 4], full=[8, 8, 8], rag=[10, 10, 3], ranks=[1, 2, 0]
    )
    out = summarize(answers, scores, options=AggregateOptions(trim=0.0))
    assert out["judges"]["j"]["normalized"]["rag"]["relevance"] == pytest.approx(150.0)
    flags = [f for f in out["flags"] if f["flag"] == "outside bounds"]
    assert {f["figure"] for f in flags} == {
        "normalized.relevance",
        "normalized.weighted",
    }


def test_equal_weight_fallback_when_no_positive_correlation() -> None:
    # Scores fall as rank_score rises: every r_d < 0.
    answers, scores = study(
        zero=[1, 1, 2, 2],
        full=[9, 9, 8, 8],
        rag=[3, 5, 7, 9],
        ranks=[1, 2, 3, 4],
        dims=("a", "b"),
    )
    out = summarize(answers, scores, options=AggregateOptions(trim=0.0))
    j = out["judges"]["j"]
    assert j["weights"]["rag"] == {"a": 0.5, "b": 0.5}
    assert j["weight_method"]["rag"].startswith("equal (fallback")
    assert j["correlations"]["rag"]["a"] < 0
    # Four questions: the bounds cannot be separated (flagged per figure).
    flags = [f["flag"] for f in out["flags"] if f["flag"] != "bounds not separated"]
    assert flags == ["equal-weight fallback"]


def test_constant_scores_give_undefined_correlation() -> None:
    answers, scores = study(
        zero=[1, 2, 3], full=[8, 9, 9], rag=[6, 6, 6], ranks=[1, 2, 0]
    )
    out = summarize(answers, scores, options=AggregateOptions(trim=0.0))
    assert out["judges"]["j"]["correlations"]["rag"]["relevance"] is None


def test_paired_bounds_use_only_retrieved_questions() -> None:
    answers, scores = study(
        zero=[2, 4, 9], full=[8, 8, 0], rag=[7, 6, 3], ranks=[1, 2, 0]
    )
    all_ = summarize(answers, scores, options=AggregateOptions(trim=0.0))
    paired = summarize(
        answers, scores, options=AggregateOptions(trim=0.0, bounds_on="paired")
    )
    tm_all = all_["judges"]["j"]["trimmed_means"]["rag"]
    tm_paired = paired["judges"]["j"]["trimmed_means"]["rag"]
    assert tm_all["zero"]["relevance"] == pytest.approx(5.0)
    assert tm_paired["zero"]["relevance"] == pytest.approx(3.0)
    assert tm_paired["full"]["relevance"] == pytest.approx(8.0)
    assert paired["judges"]["j"]["normalized"]["rag"]["relevance"] == pytest.approx(
        70.0
    )


def test_missing_scores_are_excluded_and_counted() -> None:
    answers, scores = study(
        zero=[2, 4, 6], full=[8, 8, 8], rag=[7, None, 3], ranks=[1, 2, 0]
    )
    out = summarize(answers, scores, options=AggregateOptions(trim=0.0))
    j = out["judges"]["j"]
    assert j["trimmed_means"]["rag"]["rag"]["relevance"] == 7.0
    assert j["missing"] == {"rag": {"relevance": {"parse_error": 1}}}
    assert j["n_pairs"]["rag"]["relevance"] == 2


def test_fixed_weights_global_and_per_judge() -> None:
    answers, scores = study(
        zero=[2, 4, 6], full=[8, 8, 8], rag=[7, 6, 3], ranks=[1, 2, 0],
        judges=("j1", "j2"), dims=("a", "b"),
    )  # fmt: skip
    out = summarize(answers, scores, options=AggregateOptions(weights={"a": 3, "b": 1}))
    assert out["judges"]["j2"]["weights"]["rag"] == {"a": 0.75, "b": 0.25}
    per_judge = {"j1": {"a": 1}, "j2": {"b": 2}}
    out = summarize(answers, scores, options=AggregateOptions(weights=per_judge))
    assert out["judges"]["j1"]["weights"]["rag"] == {"a": 1.0, "b": 0.0}
    assert out["judges"]["j2"]["weights"]["rag"] == {"a": 0.0, "b": 1.0}
    with pytest.raises(WeightsError, match="dimension 'c'") as info:
        summarize(answers, scores, options=AggregateOptions(weights={"c": 1}))
    assert info.value.key == "c"
    with pytest.raises(WeightsError, match="judge 'j9'"):
        summarize(answers, scores, options=AggregateOptions(weights={"j9": {"a": 1}}))
    with pytest.raises(WeightsError, match="not for judge 'j2'"):
        summarize(answers, scores, options=AggregateOptions(weights={"j1": {"a": 1}}))


def test_options_validation() -> None:
    with pytest.raises(ValueError, match=r"less than 0\.5"):
        AggregateOptions(trim=0.5)
    with pytest.raises(ValueError, match="k must be >= 1"):
        AggregateOptions(k={"rag": 0})
    with pytest.raises(ValueError, match=">= 0"):
        AggregateOptions(weights={"a": -1})
    with pytest.raises(ValueError):
        AggregateOptions(weights={"a": 1, "j": {"b": 1}})


def test_k_per_system_must_match_systems() -> None:
    answers, scores = study(
        zero=[2, 4, 6], full=[8, 8, 8], rag=[7, 6, 3], ranks=[1, 2, 0]
    )
    with pytest.raises(ConfigError, match=r"not for \['rag'\]"):
        summarize(answers, scores, options=AggregateOptions(k={"rag@x": 8}))
    out = summarize(answers, scores, options=AggregateOptions(k={"rag": 8, "x": 3}))
    assert "k given for systems without answers: ['x']" in out["notes"]


@pytest.mark.parametrize(
    ("mutate", "match"),
    [
        (
            lambda a, s: (a, s.filter(pl.col("system") != "zero")),
            "no rows of system 'zero'",
        ),
        (
            lambda a, s: (a, s.filter(pl.col("system") != "full")),
            "no rows of system 'full'",
        ),
        (
            lambda a, s: (a.with_columns(pl.lit(None, pl.Int32).alias("rank")), s),
            "without rank",
        ),
        (lambda a, s: (a.with_columns(pl.col("rank") * 5), s), "outside 0..k"),
        (
            lambda a, s: (a, s.with_columns(pl.col("score") + 5)),
            "outside 0..10",
        ),
        (
            lambda a, s: (a.filter(pl.col("question_id") != "q0"), s),
            "score row without an answer row",
        ),
        (lambda a, s: (a.drop("rank"), s), "lacks column"),
        (lambda a, s: (a.filter(pl.col("system") != "rag"), s), "no system under test"),
    ],
)
def test_bad_inputs_raise_input_error(mutate: Any, match: str) -> None:
    answers, scores = study(
        zero=[2, 4, 6], full=[8, 8, 8], rag=[7, 6, 3], ranks=[1, 2, 0]
    )
    a, s = mutate(answers, scores)
    with pytest.raises(InputError, match=match):
        summarize(a, s, options=AggregateOptions(), sources={"answers": "A.parquet"})


def test_error_names_the_source() -> None:
    answers, scores = study(
        zero=[2, 4, 6], full=[8, 8, 8], rag=[7, 6, 3], ranks=[1, 9, 0]
    )
    with pytest.raises(InputError, match=r"^file A\.parquet.*q1.*k=8"):
        summarize(
            answers,
            scores,
            options=AggregateOptions(),
            sources={"answers": "A.parquet"},
        )


def test_building_blocks() -> None:
    ans = pl.DataFrame(
        {
            "system": ["rag@a", "rag@a", "rag@b", "rag@b"],
            "rank": [1, 0, 4, 1],
            "retrieved_doc_ids": [["g"], ["x"], ["x", "y", "z", "g"], ["g", "x"]],
        }
    )
    ranked = rank_scores(ans, k={"rag@a": 8, "rag@b": 4})
    assert ranked["rank_score"].to_list() == [10, 0, 2, 5]
    assert recall_at_k(ans)["recall_at_k"].to_list() == [0.5, 1.0]
    lazy = trimmed_means(
        pl.LazyFrame({"g": [1, 1, 1], "score": [1.0, None, 2.0]}), by=["g"], trim=0.0
    )
    assert isinstance(lazy, pl.LazyFrame)
    assert lazy.collect()["trimmed_mean"].to_list() == [1.5]
    w = pearson_weights(
        pl.DataFrame({"j": ["a", "a", "b", "b"], "r": [0.2, 0.6, None, float("nan")]}),
        by=["j"],
    )
    assert w["weight"].to_list() == pytest.approx([0.25, 0.75, 0.5, 0.5])
    assert w["fallback"].to_list() == [False, False, True, True]
    cj = cross_judge(pl.DataFrame({"v": [1.0, float("nan"), 3.0]}), by=[], value="v")
    assert cj.row(0) == (2.0, pytest.approx(math.sqrt(2)), 2)


def test_no_retrieved_questions_and_equal_weights_per_judge() -> None:
    answers, scores = study(
        zero=[2, 4, 6], full=[8, 8, 8], rag=[7, 6, 3], ranks=[0, 0, 0],
        dims=("a", "b"),
    )  # fmt: skip
    out = summarize(answers, scores, options=AggregateOptions(trim=0.0))
    j = out["judges"]["j"]
    assert j["recall_at_k"]["rag"] == 0.0
    assert j["cube"]["rag"] is None
    assert j["null_reasons"]["rag"]["weighted"]["code"] == "no_retrieved_questions"
    # A judge that never scored dimension b: equal weights over what it scored.
    answers, scores = study(
        zero=[2, 4, 6], full=[8, 8, 8], rag=[7, 6, 3], ranks=[1, 2, 0],
        judges=("j1", "j2"), dims=("a", "b"),
    )  # fmt: skip
    scores = scores.filter(~((pl.col("judge") == "j2") & (pl.col("dimension") == "b")))
    out = summarize(answers, scores, options=AggregateOptions(weights="equal"))
    assert out["judges"]["j2"]["weights"]["rag"] == {"a": 1.0, "b": 0.0}
    assert out["judges"]["j1"]["weights"]["rag"] == {"a": 0.5, "b": 0.5}
    assert out["judges"]["j2"]["cube"]["rag"] is not None


@pytest.mark.skipif(not WORKED.is_dir(), reason=f"worked example not at {WORKED}")
def test_summary_is_deterministic_under_row_order() -> None:
    """The same tables in another row order give the same summary: every key,
    list and flag in the same order, floats equal up to summation order."""

    # rag@bm25 retrieves nothing, so its figures are null and flagged.
    answers = pl.read_parquet(WORKED / "answers.parquet").with_columns(
        pl.when(pl.col(schema.SYSTEM) == "rag@bm25")
        .then(pl.lit(0, dtype=pl.Int32))
        .otherwise(pl.col(schema.RANK))
        .alias(schema.RANK)
    )
    scores = pl.read_parquet(WORKED / "scores.parquet")
    options = AggregateOptions(weights="equal")
    first = summarize(answers, scores, options=options)
    shuffled = summarize(
        answers.sample(fraction=1.0, shuffle=True, seed=1),
        scores.sample(fraction=1.0, shuffle=True, seed=2),
        options=options,
    )

    def same(a: Any, b: Any, path: str) -> None:
        if isinstance(a, float) and isinstance(b, float):
            assert math.isclose(a, b, rel_tol=1e-12, abs_tol=1e-12), path
        elif isinstance(a, dict):
            assert list(a) == list(b), path
            for key in a:
                same(a[key], b[key], f"{path}.{key}")
        elif isinstance(a, list):
            assert len(a) == len(b), path
            for i, (x, y) in enumerate(zip(a, b, strict=True)):
                same(x, y, f"{path}[{i}]")
        else:
            assert a == b, path

    assert first["flags"], "the worked example should raise some flags"
    same(first, shuffled, "summary")


def test_summary_is_typed_versioned_and_round_trips(tmp_path: Path) -> None:
    answers, scores = study(
        zero=[2, 4, 6], full=[8, 8, 8], rag=[7, 6, 3], ranks=[1, 2, 0]
    )
    out = _summarize(answers, scores, options=AggregateOptions(trim=0.0))
    assert isinstance(out, Summary)
    assert out.schema_version == SCHEMA_VERSION
    assert out.intervals is None  # computed by with_intervals, not summarize
    path = out.write(tmp_path / "run" / "summary.json")
    data = json.loads(path.read_text(encoding="utf-8"))
    assert data["schema_version"] == SCHEMA_VERSION
    assert Summary.read(path) == out
    # A summary of another (or no) version: one error naming the version and
    # the command that rewrites it.
    del data["schema_version"]
    path.write_text(json.dumps(data), encoding="utf-8")
    with pytest.raises(InputError, match="schema_version absent") as err:
        Summary.read(path)
    assert f"cube-ray aggregate {tmp_path / 'run'}" in str(err.value)
    data["schema_version"] = 1
    path.write_text(json.dumps(data), encoding="utf-8")
    with pytest.raises(InputError, match="schema_version 1; this cube-ray reads"):
        Summary.read(path)
    # A misspelt key is an error, not data.
    data["schema_version"] = SCHEMA_VERSION
    data["judges"]["j"]["cubes"] = {}
    path.write_text(json.dumps(data), encoding="utf-8")
    with pytest.raises(InputError, match=r"judges\.j\.cubes"):
        Summary.read(path)
