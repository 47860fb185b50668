"""``cube-ray plan`` on pilots without spread, and ``--pair A B`` (issue 36).

Run directories are built from the worked example's scored tables (two
systems, three judges, 120 questions), without engines: a pilot whose
interval has zero width is refused (exit 2) saying why and what to do; two
systems identical on every question are said to be so by ``report`` and
``compare``; ``plan --pair`` sizes their paired difference with the same
formula as a system's CuBE.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import polars as pl
import pytest

from cube_ray import schema
from cube_ray.cli import main
from cube_ray.sizing import required_n
from tests.pipeline_helpers import ROOT, fake_config, make_corpus, make_qa_file

WORKED = ROOT.parent / "shared" / "examples" / "worked"
pytestmark = pytest.mark.skipif(
    not (WORKED / "answers.parquet").exists(),
    reason=f"worked example not found at {WORKED}",
)


def _run_dir(root: Path, answers: pl.DataFrame, scores: pl.DataFrame) -> Path:
    for kind, frame in (("answers", answers), ("scores", scores)):
        (root / kind).mkdir(parents=True)
        frame.write_parquet(root / kind / "part-00000.parquet")
    (root / "manifest.json").write_text("{}", encoding="utf-8")
    assert main(["aggregate", str(root), "--resamples", "300"]) == 0
    return root


def _config(tmp: Path) -> str:
    corpus, ids = make_corpus(tmp, 2)
    return str(fake_config(tmp, corpus, make_qa_file(tmp, ids)))


def _worked() -> tuple[pl.DataFrame, pl.DataFrame]:
    return (
        pl.read_parquet(WORKED / "answers.parquet"),
        pl.read_parquet(WORKED / "scores.parquet"),
    )


def _twins(answers: pl.DataFrame, scores: pl.DataFrame) -> tuple[Any, Any]:
    """rag@hybrid made a copy of rag@bm25: the same ranks, the same scores."""
    bm25_a = answers.filter(pl.col(schema.SYSTEM) == "rag@bm25")
    bm25_s = scores.filter(pl.col(schema.SYSTEM) == "rag@bm25")
    hybrid = pl.lit("rag@hybrid")
    return (
        pl.concat(
            [
                answers.filter(pl.col(schema.SYSTEM) != "rag@hybrid"),
                bm25_a.with_columns(hybrid.alias(schema.SYSTEM)),
            ]
        ),
        pl.concat(
            [
                scores.filter(pl.col(schema.SYSTEM) != "rag@hybrid"),
                bm25_s.with_columns(hybrid.alias(schema.SYSTEM)),
            ]
        ),
    )


def test_plan_refuses_a_pilot_without_spread(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Every question scored alike: the interval has zero width; no '1 questions'."""
    answers, scores = _worked()
    system = pl.col(schema.SYSTEM)
    level = (
        pl.when(system == schema.ZERO)
        .then(2.0)
        .when(system == schema.FULL)
        .then(8.0)
        .otherwise(5.0)
    )
    flat_a = answers.with_columns(
        pl.when(system.str.starts_with("rag"))
        .then(pl.lit(1, pl.Int32))
        .otherwise(None)
        .alias(schema.RANK)
    )
    flat_s = scores.with_columns(level.alias(schema.SCORE))
    run_dir = _run_dir(tmp_path / "flat", flat_a, flat_s)
    capsys.readouterr()
    code = main(
        ["plan", str(run_dir), "--half-width", "2", "--config", _config(tmp_path)]
    )
    captured = capsys.readouterr()
    assert code == 2, captured.out
    assert "-> 1 questions" not in captured.out
    err = captured.err
    assert "rag@bm25, rag@hybrid: the pilot's 95 % interval has zero width" in err
    assert "every resample of its 120 questions gave the same figure" in err
    assert "Run a larger pilot, with questions that differ" in err


def test_identical_systems_are_said_identical_and_their_pair_is_not_planned(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    answers, scores = _twins(*_worked())
    run_dir = _run_dir(tmp_path / "twins", answers, scores)
    assert main(["report", str(run_dir)]) == 0
    out = capsys.readouterr().out
    identical = "rag@bm25 and rag@hybrid are identical on every question"
    assert f"compared: {identical}: 0.0 points apart in every resample" in out
    assert "not resolved" not in out
    assert identical in (run_dir / "report.md").read_text(encoding="utf-8")
    # compare across two runs: the same system, unchanged, is identical too.
    other = _run_dir(tmp_path / "other", *_worked())
    out_html = tmp_path / "cmp" / "comparison.html"
    assert main(["compare", str(run_dir), str(other), "--out", str(out_html)]) == 0
    compared = capsys.readouterr().out
    assert "twins:rag@bm25 and other:rag@bm25 are identical on every question" in (
        compared
    )
    code = main(
        [
            "plan",
            str(run_dir),
            "--half-width",
            "1",
            "--pair",
            "rag@hybrid",
            "rag@bm25",
            "--config",
            _config(tmp_path),
            "--corpus-size",
            "1000",
        ]
    )
    captured = capsys.readouterr()
    assert code == 2
    assert (
        "the paired difference rag@hybrid - rag@bm25: the pilot's 95 % interval "
        "has zero width" in captured.err
    )


def test_plan_pair_sizes_the_paired_difference(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run_dir = _run_dir(tmp_path / "base", *_worked())
    summary = json.loads((run_dir / "summary.json").read_text(encoding="utf-8"))
    (recorded,) = summary["intervals"]["comparisons"]
    assert (recorded["first"], recorded["second"]) == ("rag@bm25", "rag@hybrid")
    half = recorded["interval"]["half_width"]
    capsys.readouterr()
    plan_json = tmp_path / "plan.json"
    code = main(
        [
            "plan",
            str(run_dir),
            "--half-width",
            "1",
            "--pair",
            "rag@hybrid",
            "rag@bm25",
            "--config",
            _config(tmp_path),
            "--corpus-size",
            "1000",
            "--json",
            str(plan_json),
        ]
    )
    out = capsys.readouterr().out
    assert code == 0
    plan = json.loads(plan_json.read_text(encoding="utf-8"))
    pair = plan["pair"]
    assert (pair["first"], pair["second"]) == ("rag@hybrid", "rag@bm25")
    assert pair["difference"] == pytest.approx(-recorded["difference"], abs=1e-4)
    assert pair["n_pilot"] == 120
    assert pair["half_width_pilot"] == pytest.approx(half, abs=1e-4)
    assert pair["n_required"] == required_n(120, round(half, 4), 1.0)
    assert plan["cost"]["required"]["questions"] == pair["n_required"]
    assert "systems" not in plan
    assert (
        f"the paired difference rag@hybrid - rag@bm25 ({-recorded['difference']:.3g}"
        in out
    )
    assert f"-> {pair['n_required']:,} questions (both systems answer each)" in out
    # A name that is not a system of the run is a user mistake.
    code = main(
        [
            *("plan", str(run_dir), "--half-width", "1"),
            *("--pair", "rag@bm25", "rag@x", "--config", _config(tmp_path)),
            *("--corpus-size", "1000"),
        ]
    )
    assert code == 2
    assert "'rag@x' is not a system of this run" in capsys.readouterr().err
