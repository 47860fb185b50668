"""Paired comparison end to end (issue 28, item 3): the real console script.

Run directories are built from the worked example's scored tables (two systems,
three judges, 120 questions), without engines: ``cube-ray aggregate`` and
``cube-ray report`` on one run, ``cube-ray compare`` across it and a second run
that lacks 20 of its questions and whose ``rag@hybrid`` scores one point higher.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest

from cube_ray import schema
from cube_ray.aggregate import AggregateOptions, summarize, with_intervals

WORKED = Path(__file__).resolve().parents[3] / "shared" / "examples" / "worked"
pytestmark = pytest.mark.skipif(
    not (WORKED / "answers.parquet").exists(),
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


def _run_dir(root: Path, answers: pl.DataFrame, scores: pl.DataFrame) -> Path:
    for kind, frame in (("answers", answers), ("scores", scores)):
        (root / kind).mkdir(parents=True)
        frame.write_parquet(root / kind / "part-00000.parquet")
    return root


def _interval(comparison: dict[str, object], flip: bool = False) -> str:
    low, high = comparison["interval"]["low"], comparison["interval"]["high"]  # type: ignore[index]
    if flip:
        low, high = -high, -low
    return f"95 % interval [{low:.1f}, {high:.1f}]"


def test_report_and_compare_show_the_paired_difference(tmp_path: Path) -> None:
    answers = pl.read_parquet(WORKED / "answers.parquet")
    scores = pl.read_parquet(WORKED / "scores.parquet")
    base = _run_dir(tmp_path / "base", answers, scores)

    # A run with two systems: aggregate (the summary records the comparison),
    # then the report shows it in both files and on the console.
    result = cube_ray("aggregate", base, "--resamples", "300")
    assert result.returncode == 0, result.stderr
    summary = json.loads((base / "summary.json").read_text())
    (recorded,) = summary["intervals"]["comparisons"]
    assert (recorded["first"], recorded["second"]) == ("rag@bm25", "rag@hybrid")
    assert recorded["n_questions"] == 120
    assert sorted(recorded["per_judge"]) == ["judge-a", "judge-b", "judge-c"]
    low, high = recorded["interval"]["low"], recorded["interval"]["high"]
    assert low < recorded["difference"] < high
    assert low < 0 < high  # the worked example's systems are level
    result = cube_ray("report", base)
    assert result.returncode == 0, result.stderr
    # bm25 - hybrid < 0: the sentence puts hybrid first, the interval turned.
    sentence = (
        "The difference between rag@hybrid and rag@bm25 is not resolved: "
        f"rag@hybrid is ahead by {abs(recorded['difference']):.1f} points, but the "
        f"{_interval(recorded, flip=True)} includes 0, on the 120 shared questions"
    )
    assert recorded["difference"] < 0
    compared = [ln for ln in result.stdout.splitlines() if ln.startswith("compared:")]
    assert len(compared) == 1, result.stdout
    assert compared[0].startswith(f"compared: {sentence}")
    md = (base / "report.md").read_text(encoding="utf-8")
    html = (base / "report.html").read_text(encoding="utf-8")
    assert sentence in md
    assert sentence in html
    assert "## Systems compared on the same questions" in md
    assert f"| rag@bm25 | rag@hybrid | {recorded['difference']:.2f} |" in md

    # A second run: 100 of the 120 questions, rag@hybrid one point better.
    keep = answers.get_column(schema.QUESTION_ID).unique().sort()[20:].implode()
    sub_a = answers.filter(pl.col(schema.QUESTION_ID).is_in(keep))
    sub_s = scores.filter(pl.col(schema.QUESTION_ID).is_in(keep)).with_columns(
        pl.when(pl.col(schema.SYSTEM) == "rag@hybrid")
        .then((pl.col(schema.SCORE) + 1.0).clip(0.0, 10.0))
        .otherwise(pl.col(schema.SCORE))
        .alias(schema.SCORE)
    )
    better = _run_dir(tmp_path / "better", sub_a, sub_s)
    with_intervals(
        summarize(sub_a, sub_s, options=AggregateOptions()),
        sub_a,
        sub_s,
        n_resamples=300,
    ).write(better / "summary.json")

    out = tmp_path / "cmp" / "comparison.html"
    result = cube_ray("compare", base, better, "--out", out, "--resamples", "300")
    assert result.returncode == 0, result.stderr
    compared = [ln for ln in result.stdout.splitlines() if ln.startswith("compared:")]
    sets = (
        "The question sets differ: base has 120 questions, better has 100, and 100 "
        "are shared; the paired differences use the 100 shared questions only."
    )
    assert compared[0] == f"compared: {sets}"
    assert len(compared) == 1 + 4, result.stdout  # 2 systems x 2 systems
    ahead = [ln for ln in compared if "better:rag@hybrid is ahead of base:" in ln]
    assert len(ahead) == 2, compared
    for line in ahead:
        assert "on the 100 shared questions; all 3 judges agree" in line
    same = next(ln for ln in compared if "base:rag@bm25 and better:rag@bm25" in ln)
    assert "no judge sees a difference" in same  # unchanged, on the same questions
    cmp_md = out.with_suffix(".md").read_text(encoding="utf-8")
    cmp_html = out.read_text(encoding="utf-8")
    for text in (sets, ahead[0].removeprefix("compared: ")):
        assert text in cmp_md
        assert text in cmp_html
    assert "## Runs compared on their shared questions" in cmp_md
