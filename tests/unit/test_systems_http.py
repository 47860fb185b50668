"""The HTTP adapter's request templates and response mapping (mock transport)."""

from __future__ import annotations

import json
import time

import httpx
import pytest

from cube_ray.errors import ConfigError
from cube_ray.systems import HttpSystemConfig, QuestionIn
from cube_ray.systems.http import HttpSystem, resolve_path

Q = [QuestionIn("q1", "怎么换领身份证？", "d1")]


def _system(
    cfg: HttpSystemConfig, reply: object, seen: list[httpx.Request]
) -> HttpSystem:
    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(200, json=reply)

    return HttpSystem(cfg, transport=httpx.MockTransport(handler))


def test_ragflow_preset_and_business_code() -> None:
    seen: list[httpx.Request] = []
    reply = {
        "code": 0,
        "data": {
            "answer": "带上旧证。",
            "reference": {
                "chunks": [
                    {"document_id": "d1", "id": "c1"},
                    {"document_id": "d1", "id": "c2"},
                    {"document_id": "d7", "id": "c3"},
                ]
            },
        },
    }
    cfg = HttpSystemConfig(
        preset="ragflow", url="http://rf.invalid/api/v1/chats/c/completions"
    )
    got = _system(cfg, reply, seen).answer(Q)[0]
    assert (got.answer, got.retrieved_doc_ids, got.status) == (
        "带上旧证。",
        ["d1", "d7"],  # chunks of one document count once, at its best rank
        "ok",
    )
    assert json.loads(seen[0].content) == {"question": Q[0].question, "stream": False}
    failed = _system(cfg, {"code": 102, "message": "no chat"}, []).answer(Q)[0]
    assert (failed.answer, failed.status) == (None, "service_code_102")


def test_openai_chat_preset_body_merge() -> None:
    seen: list[httpx.Request] = []
    reply = {
        "choices": [
            {
                "message": {
                    "content": "A",
                    "reference": {"chunks": [{"document_id": "d2"}]},
                }
            }
        ]
    }
    cfg = HttpSystemConfig(
        preset="openai_chat",
        url="http://x.invalid/v1/chat/completions",
        body={"model": "my-rag"},
    )
    got = _system(cfg, reply, seen).answer(Q)[0]
    assert (got.answer, got.retrieved_doc_ids) == ("A", ["d2"])
    sent = json.loads(seen[0].content)
    assert sent["model"] == "my-rag"
    assert sent["messages"] == [{"role": "user", "content": Q[0].question}]
    assert sent["extra_body"] == {"reference": True}


def test_get_method_and_missing_answer() -> None:
    seen: list[httpx.Request] = []
    cfg = HttpSystemConfig(
        url="http://x.invalid/ask",
        method="GET",
        body={"q": "{question}", "n": 5},
        answer_path="out.text",
        retrieved_path="out.ids",
    )
    got = _system(cfg, {"out": {"ids": ["d1", 7]}}, seen).answer(Q)[0]
    assert (got.answer, got.retrieved_doc_ids, got.status) == (
        None,
        ["d1", "7"],
        "no_answer_in_response",
    )
    assert seen[0].method == "GET"
    assert seen[0].url.params["q"] == Q[0].question
    assert seen[0].url.params["n"] == "5"


def test_resolve_path_edge_cases() -> None:
    doc = {"a": [{"b": [{"id": 1}, {"id": 2}]}, {"b": [{"id": 3}]}], "x": None}
    assert resolve_path(doc, "a[].b[].id") == [1, 2, 3]
    assert resolve_path(doc, "a[1].b[0].id") == 3
    assert resolve_path(doc, "a[5].b") is None
    assert resolve_path(doc, "x") is None
    assert resolve_path(doc, "a[].nope[].id") == []
    with pytest.raises(ConfigError, match="empty segment"):
        resolve_path(doc, "a..b")


def test_bad_id_pattern_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="id_pattern"):
        HttpSystem(HttpSystemConfig(url="http://x", id_pattern="("))


def test_retry_after_is_honoured() -> None:
    calls: list[float] = []

    def handler(request: httpx.Request) -> httpx.Response:
        calls.append(time.perf_counter())
        if len(calls) == 1:
            return httpx.Response(429, headers={"Retry-After": "0.3"})
        return httpx.Response(200, json={"answer": "A", "retrieved_doc_ids": ["d1"]})

    cfg = HttpSystemConfig(
        url="http://x.invalid/ask", backoff_base_s=0.001, backoff_max_s=5
    )
    got = HttpSystem(cfg, transport=httpx.MockTransport(handler)).answer(Q)[0]
    assert (got.answer, got.status) == ("A", "ok")
    assert calls[1] - calls[0] >= 0.29
