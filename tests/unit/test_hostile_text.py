"""Hostile text where cube_ray prints it: report.md cells rendered by a real
Markdown parser, plot labels with ``$``, a key echoed in encoded forms, and a
judge engine that calls a NaN score valid."""

from __future__ import annotations

import base64
import contextlib
import math
from urllib.parse import quote, quote_plus

import pyarrow as pa
import pytest

from cube_ray import schema
from cube_ray.credentials import redact
from cube_ray.engines.base import ScoreResult
from cube_ray.report import _plots
from cube_ray.report._render import LongText, Para, Section, Table, render_markdown
from cube_ray.stages import INPUT_HASH, JudgeStage

BEACON = "![x](http://t.example/p.png)"
HOSTILE = [
    BEACON,
    "[click](http://t.example/)",
    "[ref]: http://t.example/p.png",
    "![ref]",
    "<img src=http://t.example/a.png>",
    "<http://t.example/auto>",
    "a | b",
    "`code` *em* _em_ ~~del~~ $x$",
    "# heading",
    "- item",
    "1. item",
    "&lt;script&gt;",
]


def _render(md: str) -> str:
    markdown_it = pytest.importorskip("markdown_it")
    return str(markdown_it.MarkdownIt("commonmark").enable("table").render(md))


def test_report_markdown_renders_hostile_text_as_text() -> None:
    table = Table(
        headers=["system", "answer"],
        rows=[[h, LongText(h)] for h in HOSTILE],
        caption=BEACON,
    )
    section = Section("worst", "Worst answers " + BEACON, [table])
    section.blocks += [Para(h) for h in HOSTILE]
    section.blocks += [Para(h, kind="note") for h in HOSTILE]
    md = render_markdown(
        title="run " + BEACON, meta=HOSTILE, sections=[section], footer="- x"
    )
    html = _render(md)
    # Nothing fetches or links: no image, no link, no raw HTML tag, no list,
    # no heading but the report's own, no code span, no emphasis.
    for tag in ("<img", "<a ", "<code", "<strong", "<del", "<li", "<script"):
        assert tag not in html, (tag, html)
    assert html.count("<em>") == 1  # the caption's own italics
    assert html.count("<h1>") == 1
    assert html.count("<h2>") == 1
    # The table keeps its shape: one row per hostile cell, two cells each.
    assert html.count("<tr>") == len(HOSTILE) + 1
    assert html.count("<td>") == 2 * len(HOSTILE)
    # And the text is all there, as written.
    assert "![x](http://t.example/p.png)" in html
    assert "a | b" in html


@pytest.mark.parametrize("name", ["rag@$\\frac{$", "$x^$", "j$\\undefined$"])
def test_plots_take_dollar_names_as_text(name: str) -> None:
    png = _plots.cube_chart(
        {name: {name: 0.5}},
        {name: 0.5},
        {name: (0.4, 0.6)},
        systems=[name],
        judges=[name],
    )
    assert png.startswith(b"\x89PNG")


KEY = "sk-live/abc+123=xyz-LONGER-KEY"


@pytest.mark.parametrize("prefix", ["", "B", "Be", "Bearer ", "user:"])
def test_redact_covers_base64_forms_at_every_alignment(prefix: str) -> None:
    raw = (prefix + KEY + " trailing").encode()
    for enc in (base64.b64encode(raw), base64.urlsafe_b64encode(raw)):
        text = f"error: {enc.decode()} end"
        out = redact(text, KEY)
        assert out != text
        # What is left decodes to no more than a couple of the key's bytes.
        assert KEY[2:-2] not in _decode_all(out)


def _decode_all(text: str) -> str:
    """Every base64 reading of every run in ``text`` (both alphabets)."""
    found = []
    for run in text.replace("*", " ").split():
        for start in range(4):
            chunk = run[start:]
            chunk = chunk[: len(chunk) - len(chunk) % 4]
            for dec in (base64.b64decode, base64.urlsafe_b64decode):
                with contextlib.suppress(ValueError):
                    found.append(dec(chunk).decode("latin-1"))
    return " ".join(found)


def test_redact_covers_url_encoded_forms() -> None:
    text = f"a={quote(KEY, safe='')}&b={quote_plus(KEY)} c={KEY}"
    out = redact(text, KEY)
    assert out == "a=***&b=*** c=***"
    assert redact("nothing", KEY) == "nothing"


class _LyingJudge:
    """An engine that calls NaN, infinite and out-of-range scores valid."""

    name = "liar"

    def score(self, prompts: list[str], *, mode: str) -> list[ScoreResult]:
        values = [math.nan, math.inf, 11.0, -1.0, 7.0]
        return [ScoreResult(v, status="ok", raw=str(v)) for v in values[: len(prompts)]]

    def close(self) -> None:
        pass


def test_judge_stage_never_stores_a_nan_score_as_ok() -> None:
    stage = JudgeStage(
        "liar",
        None,
        rubrics={"relevance": "r"},
        engine_factory=lambda _cfg: _LyingJudge(),  # type: ignore[arg-type,return-value]
    )
    n = 5
    batch = pa.table(
        {
            schema.QUESTION_ID: [f"q{i}" for i in range(n)],
            schema.SYSTEM: ["rag"] * n,
            schema.DIMENSION: ["relevance"] * n,
            schema.TEXT: ["doc"] * n,
            schema.QUESTION: ["q"] * n,
            schema.ANSWER: ["a"] * n,
            INPUT_HASH: ["h"] * n,
        }
    )
    rows = stage(batch).to_pylist()
    assert [r[schema.STATUS] for r in rows] == ["invalid_score"] * 4 + ["ok"]
    assert [r[schema.SCORE] for r in rows] == [None] * 4 + [7.0]
    assert "not in 0..10" in rows[0][schema.RAW]
