"""The report speaks the reader's words (issue 28, item 4).

Reports (report.html, report.md, the console headline and the compare page)
of crafted runs are rendered through the public entry points, so every
section any report module adds is read here: no jargon ("held fixed", a bare
"bca", "judge(s)", "± n/a", "defined replicates"), a warning where
Krippendorff's alpha says the judges disagree (and only there), a CuBE above
100 explained where it is shown, one scale per table, each glossary term once
where it first appears, run details as rows rather than cut JSON. A static
scan of every module of cube_ray/report checks their literal text too.
"""

from __future__ import annotations

import ast
import html
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import polars as pl
import pytest

from cube_ray import schema
from cube_ray.aggregate import AggregateOptions, Summary, summarize, with_intervals
from cube_ray.report import RunData, console_lines, write_comparison, write_report
from cube_ray.report._glossary import GLOSSARY
from cube_ray.report._words import SCALE_10, SCALE_100

REPORT_PACKAGE = Path(__file__).resolve().parents[2] / "cube_ray" / "report"
DIMS = ("relevance", "quality")
SPELLED = "bias-corrected (BCa) bootstrap"
BANNED = ("held fixed", "defined replicates", "± n/a", "n/a SD", "SD n/a")


@dataclass(frozen=True)
class Crafted:
    """A run directory and the summary beside its tables."""

    root: Path
    summary: Summary


def _tables(
    *,
    systems: dict[str, float],
    judges: dict[str, str],
    n: int = 40,
    seed: int = 0,
) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Answers and 0-10 scores of ``n`` questions.

    ``systems``: name -> mean score of its retrieved answers (zero bound 3,
    full bound 7). ``judges``: name -> ``agree`` (scores follow the question
    and the set), ``random_quality`` (quality scored at random: the judges
    disagree there) or ``flat`` (every set alike: bounds not separated).
    """
    rng = np.random.default_rng(seed)
    qids = [f"q{i:03d}" for i in range(n)]
    base = {schema.ZERO: 3.0, schema.FULL: 7.0, **systems}
    effect = rng.normal(0, 1.0, size=(n, len(DIMS)))
    answers, scores = [], []
    for name, mean in base.items():
        is_system = name in systems
        ranks = (
            rng.choice([1, 1, 1, 2, 3], size=n)
            if is_system and mean <= 7.0
            else np.ones(n, dtype=int)
        )
        for qi, qid in enumerate(qids):
            rank = int(ranks[qi]) if is_system else None
            answers.append(
                {
                    schema.QUESTION_ID: qid,
                    schema.DOC_ID: f"d{qi:03d}",
                    schema.SYSTEM: name,
                    schema.ANSWER: f"answer {qid} of {name}",
                    schema.RETRIEVED_DOC_IDS: [f"d{qi:03d}"] if is_system else None,
                    schema.RANK: rank,
                }
            )
            for judge, kind in judges.items():
                for di, dim in enumerate(DIMS):
                    at_random = kind == "flat" or (
                        kind == "random_quality" and dim == "quality"
                    )
                    if at_random:
                        value = float(rng.integers(2, 9))
                    else:
                        rank_bonus = 0.0 if rank is None else (1.0 - 0.6 * (rank - 1))
                        value = mean + effect[qi, di] + rank_bonus + rng.normal(0, 0.3)
                    scores.append(
                        {
                            schema.QUESTION_ID: qid,
                            schema.SYSTEM: name,
                            schema.JUDGE: judge,
                            schema.DIMENSION: dim,
                            schema.SCORE: float(np.clip(round(value), 0, 10)),
                            schema.STATUS: "ok",
                            "raw": "",
                        }
                    )
    frame = pl.DataFrame(answers).with_columns(pl.col(schema.RANK).cast(pl.Int32))
    return frame, pl.DataFrame(scores)


def _run(
    root: Path,
    *,
    systems: dict[str, float],
    judges: dict[str, str],
    resamples: int = 40,
) -> Crafted:
    answers, scores = _tables(systems=systems, judges=judges)
    root.mkdir(parents=True)
    answers.write_parquet(root / "answers.parquet")
    scores.write_parquet(root / "scores.parquet")
    summary = summarize(answers, scores, options=AggregateOptions(k=3))
    if resamples:
        summary = with_intervals(summary, answers, scores, n_resamples=resamples)
    summary.write(root / "summary.json")
    (root / "manifest.json").write_text(
        '{"status": "complete", '
        '"config": {"judges": {"judge-a": {"backend": "vllm", "model": "m"}}}, '
        '"stages": {"scores:judge-a": {"seconds": 12.5, "rows_written": 320}}, '
        '"retries": [{"stage": "judge", "wall_s": 3.5}]}',
        encoding="utf-8",
    )
    return Crafted(root, summary)


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Crafted]:
    base = tmp_path_factory.mktemp("words")
    agree = {"judge-a": "agree", "judge-b": "agree"}
    return {
        # Two systems, a jury that agrees, CuBE well inside 0-100.
        "agree": _run(
            base / "agree", systems={"rag@a": 6.0, "rag@b": 5.0}, judges=agree
        ),
        # The judges disagree on quality (judge-b scores it at random).
        "disagree": _run(
            base / "disagree",
            systems={"rag@a": 6.0},
            judges={"judge-a": "agree", "judge-b": "random_quality"},
        ),
        # The demo's case: one judge separates the bounds and the RAG answers
        # score above the full bound; no interval recorded.
        "above": _run(
            base / "above",
            systems={"rag": 7.8},
            judges={"judge-a": "agree", "judge-flat": "flat"},
            resamples=0,
        ),
    }


@dataclass(frozen=True)
class Rendered:
    """Every text a reader sees of one run."""

    html: str
    """The page's text, tags removed, entities decoded."""
    raw_html: str
    md: str
    console: str


def _text_of(page: str) -> str:
    body = re.sub(r"<style>.*?</style>", " ", page, flags=re.S)
    body = re.sub(r'src="data:[^"]*"', "", body)
    return html.unescape(re.sub(r"<[^>]+>", " ", body))


@pytest.fixture(scope="module")
def rendered(runs: dict[str, Crafted]) -> dict[str, Rendered]:
    out = {}
    for name, run in runs.items():
        human = run.root / "human.csv"
        pl.read_parquet(run.root / "scores.parquet").filter(
            pl.col(schema.JUDGE) == "judge-a"
        ).select(
            schema.QUESTION_ID, schema.SYSTEM, schema.DIMENSION, schema.SCORE
        ).write_csv(human)
        # "above" keeps no interval: the report must say why there is none.
        paths = write_report(
            run.root,
            human_ratings=human,
            baselines=True,
            n_resamples=0 if name == "above" else None,
        )
        page = paths.html.read_text(encoding="utf-8")
        out[name] = Rendered(
            html=_text_of(page),
            raw_html=page,
            md=paths.markdown.read_text(encoding="utf-8"),
            console="\n".join(paths.headline),
        )
    # With intervals for both runs, and with none ("--resamples 0").
    for name, resamples in (("compare", 30), ("compare-none", 0)):
        cmp = write_comparison(
            [runs["agree"].root, runs["above"].root],
            out=runs["agree"].root.parent / name / "comparison.html",
            n_resamples=resamples,
        )
        page = cmp.read_text(encoding="utf-8")
        out[name] = Rendered(
            html=_text_of(page),
            raw_html=page,
            md=cmp.with_suffix(".md").read_text(encoding="utf-8"),
            console="",
        )
    return out


def _jargon(text: str) -> list[str]:
    """Every banned phrase in ``text``."""
    found = [b for b in BANNED if b in text]
    found += re.findall(r"\b\w+\(s\)", text)  # "judge(s)", "system(s)"
    # "bca"/"BCa" only inside the spelled-out name.
    found += re.findall(r"(?i)\bbca\b", text.replace(SPELLED, ""))
    return found


@pytest.mark.parametrize(
    "name", ["agree", "disagree", "above", "compare", "compare-none"]
)
def test_no_jargon_anywhere(rendered: dict[str, Rendered], name: str) -> None:
    page = rendered[name]
    for kind, text in (("html", page.html), ("md", page.md), ("console", page.console)):
        assert _jargon(text) == [], f"{name} {kind}"


def test_the_interval_method_is_spelled_out(rendered: dict[str, Rendered]) -> None:
    md = rendered["agree"].md
    assert f"| {SPELLED} | 40 of 40 |" in md
    assert "the same judges in every resample" in md
    assert "Run agree · 2 systems · 2 judges · 2 dimensions · 40 questions" in md


def _sections(md: str) -> dict[str, str]:
    parts = re.split(r"^## ", md, flags=re.M)
    return {p.split("\n", 1)[0]: p for p in parts[1:]}


def test_disagreement_warned_only_when_alpha_is_low(
    rendered: dict[str, Rendered],
) -> None:
    warning = "The judges disagree on quality (Krippendorff's α "
    disagree = _sections(rendered["disagree"].md)
    # Said in the headline, where the figure is read, and beside the alpha.
    assert warning in disagree["Headline"]
    assert warning in disagree["Judge agreement"]
    assert "read its figures with care" in rendered["disagree"].html
    assert "disagree on relevance" not in rendered["disagree"].md
    assert "The judges disagree" not in rendered["agree"].md
    assert "The judges disagree" not in rendered["agree"].html
    # The flat judge scores at random: the jury disagrees on both dimensions.
    assert "The judges disagree on quality and relevance" in rendered["above"].md


def test_cube_above_100_is_explained_where_shown(
    runs: dict[str, Crafted], rendered: dict[str, Rendered]
) -> None:
    mean = runs["above"].summary.across_judges["rag"].figures["cube"].mean
    assert mean is not None
    assert mean > 100
    headline = _sections(rendered["above"].md)["Headline"]
    assert f"| rag | {mean:.2f} |" in headline
    assert "Above 100: rag's answers scored higher than the full-bound" in headline
    card = rendered["above"].raw_html.split('data-system="rag">', 1)[1]
    card = card.split("</dl>", 1)[0]
    assert f'<div class="cube">{mean:.1f}</div>' in card
    assert "<dt>above 100</dt><dd>scored above the full bound</dd>" in card
    assert "above 100: rag's answers scored above the full bound" in (
        rendered["above"].console
    )
    assert "Above 100: above:rag's answers" in rendered["compare"].md
    # The flag says it in words too.
    per_judge = _sections(rendered["above"].md)["Per-judge results"]
    assert "| outside bounds | figure normalized.weighted; value " in per_judge
    for name in ("agree", "disagree"):
        assert "Above 100:" not in rendered[name].md
        assert "<dt>above 100</dt>" not in rendered[name].raw_html
        assert "above 100" not in rendered[name].console


def test_one_judge_and_no_interval_are_said_in_words(
    rendered: dict[str, Rendered],
) -> None:
    above = rendered["above"]
    assert "one judge: no spread across judges to show" in above.html
    assert "no interval: none was computed" in above.html
    assert "one judge, so no SD" in above.console
    assert "the headline averages 1 judge: judge-a." in above.md
    assert "above:rag: no interval: none was computed" in rendered["compare-none"].md
    assert "above:rag: no interval" not in rendered["compare"].md


def _md_tables(md: str) -> list[tuple[str, list[str]]]:
    """``(caption, lines)`` of every Markdown table."""
    tables, caption, lines = [], "", []
    for line in [*md.splitlines(), ""]:
        if line.startswith("|"):
            lines.append(line)
            continue
        if lines:
            tables.append((caption, lines))
            lines = []
        if line.startswith("*") and line.endswith("*"):
            caption = line
        elif line.strip():
            caption = ""
    return tables


def _numbers(lines: list[str]) -> set[str]:
    return set(re.findall(r"-?\d+\.\d+", " ".join(lines)))


@pytest.mark.parametrize("name", ["agree", "disagree", "above"])
def test_one_scale_per_table(
    runs: dict[str, Crafted], rendered: dict[str, Rendered], name: str
) -> None:
    summary = runs[name].summary
    raw = {
        f"{v:.3f}"
        for j in summary.judges.values()
        for by_set in j.trimmed_means.values()
        for figures in by_set.values()
        for v in figures.values()
        if v is not None
    }
    bounded = {
        f"{v:.{d}f}"
        for j in summary.judges.values()
        for v in j.cube.values()
        if v is not None
        for d in (1, 2)
    } | {
        f"{c.mean:.{d}f}"
        for a in summary.across_judges.values()
        for c in a.figures.values()
        if c.mean is not None
        for d in (1, 2)
    }
    tables = _md_tables(rendered[name].md)
    assert len(tables) > 8
    seen_raw = seen_bounded = False
    for caption, lines in tables:
        found = _numbers(lines)
        assert not (found & raw and found & bounded), (caption, lines[0])
        assert not (SCALE_10 in caption and SCALE_100 in caption), caption
        if found & raw:
            seen_raw = True
            assert SCALE_10 in caption, caption
        if found & bounded and "CuBE" in lines[0]:
            seen_bounded = True
    assert seen_raw
    assert seen_bounded


@pytest.mark.parametrize("name", ["agree", "above", "compare"])
def test_each_term_explained_once_where_it_first_appears(
    rendered: dict[str, Rendered], name: str
) -> None:
    page = rendered[name]
    terms = re.findall(r"^> \*\*(.+?)\*\*:", page.md, flags=re.M)
    assert len(terms) == len(set(terms)), terms
    assert {"CuBE", "SD", "95% interval (bootstrap)"} <= set(terms)
    assert page.raw_html.count("<dt>CuBE:</dt>") == 1
    patterns = {t.term: re.compile(t.pattern) for t in GLOSSARY}
    sections = _sections(page.md)
    titles = list(sections)
    for term in terms:
        # Explained no later than the section that first uses it in the
        # Markdown (the report's own words, not the glossary lines; the HTML
        # may use it earlier, in a figure's caption or a card).
        first = next(
            i
            for i, text in enumerate(sections.values())
            if any(
                patterns[term].search(line)
                for line in text.splitlines()
                if not line.startswith("> **")
            )
        )
        where = next(
            i for i, t in enumerate(sections.values()) if f"> **{term}**:" in t
        )
        assert where <= first, (term, titles[where], titles[first])
    if name == "agree":
        assert "> **Krippendorff's α**:" in sections["Judge agreement"]
        assert "> **trimmed mean**:" in sections["Per-judge results"]
        assert "> **CuBE**:" in sections["Headline"]
    if name == "above":  # the warning in the headline names it first
        assert "> **Krippendorff's α**:" in sections["Headline"]


def test_run_details_are_rows_not_json(rendered: dict[str, Rendered]) -> None:
    details = _sections(rendered["agree"].md)["Run details"]
    assert "| parameters.trim | 0.1 |" in details
    assert "| parameters.k | 3 |" in details
    assert "| systems | rag@a, rag@b |" in details
    assert "| stages.scores:judge-a.seconds | 12.5 |" in details
    assert "| retries 1.wall_s | 3.5 |" in details  # a key of a newer version
    assert "| config.judges.judge-a.backend | vllm |" in details
    assert "| status | complete |" in details
    assert '{"' not in details
    assert "…" not in details


def test_console_headline_in_words(runs: dict[str, Crafted]) -> None:
    lines = console_lines(RunData(runs["agree"].root, runs["agree"].summary))
    text = "\n".join(lines)
    assert _jargon(text) == []
    assert "2 of 2 judges: judge-a, judge-b; SD " in text


def _literals(tree: ast.AST) -> list[str]:
    """The module's string literals, docstrings left out (they are for coders)."""
    docstrings = set()
    for node in ast.walk(tree):
        if isinstance(
            node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef
        ):
            body = node.body
            if body and isinstance(body[0], ast.Expr):
                docstrings.add(id(body[0].value))
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant):
            docstrings.add(id(node.value))  # attribute docstrings
    return [
        node.value
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant)
        and isinstance(node.value, str)
        and id(node) not in docstrings
    ]


def test_every_report_module_is_free_of_jargon() -> None:
    """Text other modules add (paired differences, calibrated CuBE, ...) too."""
    modules = sorted(REPORT_PACKAGE.glob("*.py"))
    assert len(modules) > 10
    bad = {}
    for path in modules:
        literals = _literals(ast.parse(path.read_text(encoding="utf-8")))
        found = [
            s
            for s in literals
            if any(b in s for b in BANNED)
            or re.search(r"\b(judge|system|dimension|question)\(s\)", s)
        ]
        if found:
            bad[path.name] = found
    assert bad == {}


def test_the_paired_verdict_is_in_the_headline_above_a_collapsible_glossary(
    rendered: dict[str, Rendered],
) -> None:
    """Issue 36: who is ahead is read under the cards, before any glossary."""
    page = rendered["agree"]
    headline = _sections(page.md)["Headline"]
    verdicts = [ln for ln in headline.splitlines() if ln.startswith("Compared: ")]
    assert len(verdicts) == 1, headline  # two systems, one pair
    assert "rag@a" in verdicts[0]
    assert "rag@b" in verdicts[0]
    assert "95 % interval [" in verdicts[0]
    # Above the headline's first glossary line in the Markdown ...
    assert headline.index(verdicts[0]) < headline.index("> **")
    # ... and in the HTML: after the cards, before the first (closed) glossary.
    raw = page.raw_html
    verdict = raw.index('<p class="verdict">Compared: ')
    assert raw.rindex('<div class="card"', 0, verdict) < verdict
    assert verdict < raw.index('<details class="terms"><summary>Terms used above: ')
    assert verdict < raw.index('<section id="paired"')
    assert '<dl class="terms">' in raw
    assert raw.count('<dl class="terms">') == raw.count('<details class="terms">')
    # One system: no verdict to give.
    assert 'class="verdict"' not in rendered["disagree"].raw_html
