"""Judging protocols (CUBE_METHOD.md section 14) through ``cube-ray run``, HTTP judges.

A stub OpenAI-compatible server on 127.0.0.1 answers every protocol with
logprobs the test knows, so each stored score can be recomputed exactly:

* ``score``: the first token is "7" or "9", half each: 8.0;
* ``checklist``: the first token is 是 (written "是" and " 是", a tokenisation
  variant) with P(yes) = :func:`_p_yes` of the criterion, else 否; asked of
  an empty answer (``checklist_baseline: empty_answer``) P(yes) is 0.4;
* ``checklist`` on an API without logprobs: the text says 是 or 否;
* ``all_dimensions``: line k (k = 0..3) is k + 5 or k + 6, half each.

It also counts the requests and the prompt tokens per judge: the run's calls
are what ``--dry-run`` priced, and the scores table's token counts add up to
what the server was sent.
"""

from __future__ import annotations

import json
import math
import re
import subprocess
import sys
import threading
from collections import Counter
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, ClassVar

import polars as pl
import pytest
import yaml

from cube_ray.prompts import default_rubric
from cube_ray.protocols import checklist, checklist_score, contrast
from tests.pipeline_helpers import fake_config, make_corpus, make_qa_file

pytestmark = [pytest.mark.ray, pytest.mark.timeout(900)]

N_DOCS = 4
DIMENSIONS = ("relevance", "specificity", "completeness", "quality")
_ANSWER = re.compile(r"<answer-(\w+)>\n(.*?)\n</answer-\1>", re.DOTALL)
_CRITERION = re.compile(r"评分项：(.*)\n")


def _p_yes(criterion: str) -> float:
    """The stub's P(yes) of a criterion (of a non-empty answer)."""
    return 0.2 + 0.6 * (len(criterion) % 7) / 6


def _says_yes(criterion: str) -> bool:
    """The stub's word on an API without logprobs."""
    return len(criterion) % 2 == 0


def _step(dist: dict[str, float]) -> dict[str, Any]:
    best = max(dist, key=lambda k: dist[k])
    return {
        "token": best,
        "logprob": math.log(dist[best]),
        "top_logprobs": [{"token": t, "logprob": math.log(p)} for t, p in dist.items()],
    }


def _reply(model: str, prompt: str) -> tuple[str, dict[str, Any] | None]:
    """The text and the chat-API logprobs block of one request."""
    if _ANSWER.search(prompt) is None:  # the preflight's probe
        return "ok", None
    if prompt.rstrip().endswith("回答（是/否）："):
        criterion = _CRITERION.findall(prompt)[-1].strip()
        if model == "plain":
            return ("是。" if _says_yes(criterion) else "否"), None
        answer = _ANSWER.search(prompt)
        assert answer is not None
        p = _p_yes(criterion) if answer.group(2).strip() else 0.4
        dist = {"是": p * 0.75, " 是": p * 0.25, "否": 1.0 - p}
        text = "是" if p >= 0.5 else "否"
        return text, {"content": [_step(dist)]}
    if prompt.rstrip().endswith("得分（0-10，每行一个）："):
        content = []
        for k in range(len(DIMENSIONS)):
            if k:
                content.append(_step({"\n": 1.0}))
            content.append(_step({str(k + 5): 0.5, str(k + 6): 0.5 - 1e-9}))
        return "\n".join(str(k + 5) for k in range(len(DIMENSIONS))), {
            "content": content
        }
    return "7", {"content": [_step({"7": 0.5, "9": 0.5 - 1e-9})]}


class _Handler(BaseHTTPRequestHandler):
    calls: ClassVar[Counter[str]]
    tokens: ClassVar[Counter[str]]
    lock: ClassVar[threading.Lock]

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet."""

    def _send(self, payload: bytes) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def do_GET(self) -> None:
        """The preflight's readiness probe: every judge's model is served."""
        names = ("score", "checklist", "contrast", "plain", "all")
        self._send(json.dumps({"data": [{"id": n} for n in names]}).encode())

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        prompt = "\n".join(str(m["content"]) for m in body["messages"])
        model = str(body["model"])
        text, logprobs = _reply(model, prompt)
        if not body.get("logprobs"):
            logprobs = None
        if _ANSWER.search(prompt) is not None:  # not the preflight's probe
            with self.lock:
                self.calls[model] += 1
                self.tokens[model] += len(prompt)
        choice: dict[str, Any] = {
            "index": 0,
            "message": {"role": "assistant", "content": text},
        }
        if logprobs is not None:
            choice["logprobs"] = logprobs
        usage = {"prompt_tokens": len(prompt), "completion_tokens": 1}
        self._send(json.dumps({"choices": [choice], "usage": usage}).encode())


@pytest.fixture
def server() -> Iterator[tuple[str, type[_Handler]]]:
    handler = type(
        "Handler",
        (_Handler,),
        {"calls": Counter(), "tokens": Counter(), "lock": threading.Lock()},
    )
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}/v1", handler
    finally:
        httpd.shutdown()
        httpd.server_close()


def _cube_ray(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "cube_ray.cli", *args],
        capture_output=True,
        text=True,
        timeout=800,
        check=False,
    )


def test_every_protocol_through_cube_ray_run(
    tmp_path: Path, server: tuple[str, type[_Handler]]
) -> None:
    base_url, handler = server
    corpus, ids = make_corpus(tmp_path, N_DOCS)
    path = fake_config(tmp_path, corpus, make_qa_file(tmp_path, ids))
    cfg = yaml.safe_load(path.read_text(encoding="utf-8"))
    http = {
        "backend": "openai_http",
        "base_url": base_url,
        "max_retries": 0,
        "logprobs": True,
        "score_mode": "expected",
        "pool": {"batch_size": 6},  # answers' dimensions split across batches
    }
    cfg["judges"] = {
        "score": {**http, "model": "score"},
        "checklist": {**http, "model": "checklist", "protocol": "checklist"},
        "contrast": {
            **http,
            "model": "contrast",
            "protocol": "checklist",
            "checklist_baseline": "empty_answer",
        },
        "plain": {
            **http,
            "model": "plain",
            "protocol": "checklist",
            "logprobs": False,
            "score_mode": "argmax",
        },
        "all": {**http, "model": "all", "protocol": "all_dimensions"},
    }
    cfg["prompts"] = {"language": "zh"}
    path.write_text(yaml.safe_dump(cfg, allow_unicode=True), encoding="utf-8")

    dry = _cube_ray("run", str(path), "--dry-run")
    assert dry.returncode == 0, dry.stderr[-3000:]
    planned = {
        m.group(1): int(m.group(2).replace(",", ""))
        for m in re.finditer(
            r"^scores:(\w+)\s+openai_http:\w+\s+([\d,]+)", dry.stdout, re.M
        )
    }
    assert "Judging protocols (CUBE_METHOD.md section 14), per answer:" in dry.stdout
    assert handler.calls == Counter()  # a dry run sends nothing

    run_dir = tmp_path / "run"
    proc = _cube_ray("run", str(path), "--out", str(run_dir), "--no-progress")
    assert proc.returncode == 0, proc.stderr[-4000:]

    answers = 3 * N_DOCS
    items = {d: checklist(default_rubric(d, "zh"), dimension=d) for d in DIMENSIONS}
    n_items = sum(len(c.items) for c in items.values())
    calls = {
        "score": answers * len(DIMENSIONS),
        "checklist": answers * n_items,
        "contrast": answers * n_items + N_DOCS * n_items,
        "plain": answers * n_items,
        "all": answers,
    }
    # The empty answer is asked once per question and item in each stage
    # instance that meets the question: at least once, at most per answer.
    baseline = handler.calls.pop("contrast") - answers * n_items
    assert N_DOCS * n_items <= baseline <= answers * n_items
    assert dict(handler.calls) == {k: v for k, v in calls.items() if k != "contrast"}
    assert planned == calls  # --dry-run priced what the run did (its baseline:
    # once per question and item)

    scores = pl.read_parquet(run_dir / "scores" / "*.parquet")
    assert scores.height == answers * len(DIMENSIONS) * len(calls)
    assert scores["status"].unique().to_list() == ["ok"]
    # Each row's token counts are its share of the calls made for it.
    sent = scores.group_by("judge").agg(pl.col("prompt_tokens").sum())
    assert dict(sent.iter_rows()) == dict(handler.tokens)

    def got(judge: str, dimension: str) -> set[float]:
        rows = scores.filter(
            (pl.col("judge") == judge) & (pl.col("dimension") == dimension)
        )
        return {round(s, 4) for s in rows["score"].to_list()}

    for k, dim in enumerate(DIMENSIONS):
        assert got("score", dim) == {8.0}
        assert got("all", dim) == {k + 5.5}
        weights = [i.weight for i in items[dim].items]
        p = [_p_yes(i.text) for i in items[dim].items]
        assert got("checklist", dim) == {round(checklist_score(p, weights), 4)}
        against = [contrast(x, 0.4) for x in p]
        assert got("contrast", dim) == {round(checklist_score(against, weights), 4)}
        said = [1.0 if _says_yes(i.text) else 0.0 for i in items[dim].items]
        assert got("plain", dim) == {round(checklist_score(said, weights), 4)}
    # The manifest records the protocol in each judge's config.
    manifest = json.loads((run_dir / "manifest.json").read_text(encoding="utf-8"))
    assert manifest["status"] == "complete"


def test_judges_check_measures_a_judge_under_its_protocol(
    tmp_path: Path, server: tuple[str, type[_Handler]]
) -> None:
    base_url, handler = server
    corpus, ids = make_corpus(tmp_path, 8)
    path = fake_config(tmp_path, corpus, make_qa_file(tmp_path, ids))
    cfg = yaml.safe_load(path.read_text(encoding="utf-8"))
    http = {"backend": "openai_http", "base_url": base_url, "max_retries": 0}
    cfg["judges"] = {
        "checklist": {
            **http,
            "model": "checklist",
            "protocol": "checklist",
            "logprobs": True,
            "score_mode": "expected",
        },
        "all": {**http, "model": "all", "protocol": "all_dimensions"},
    }
    cfg["prompts"] = {"language": "zh"}
    path.write_text(yaml.safe_dump(cfg, allow_unicode=True), encoding="utf-8")
    out = tmp_path / "check.json"
    proc = _cube_ray("judges", "check", str(path), "--sample", "6", "--json", str(out))
    assert proc.returncode in (0, 1), proc.stderr[-3000:]
    data = json.loads(out.read_text(encoding="utf-8"))
    for name in ("checklist", "all"):
        judge = data["judges"][name]
        assert judge["protocol"] == {"all": "all_dimensions"}.get(name, name)
        assert judge["scored"] == judge["rows"] > 0
    assert "(openai_http, checklist, protocol checklist" in proc.stdout
    # The checklist judge asked items, the other one call per answer.
    assert handler.calls["checklist"] > handler.calls["all"] > 0
