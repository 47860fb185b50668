"""The HTTP engine against a real, misbehaving OpenAI-compatible server on 127.0.0.1.

The server (stdlib ``http.server`` in a thread) reads a behaviour marker
``[[...]]`` from each prompt and injects 500s, 429 with Retry-After, slow
responses (timeouts), malformed JSON, unparsable scores and 400s.
"""

from __future__ import annotations

import json
import logging
import math
import re
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from cube_ray.engines import OpenAIHttpEngineConfig, SamplingParams, build_engine
from cube_ray.engines.openai_http import REMINDER
from cube_ray.errors import EngineError

pytestmark = pytest.mark.timeout(60)

KEY = "sk-test-DO-NOT-LEAK-4f2a9c"
KEY_ENV = "CUBE_RAY_TEST_API_KEY"
MARKER = re.compile(r"\[\[([^\]]+)\]\]")


@dataclass
class Hit:
    marker: str
    t: float
    authorization: str | None
    body: dict[str, Any]


@dataclass
class State:
    hits: list[Hit] = field(default_factory=list)
    counts: dict[str, int] = field(default_factory=dict)
    in_flight: int = 0
    max_in_flight: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)


def _prompt_text(body: dict[str, Any]) -> str:
    if "messages" in body:
        return "\n".join(str(m["content"]) for m in body["messages"])
    return str(body.get("prompt", ""))


def _completion(body: dict[str, Any], text: str, logprobs: Any = None) -> bytes:
    if "messages" in body:
        choice: dict[str, Any] = {"index": 0, "message": {"role": "assistant"}}
        choice["message"]["content"] = text
    else:
        choice = {"index": 0, "text": text}
    if logprobs is not None:
        choice["logprobs"] = logprobs
    usage = {"prompt_tokens": 11, "completion_tokens": 1, "total_tokens": 12}
    return json.dumps({"choices": [choice], "usage": usage}).encode()


def _chat_logprobs(dist: dict[str, float]) -> dict[str, Any]:
    best = max(dist, key=lambda k: dist[k])
    tops = [{"token": t, "logprob": math.log(p)} for t, p in dist.items()]
    return {
        "content": [
            {"token": best, "logprob": math.log(dist[best]), "top_logprobs": tops}
        ]
    }


Step = tuple[str, dict[str, float]]
"""One generated position: the chosen token and its top alternatives."""


def _steps_logprobs(body: dict[str, Any], steps: list[Step]) -> dict[str, Any]:
    """The ``logprobs`` block of a chat or completions reply, as servers send it."""
    if "messages" in body:
        return {
            "content": [
                {
                    "token": chosen,
                    "logprob": math.log(alts[chosen]),
                    "top_logprobs": [
                        {"token": t, "logprob": math.log(p)} for t, p in alts.items()
                    ],
                }
                for chosen, alts in steps
            ]
        }
    return {
        "tokens": [chosen for chosen, _ in steps],
        "token_logprobs": [math.log(alts[chosen]) for chosen, alts in steps],
        "top_logprobs": [
            {t: math.log(p) for t, p in alts.items()} for _, alts in steps
        ],
    }


EOS = "<|im_end|>"
"""A server that splits "10" lists its end token among the alternatives."""
ONE_TEN_FOLLOW_UP: list[Step] = [("1", {"1": 1.0}), ("0", {"0": 0.6, EOS: 0.4})]
"""Reply to a request constrained to ("1", "10"): P("0" | "1") = 0.6."""
EXPECTED_ONE9 = 9 * 0.6 + 1 * 0.4 * 0.4 + 10 * 0.4 * 0.6
"""The judge of ``one9`` (P(9) = 0.6, P(first "1") = 0.4) with that split."""


def make_handler(state: State) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:  # quiet
            pass

        def _send(self, code: int, payload: bytes, headers: dict[str, str]) -> None:
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            for k, v in headers.items():
                self.send_header(k, v)
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length", 0))
            body = json.loads(self.rfile.read(length))
            text = _prompt_text(body)
            m = MARKER.search(text)
            marker = m.group(1) if m else "ok:5"
            with state.lock:
                n = state.counts.get(text, 0)
                state.counts[text] = n + 1
                state.hits.append(
                    Hit(
                        marker,
                        time.monotonic(),
                        self.headers.get("Authorization"),
                        body,
                    )
                )
                state.in_flight += 1
                state.max_in_flight = max(state.max_in_flight, state.in_flight)
            try:
                self._respond(marker, n, body, text)
            finally:
                with state.lock:
                    state.in_flight -= 1

        def _respond(
            self, marker: str, n: int, body: dict[str, Any], text: str
        ) -> None:
            kind, _, arg = marker.partition(":")
            if body.get("model") == "missing-model":
                self._send(404, b'{"error": "model not found"}', {})
            elif kind == "ok":
                time.sleep(0.05)  # lets requests overlap, to observe concurrency
                self._send(200, _completion(body, arg), {})
            elif kind == "500x2":
                if n < 2:
                    self._send(500, b'{"error": "boom"}', {})
                else:
                    self._send(200, _completion(body, arg), {})
            elif kind == "429":
                if n < 1:
                    self._send(429, b'{"error": "slow down"}', {"Retry-After": "1"})
                else:
                    self._send(200, _completion(body, arg), {})
            elif kind == "badjson":
                if n < 1:
                    self._send(200, b'{"choices": [ {"message": ', {})
                else:
                    self._send(200, _completion(body, arg), {})
            elif kind == "slow":
                time.sleep(2.5)
                self._send(200, _completion(body, "5"), {})
            elif kind == "always500":
                self._send(503, b'{"error": "down"}', {})
            elif kind == "echo":
                # A careless server that echoes the request headers in its error.
                auth = self.headers.get("Authorization", "")
                self._send(500, json.dumps({"error": auth}).encode(), {})
            elif kind == "chatty":
                self._send(200, _completion(body, "I would say 7/10."), {})
            elif kind == "fixlater":
                reply = arg if REMINDER in text else f"Score: {arg} points"
                self._send(200, _completion(body, reply), {})
            elif kind == "bad400":
                self._send(400, b'{"error": "context length exceeded"}', {})
            elif kind == "logprobs":
                dist = {"7": 0.5, "8": 0.3, "6": 0.15, "Sure": 0.05}
                self._send(200, _completion(body, "7", _chat_logprobs(dist)), {})
            elif kind == "lowmass":
                # Greedy "7", but most of the mass is on words, not scores.
                alts = {"7": 0.25, "8": 0.05, "Sure": 0.2, "I": 0.2, "The": 0.2}
                steps: list[Step] = [("7", alts)]
                self._send(
                    200, _completion(body, "7", _steps_logprobs(body, steps)), {}
                )
            elif kind == "split10":
                # "10" written as "1" + "0"; the next step holds P("0" | "1").
                steps = [("1", {"1": 0.6, "9": 0.4}), ("0", {"0": 0.75, EOS: 0.25})]
                self._send(
                    200, _completion(body, "10", _steps_logprobs(body, steps)), {}
                )
            elif kind == "one9":
                if body.get("guided_choice") == ["1", "10"]:
                    steps = ONE_TEN_FOLLOW_UP
                    text = "10"
                elif str(body.get("prompt", "")).endswith("]]1"):
                    steps = [("0", {"0": 0.6, "\n": 0.3, EOS: 0.1})]
                    text = "0"
                else:
                    steps = [("9", {"9": 0.6, "1": 0.4})]
                    text = "9"
                self._send(
                    200, _completion(body, text, _steps_logprobs(body, steps)), {}
                )
            elif kind == "tiny1":
                steps = [("7", {"7": 0.995, "1": 0.004})]
                self._send(
                    200, _completion(body, "7", _steps_logprobs(body, steps)), {}
                )
            elif kind == "lead":
                steps = [("\n", {"\n": 0.9, "7": 0.1}), ("7", {"7": 0.8, "8": 0.2})]
                self._send(
                    200, _completion(body, "\n7", _steps_logprobs(body, steps)), {}
                )
            elif kind == "lpchatty":
                dist = {"Sure": 0.9, "7": 0.1}
                self._send(200, _completion(body, "Sure, 7", _chat_logprobs(dist)), {})
            else:  # pragma: no cover - a typo in a test marker
                self._send(418, b"{}", {})

    return Handler


class _QuietServer(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request: Any, client_address: Any) -> None:
        pass  # clients that time out break the pipe; that is the point


@pytest.fixture
def server() -> Iterator[tuple[str, State]]:
    state = State()
    httpd = _QuietServer(("127.0.0.1", 0), make_handler(state))
    httpd.daemon_threads = True
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}/v1", state
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join(5)


def _config(base_url: str, **kw: Any) -> OpenAIHttpEngineConfig:
    defaults: dict[str, Any] = {
        "base_url": base_url,
        "model": "judge-model",
        "api_key_env": KEY_ENV,
        "max_concurrency": 4,
        # Generous for a loaded CI machine; the "slow" rows sleep 2.5 s.
        "timeout_s": 1.0,
        "max_retries": 2,
        "backoff_base_s": 0.01,
        "backoff_max_s": 0.05,
    }
    defaults.update(kw)
    return OpenAIHttpEngineConfig(**defaults)


def test_every_row_scored_or_explicit_status(
    server: tuple[str, State],
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    base_url, state = server
    monkeypatch.setenv(KEY_ENV, KEY)
    caplog.set_level(logging.DEBUG)
    engine = build_engine(_config(base_url))
    prompts = [f"row {i} [[ok:{i % 11}]]" for i in range(8)] + [
        "r8 [[500x2:9]]",
        "r9 [[429:3]]",
        "r10 [[badjson:4]]",
        "r11 [[slow]]",
        "r12 [[always500]]",
        "r13 [[chatty]]",
        "r14 [[fixlater:6]]",
        "r15 [[bad400]]",
        "r16 [[echo]]",
    ]
    results = engine.score(prompts, mode="argmax")
    assert len(results) == len(prompts)
    got = [(r.score, r.status) for r in results]
    assert got[:8] == [(float(i % 11), "ok") for i in range(8)]
    assert got[8:] == [
        (9.0, "ok"),
        (3.0, "ok"),
        (4.0, "ok"),
        (None, "timeout"),
        (None, "http_error"),
        (None, "parse_error"),
        (6.0, "ok"),
        (None, "http_error"),
        (None, "http_error"),
    ]
    # A failed score is missing with its raw text, never 0.
    assert results[13].raw == "I would say 7/10."
    assert "503" in (results[12].raw or "")
    # Retries: 500 twice then ok; the unparsable score asked 1 + parse_retries times.
    assert state.counts["r8 [[500x2:9]]"] == 3
    assert sum(h.marker == "chatty" for h in state.hits) == 3
    assert state.counts["r12 [[always500]]"] == 3  # 1 + max_retries
    assert state.counts["r15 [[bad400]]"] == 1  # a 400 is not retried
    # Retry-After: 1 was honoured although the backoff would wait ~10 ms.
    t429 = [h.t for h in state.hits if h.marker == "429:3"]
    assert len(t429) == 2
    assert t429[1] - t429[0] >= 0.95
    # The concurrency limit held.
    assert 1 < state.max_in_flight <= 4
    # The key went out in the header, and nowhere else.
    assert {h.authorization for h in state.hits} == {f"Bearer {KEY}"}
    assert KEY not in repr(results)
    # An error body is kept as its status and length only (it echoed the key).
    assert re.fullmatch(r"HTTP 500 \(\d+ bytes\)", results[16].raw or "")
    assert KEY not in caplog.text
    # Token usage is recorded per row and per engine.
    assert results[0].prompt_tokens == 11
    assert engine.usage.prompt_tokens >= 11 * 8  # type: ignore[attr-defined]
    engine.close()


def test_generate_completions_api_and_guided_choice(
    server: tuple[str, State], monkeypatch: pytest.MonkeyPatch
) -> None:
    base_url, state = server
    monkeypatch.setenv(KEY_ENV, KEY)
    engine = build_engine(_config(base_url, api="completions", guided_choice=True))
    gens = engine.generate(
        ["g0 [[ok:hello]]", "g1 [[always500]]"],
        sampling=SamplingParams(max_tokens=16, stop=("\n",)),
    )
    assert [(g.text, g.status) for g in gens] == [
        ("hello", "ok"),
        (None, "http_error"),
    ]
    assert gens[0].completion_tokens == 1
    scores = engine.score(["s0 [[ok:10]]"], mode="argmax")
    assert (scores[0].score, scores[0].status) == (10.0, "ok")
    body = next(h.body for h in state.hits if h.marker == "ok:10")
    assert body["structured_outputs"] == {"choice": [str(i) for i in range(11)]}
    assert body["guided_choice"] == [str(i) for i in range(11)]
    assert "prompt" in body
    assert "messages" not in body


def test_expected_score_from_logprobs(
    server: tuple[str, State], monkeypatch: pytest.MonkeyPatch
) -> None:
    base_url, state = server
    monkeypatch.setenv(KEY_ENV, KEY)
    engine = build_engine(_config(base_url, logprobs=True, score_mode="expected"))
    [result] = engine.score(["e0 [[logprobs]]"], mode="expected")
    # Renormalised over the score tokens: (7*.5 + 8*.3 + 6*.15) / .95
    assert result.status == "ok"
    assert result.score == pytest.approx((3.5 + 2.4 + 0.9) / 0.95, abs=1e-6)
    assert state.hits[0].body["logprobs"] is True
    assert state.hits[0].body["top_logprobs"] == 20
    # Text that is not a score: its logprobs are not trusted either.
    [bad] = engine.score(["e1 [[lpchatty]]"], mode="expected")
    assert (bad.score, bad.status, bad.raw) == (None, "parse_error", "Sure, 7")


def test_expected_score_mass_and_one_ten_split_chat(
    server: tuple[str, State], monkeypatch: pytest.MonkeyPatch
) -> None:
    base_url, state = server
    monkeypatch.setenv(KEY_ENV, KEY)
    engine = build_engine(_config(base_url, logprobs=True, score_mode="expected"))
    prompts = ["c0 [[lowmass]]", "c1 [[split10]]", "c2 [[one9]]", "c3 [[tiny1]]"]
    prompts.append("c4 [[lead]]")
    res = engine.score(prompts, mode="expected")
    got = [(r.score, r.status) for r in res]
    assert got[0] == (None, "low_score_mass")
    assert res[0].raw == "7 [score-token mass 0.3000 < min_score_mass 0.5]"
    # "1" + "0": P(1) = 0.6 * 0.25, P(10) = 0.6 * 0.75, P(9) = 0.4.
    assert got[1] == (pytest.approx(0.15 + 4.5 + 3.6), "ok")
    # A chat endpoint without a constraint cannot be asked what follows "1":
    # the greedy score, with its own status and the reason in raw.
    assert got[2] == (9.0, "argmax_fallback")
    assert (res[2].raw or "").startswith("9 [")
    assert state.counts["c2 [[one9]]"] == 1
    # A negligible "1" needs no split (error < 0.05 points).
    assert got[3] == (pytest.approx((7 * 0.995 + 0.004) / 0.999), "ok")
    # The score is read at the first non-blank token.
    assert got[4] == (pytest.approx(7.2), "ok")
    assert len(state.hits) == len(prompts)  # no follow-up request
    assert engine.usage.statuses == {  # type: ignore[attr-defined]
        "ok": 3,
        "low_score_mass": 1,
        "argmax_fallback": 1,
    }
    # The threshold is the engine's: lowered, the same reply is a score.
    lenient = build_engine(
        _config(base_url, logprobs=True, score_mode="expected", min_score_mass=0.2)
    )
    [ok] = lenient.score(["c5 [[lowmass]]"], mode="expected")
    assert (ok.score, ok.status) == (pytest.approx((7 * 0.25 + 8 * 0.05) / 0.3), "ok")


@pytest.mark.parametrize("api", ["chat", "completions"])
def test_expected_one_ten_split_from_a_follow_up(
    server: tuple[str, State], monkeypatch: pytest.MonkeyPatch, api: str
) -> None:
    base_url, state = server
    monkeypatch.setenv(KEY_ENV, KEY)
    # chat needs the constraint to force "1"; completions can continue a prompt.
    guided = api == "chat"
    engine = build_engine(
        _config(
            base_url,
            api=api,
            guided_choice=guided,
            logprobs=True,
            score_mode="expected",
        )
    )
    res = engine.score(["f0 [[one9]]", "f1 [[tiny1]]"], mode="expected")
    assert [(r.score, r.status) for r in res] == [
        (pytest.approx(EXPECTED_ONE9), "ok"),
        (pytest.approx((7 * 0.995 + 0.004) / 0.999), "ok"),
    ]
    one9 = [h.body for h in state.hits if h.marker == "one9"]
    assert len(one9) == 2  # the score, then one follow-up
    assert sum(h.marker == "tiny1" for h in state.hits) == 1
    if guided:
        assert one9[1]["guided_choice"] == ["1", "10"]
        assert one9[1]["structured_outputs"] == {"choice": ["1", "10"]}
    else:
        assert one9[1]["prompt"] == one9[0]["prompt"] + "1"
        assert one9[1]["max_tokens"] == 1
    # The follow-up's tokens are counted on the row.
    assert res[0].prompt_tokens == 22


def test_fatal_statuses_raise_without_the_key(
    server: tuple[str, State], monkeypatch: pytest.MonkeyPatch
) -> None:
    base_url, _state = server
    monkeypatch.setenv(KEY_ENV, KEY)
    engine = build_engine(_config(base_url, model="missing-model"))
    with pytest.raises(EngineError, match="HTTP 404") as info:
        engine.score(["x [[ok:1]]"], mode="argmax")
    assert KEY not in str(info.value)


def test_missing_key_env_is_an_engine_error(
    server: tuple[str, State], monkeypatch: pytest.MonkeyPatch
) -> None:
    base_url, _state = server
    monkeypatch.delenv(KEY_ENV, raising=False)
    with pytest.raises(EngineError, match=KEY_ENV):
        build_engine(_config(base_url))


def test_runs_inside_a_running_event_loop(
    server: tuple[str, State], monkeypatch: pytest.MonkeyPatch
) -> None:
    import asyncio

    base_url, _state = server
    monkeypatch.setenv(KEY_ENV, KEY)
    engine = build_engine(_config(base_url))

    async def inside() -> list[float | None]:
        return [r.score for r in engine.score(["a [[ok:2]]"], mode="argmax")]

    assert asyncio.run(inside()) == [2.0]
