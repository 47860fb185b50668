"""``cube-ray aggregate`` end to end: the real console script in a subprocess."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import polars as pl
import pytest

WORKED = Path(__file__).resolve().parents[2] / "examples" / "worked"
pytestmark = pytest.mark.skipif(
    not (WORKED / "expected_summary.json").exists(),
    reason=f"worked example not found at {WORKED}",
)


def cube_ray(*args: str | Path) -> subprocess.CompletedProcess[str]:
    script = Path(sys.executable).parent / "cube-ray"
    command = (
        [str(script)] if script.exists() else [sys.executable, "-m", "cube_ray.cli"]
    )
    return subprocess.run(
        [*command, *map(str, args)], capture_output=True, text=True, timeout=300
    )


def assert_close(expected: Any, got: Any, path: str = "") -> None:
    if isinstance(expected, dict):
        for key, value in expected.items():
            assert key in got, f"{path}.{key} missing"
            assert_close(value, got[key], f"{path}.{key}")
    elif expected is None:
        assert got is None, path
    else:
        assert abs(expected - got) <= 1e-9, path


@pytest.fixture
def run_dir(tmp_path: Path) -> Path:
    run = tmp_path / "run"
    (run / "answers").mkdir(parents=True)
    (run / "scores").mkdir()
    shutil.copy(WORKED / "answers.parquet", run / "answers" / "part-00000.parquet")
    scores = pl.read_parquet(WORKED / "scores.parquet")
    half = scores.height // 2
    scores.head(half).write_parquet(run / "scores" / "part-00000.parquet")
    scores.tail(scores.height - half).write_parquet(
        run / "scores" / "part-00001.parquet"
    )
    return run


def test_run_dir_writes_summary(run_dir: Path) -> None:
    result = cube_ray("aggregate", run_dir)
    assert result.returncode == 0, result.stderr
    summary = json.loads((run_dir / "summary.json").read_text())
    expected = json.loads((WORKED / "expected_summary.json").read_text())
    assert_close(expected, summary)
    assert summary["parameters"] == {
        "k": 8,
        "trim": 0.1,
        "weights": "pearson",
        "bounds_on": "all",
        "min_span": 1e-9,
        "min_gap": 0.5,
        "alpha": 0.05,
        "require_separation": True,
        "require_qualification": False,
    }
    assert not list(run_dir.glob(".tmp-*"))  # no temp file left
    # Typed and versioned, with the headline's bootstrap intervals (issue 23).
    assert summary["schema_version"] == 2
    intervals = summary["intervals"]
    assert (intervals["n_resamples"], intervals["seed"]) == (1000, 0)
    assert (intervals["method"], intervals["resampling"]) == ("bca", "questions")
    for system, across in expected["across_judges"].items():
        cell = intervals["systems"][system]
        assert cell["n_defined"] == 1000
        low, high = cell["cube"]["low"], cell["cube"]["high"]
        assert low < across["cube"]["mean"] < high
        assert cell["cube"]["half_width"] == pytest.approx((high - low) / 2)


def test_tables_to_stdout_and_out_file(tmp_path: Path) -> None:
    a, s = WORKED / "answers.parquet", WORKED / "scores.parquet"
    result = cube_ray("aggregate", "--answers", a, "--scores", s)
    assert result.returncode == 0, result.stderr
    expected = json.loads((WORKED / "expected_summary.json").read_text())
    assert_close(expected, json.loads(result.stdout))
    out = tmp_path / "deep" / "summary.json"
    weights = tmp_path / "w.json"
    table = {
        "judge-a": {"relevance": 1},
        "judge-b": {"quality": 1},
        "judge-c": {"relevance": 1, "quality": 1},
    }
    weights.write_text(json.dumps(table))
    result = cube_ray(
        "aggregate", "--answers", a, "--scores", s, "--k", "rag@bm25=8,rag@hybrid=8",
        "--trim", "0.2", "--weights", weights, "--bounds-on", "paired", "--out", out,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    summary = json.loads(out.read_text())
    assert summary["judges"]["judge-c"]["weights"]["rag@bm25"]["quality"] == 0.5
    assert summary["parameters"]["bounds_on"] == "paired"


def bad(result: subprocess.CompletedProcess[str], *patterns: str) -> None:
    assert result.returncode == 2, (result.returncode, result.stderr)
    assert "Traceback" not in result.stderr, result.stderr
    assert result.stderr.startswith("cube-ray: error: "), result.stderr
    for pattern in patterns:
        assert pattern in result.stderr, result.stderr


def rewrite(path: Path, mutate: Any) -> None:
    mutate(pl.read_parquet(path)).write_parquet(path)


@pytest.mark.parametrize(
    ("table", "mutate", "patterns"),
    [
        ("answers", lambda df: df.drop("rank"), ["lacks column", "'rank'"]),
        (
            "scores",
            lambda df: df.with_columns(pl.col("score").cast(pl.String)),
            ["field 'score'", "has type String", "row 1 (1-based)"],
        ),
        (
            "scores",
            lambda df: df.filter(pl.col("system") != "zero"),
            ["no rows of system 'zero'"],
        ),
        (
            "scores",
            lambda df: pl.concat([df, df.slice(7, 1)]),
            ["duplicate rows", "question_id='q00000'", "judge='judge-a'"],
        ),
        (
            "scores",
            lambda df: df.with_columns(
                pl.when(pl.int_range(pl.len()) == 5)
                .then(11.0)
                .otherwise(pl.col("score"))
                .alias("score")
            ),
            ["row 6 (1-based)", "score 11.0 outside 0..10", "field 'score'"],
        ),
        (
            "answers",
            lambda df: df.with_columns(
                pl.when(pl.int_range(pl.len()) == 2)
                .then(None)
                .otherwise(pl.col("rank"))
                .alias("rank")
            ),
            ["row 3 (1-based)", "without rank", "system='rag@bm25'"],
        ),
    ],
)
def test_bad_input_exits_2_without_output(
    run_dir: Path, table: str, mutate: Any, patterns: list[str]
) -> None:
    for path in sorted((run_dir / table).glob("*.parquet")):
        rewrite(path, mutate)  # every file: some errors concern the whole table
    bad(cube_ray("aggregate", run_dir), str(run_dir / table), *patterns)
    assert not (run_dir / "summary.json").exists()


def test_unreadable_file(run_dir: Path) -> None:
    path = run_dir / "scores" / "part-00001.parquet"
    path.write_text("garbage")
    bad(cube_ray("aggregate", run_dir), str(path), "cannot be read as Parquet")
    assert not (run_dir / "summary.json").exists()


@pytest.mark.parametrize(
    ("content", "patterns"),
    [
        ('{"judge-z": {"relevance": 1}}', ["judge 'judge-z'", "field 'judge-z'"]),
        ('{"fluency": 1}', ["dimension 'fluency'"]),
        ('{"relevance": 1,', ["not valid JSON"]),
        ("[1, 2]", ["must hold a JSON object"]),
        ('{"relevance": -1}', ["malformed weights", ">= 0"]),
        ('{"relevance": "high"}', ["malformed weights"]),
    ],
)
def test_bad_weights_file(run_dir: Path, content: str, patterns: list[str]) -> None:
    weights = run_dir / "weights.json"
    weights.write_text(content)
    bad(cube_ray("aggregate", run_dir, "--weights", weights), str(weights), *patterns)
    assert not (run_dir / "summary.json").exists()


def test_usage_errors(run_dir: Path) -> None:
    result = cube_ray("aggregate", run_dir, "--answers", run_dir / "answers")
    assert result.returncode == 2
    assert "not both" in result.stderr
    result = cube_ray("aggregate", "--answers", run_dir / "answers")
    assert result.returncode == 2
    bad(cube_ray("aggregate", run_dir, "--trim", "0.5"), "--trim")
    bad(cube_ray("aggregate", run_dir, "--k", "eight"), "--k")
    bad(cube_ray("aggregate", run_dir, "--k", "3"), "outside 0..k (k=3)", "answers")
    bad(cube_ray("aggregate", run_dir / "missing"), "no such file or directory")
    bad(cube_ray("aggregate", run_dir, "--alpha", "0"), "--alpha")
    bad(cube_ray("aggregate", run_dir, "--min-gap", "-1"), "--min-gap")
    assert not (run_dir / "summary.json").exists()


def test_separation_options(run_dir: Path, tmp_path: Path) -> None:
    # The worked example's judges have weighted gaps of 2.58-2.68 points: a
    # required gap of 3 leaves every judge out of the headline.
    strict, loose = tmp_path / "strict.json", tmp_path / "loose.json"
    result = cube_ray("aggregate", run_dir, "--min-gap", "3", "--out", strict)
    assert result.returncode == 0, result.stderr
    summary = json.loads(strict.read_text())
    across = summary["across_judges"]["rag@bm25"]
    assert across["judges"] == []
    assert across["reason"] == {
        "code": "no_judge_separates",
        "text": "no judge separates the bounds",
    }
    assert across["cube"]["mean"] is None
    assert summary["intervals"]["systems"]["rag@bm25"]["cube"]["low"] is None
    assert summary["parameters"]["min_gap"] == 3.0
    result = cube_ray(
        "aggregate", run_dir, "--min-gap", "3", "--no-require-separation",
        "--alpha", "0.01", "--resamples", "0", "--out", loose,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    summary = json.loads(loose.read_text())
    assert summary["across_judges"]["rag@bm25"]["cube"]["n_judges"] == 3
    assert summary["parameters"]["require_separation"] is False
    assert summary["parameters"]["alpha"] == 0.01
    assert summary["intervals"] is None  # --resamples 0
