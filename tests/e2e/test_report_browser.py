"""Open report.html in headless Chromium over the DevTools protocol.

Asserts: no console error or uncaught exception, no network request (only the
file itself and inline ``data:`` images), the headline and every plot are
present and decoded, no horizontal overflow at laptop width, untrusted answer
text is inert, and the page prints to PDF. Saves a full-page screenshot.

Data: the worked example of /work/shared/examples (copied into a tmp run dir)
with real Guangdong item names as document titles (source:
/work/shared/data/guangdong_service_items/records.jsonl, first 120 records).
"""

from __future__ import annotations

import base64
import io
import json
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
import pytest

from cube_ray import schema
from cube_ray.aggregate import AggregateOptions, summarize
from cube_ray.report import write_report

SHARED = Path(__file__).resolve().parents[3] / "shared"
WORKED = Path(__file__).resolve().parents[2] / "examples" / "worked"
RECORDS = SHARED / "data" / "guangdong_service_items" / "records.jsonl"
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
PROBE = '<script>document.title="pwned"</script><img src="http://198.51.100.7/x.png">'

websockets_sync = pytest.importorskip(
    "websockets.sync.client", reason="websockets (installed with the cpu extra)"
)
pytestmark = [
    pytest.mark.skipif(
        CHROMIUM is None,
        reason="chromium not installed (Debian: apt-get install chromium; "
        "`make sysdeps` does it)",
    ),
    pytest.mark.skipif(
        not WORKED.is_dir(), reason=f"worked example not found at {WORKED}"
    ),
    pytest.mark.timeout(180),
]


def _build_run(root: Path) -> Path:
    run = root / "run"
    for kind in ("answers", "scores"):
        (run / kind).mkdir(parents=True)
        shutil.copy(WORKED / f"{kind}.parquet", run / kind / "part-0.parquet")
    answers = pl.read_parquet(WORKED / "answers.parquet")
    # The worked example's summary (it reproduces expected_summary.json).
    summarize(
        answers,
        pl.read_parquet(WORKED / "scores.parquet"),
        options=AggregateOptions(),
    ).write(run / "summary.json")
    doc_ids = sorted(answers.get_column(schema.DOC_ID).unique().to_list())
    titles = [f"item {i}" for i in range(len(doc_ids))]
    if RECORDS.is_file():
        with RECORDS.open(encoding="utf-8") as fh:
            lines = zip(doc_ids, fh, strict=False)
            names = [json.loads(line)["TASK_NAME"] for _, line in lines]
        titles[: len(names)] = names
    pl.DataFrame(
        {
            schema.DOC_ID: doc_ids,
            schema.TITLE: titles,
            schema.TEXT: [f"事项名称: {t}" for t in titles],
            schema.CONTENT_HASH: ["x"] * len(doc_ids),
        }
    ).write_parquet(run / "documents.parquet")
    questions = (
        answers.select(schema.QUESTION_ID, schema.DOC_ID)
        .unique()
        .sort(schema.QUESTION_ID)
    )
    questions.with_columns(
        pl.format("请问办理{}需要哪些材料？", pl.col(schema.DOC_ID)).alias(
            schema.QUESTION
        )
    ).write_parquet(run / "questions.parquet")
    # Untrusted answer text: must be shown as text, never run or fetched.
    answers.with_columns(
        pl.when(pl.col(schema.QUESTION_ID) == "q00107")
        .then(pl.lit(PROBE))
        .otherwise(pl.col(schema.ANSWER))
        .alias(schema.ANSWER)
    ).write_parquet(run / "answers" / "part-0.parquet")
    # Human ratings (judge-a's scores of 30 questions) fill every section.
    scores = pl.read_parquet(WORKED / "scores.parquet").filter(
        (pl.col(schema.JUDGE) == "judge-a")
        & pl.col(schema.SCORE).is_not_null()
        & pl.col(schema.QUESTION_ID).is_in(questions[schema.QUESTION_ID][:30].implode())
    )
    scores.select(
        schema.QUESTION_ID, schema.SYSTEM, schema.DIMENSION, schema.SCORE
    ).write_csv(run / "human.csv")
    return run


def _one_system_run(run: Path) -> Path:
    """The worked example with one system (rag@bm25) and its two bounds."""
    run.mkdir(parents=True)
    keep = pl.col(schema.SYSTEM).is_in(["zero", "full", "rag@bm25"])
    answers = pl.read_parquet(WORKED / "answers.parquet").filter(keep)
    scores = pl.read_parquet(WORKED / "scores.parquet").filter(keep)
    answers.write_parquet(run / "answers.parquet")
    scores.write_parquet(run / "scores.parquet")
    summarize(answers, scores, options=AggregateOptions()).write(run / "summary.json")
    return run


class _Cdp:
    """A minimal synchronous Chrome DevTools Protocol client."""

    def __init__(self, url: str) -> None:
        self.ws = websockets_sync.connect(url, max_size=None, open_timeout=30)
        self.next_id = 0
        self.events: list[dict[str, Any]] = []

    def send(
        self, method: str, params: dict[str, Any] | None = None, *, session: str = ""
    ) -> dict[str, Any]:
        self.next_id += 1
        msg: dict[str, Any] = {"id": self.next_id, "method": method}
        msg["params"] = params or {}
        if session:
            msg["sessionId"] = session
        self.ws.send(json.dumps(msg))
        while True:
            reply = json.loads(self.ws.recv(timeout=60))
            if reply.get("id") == self.next_id:
                if "error" in reply:
                    raise AssertionError(f"{method}: {reply['error']}")
                return dict(reply.get("result", {}))
            self.events.append(reply)

    def wait_event(self, method: str, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        if any(e.get("method") == method for e in self.events):
            return
        while time.monotonic() < deadline:
            event = json.loads(self.ws.recv(timeout=deadline - time.monotonic()))
            self.events.append(event)
            if event.get("method") == method:
                return
        raise AssertionError(f"no {method} within {timeout} s")


@pytest.fixture
def browser(tmp_path: Path) -> Iterator[_Cdp]:
    assert CHROMIUM is not None
    profile = tmp_path / "profile"
    proc = subprocess.Popen(
        [
            CHROMIUM,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--disable-extensions",
            "--remote-debugging-port=0",
            f"--user-data-dir={profile}",
            "about:blank",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        port_file = profile / "DevToolsActivePort"
        deadline = time.monotonic() + 60
        while not (port_file.is_file() and len(port_file.read_text().split()) >= 2):
            if proc.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"chromium did not start (exit code {proc.poll()})")
            time.sleep(0.1)
        port, path = port_file.read_text().split()[:2]
        cdp = _Cdp(f"ws://127.0.0.1:{port}{path}")
        try:
            yield cdp
        finally:
            cdp.ws.close()
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def test_report_in_headless_chromium(tmp_path: Path, browser: _Cdp) -> None:
    run = _build_run(tmp_path)
    paths = write_report(
        run, baselines=True, human_ratings=run / "human.csv", n_resamples=300
    )
    summary = json.loads((run / "summary.json").read_text())

    target = browser.send("Target.createTarget", {"url": "about:blank"})
    session = browser.send(
        "Target.attachToTarget", {"targetId": target["targetId"], "flatten": True}
    )["sessionId"]
    for domain in ("Page", "Runtime", "Log", "Network"):
        browser.send(f"{domain}.enable", session=session)
    browser.send(
        "Emulation.setDeviceMetricsOverride",
        {"width": 1366, "height": 800, "deviceScaleFactor": 1, "mobile": False},
        session=session,
    )
    browser.send("Page.navigate", {"url": paths.html.as_uri()}, session=session)
    browser.wait_event("Page.loadEventFired")

    def evaluate(expr: str) -> Any:
        res = browser.send(
            "Runtime.evaluate",
            {"expression": expr, "returnByValue": True, "awaitPromise": True},
            session=session,
        )
        return res["result"].get("value")

    # Every image decoded (awaits decode(), so the checks below see the final page).
    decoded = evaluate(
        "Promise.all([...document.images].map(i => i.decode().then(() => true, "
        "() => false)))"
    )
    assert decoded, "no image on the page"
    assert all(decoded), decoded

    info = evaluate(
        """(() => ({
          title: document.title,
          headline: !!document.querySelector('#headline .card'),
          cards: [...document.querySelectorAll('#headline .card')].map(c => ({
             system: c.dataset.system, cube: c.querySelector('.cube').textContent})),
          plots: [...document.querySelectorAll('figure.plot')].map(f => ({
             id: f.dataset.plot, w: f.querySelector('img').naturalWidth})),
          scripts: document.scripts.length,
          sections: [...document.querySelectorAll('main > section')].map(s => s.id),
          overflow: document.documentElement.scrollWidth
                    - document.documentElement.clientWidth,
          probe: document.body.textContent.includes('document.title="pwned"'),
        }))()"""
    )
    browser.send(
        "Emulation.setDeviceMetricsOverride",
        {"width": 1024, "height": 768, "deviceScaleFactor": 1, "mobile": False},
        session=session,
    )
    narrow_overflow = evaluate(
        "document.documentElement.scrollWidth - document.documentElement.clientWidth"
    )
    browser.send(
        "Emulation.setDeviceMetricsOverride",
        {"width": 1366, "height": 800, "deviceScaleFactor": 1, "mobile": False},
        session=session,
    )
    screenshot = _screenshot(browser, session)
    (tmp_path / "report.png").write_bytes(screenshot)
    _assert_chart_title_not_clipped(browser, session, evaluate)
    shot_dir = Path(__file__).resolve().parents[2] / ".pytest_cache"
    if shot_dir.is_dir():  # a stable place to look at the last screenshot
        (shot_dir / "report_browser.png").write_bytes(screenshot)
        # The headline as a reader first sees it (docs/img/report.png).
        top = evaluate(
            "document.querySelector('#headline').getBoundingClientRect().bottom"
            " + window.scrollY"
        )
        (shot_dir / "report_headline.png").write_bytes(
            _screenshot(browser, session, height=min(float(top), 2400.0))
        )

    pdf = base64.b64decode(
        browser.send("Page.printToPDF", {"printBackground": True}, session=session)[
            "data"
        ]
    )
    assert pdf.startswith(b"%PDF")
    assert pdf.count(b"/Type /Page") > 2

    errors = [
        e
        for e in browser.events
        if e.get("method") == "Runtime.exceptionThrown"
        or (
            e.get("method") == "Runtime.consoleAPICalled"
            and e["params"].get("type") in ("error", "assert", "warning")
        )
        or (
            e.get("method") == "Log.entryAdded"
            and e["params"]["entry"].get("level") in ("error", "warning")
        )
    ]
    assert errors == []
    requests = [
        e["params"]["request"]["url"]
        for e in browser.events
        if e.get("method") == "Network.requestWillBeSent"
    ]
    foreign = [
        u for u in requests if not (u.startswith("data:") or u == paths.html.as_uri())
    ]
    assert foreign == []

    assert info["title"].startswith("CuBE report")  # the probe did not run
    assert info["scripts"] == 0
    assert info["probe"], "the escaped probe text should be visible as text"
    assert info["overflow"] <= 0, "page wider than a 1366 px laptop screen"
    assert narrow_overflow <= 0, "page wider than a 1024 px screen"
    assert info["headline"]
    expected_cards = {
        s: f"{v['cube']['mean']:.1f}" for s, v in summary["across_judges"].items()
    }
    assert {c["system"]: c["cube"] for c in info["cards"]} == expected_cards
    plot_ids = {p["id"] for p in info["plots"]}
    assert plot_ids == {
        "fig-cube",
        "fig-histograms",
        "fig-rank",
        "fig-correlation",
        "fig-bounds",
        "fig-variants",
    }
    assert all(p["w"] > 100 for p in info["plots"])
    # One system: the narrowest CuBE chart, where its title was cut (issue 28).
    one = _one_system_run(tmp_path / "one")
    browser.events = [
        e for e in browser.events if e.get("method") != "Page.loadEventFired"
    ]
    browser.send(
        "Page.navigate",
        {"url": write_report(one, n_resamples=50).html.as_uri()},
        session=session,
    )
    browser.wait_event("Page.loadEventFired")
    assert all(
        evaluate(
            "Promise.all([...document.images].map(i => i.decode().then(() => true, "
            "() => false)))"
        )
    )
    _assert_chart_title_not_clipped(browser, session, evaluate)
    assert info["sections"] == [
        "headline",
        "paired",
        "judges",
        "distributions",
        "retrieval",
        "bounds",
        "variants",
        "agreement",
        "humans",
        "baselines",
        "worst",
        "details",
    ]


def _screenshot(
    browser: _Cdp,
    session: str,
    *,
    x: float = 0,
    y: float = 0,
    width: float | None = None,
    height: float | None = None,
) -> bytes:
    metrics = browser.send("Page.getLayoutMetrics", session=session)
    size = metrics["cssContentSize"]
    data = browser.send(
        "Page.captureScreenshot",
        {
            "format": "png",
            "captureBeyondViewport": True,
            "clip": {
                "x": x,
                "y": y,
                "width": width if width is not None else size["width"],
                "height": height if height is not None else min(size["height"], 16000),
                "scale": 1,
            },
        },
        session=session,
    )["data"]
    return base64.b64decode(data)


def _assert_chart_title_not_clipped(browser: _Cdp, session: str, evaluate: Any) -> None:
    """The CuBE chart's title lies inside its picture, as Chromium shows it.

    Its long title ("CuBE per system (bar: jury mean, …") was centred over
    the axes and cut at both edges of the PNG ("per system (bar: jury mean,").
    The chart's top band (above the axes and the legend) is read from a
    screenshot of the shown image: its dark pixels (the title) must keep a
    margin to the left and right edges.
    """
    from PIL import Image

    box = evaluate(
        """(() => { const r = document.querySelector('#fig-cube img')
            .getBoundingClientRect();
          return {x: r.left + window.scrollX, y: r.top + window.scrollY,
                  w: r.width, h: r.height,
                  inside: r.left >= 0 && r.right <= window.innerWidth}; })()"""
    )
    assert box["inside"], box  # the picture itself is not cut by the page
    shot = _screenshot(
        browser, session, x=box["x"], y=box["y"], width=box["w"], height=box["h"]
    )
    image = Image.open(io.BytesIO(shot)).convert("L")
    width, height = image.size
    pixels = np.asarray(image)
    band = pixels[: max(1, int(height * 0.07))]
    dark = np.flatnonzero((band < 110).any(axis=0))
    assert dark.size, "no title in the chart's top band"
    margin = 0.03 * width
    assert dark.min() > margin, ("title cut on the left", dark.min(), width)
    assert dark.max() < width - margin, ("title cut on the right", dark.max(), width)
