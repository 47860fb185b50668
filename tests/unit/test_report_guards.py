"""The headline's validity guards (CUBE_METHOD.md section 10, issue 11).

The interval averages the judges the headline averages, in every replicate; a
judge with no score on one dimension is not silently dropped; intervals
recomputed for the report must reproduce summary.json or the report fails;
options come from summary.json; a variant without a separated judge gets no
number.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
import pytest
from scipy import stats

from cube_ray import schema
from cube_ray.aggregate import (
    DEFAULT_INTERVAL,
    AggregateOptions,
    bca_interval,
    bootstrap_cube,
    evaluate_replicates,
    fixed_judge_mean,
    summarize as _summarize,
)
from cube_ray.cli import main
from cube_ray.errors import InputError
from cube_ray.report import NO_VERDICT, write_report
from cube_ray.report._words import interval_method

WORKED = Path(__file__).resolve().parents[2] / "examples" / "worked"
needs_worked = pytest.mark.skipif(
    not WORKED.is_dir(), reason=f"worked example not found at {WORKED}"
)
BM25 = "rag@bm25"


@pytest.fixture(scope="module")
def tables() -> tuple[pl.DataFrame, pl.DataFrame]:
    if not WORKED.is_dir():
        pytest.skip(f"worked example not found at {WORKED}")
    return (
        pl.read_parquet(WORKED / "answers.parquet"),
        pl.read_parquet(WORKED / "scores.parquet"),
    )


def summarize(*args: Any, **kwargs: Any) -> dict[str, Any]:
    """The summary as the JSON that summary.json holds."""
    return _summarize(*args, **kwargs).model_dump(mode="json")


def _run_dir(
    root: Path, answers: pl.DataFrame, scores: pl.DataFrame, summary: dict[str, Any]
) -> Path:
    root.mkdir(parents=True)
    answers.write_parquet(root / "answers.parquet")
    scores.write_parquet(root / "scores.parquet")
    (root / "summary.json").write_text(json.dumps(summary), encoding="utf-8")
    return root


def _headline_rows(md: str) -> dict[str, list[str]]:
    lines = md.splitlines()
    start = next(
        i for i, line in enumerate(lines) if line.startswith("| system | CuBE")
    )
    rows = {}
    for line in lines[start + 2 :]:
        if not line.startswith("|"):
            break
        cells = [c.strip() for c in line.strip("|").split(" | ")]
        rows[cells[0]] = cells[1:]
    return rows


# --- the NaN bug: a judge without scores on one dimension -------------------


@needs_worked
def test_judge_without_a_dimension_stays_in_every_replicate(
    tables: tuple[pl.DataFrame, pl.DataFrame],
) -> None:
    """judge-a never scored 'quality': its Pearson weight there is 0, so its
    weighted total is defined (0 x missing must not be NaN). Before the fix the
    recomputation made judge-a's CuBE NaN and the interval averaged only
    judge-b and judge-c, while the headline averaged all three."""
    answers, scores = tables
    scores = scores.filter(
        ~((pl.col(schema.JUDGE) == "judge-a") & (pl.col(schema.DIMENSION) == "quality"))
    )
    summary = summarize(answers, scores, options=AggregateOptions())
    rep = evaluate_replicates(answers, scores)
    for ji, judge in enumerate(rep.judges):
        for si, system in enumerate(rep.systems):
            assert rep.cube[ji, si, 0] == pytest.approx(
                summary["judges"][judge]["cube"][system], abs=1e-9
            )
    for si, system in enumerate(rep.systems):
        assert rep.cube_mean[si, 0] == pytest.approx(
            summary["across_judges"][system]["cube"]["mean"], abs=1e-9
        )
    boot = bootstrap_cube(answers, scores, n_resamples=50, seed=1)
    for system, result in boot.items():
        assert result.n_defined == 50
        assert result.judges == ("judge-a", "judge-b", "judge-c")
        lo, hi = result.cube
        assert lo is not None
        assert hi is not None
        assert lo < summary["across_judges"][system]["cube"]["mean"] < hi


def test_fixed_judges_make_a_replicate_undefined_instead_of_averaging_fewer() -> None:
    cube = np.array([[[40.0, 50.0, 60.0]], [[44.0, np.nan, 64.0]]])  # [J, S, B]
    both = fixed_judge_mean(cube, np.array([[True], [True]]))
    assert both[0, 0] == pytest.approx(42.0)
    assert np.isnan(both[0, 1])  # not 50.0, the value of one judge
    first = fixed_judge_mean(cube, np.array([[True], [False]]))
    assert first[0].tolist() == [40.0, 50.0, 60.0]
    assert np.isnan(fixed_judge_mean(cube, np.array([[False], [False]]))).all()


@needs_worked
def test_interval_averages_only_the_headline_judges(
    tables: tuple[pl.DataFrame, pl.DataFrame],
) -> None:
    answers, scores = tables
    used = {BM25: ["judge-a", "judge-b"]}
    rep = evaluate_replicates(answers, scores, judges=used)
    si = rep.systems.index(BM25)
    assert rep.cube_mean[si, 0] == pytest.approx(rep.cube[:2, si, 0].mean())
    other = rep.systems.index("rag@hybrid")  # not listed: every judge
    assert rep.cube_mean[other, 0] == pytest.approx(rep.cube[:, other, 0].mean())
    boot = bootstrap_cube(answers, scores, n_resamples=30, seed=2, judges=used)
    assert boot[BM25].judges == ("judge-a", "judge-b")
    assert boot["rag@hybrid"].judges == ("judge-a", "judge-b", "judge-c")


# --- the report reproduces summary.json or fails ------------------------------


@needs_worked
def test_report_fails_when_summary_does_not_match_tables(
    tables: tuple[pl.DataFrame, pl.DataFrame],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Intervals the report computes must be intervals of the summary's figures:
    a summary whose headline the tables do not reproduce is refused."""
    answers, scores = tables
    summary = summarize(answers, scores, options=AggregateOptions())
    summary["across_judges"][BM25]["cube"]["mean"] += 5.0
    run = _run_dir(tmp_path / "run", answers, scores, summary)
    with pytest.raises(InputError, match=f"across-judge CuBE of {BM25}") as err:
        write_report(run, n_resamples=10)
    assert "cube-ray aggregate" in str(err.value)
    assert main(["report", str(run), "--resamples", "10"]) == 2
    assert "does not match" in capsys.readouterr().err
    assert not (run / "report.html").exists()


@needs_worked
def test_report_fails_when_options_differ(
    tables: tuple[pl.DataFrame, pl.DataFrame], tmp_path: Path
) -> None:
    """summary.json says trim 0.2 but its figures were computed with 0.1."""
    answers, scores = tables
    summary = summarize(answers, scores, options=AggregateOptions())
    summary["parameters"]["trim"] = 0.2
    run = _run_dir(tmp_path / "run", answers, scores, summary)
    with pytest.raises(InputError, match="does not match"):
        write_report(run, n_resamples=10)


@needs_worked
def test_report_uses_recorded_options(
    tables: tuple[pl.DataFrame, pl.DataFrame], tmp_path: Path
) -> None:
    answers, scores = tables
    options = AggregateOptions(trim=0.2, bounds_on="paired")
    summary = summarize(answers, scores, options=options)
    run = _run_dir(tmp_path / "run", answers, scores, summary)
    md = write_report(run, n_resamples=20).markdown.read_text()
    rows = _headline_rows(md)
    boot = bootstrap_cube(answers, scores, n_resamples=20, seed=0, options=options)
    for system, across in summary["across_judges"].items():
        assert rows[system][0] == f"{across['cube']['mean']:.2f}"
        lo, hi = boot[system].cube
        assert lo is not None
        assert hi is not None
        assert rows[system][2] == f"[{lo:.2f}, {hi:.2f}]"
    assert "min_span" not in md.split("## Per-judge")[0]


@needs_worked
def test_invalid_parameters_are_an_error(
    tables: tuple[pl.DataFrame, pl.DataFrame], tmp_path: Path
) -> None:
    answers, scores = tables
    summary = summarize(answers, scores, options=AggregateOptions())
    summary["parameters"]["trim"] = 0.7
    run = _run_dir(tmp_path / "run", answers, scores, summary)
    with pytest.raises(InputError, match=r"parameters\.trim") as err:
        write_report(run)
    assert "cube-ray aggregate" in str(err.value)


# --- the headline: who was used, and no number without a separated judge ----


def _guarded_summary(
    answers: pl.DataFrame, scores: pl.DataFrame, used: dict[str, list[str]]
) -> dict[str, Any]:
    """The worked example's summary with section 10's keys, ``used`` judges."""
    summary = summarize(answers, scores, options=AggregateOptions())
    for system, block in summary["across_judges"].items():
        judges = used.get(system, list(summary["judges"]))
        left = [j for j in summary["judges"] if j not in judges]
        block["judges"] = judges
        block["excluded"] = {
            j: {
                "code": "bounds_not_separated",
                "text": "its full-score answers did not score clearly above its "
                "zero-score answers",
                "gap": 0.1,
                "p_value": 0.4,
            }
            for j in left
        }
        block["reason"] = (
            None
            if judges
            else {"code": "no_judge_separates", "text": "no judge separates the bounds"}
        )
        for figure, cell in list(block.items()):
            if not isinstance(cell, dict) or figure in ("excluded", "reason"):
                continue
            per = [
                summary["judges"][j]["cube"][system]
                if figure == "cube"
                else summary["judges"][j]["normalized"][system][figure]
                for j in judges
            ]
            block[figure] = {
                "mean": float(np.mean(per)) if per else None,
                "sd": float(np.std(per, ddof=1)) if len(per) > 1 else None,
                "n_judges": len(per),
            }
        for j in left:
            summary["judges"][j].setdefault("bound_separation", {})[system] = {
                "weighted": {
                    "gap": 0.1,
                    "p_value": 0.4,
                    "n_pairs": 120,
                    "separated": False,
                }
            }
    return summary


@needs_worked
def test_headline_without_a_separated_judge_shows_no_number(
    tables: tuple[pl.DataFrame, pl.DataFrame], tmp_path: Path
) -> None:
    answers, scores = tables
    summary = _guarded_summary(answers, scores, {BM25: [], "rag@hybrid": ["judge-a"]})
    run = _run_dir(tmp_path / "run", answers, scores, summary)
    paths = write_report(run, n_resamples=30)
    md, html = paths.markdown.read_text(), paths.html.read_text()
    rows = _headline_rows(md)
    assert rows[BM25][:3] == [NO_VERDICT, "n/a", "n/a"]
    headline = md.split("## Per-judge")[0]
    for judge in summary["judges"].values():  # no per-judge number either
        assert f"{judge['cube'][BM25]:.2f}" not in headline
    assert "no judge separates the bounds" in headline
    card = html.split(f'data-system="{BM25}">', 1)[1].split("</dl>")[0]
    assert f'<div class="cube">{NO_VERDICT}</div>' in card
    # The per-judge figures are kept (nothing hidden) in their own section.
    assert f"{summary['judges']['judge-a']['cube'][BM25]:.2f}" in md
    # The other variant: one judge used, the two left out named with why.
    hybrid = rows["rag@hybrid"]
    assert hybrid[0] == f"{summary['judges']['judge-a']['cube']['rag@hybrid']:.2f}"
    assert "rag@hybrid: the headline averages 1 judge: judge-a." in headline
    assert (
        "judge-b: its full-score answers did not score clearly above its zero-score "
        "answers (one-sided Wilcoxon p = 0.400)" in headline
    )
    assert "| rag@hybrid | judge-a | judge-b:" in headline
    assert "bias-corrected (BCa) bootstrap | 30 of 30 |" in headline


@needs_worked
def test_interval_of_a_partial_jury_is_the_bootstrap_of_those_judges(
    tables: tuple[pl.DataFrame, pl.DataFrame], tmp_path: Path
) -> None:
    answers, scores = tables
    used = {BM25: ["judge-a", "judge-c"]}
    summary = _guarded_summary(answers, scores, used)
    run = _run_dir(tmp_path / "run", answers, scores, summary)
    md = write_report(run, n_resamples=40, seed=3).markdown.read_text()
    boot = bootstrap_cube(answers, scores, n_resamples=40, seed=3, judges=used)
    lo, hi = boot[BM25].cube
    assert lo is not None
    assert hi is not None
    assert _headline_rows(md)[BM25][2] == f"[{lo:.2f}, {hi:.2f}]"


# --- outages and BCa -------------------------------------------------------


def test_outages_are_left_out_not_counted_as_misses() -> None:
    qids = [f"q{i}" for i in range(6)]
    answers = pl.DataFrame(
        {
            schema.QUESTION_ID: qids * 3,
            schema.SYSTEM: ["zero"] * 6 + ["full"] * 6 + ["rag"] * 6,
            schema.RANK: [None] * 12 + [1, 2, 0, 3, 0, 0],
            schema.STATUS: ["ok"] * 12 + ["ok", "ok", "ok", "ok", "error", "timeout"],
        },
        schema_overrides={schema.RANK: pl.Int32},
    )
    values = {"zero": [2.0, 3, 2, 3, 2, 3], "full": [8.0, 9, 8, 9, 8, 9]}
    values["rag"] = [7.0, 6, 2, 5, 9, 9]  # the failed rows' scores must not count
    scores = pl.DataFrame(
        {
            schema.QUESTION_ID: qids * 3,
            schema.SYSTEM: ["zero"] * 6 + ["full"] * 6 + ["rag"] * 6,
            schema.JUDGE: ["j"] * 18,
            schema.DIMENSION: ["d"] * 18,
            schema.SCORE: values["zero"] + values["full"] + values["rag"],
            schema.STATUS: ["ok"] * 18,
        }
    )
    rep = evaluate_replicates(answers, scores, options=AggregateOptions(trim=0.0))
    assert rep.recall[0, 0] == pytest.approx(3 / 4)  # not 3 / 6
    expected = 100 * (np.mean([7.0, 6, 5]) - 2.5) / (8.5 - 2.5)
    assert rep.normalized[0, 0, 0, -1] == pytest.approx(expected)
    assert rep.cube[0, 0, 0] == pytest.approx(expected * 3 / 4)


def test_bca_interval_matches_scipy_on_a_skewed_statistic() -> None:
    rng = np.random.default_rng(5)
    x = rng.exponential(size=60)
    reps = x[rng.integers(0, x.size, (40_000, x.size))].mean(axis=1)
    jack = (x.sum() - x) / (x.size - 1)
    ours = bca_interval(reps, float(x.mean()), jack, 0.95)
    ref = stats.bootstrap(
        (x,), np.mean, n_resamples=40_000, method="BCa", random_state=6
    ).confidence_interval
    assert ours[0] == pytest.approx(ref.low, abs=0.02)
    assert ours[1] == pytest.approx(ref.high, abs=0.02)
    # Right-skewed: BCa moves both ends up relative to the percentile interval.
    lo, hi = np.quantile(reps, [0.025, 0.975])
    assert ours[0] is not None
    assert ours[1] is not None
    assert ours[0] > lo
    assert ours[1] > hi


@needs_worked
def test_bca_bootstrap_of_the_worked_example(
    tables: tuple[pl.DataFrame, pl.DataFrame],
) -> None:
    answers, scores = tables
    expected = json.loads((WORKED / "expected_summary.json").read_text())
    boot = bootstrap_cube(answers, scores, n_resamples=200, seed=0, method="bca")
    for system, result in boot.items():
        assert result.method == "bca"
        lo, hi = result.cube
        assert lo is not None
        assert hi is not None
        assert lo < expected["across_judges"][system]["cube"]["mean"] < hi


def test_cli_interval_option(tmp_path: Path) -> None:
    if not WORKED.is_dir():
        pytest.skip(f"worked example not found at {WORKED}")
    run = tmp_path / "run"
    run.mkdir()
    for kind in ("answers", "scores"):
        shutil.copy(WORKED / f"{kind}.parquet", run / f"{kind}.parquet")
    answers = pl.read_parquet(WORKED / "answers.parquet")
    scores = pl.read_parquet(WORKED / "scores.parquet")
    _summarize(answers, scores, options=AggregateOptions()).write(run / "summary.json")
    args = ["report", str(run), "--resamples", "20"]
    assert main([*args, "--interval", "percentile"]) == 0
    assert "| percentile bootstrap | 20 of 20 |" in (run / "report.md").read_text()
    assert main(args) == 0  # the default
    default = interval_method(DEFAULT_INTERVAL)
    assert f"| {default} | 20 of 20 |" in (run / "report.md").read_text()


# --- end to end with the aggregation's own guards ----------------------------


def _blind(scores: pl.DataFrame, judges: list[str]) -> pl.DataFrame:
    """``judges`` score full answers like zero answers (+0.1): a 0.1-point gap,
    the demo's case, instead of telling a grounded answer from no answer."""
    keys = [schema.QUESTION_ID, schema.JUDGE, schema.DIMENSION]
    zero = scores.filter(pl.col(schema.SYSTEM) == "zero").select(
        *keys, pl.col(schema.SCORE).alias("zero_score")
    )
    return (
        scores.join(zero, on=keys, how="left")
        .with_columns(
            pl.when(
                (pl.col(schema.SYSTEM) == "full") & pl.col(schema.JUDGE).is_in(judges)
            )
            .then(pl.min_horizontal(pl.col("zero_score") + 0.1, pl.lit(10.0)))
            .otherwise(pl.col(schema.SCORE))
            .alias(schema.SCORE)
        )
        .drop("zero_score")
    )


@needs_worked
def test_report_of_a_summary_with_a_blind_judge(
    tables: tuple[pl.DataFrame, pl.DataFrame], tmp_path: Path
) -> None:
    answers, scores = tables
    scores = _blind(scores, ["judge-c"])
    summary = summarize(answers, scores, options=AggregateOptions())
    for block in summary["across_judges"].values():
        assert block["judges"] == ["judge-a", "judge-b"]
    # judge-c's own CuBE is a meaningless large number; it must not enter.
    assert abs(summary["judges"]["judge-c"]["cube"][BM25]) > 100
    run = _run_dir(tmp_path / "run", answers, scores, summary)
    md = write_report(run, n_resamples=30).markdown.read_text()
    headline = md.split("## Per-judge")[0]
    rows = _headline_rows(md)
    for system, block in summary["across_judges"].items():
        assert rows[system][0] == f"{block['cube']['mean']:.2f}"
        assert f"{summary['judges']['judge-c']['cube'][system]:.2f}" not in headline
        assert f"| {system} | judge-a, judge-b | judge-c:" in headline
    assert "the headline averages 2 judges: judge-a and judge-b." in headline
    why = summary["across_judges"][BM25]["excluded"]["judge-c"]
    assert why["code"] == "bounds_not_separated"
    assert f"judge-c: {why['text']}" in headline  # the aggregation's words
    assert "points above" in why["text"]
    assert "does not record" not in headline  # a current summary records all


@needs_worked
def test_report_of_a_summary_without_a_separated_judge(
    tables: tuple[pl.DataFrame, pl.DataFrame], tmp_path: Path
) -> None:
    answers, scores = tables
    scores = _blind(scores, ["judge-a", "judge-b", "judge-c"])
    summary = summarize(answers, scores, options=AggregateOptions())
    run = _run_dir(tmp_path / "run", answers, scores, summary)
    paths = write_report(run, n_resamples=30)
    md = paths.markdown.read_text()
    rows = _headline_rows(md)
    for system in summary["across_judges"]:
        assert rows[system][:3] == [NO_VERDICT, "n/a", "n/a"]
        assert rows[system][4:] == ["n/a", "n/a"]
    headline = md.split("## Per-judge")[0]
    assert "no judge separates the bounds" in headline
    for judge in summary["judges"].values():
        for value in judge["cube"].values():
            assert f"{value:.2f}" not in headline
            assert f"{value:.1f}" not in paths.html.read_text().split('id="judges"')[0]
