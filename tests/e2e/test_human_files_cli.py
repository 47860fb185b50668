"""Human files through the real console script (issue 34, item 5).

An item scored twice without a ``rater`` column is exit 2 naming both lines;
with a ``rater`` column two raters are averaged and their agreement is in the
summary's calibration block and the report; a score written any way but ASCII
digits with an optional decimal point is one error naming the line and field.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import polars as pl
import pytest

from cube_ray import schema
from cube_ray.aggregate import Summary
from cube_ray.report._calibrated import calibrated_section
from cube_ray.report._data import RunData
from cube_ray.report._render import render_markdown
from tests.e2e.test_calibrated_cli import DIMS, M, _study, cube_ray

pytestmark = pytest.mark.timeout(600)


@pytest.fixture(scope="module")
def study(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, Path, float]:
    return _study(tmp_path_factory.mktemp("human_files"))


def _aggregate(
    answers: Path, scores: Path, human: Path, out: Path
) -> tuple[int, str, str]:
    result = cube_ray(
        "aggregate", "--answers", answers, "--scores", scores, "--human", human,
        "--resamples", "50", "--out", out,
    )  # fmt: skip
    return result.returncode, result.stdout, result.stderr


def test_an_item_scored_twice_without_a_rater_is_exit_2_naming_both_lines(
    study: tuple[Path, Path, Path, float], tmp_path: Path
) -> None:
    answers, scores, human, _ = study
    lines = human.read_text(encoding="utf-8").splitlines()
    # Line 5 scores the item of line 3 again, with another score.
    qid, system, dim, score = lines[2].split(",")
    other = "9.0" if score != "9.0" else "1.0"
    lines.insert(4, ",".join([qid, system, dim, other]))
    bad = tmp_path / "human.csv"
    bad.write_text("\n".join(lines) + "\n", encoding="utf-8")
    out = tmp_path / "summary.json"
    code, _, err = _aggregate(answers, scores, bad, out)
    assert code == 2, err
    assert "Traceback" not in err
    assert str(bad) in err
    assert "line 3 and line 5" in err, err
    assert f"question {qid!r}, set {system!r}, dimension {dim!r}" in err, err
    assert "'rater'" in err  # the fix: name the raters
    assert not out.exists()


def test_the_same_rater_twice_is_exit_2(
    study: tuple[Path, Path, Path, float], tmp_path: Path
) -> None:
    answers, scores, human, _ = study
    ratings = pl.read_csv(human).with_columns(pl.lit("ann").alias("rater"))
    doubled = pl.concat([ratings, ratings.head(1)])
    bad = tmp_path / "human.csv"
    doubled.write_csv(bad)
    code, _, err = _aggregate(answers, scores, bad, tmp_path / "summary.json")
    assert code == 2, err
    assert "Traceback" not in err
    assert f"line 2 and line {doubled.height + 1}" in err, err
    assert "rater 'ann' scores" in err, err


def test_two_raters_are_averaged_and_their_agreement_reported(
    study: tuple[Path, Path, Path, float], tmp_path: Path
) -> None:
    answers, scores, human, _ = study
    first = pl.read_csv(human).with_columns(pl.lit("ann").alias("rater"))
    rng = np.random.default_rng(5)
    shift = rng.choice([-1.0, 0.0, 0.0, 1.0], first.height)
    second = first.with_columns(
        (pl.col(schema.SCORE) + pl.Series(shift)).clip(0.0, 10.0),
        pl.lit("bo").alias("rater"),
    )
    both = pl.concat([first, second])
    path = tmp_path / "two.csv"
    both.write_csv(path)
    out = tmp_path / "summary.json"
    code, _, err = _aggregate(answers, scores, path, out)
    assert code == 0, err
    block = json.loads(out.read_text(encoding="utf-8"))["calibration"]
    assert block["n_labeled"] == M
    assert block["n_ratings"] == both.height
    by_dim = {r["dimension"]: r for r in block["raters"]}
    assert set(by_dim) == set(DIMS)
    for dim in DIMS:
        a = first.filter(pl.col(schema.DIMENSION) == dim)[schema.SCORE].to_numpy()
        b = second.filter(pl.col(schema.DIMENSION) == dim)[schema.SCORE].to_numpy()
        row = by_dim[dim]
        assert row["raters"] == 2
        assert row["units"] == len(a)
        assert row["mean_abs_difference"] == pytest.approx(np.mean(np.abs(a - b)))
        assert 0.5 < row["alpha"] < 1.0  # close raters, not identical
    # One rater alone has no agreement to report.
    code, _, err = _aggregate(answers, scores, human, tmp_path / "one.json")
    assert code == 0, err
    one = json.loads((tmp_path / "one.json").read_text(encoding="utf-8"))
    assert one["calibration"]["raters"] == []
    # The report shows the agreement beside the calibrated figures.
    section = calibrated_section(RunData(run_dir=tmp_path, summary=Summary.read(out)))
    assert section is not None
    text = render_markdown(title="t", meta=[], sections=[section], footer="")
    assert "The people's agreement" in text
    assert f"{by_dim[DIMS[0]]['alpha']:.3f}" in text


@pytest.mark.parametrize("cell", ["1e1", "1_0", "\uff17", "\u0667", "+7", "0x7"])
def test_a_score_not_written_by_the_rule_names_line_and_field(
    study: tuple[Path, Path, Path, float], tmp_path: Path, cell: str
) -> None:
    answers, scores, human, _ = study
    lines = human.read_text(encoding="utf-8").splitlines()
    lines[3] = lines[3].rsplit(",", 1)[0] + "," + cell
    bad = tmp_path / "human.csv"
    bad.write_text("\n".join(lines) + "\n", encoding="utf-8")
    code, _, err = _aggregate(answers, scores, bad, tmp_path / "summary.json")
    assert code == 2, err
    assert "Traceback" not in err
    assert str(bad) in err
    assert "line 4" in err, err
    assert "score" in err
    assert f"{cell!r} is not a number" in err, err
    assert "ASCII digits" in err
