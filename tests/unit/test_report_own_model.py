"""The headline without the judges that score their own model's answers (§12).

The aggregation computes ``across_judges.<system>.without_own_model`` from the
per-judge CuBE; the console and the report only show it beside the headline.
Real tables: the worked example (three judges, two systems).
"""

from __future__ import annotations

import statistics
from pathlib import Path

import polars as pl
import pytest

from cube_ray.aggregate import AggregateOptions, Summary, summarize
from cube_ray.qualification import OWN_MODEL
from cube_ray.report import write_report
from cube_ray.report._data import RunData
from cube_ray.report._headline import console_lines

WORKED = Path(__file__).resolve().parents[2] / "examples" / "worked"


@pytest.fixture(scope="module")
def tables() -> tuple[pl.DataFrame, pl.DataFrame]:
    if not WORKED.is_dir():
        pytest.skip(f"worked example not found at {WORKED}")
    return (
        pl.read_parquet(WORKED / "answers.parquet"),
        pl.read_parquet(WORKED / "scores.parquet"),
    )


def _summary(
    tables: tuple[pl.DataFrame, pl.DataFrame], own: list[tuple[str, str]]
) -> Summary:
    flags = [
        {"flag": OWN_MODEL, "judge": j, "system": writer, "model": "m"}
        for j, writer in own
    ]
    return summarize(*tables, options=AggregateOptions(), own_model=flags)


def test_the_figure_is_the_headline_over_the_other_judges(
    tables: tuple[pl.DataFrame, pl.DataFrame],
) -> None:
    # judge-a shares the generator's model (every system), judge-b
    # rag@hybrid's only.
    summary = _summary(tables, [("judge-a", "generator"), ("judge-b", "rag@hybrid")])
    plain = _summary(tables, [])
    for system, kept in (
        ("rag@bm25", ["judge-b", "judge-c"]),
        ("rag@hybrid", ["judge-c"]),
    ):
        across = summary.across_judges[system]
        # The headline itself is unchanged: the flag only adds the second figure.
        for name, fig in plain.across_judges[system].figures.items():
            got = across.figures[name]  # summation order: last digit only
            assert (got.mean, got.sd) == pytest.approx((fig.mean, fig.sd))
            assert got.n_judges == fig.n_judges
        assert across.judges == ["judge-a", "judge-b", "judge-c"]
        block = across.without_own_model
        assert block is not None
        cube = [summary.judges[j].cube[system] for j in kept]
        assert block.judges == kept
        assert block.n_judges == len(kept)
        assert block.mean == pytest.approx(statistics.fmean(c for c in cube if c))
        assert block.sd == (
            pytest.approx(statistics.stdev(c for c in cube if c))
            if len(kept) > 1
            else None
        )
        assert plain.across_judges[system].without_own_model is None
    assert "without_own_model" not in plain.to_json()
    # The typed model reads its own JSON back.
    assert Summary.model_validate_json(summary.to_json()) == summary
    flagged = {(f.judge, f.system) for f in summary.flags if f.flag == OWN_MODEL}
    assert flagged == {("judge-a", "generator"), ("judge-b", "rag@hybrid")}


def test_a_flagged_judge_outside_the_headline_changes_nothing(
    tables: tuple[pl.DataFrame, pl.DataFrame],
) -> None:
    answers, scores = tables
    summary = summarize(
        answers,
        scores.filter(pl.col("judge") != "judge-c"),
        options=AggregateOptions(),
        own_model=[{"flag": OWN_MODEL, "judge": "judge-x", "system": "generator"}],
    )
    for across in summary.across_judges.values():
        assert across.without_own_model is None


def test_console_and_report_show_it_beside_the_headline(
    tables: tuple[pl.DataFrame, pl.DataFrame], tmp_path: Path
) -> None:
    summary = _summary(tables, [("judge-a", "generator")])
    lines = console_lines(RunData(tmp_path, summary))
    for system in summary.systems:
        block = summary.across_judges[system].without_own_model
        assert block is not None
        at = next(i for i, line in enumerate(lines) if line.startswith(f"{system}:"))
        assert lines[at + 1] == (
            f"  without judge-a (judges its own model's answers): CuBE "
            f"{block.mean:.2f} (2 judges: judge-b, judge-c; SD {block.sd:.2f})"
        )

    run = tmp_path / "run"
    run.mkdir()
    tables[0].write_parquet(run / "answers.parquet")
    tables[1].write_parquet(run / "scores.parquet")
    summary.write(run / "summary.json")
    md = write_report(run, n_resamples=20).markdown.read_text(encoding="utf-8")
    assert "The headline without the judges that score their own model's" in md
    for system in summary.systems:
        block = summary.across_judges[system].without_own_model
        assert block is not None
        mean = summary.across_judges[system].figures["cube"].mean
        assert mean is not None
        row = f"| {system} | {mean:.2f} | judge-a | {block.mean:.2f} | {block.sd:.2f} |"
        assert row in md

    # Without the flag: no second figure anywhere.
    plain = _summary(tables, [])
    assert not [
        line for line in console_lines(RunData(tmp_path, plain)) if "own model" in line
    ]
    plain.write(run / "summary.json")
    md = write_report(run, n_resamples=20).markdown.read_text(encoding="utf-8")
    assert "The headline without the judges" not in md
