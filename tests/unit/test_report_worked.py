"""The report of the worked example: headline equals the summary, CLI, compare."""

from __future__ import annotations

import functools
import json
import re
import shutil
from pathlib import Path
from typing import Any

import polars as pl
import pytest

from cube_ray import schema
from cube_ray.aggregate import AggregateOptions, Summary, summarize, with_intervals
from cube_ray.cli import main
from cube_ray.errors import InputError
from cube_ray.report import write_comparison, write_report

WORKED = Path(__file__).resolve().parents[2] / "examples" / "worked"
pytestmark = pytest.mark.skipif(
    not WORKED.is_dir(), reason=f"worked example not found at {WORKED}"
)
ALL_PLOTS = {
    "fig-cube",
    "fig-histograms",
    "fig-rank",
    "fig-correlation",
    "fig-bounds",
    "fig-variants",
}


@functools.cache
def _worked_summary() -> Summary:
    """The worked example's summary (it reproduces expected_summary.json to
    1e-9: tests/unit/test_aggregate.py), without intervals."""
    return summarize(
        pl.read_parquet(WORKED / "answers.parquet"),
        pl.read_parquet(WORKED / "scores.parquet"),
        options=AggregateOptions(),
    )


def _worked_run(root: Path, *, tables: bool = True) -> Path:
    root.mkdir(parents=True)
    if tables:
        for kind in ("answers", "scores"):
            (root / kind).mkdir()
            shutil.copy(WORKED / f"{kind}.parquet", root / kind / "part-0.parquet")
    _worked_summary().write(root / "summary.json")
    return root


def _md_table(md: str, header_start: str) -> dict[str, list[str]]:
    """Rows of the Markdown table whose header starts with ``header_start``."""
    lines = md.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(header_start))
    rows = {}
    for line in lines[start + 2 :]:
        if not line.startswith("|"):
            break
        cells = [c.strip() for c in line.strip("|").split(" | ")]
        rows[cells[0]] = cells[1:]
    return rows


def _plots(html: str) -> set[str]:
    return set(re.findall(r'data-plot="([^"]+)"', html))


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    run = _worked_run(tmp_path_factory.mktemp("worked") / "run")
    write_report(run, n_resamples=200, baselines=True)
    return run, json.loads((run / "summary.json").read_text())


def test_headline_equals_summary(report: tuple[Path, dict[str, Any]]) -> None:
    run, summary = report
    html = (run / "report.html").read_text()
    md = (run / "report.md").read_text()
    headline = _md_table(md, "| system | CuBE mean")
    assert set(headline) == set(summary["across_judges"])
    for system, across in summary["across_judges"].items():
        cube_mean, cube_sd, ci, recall, w_mean, w_sd = headline[system]
        assert cube_mean == f"{across['cube']['mean']:.2f}"
        assert cube_sd == f"{across['cube']['sd']:.2f}"
        assert w_mean == f"{across['weighted']['mean']:.2f}"
        assert w_sd == f"{across['weighted']['sd']:.2f}"
        assert recall == f"{summary['judges']['judge-a']['recall_at_k'][system]:.3f}"
        lo, hi = (float(x) for x in ci.strip("[]").split(","))
        assert lo < across["cube"]["mean"] < hi
        card = re.search(
            rf'data-system="{re.escape(system)}">.*?<div class="cube">([^<]+)</div>',
            html,
        )
        assert card is not None
        assert card.group(1) == f"{across['cube']['mean']:.1f}"


def test_per_judge_tables_carry_the_summary(
    report: tuple[Path, dict[str, Any]],
) -> None:
    run, summary = report
    md = (run / "report.md").read_text()
    for system in summary["across_judges"]:
        lines = [
            line
            for line in md.splitlines()
            if line.startswith("| judge-") and "| normalised |" in line
        ]
        assert lines
        for judge, block in summary["judges"].items():
            row = next(
                line
                for line in lines
                if line.startswith(f"| {judge} |")
                and f"| {block['cube'][system]:.2f} |" in line
            )
            assert f"{block['normalized'][system]['weighted']:.1f}" in row


def test_every_plot_and_section_present(report: tuple[Path, dict[str, Any]]) -> None:
    run, _ = report
    html = (run / "report.html").read_text()
    assert _plots(html) == ALL_PLOTS
    for anchor in (
        "headline",
        "judges",
        "distributions",
        "retrieval",
        "bounds",
        "variants",
        "agreement",
        "baselines",
        "worst",
        "details",
    ):
        assert f'<section id="{anchor}">' in html
    # Self-contained: no script, no external reference.
    assert "<script" not in html.lower()
    assert not re.search(r'(src|href)="(?!data:|#)', html)
    md = (run / "report.md").read_text()
    assert "Krippendorff" in md
    assert "ROUGE-L" in md
    assert "missed retrievals" in md


def test_untrusted_text_is_escaped(tmp_path: Path) -> None:
    run = _worked_run(tmp_path / "run")
    answers = pl.read_parquet(WORKED / "answers.parquet")
    evil = '</td><script>alert("x")</script> a|b `c`\n| x | y |'
    answers.with_columns(pl.lit(evil).alias(schema.ANSWER)).write_parquet(
        run / "answers" / "part-0.parquet"
    )
    paths = write_report(run, n_resamples=0)
    html = paths.html.read_text()
    assert "<script" not in html
    assert "&lt;/td&gt;&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;" in html
    md = paths.markdown.read_text()
    # Literal in Markdown: backslash-escaped, not HTML entities.
    assert "\\<script\\>" in md
    assert "&lt;" not in md
    assert "<script" not in md.replace("\\<script", "")
    assert "a\\|b" in md
    # Newlines and pipes in cells keep every table row as wide as its header.
    for block in md.split("\n\n"):
        rows = [line for line in block.splitlines() if line.startswith("| ")]
        if rows:
            width = {len(re.findall(r"(?<!\\)\|", r)) for r in rows}
            assert len(width) == 1, rows


def test_summary_only_run(tmp_path: Path) -> None:
    run = _worked_run(tmp_path / "run", tables=False)
    paths = write_report(run)
    html = paths.html.read_text()
    assert _plots(html) == {"fig-cube", "fig-bounds", "fig-variants"}
    assert "no bootstrap interval" in html


def test_cli_report_and_errors(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = _worked_run(tmp_path / "run")
    out = tmp_path / "out"
    assert main(["report", str(run), "--resamples", "20", "--out-dir", str(out)]) == 0
    assert (out / "report.html").is_file()
    assert (out / "report.md").is_file()
    capsys.readouterr()
    assert main(["report", str(tmp_path / "nope")]) == 2
    assert "not a directory" in capsys.readouterr().err
    (run / "summary.json").unlink()
    assert main(["report", str(run)]) == 2
    assert "cube-ray aggregate" in capsys.readouterr().err


def test_compare(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    a = _worked_run(tmp_path / "a" / "run")
    b = _worked_run(tmp_path / "b" / "run")
    out = tmp_path / "cmp" / "comparison.html"
    assert (
        main(["compare", str(a), str(b), "--out", str(out), "--resamples", "20"]) == 0
    )
    html = out.read_text()
    assert _plots(html) == {"fig-compare"}
    # Same directory names: the full paths tell the runs apart.
    assert f"<td>{a}</td><td>rag@bm25</td>" in html
    assert f"<td>{b}</td><td>rag@hybrid</td>" in html
    md = out.with_suffix(".md").read_text()
    assert "44.97" in md
    with pytest.raises(InputError):
        write_comparison([], out=out)


def test_report_when_no_system_retrieved_its_gold_document(tmp_path: Path) -> None:
    """A system that never retrieved the gold document: CuBE is 0 or undefined,
    correlations over retrieved questions have no pairs; the report still renders
    and says so instead of crashing."""
    run = tmp_path / "run"
    run.mkdir()
    answers = pl.read_parquet(WORKED / "answers.parquet").with_columns(
        pl.when(pl.col(schema.SYSTEM).str.starts_with("rag"))
        .then(pl.lit(0, dtype=pl.Int32))
        .otherwise(pl.col(schema.RANK))
        .alias(schema.RANK)
    )
    scores = pl.read_parquet(WORKED / "scores.parquet")
    answers.write_parquet(run / "answers.parquet")
    scores.write_parquet(run / "scores.parquet")
    summary = summarize(answers, scores, options=AggregateOptions())
    assert summary.judges["judge-a"].recall_at_k["rag@bm25"] == 0.0
    summary.write(run / "summary.json")
    paths = write_report(run, n_resamples=20)
    html = paths.html.read_text(encoding="utf-8")
    assert "fig-correlation" in _plots(html)
    assert "rag@bm25" in html


def test_report_shows_the_summary_intervals(tmp_path: Path) -> None:
    """The report formats the intervals summary.json records (it computes none
    when they are there); asked for others, it has the aggregation compute
    them."""
    run = _worked_run(tmp_path / "run")
    answers = pl.read_parquet(WORKED / "answers.parquet")
    scores = pl.read_parquet(WORKED / "scores.parquet")
    summary = with_intervals(
        _worked_summary(), answers, scores, n_resamples=60, seed=9, method="percentile"
    )
    summary.write(run / "summary.json")
    assert summary.intervals is not None
    paths = write_report(run)
    md = paths.markdown.read_text(encoding="utf-8")
    rows = _md_table(md, "| system | CuBE")
    for system, cell in summary.intervals.systems.items():
        assert rows[system][2] == f"[{cell.cube.low:.2f}, {cell.cube.high:.2f}]"
        assert f"95% CI [{cell.cube.low:.2f}, {cell.cube.high:.2f}]" in "\n".join(
            paths.headline
        )
    assert "| percentile bootstrap | 60 of 60 |" in md
    assert "60 resamples of the questions, seed 9, percentile bootstrap interval" in md
    # Other intervals than recorded: computed by the aggregation, not stored.
    md = write_report(run, n_resamples=30, interval="bca").markdown.read_text()
    assert "| bias-corrected (BCa) bootstrap | 30 of 30 |" in md
    assert Summary.read(run / "summary.json") == summary
