"""Reading and validating the answers and scores tables."""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest

from cube_ray import schema
from cube_ray.errors import InputError
from cube_ray.tables import (
    read_answers,
    read_scores,
    validate_answers,
    validate_scores,
)


def answers_frame() -> pl.DataFrame:
    return pl.DataFrame(
        {
            "question_id": ["q0", "q1"] * 3,
            "doc_id": ["d0", "d1"] * 3,
            "system": ["zero", "zero", "full", "full", "rag@a", "rag@a"],
            "answer": ["a"] * 6,
            "retrieved_doc_ids": [None] * 4 + [["d0", "x"], ["x", "y"]],
            "rank": [None] * 4 + [1, 0],
        },
        schema_overrides={"rank": pl.Int32, "retrieved_doc_ids": pl.List(pl.String)},
    )


def scores_frame() -> pl.DataFrame:
    a = answers_frame()
    return a.select("question_id", "system").with_columns(
        judge=pl.lit("j"),
        dimension=pl.lit("relevance"),
        score=pl.Series([1.0, 2.0, 9.0, 8.0, 7.0, None]),
        status=pl.Series(["ok"] * 5 + ["parse_error"]),
        raw=pl.lit("x"),
    )


def write(df: pl.DataFrame, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    df.write_parquet(path)
    return path


def test_read_file_and_directory(tmp_path: Path) -> None:
    a = answers_frame().with_columns(pl.lit(1.5).alias("latency_s"))
    f = write(a, tmp_path / "answers.parquet")
    got = read_answers(f)
    assert got.columns == a.columns  # extra column kept
    assert got.schema["rank"] == pl.Int32
    d = tmp_path / "answers"
    write(a.head(3), d / "part-0.parquet")
    write(a.tail(3).drop("latency_s"), d / "sub" / "part-1.parquet")
    got = read_answers(d)
    assert got.height == 6
    assert got["latency_s"].null_count() == 3
    s = read_scores(write(scores_frame(), tmp_path / "scores.parquet"))
    assert s.height == 6


def test_integer_rank_and_score_types_are_cast(tmp_path: Path) -> None:
    a = answers_frame().with_columns(pl.col("rank").cast(pl.Int64))
    assert read_answers(write(a, tmp_path / "a.parquet")).schema["rank"] == pl.Int32
    s = scores_frame().with_columns(pl.col("score").cast(pl.Int64))
    assert read_scores(write(s, tmp_path / "s.parquet")).schema["score"] == pl.Float64


@pytest.mark.parametrize(
    ("table", "mutate", "patterns"),
    [
        ("answers", lambda df: df.drop("rank"), ["lacks column", "'rank'"]),
        (
            "answers",
            lambda df: df.with_columns(pl.col("rank").cast(pl.String)),
            ["field 'rank'", "has type String", "row 5 (1-based)", "integer"],
        ),
        (
            "answers",
            lambda df: df.with_columns(
                pl.when(pl.col("system") == "rag@a")
                .then(None)
                .otherwise(pl.col("rank"))
                .alias("rank")
            ),
            ["row 5 (1-based)", "field 'rank'", "without rank", "question_id='q0'"],
        ),
        (
            "answers",
            lambda df: df.with_columns(pl.col("rank") - 3),
            ["negative rank", "row 5 (1-based)"],
        ),
        (
            "answers",
            lambda df: pl.concat([df, df.tail(1)]),
            ["duplicate rows", "question_id='q1'", "system='rag@a'"],
        ),
        (
            "answers",
            lambda df: df.filter(pl.col("system") != "full"),
            ["no rows of system 'full'"],
        ),
        (
            "answers",
            lambda df: df.filter(pl.col("system") != "rag@a"),
            ["no system under test"],
        ),
        (
            "answers",
            lambda df: df.with_columns(pl.lit("bm25").alias("system")),
            ["unknown system 'bm25'", "row 1 (1-based)"],
        ),
        (
            "scores",
            lambda df: df.with_columns(pl.col("score").cast(pl.String)),
            ["field 'score'", "float64"],
        ),
        (
            "scores",
            lambda df: df.with_columns(pl.col("score") * 2),
            ["row 3 (1-based)", "score 18.0 outside 0..10", "judge='j'"],
        ),
        (
            "scores",
            lambda df: df.with_columns(pl.col("score").fill_null(float("nan"))),
            ["row 6 (1-based)", "outside 0..10"],
        ),
        (
            "scores",
            lambda df: pl.concat([df, df.head(1)]),
            ["duplicate rows", "dimension='relevance'"],
        ),
        (
            "scores",
            lambda df: df.filter(pl.col("system") != "zero"),
            ["no rows of system 'zero'"],
        ),
        (
            "scores",
            lambda df: df.with_columns(pl.lit(None, pl.String).alias("judge")),
            ["judge is null", "row 1 (1-based)"],
        ),
        ("scores", lambda df: df.drop("status"), ["lacks column", "'status'"]),
    ],
)
def test_bad_tables(
    tmp_path: Path, table: str, mutate: object, patterns: list[str]
) -> None:
    df = answers_frame() if table == "answers" else scores_frame()
    path = write(mutate(df), tmp_path / f"{table}.parquet")  # type: ignore[operator]
    reader = read_answers if table == "answers" else read_scores
    with pytest.raises(InputError) as info:
        reader(path)
    message = str(info.value)
    assert message.startswith(f"file {path}")
    for pattern in patterns:
        assert pattern in message, message


def test_duplicate_across_files_names_both(tmp_path: Path) -> None:
    s = scores_frame()
    write(s, tmp_path / "scores" / "a.parquet")
    write(s.tail(2), tmp_path / "scores" / "b.parquet")
    with pytest.raises(InputError, match="duplicate rows") as info:
        read_scores(tmp_path / "scores")
    assert "a.parquet row 5 (1-based)" in str(info.value)
    assert "b.parquet row 1 (1-based)" in str(info.value)


def test_bad_value_in_second_file_names_it(tmp_path: Path) -> None:
    s = scores_frame()
    write(s.head(3), tmp_path / "scores" / "a.parquet")
    write(
        s.tail(3).with_columns(pl.col("score") + 10), tmp_path / "scores" / "b.parquet"
    )
    with pytest.raises(InputError, match=r"b\.parquet, row 1 \(1-based\)"):
        read_scores(tmp_path / "scores")


def test_unreadable_and_missing_paths(tmp_path: Path) -> None:
    bad = tmp_path / "answers.parquet"
    bad.write_bytes(b"not parquet at all")
    with pytest.raises(InputError, match="cannot be read as Parquet"):
        read_answers(bad)
    with pytest.raises(InputError, match="no such file"):
        read_answers(tmp_path / "nope")
    (tmp_path / "empty").mkdir()
    with pytest.raises(InputError, match=r"no \.parquet file"):
        read_scores(tmp_path / "empty")


def test_validate_in_memory_names_the_source() -> None:
    assert validate_answers(answers_frame(), source="answers stage").height == 6
    cat = scores_frame().with_columns(pl.col(schema.JUDGE).cast(pl.Categorical))
    assert validate_scores(cat, source="judge stage").schema[schema.JUDGE] == (
        pl.Categorical()
    )
    with pytest.raises(InputError, match=r"^file judge stage, row 1 \(1-based\)"):
        validate_scores(
            scores_frame().with_columns(pl.col("score") - 5), source="judge stage"
        )


def test_lean_read_keeps_keys_ranks_scores_and_status_only(tmp_path: Path) -> None:
    d = tmp_path / "answers"
    a = answers_frame().with_columns(
        pl.lit("ok").alias("status"), pl.lit(1.5).alias("latency_s")
    )
    write(a.head(3), d / "part-0.parquet")
    write(a.tail(3), d / "part-1.parquet")
    # A crash leftover: never read, lean or not.
    write(a.head(1), d / ".tmp-part-2.parquet")
    lean = read_answers(d, lean=True)
    assert "latency_s" not in lean.columns
    assert lean["answer"].null_count() == lean.height == 6
    assert lean["rank"].to_list() == a["rank"].to_list()
    assert lean["status"].to_list() == ["ok"] * 6
    assert read_answers(d).height == 6
    s = read_scores(write(scores_frame(), tmp_path / "scores.parquet"), lean=True)
    assert s["raw"].null_count() == s.height  # the judge's raw text is not read
    assert s["score"].to_list() == scores_frame()["score"].to_list()
    assert s["status"].to_list() == scores_frame()["status"].to_list()
    # Lean reads validate as strictly: a missing column is still named.
    bad = tmp_path / "bad.parquet"
    write(answers_frame().drop("answer"), bad)
    with pytest.raises(InputError, match="answer"):
        read_answers(bad, lean=True)


def test_lean_read_gives_the_worked_summary_exactly() -> None:
    import json

    from cube_ray.aggregate import AggregateOptions, summarize
    from tests.unit.test_aggregate import WORKED, compare_leaves

    if not (WORKED / "answers.parquet").exists():
        pytest.fail(f"worked example not found at {WORKED}")
    answers = read_answers(WORKED / "answers.parquet", lean=True)
    scores = read_scores(WORKED / "scores.parquet", lean=True)
    assert answers.schema["question_id"] == pl.Categorical
    assert scores.schema["dimension"] == pl.Categorical
    out = summarize(answers, scores, options=AggregateOptions())
    expected = json.loads((WORKED / "expected_summary.json").read_text())
    assert compare_leaves(expected, out.model_dump(mode="json")) == 180
