"""Hostile replies from a real server on 127.0.0.1: every one becomes its own row
with a status, in the judge stage (OpenAI-compatible engine) and in the system
stage (HTTP RAG service); nothing raises, nothing is lost, nothing hangs."""

from __future__ import annotations

import base64
import math
import re
import time
from typing import Any

import pyarrow as pa
import pytest

from cube_ray import schema
from cube_ray.engines import OpenAIHttpEngineConfig
from cube_ray.http_reply import MAX_REPLY_BYTES
from cube_ray.stages import INPUT_HASH, JudgeStage, SystemStage
from cube_ray.stages._base import ANSWER_MAX_CHARS, RAW_MAX_CHARS
from cube_ray.systems.config import HttpSystemConfig
from tests.hostile_server import hostile_server

pytestmark = pytest.mark.timeout(120)

KEY_ENV = "CUBE_RAY_HOSTILE_KEY"
KEY = "sk-hostile-" + "Zq7w" * 6
TIMEOUT_S = 3.0

# Marker -> the status its row must get from the judge stage.
JUDGE_CASES = {
    "ok": "ok",
    "inf": "no_logprobs",  # every logprob Infinity: nothing valid is left
    "nan": "no_logprobs",
    "big": "no_logprobs",  # logprob 1000 (exp overflows)
    "bigint": "no_logprobs",  # a 400-digit integer (float() overflows)
    "shape2": "no_logprobs",  # logprobs of the wrong shape
    "nested": "malformed_response",  # RecursionError in the JSON parser
    "notjson": "malformed_response",
    "shape": "malformed_response",  # choices is a string, usage a list
    "gzip": "malformed_response",  # httpx.DecodingError
    "huge": "response_too_large",
    "echo": "http_error",  # a 500 echoing the key
    "textecho": "parse_error",  # a 200 whose text holds the key, encoded
    "drip": "timeout",  # one byte a second
}


def _judge_batch(markers: list[str]) -> pa.Table:
    n = len(markers)
    return pa.table(
        {
            schema.QUESTION_ID: [f"q{i}" for i in range(n)],
            schema.SYSTEM: ["rag"] * n,
            schema.DIMENSION: ["relevance"] * n,
            schema.TEXT: ["文件规定了办理流程。"] * n,
            schema.QUESTION: ["如何办理？"] * n,
            schema.ANSWER: [f"按流程办理 [[{m}]]" for m in markers],
            INPUT_HASH: [f"h{i}" for i in range(n)],
        }
    )


def test_judge_stage_gives_every_hostile_reply_its_own_status(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(KEY_ENV, KEY)
    markers = list(JUDGE_CASES)
    with hostile_server() as server:
        engine = OpenAIHttpEngineConfig(
            base_url=server.url + "/v1",
            model="hostile",
            api_key_env=KEY_ENV,
            logprobs=True,
            score_mode="expected",
            timeout_s=TIMEOUT_S,
            max_retries=1,
            backoff_base_s=0.01,
            backoff_max_s=0.01,
            parse_retries=1,
        )
        stage = JudgeStage("hostile", engine, rubrics={"relevance": "Is it relevant?"})
        started = time.monotonic()
        out = stage(_judge_batch(markers))
        elapsed = time.monotonic() - started
        stage.close()
        hits = dict(server.hits)
        sent_huge = server.bytes_sent["huge"]
    rows = out.to_pylist()
    assert len(rows) == len(markers)  # one bad reply marks one row, not the batch
    got = {m: r[schema.STATUS] for m, r in zip(markers, rows, strict=True)}
    assert got == JUDGE_CASES
    by = dict(zip(markers, rows, strict=True))
    # A score is a finite number in 0..10, or missing: never NaN with "ok".
    assert 7.0 < by["ok"][schema.SCORE] < 8.0
    for m, r in by.items():
        if m != "ok":
            assert r[schema.SCORE] is None, m
        else:
            assert math.isfinite(r[schema.SCORE])
    # The whole request has a deadline: the trickling reply ended at
    # timeout_s per attempt (2 attempts), not after its 60 s.
    assert elapsed < 2 * TIMEOUT_S + 4, elapsed
    # Too large is not retried (the same request gets the same reply) and the
    # client stopped reading near the limit: the body was not stored.
    assert hits["huge"] == 1
    assert sent_huge < 4 * MAX_REPLY_BYTES
    assert "over" in by["huge"][schema.RAW]
    # 5xx is retried; its body (which echoed the key) is kept as its length.
    assert hits["echo"] == 2
    assert re.fullmatch(r"HTTP 500 \(\d+ bytes\)", by["echo"][schema.RAW])
    # The key is masked wherever a reply's text is kept, in every form.
    assert "***" in by["textecho"][schema.RAW]
    for r in rows:
        raw = r[schema.RAW] or ""
        assert KEY not in raw
        assert KEY[3:-3] not in raw  # URL-encoding leaves this key as is
        for text in (f"Bearer {KEY}", f"key={KEY};"):
            assert base64.b64encode(text.encode()).decode()[12:36] not in raw
        assert len(raw) <= RAW_MAX_CHARS + 60
    # A row without valid logprobs says so; none raised an OverflowError.
    assert "no score token has logprobs" in by["big"][schema.RAW]


SYSTEM_CASES = {
    "ok": "ok",
    "drip": "timeout",
    "huge": "response_too_large",
    "nested": "invalid_json",
    "notjson": "invalid_json",
    "badutf8": "invalid_json",
    "gzip": "invalid_json",
    "echo": "http_500",
    "shape": "no_answer_in_response",
}


def _system_batch(markers: list[str]) -> pa.Table:
    n = len(markers)
    return pa.table(
        {
            schema.QUESTION_ID: [f"q{i}" for i in range(n)],
            schema.DOC_ID: [f"q{i}" for i in range(n)],
            schema.QUESTION: [f"如何办理？[[{m}]]" for m in markers],
            INPUT_HASH: [f"h{i}" for i in range(n)],
        }
    )


def test_http_system_stage_gives_every_hostile_reply_its_own_status(
    tmp_path: Any,
) -> None:
    markers = list(SYSTEM_CASES)
    with hostile_server() as server:
        system = HttpSystemConfig(
            name="rag",
            url=server.url + "/v1/answer",
            timeout_s=TIMEOUT_S,
            max_retries=0,
        )
        stage = SystemStage(system, documents_path=str(tmp_path))
        started = time.monotonic()
        out = stage(_system_batch(markers))
        elapsed = time.monotonic() - started
        stage.close()
        sent_huge = server.bytes_sent["huge"]
    rows = out.to_pylist()
    assert len(rows) == len(markers)
    got = {m: r[schema.STATUS] for m, r in zip(markers, rows, strict=True)}
    assert got == SYSTEM_CASES
    by = dict(zip(markers, rows, strict=True))
    assert by["ok"][schema.ANSWER] == "答复：按规定办理。"
    assert by["ok"][schema.RANK] == 1
    assert all(r[schema.ANSWER] is None for m, r in by.items() if m != "ok")
    # A whole-request deadline: ~timeout_s for a reply of one byte a second.
    assert elapsed < TIMEOUT_S + 3, elapsed
    assert by["drip"][schema.LATENCY_S] == pytest.approx(TIMEOUT_S, abs=1.5)
    assert sent_huge < 4 * MAX_REPLY_BYTES


class _LongSystem:
    """A system whose answer is 1 MB of text."""

    name = "rag"
    k = 8

    def answer(self, questions: Any) -> list[Any]:
        from cube_ray.systems.base import SystemAnswer

        return [SystemAnswer("长" * 1_000_000, [q.doc_id]) for q in questions]

    def close(self) -> None:
        pass


def test_stored_answer_is_capped(tmp_path: Any) -> None:
    stage = SystemStage(
        None,
        documents_path=str(tmp_path),
        system_factory=lambda *a, **k: _LongSystem(),
    )
    [row] = stage(_system_batch(["ok"])).to_pylist()
    assert row[schema.STATUS] == "ok"
    assert row[schema.ANSWER].startswith("长" * ANSWER_MAX_CHARS + " [cut: 1000000")
    assert len(row[schema.ANSWER]) < ANSWER_MAX_CHARS + 60


def test_an_unforeseen_error_in_one_request_marks_its_row_only(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Any
) -> None:
    """Whatever else one request raises (a bug, a library surprise) is the
    ``error`` status of its own row; the batch's other rows are answered."""
    from cube_ray.engines.openai_http import OpenAIHttpEngine
    from cube_ray.systems.http import HttpSystem

    real_one = OpenAIHttpEngine._one
    real_ask = HttpSystem._ask

    async def one(self: Any, client: Any, prompt: str, *a: Any, **k: Any) -> Any:
        if "[[crash]]" in prompt:
            raise RuntimeError("surprise")
        return await real_one(self, client, prompt, *a, **k)

    async def ask(self: Any, client: Any, question: Any) -> Any:
        if "[[crash]]" in question.question:
            raise RuntimeError("surprise")
        return await real_ask(self, client, question)

    monkeypatch.setattr(OpenAIHttpEngine, "_one", one)
    monkeypatch.setattr(HttpSystem, "_ask", ask)
    with hostile_server() as server:
        engine = OpenAIHttpEngineConfig(
            base_url=server.url + "/v1", model="hostile", max_retries=0
        )
        judge = JudgeStage("hostile", engine, rubrics={"relevance": "r"})
        scored = judge(_judge_batch(["ok", "crash", "ok"])).to_pylist()
        judge.close()
        system = SystemStage(
            HttpSystemConfig(name="rag", url=server.url + "/v1/answer", max_retries=0),
            documents_path=str(tmp_path),
        )
        answered = system(_system_batch(["ok", "crash", "ok"])).to_pylist()
        system.close()
    assert [r[schema.STATUS] for r in scored] == ["ok", "error", "ok"]
    assert scored[1][schema.RAW] == "RuntimeError: surprise"
    assert [r[schema.STATUS] for r in answered] == ["ok", "error", "ok"]
