"""Validity guards of the aggregation (CUBE_METHOD.md section 10).

A synthetic study with two judges that can tell the bounds apart, one blind
judge whose scores ignore the answer, and outages of the system under test and
of the zero bound. Every figure is checked against a direct scipy computation
on the raw rows.
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import polars as pl
import pytest
from scipy import stats

from cube_ray.aggregate import AggregateOptions, summarize as _summarize

N = 80
DIMS = ("a", "b")
JUDGES = ("good-1", "good-2", "blind")
RAG_DOWN = 8  # rag outages (10 %)
ZERO_DOWN = 3  # zero-bound outages


def summarize(*args: Any, **kwargs: Any) -> dict[str, Any]:
    """The summary as the JSON that summary.json holds."""
    return _summarize(*args, **kwargs).model_dump(mode="json")


def _study(*, fractional: bool, seed: int = 7) -> tuple[pl.DataFrame, pl.DataFrame]:
    rng = np.random.default_rng(seed)
    qids = [f"q{i:03d}" for i in range(N)]
    ranks = rng.choice([0, 1, 2, 3, 5, 8], size=N, p=[0.3, 0.3, 0.2, 0.1, 0.05, 0.05])
    rag_status = ["ok"] * N
    for i in rng.choice(N, size=RAG_DOWN, replace=False):
        rag_status[i] = "error: ReadTimeout"
        ranks[i] = 0  # what a failed call looks like today: no documents
    zero_status = ["ok"] * N
    for i in rng.choice(N, size=ZERO_DOWN, replace=False):
        zero_status[i] = "error: EngineDead"
    answers = pl.DataFrame(
        {
            "question_id": qids * 3,
            "system": ["zero"] * N + ["full"] * N + ["rag"] * N,
            "rank": [None] * (2 * N) + [int(r) for r in ranks],
            "status": zero_status + ["ok"] * N + rag_status,
        },
        schema_overrides={"rank": pl.Int32},
    )
    rows: list[dict[str, Any]] = []
    quality = rng.uniform(0, 1, size=N)
    for judge in JUDGES:
        for dim in DIMS:
            for system in ("zero", "full", "rag"):
                if judge == "blind":
                    raw = rng.normal(6.5, 1.5, size=N)
                else:
                    base = {"zero": 3.0, "full": 7.0, "rag": 5.0}[system]
                    raw = base + 2 * quality + rng.normal(0, 1.2, size=N)
                raw = np.clip(raw, 0, 10)
                score = raw if fractional else np.rint(raw)
                for q, value in zip(qids, score, strict=True):
                    rows.append(
                        {
                            "question_id": q,
                            "system": system,
                            "judge": judge,
                            "dimension": dim,
                            "score": float(value),
                            "status": "ok",
                        }
                    )
    scores = pl.DataFrame(rows)
    # A few missing scores (never zeros).
    missing = rng.choice(scores.height, size=15, replace=False)
    scores = scores.with_row_index().with_columns(
        score=pl.when(pl.col("index").is_in(missing))
        .then(None)
        .otherwise(pl.col("score")),
        status=pl.when(pl.col("index").is_in(missing))
        .then(pl.lit("unparsable"))
        .otherwise(pl.col("status")),
    )
    return answers, scores.drop("index")


def _available(answers: pl.DataFrame, scores: pl.DataFrame) -> pl.DataFrame:
    ok = answers.filter(pl.col("status") == "ok").select("question_id", "system")
    return scores.join(ok, on=["question_id", "system"], how="semi")


def _values(
    scores: pl.DataFrame, system: str, judge: str, dim: str
) -> dict[str, float]:
    rows = scores.filter(
        (pl.col("system") == system)
        & (pl.col("judge") == judge)
        & (pl.col("dimension") == dim)
        & pl.col("score").is_not_null()
    )
    return dict(zip(rows["question_id"], rows["score"], strict=True))


@pytest.fixture(scope="module", params=[False, True], ids=["integer", "fractional"])
def case(request: pytest.FixtureRequest) -> tuple[Any, ...]:
    answers, scores = _study(fractional=request.param)
    out = summarize(answers, scores, options=AggregateOptions())
    json.dumps(out, allow_nan=False)
    return answers, scores, out


def test_gap_and_p_match_scipy_per_dimension(case: tuple[Any, ...]) -> None:
    answers, scores, out = case
    usable = _available(answers, scores)
    for judge in JUDGES:
        for dim in DIMS:
            zero = _values(usable, "zero", judge, dim)
            full = _values(usable, "full", judge, dim)
            test = out["judges"][judge]["bound_separation"]["rag"][dim]
            gap = stats.trim_mean(list(full.values()), 0.1) - stats.trim_mean(
                list(zero.values()), 0.1
            )
            assert test["gap"] == pytest.approx(gap, abs=1e-9)
            both = sorted(set(zero) & set(full))
            delta = np.array([full[q] - zero[q] for q in both])
            assert test["n_pairs"] == len(both)
            p = stats.wilcoxon(delta, alternative="greater").pvalue
            assert test["p_value"] == pytest.approx(p, rel=1e-9, abs=1e-300)
            assert test["separated"] == (gap >= 0.5 and p < 0.05)


def test_weighted_total_pairs_match_scipy(case: tuple[Any, ...]) -> None:
    answers, scores, out = case
    usable = _available(answers, scores)
    for judge in JUDGES:
        weights = out["judges"][judge]["weights"]["rag"]
        per_dim = {
            s: {d: _values(usable, s, judge, d) for d in DIMS if weights[d] > 0}
            for s in ("zero", "full")
        }
        both = set.intersection(
            *(set(v) for s in ("zero", "full") for v in per_dim[s].values())
        )
        delta = np.array(
            [
                sum(
                    weights[d] * (per_dim["full"][d][q] - per_dim["zero"][d][q])
                    for d in per_dim["full"]
                )
                for q in sorted(both)
            ]
        ).round(10)
        test = out["judges"][judge]["bound_separation"]["rag"]["weighted"]
        assert test["n_pairs"] == len(both)
        p = stats.wilcoxon(delta, alternative="greater").pvalue
        assert test["p_value"] == pytest.approx(p, rel=1e-9, abs=1e-300)
        tm = out["judges"][judge]["trimmed_means"]["rag"]
        assert test["gap"] == pytest.approx(
            tm["full"]["weighted"] - tm["zero"]["weighted"], abs=1e-12
        )


def test_blind_judge_is_flagged_and_left_out_of_the_headline(
    case: tuple[Any, ...],
) -> None:
    _, _, out = case
    blind = out["judges"]["blind"]["bound_separation"]["rag"]["weighted"]
    assert not blind["separated"]
    for judge in ("good-1", "good-2"):
        assert out["judges"][judge]["bound_separation"]["rag"]["weighted"]["separated"]
    across = out["across_judges"]["rag"]
    assert across["judges"] == ["good-1", "good-2"]
    assert set(across["excluded"]) == {"blind"}
    why = across["excluded"]["blind"]
    assert why["code"] == "bounds_not_separated"
    assert why["text"].startswith("bounds not separated")
    separation = out["judges"]["blind"]["bound_separation"]["rag"]["weighted"]
    assert (why["gap"], why["p_value"]) == (separation["gap"], separation["p_value"])
    assert across["reason"] is None
    # The blind judge keeps every per-judge figure (nothing is hidden) ...
    assert out["judges"]["blind"]["normalized"]["rag"]["weighted"] is not None
    # ... but the headline is the mean over the separated judges only.
    cubes = [out["judges"][j]["cube"]["rag"] for j in ("good-1", "good-2")]
    assert across["cube"]["mean"] == pytest.approx(np.mean(cubes), abs=1e-12)
    assert across["cube"]["sd"] == pytest.approx(np.std(cubes, ddof=1), abs=1e-12)
    assert across["cube"]["n_judges"] == 2
    flags = [
        f
        for f in out["flags"]
        if f["flag"] == "bounds not separated"
        and f["judge"] == "blind"
        and f["figure"] == "bound_separation.weighted"
    ]
    assert flags == [
        {
            "flag": "bounds not separated",
            "judge": "blind",
            "system": "rag",
            "figure": "bound_separation.weighted",
            "gap": blind["gap"],
            "p_value": blind["p_value"],
        }
    ]


def test_outages_are_not_misses(case: tuple[Any, ...]) -> None:
    answers, scores, out = case
    rag = answers.filter(pl.col("system") == "rag")
    ok = rag.filter(pl.col("status") == "ok")
    recall = (ok["rank"] >= 1).mean()
    assert out["judges"]["good-1"]["recall_at_k"]["rag"] == pytest.approx(recall)
    # Counting the outages as misses would have given a lower recall.
    assert (rag["rank"] >= 1).mean() < recall
    assert out["counts"]["unavailable"] == {
        "zero": ZERO_DOWN,
        "full": 0,
        "rag": RAG_DOWN,
    }
    assert out["counts"]["questions_by_system"]["rag"] == N - RAG_DOWN
    unavailable = sorted(
        (f["system"], f["count"], f["share"])
        for f in out["flags"]
        if f["flag"] == "unavailable answers"
    )
    assert unavailable == [
        ("rag", RAG_DOWN, RAG_DOWN / N),
        ("zero", ZERO_DOWN, ZERO_DOWN / N),
    ]
    # Trimmed means of the zero bound use the available answers only.
    usable = _available(answers, scores)
    zero = _values(usable, "zero", "good-1", "a")
    assert len(zero) <= N - ZERO_DOWN
    got = out["judges"]["good-1"]["trimmed_means"]["rag"]["zero"]["a"]
    assert got == pytest.approx(stats.trim_mean(list(zero.values()), 0.1), abs=1e-9)
    # The rag set: available answers with the gold document retrieved.
    hits = set(ok.filter(pl.col("rank") >= 1)["question_id"])
    rag_scores = {
        q: v for q, v in _values(usable, "rag", "good-1", "a").items() if q in hits
    }
    got = out["judges"]["good-1"]["trimmed_means"]["rag"]["rag"]["a"]
    assert got == pytest.approx(stats.trim_mean(list(rag_scores.values()), 0.1))


def test_without_required_separation_every_judge_is_used() -> None:
    answers, scores = _study(fractional=False)
    out = summarize(answers, scores, options=AggregateOptions(require_separation=False))
    across = out["across_judges"]["rag"]
    assert across["judges"] == sorted(JUDGES)
    assert across["excluded"] == {}
    assert across["cube"]["n_judges"] == 3
    # The flag stays.
    assert any(
        f["flag"] == "bounds not separated" and f["judge"] == "blind"
        for f in out["flags"]
    )


def test_no_separated_judge_leaves_every_headline_null() -> None:
    answers, scores = _study(fractional=False)
    blind_only = scores.filter(pl.col("judge") == "blind")
    out = summarize(answers, blind_only, options=AggregateOptions())
    across = out["across_judges"]["rag"]
    assert across["judges"] == []
    assert across["reason"]["code"] == "no_judge_separates"
    for figure in (*DIMS, "weighted", "cube"):
        assert across[figure] == {"mean": None, "sd": None, "n_judges": 0}
    assert out["judges"]["blind"]["cube"]["rag"] is not None


def test_a_high_min_gap_excludes_good_judges_too() -> None:
    answers, scores = _study(fractional=False)
    out = summarize(answers, scores, options=AggregateOptions(min_gap=9.0))
    assert out["across_judges"]["rag"]["judges"] == []
    why = out["across_judges"]["rag"]["excluded"]["good-1"]
    assert "at least 9 needed" in why["text"]
    assert why["min_gap"] == 9.0


def test_paired_bounds_test_only_the_retrieved_questions() -> None:
    answers, scores = _study(fractional=False)
    out = summarize(answers, scores, options=AggregateOptions(bounds_on="paired"))
    usable = _available(answers, scores)
    hits = set(
        answers.filter(
            (pl.col("system") == "rag")
            & (pl.col("status") == "ok")
            & (pl.col("rank") >= 1)
        )["question_id"]
    )
    zero, full = (
        {q: v for q, v in _values(usable, s, "good-2", "b").items() if q in hits}
        for s in ("zero", "full")
    )
    both = sorted(set(zero) & set(full))
    delta = np.array([full[q] - zero[q] for q in both])
    test = out["judges"]["good-2"]["bound_separation"]["rag"]["b"]
    assert test["n_pairs"] == len(both) < N
    p = stats.wilcoxon(delta, alternative="greater").pvalue
    assert test["p_value"] == pytest.approx(p, rel=1e-9)


def test_answers_without_status_have_no_outages() -> None:
    answers, scores = _study(fractional=False)
    out = summarize(answers.drop("status"), scores, options=AggregateOptions())
    assert out["counts"]["unavailable"] == {"zero": 0, "full": 0, "rag": 0}
    assert out["counts"]["questions_by_system"]["rag"] == N


@pytest.mark.parametrize("bounds_on", ["all", "paired"])
@pytest.mark.parametrize("key_type", [pl.Categorical, "enum"])
def test_packed_integer_keys_give_the_same_separation(
    bounds_on: str, key_type: Any
) -> None:
    """Integer question ids with categorical keys take the packed fast path."""
    answers, scores = _study(fractional=False)

    def compact(frame: pl.DataFrame) -> pl.DataFrame:
        cols = [c for c in ("system", "judge", "dimension") if c in frame.columns]
        return frame.with_columns(
            pl.col("question_id").str.slice(1).cast(pl.Int32) + 4_000_000_000 // 2,
            *(
                pl.col(c).cast(
                    pl.Enum(sorted(frame[c].unique()))
                    if key_type == "enum"
                    else pl.Categorical
                )
                for c in cols
            ),
        )

    options = AggregateOptions(bounds_on=bounds_on)  # type: ignore[arg-type]
    plain = summarize(answers, scores, options=options)
    packed = summarize(compact(answers), compact(scores), options=options)
    for judge in JUDGES:
        got = packed["judges"][judge]["bound_separation"]
        expected = plain["judges"][judge]["bound_separation"]
        for figure, test in expected["rag"].items():
            assert got["rag"][figure]["n_pairs"] == test["n_pairs"]
            assert got["rag"][figure]["p_value"] == pytest.approx(
                test["p_value"], rel=1e-12, abs=1e-300
            )
            assert got["rag"][figure]["separated"] == test["separated"]
    for key in ("judges", "excluded", "reason"):
        assert packed["across_judges"]["rag"][key] == plain["across_judges"]["rag"][key]
    assert packed["across_judges"]["rag"]["cube"]["mean"] == pytest.approx(
        plain["across_judges"]["rag"]["cube"]["mean"], abs=1e-9
    )


@pytest.mark.parametrize("packed", [False, True])
def test_row_order_does_not_change_the_pairs(packed: bool) -> None:
    """Aligned zero/full rows are paired by position, shuffled ones by a join."""
    answers, scores = _study(fractional=True)
    if packed:
        answers, scores = (
            f.with_columns(
                pl.col("question_id").str.slice(1).cast(pl.Int64),
                *(
                    pl.col(c).cast(pl.Categorical)
                    for c in ("system", "judge", "dimension")
                    if c in f.columns
                ),
            )
            for f in (answers, scores)
        )
    # Drop two zero rows so that the sets also differ in length.
    shuffled = scores.sample(fraction=1.0, shuffle=True, seed=3).slice(2)
    dropped = scores.join(
        shuffled, on=["question_id", "system", "judge", "dimension"], how="anti"
    )
    options = AggregateOptions()
    ordered = summarize(
        answers,
        scores.join(
            dropped, on=["question_id", "system", "judge", "dimension"], how="anti"
        ),
        options=options,
    )
    got = summarize(answers, shuffled, options=options)
    for judge in JUDGES:
        for figure, test in ordered["judges"][judge]["bound_separation"]["rag"].items():
            other = got["judges"][judge]["bound_separation"]["rag"][figure]
            assert other["n_pairs"] == test["n_pairs"]
            assert other["p_value"] == pytest.approx(test["p_value"], rel=1e-12)
