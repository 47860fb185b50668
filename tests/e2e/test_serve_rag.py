"""The HTTP adapter against ``serve-rag`` on 127.0.0.1, with injected faults.

The same questions, in-process and through HTTP (three presets, a fault-injecting
proxy, the real ``cube-ray serve-rag`` command), must give the same answers,
retrieved ids and ranks.
"""

from __future__ import annotations

import http.client
import json
import logging
import os
import re
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest

from cube_ray.config import RunConfig
from cube_ray.corpus import with_prompt_language
from cube_ray.engines import FakeEngineConfig
from cube_ray.errors import ConfigError
from cube_ray.prompts import derive_nonce
from cube_ray.retrieval import gold_rank
from cube_ray.systems import (
    BuiltinRagSystemConfig,
    HttpSystemConfig,
    QuestionIn,
    SystemAnswer,
    build_system,
)
from cube_ray.systems.http import HttpSystem
from cube_ray.systems.serve import RagHttpServer, make_server
from tests.unit.test_retrieval import ZH_DOCS, ZH_QUERIES, write_documents

pytestmark = pytest.mark.timeout(120)

QUESTIONS = [
    QuestionIn(f"q{i}", q, gold) for i, (q, gold) in enumerate(ZH_QUERIES.items())
]
ENDPOINTS = {
    "custom": "/v1/answer",
    "ragflow": "/api/v1/chats/chat-1/completions",
    "openai_chat": "/v1/chat/completions",
}


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RagHttpServer]:
    docs = write_documents(tmp_path_factory.mktemp("run") / "documents", ZH_DOCS)
    system = build_system(
        BuiltinRagSystemConfig(k=3),
        documents_path=str(docs),
        generator=FakeEngineConfig(name="gen"),
    )
    server = make_server(system, port=0)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()
    thread.join(5)
    system.close()


@pytest.fixture(scope="module")
def in_process(served: RagHttpServer) -> list[SystemAnswer]:
    return served.system.answer(QUESTIONS)


def _url(server: ThreadingHTTPServer, path: str) -> str:
    host, port = server.server_address[:2]
    return f"http://{host!s}:{port}{path}"


def _same(got: list[SystemAnswer], expected: list[SystemAnswer]) -> None:
    for q, g, e in zip(QUESTIONS, got, expected, strict=True):
        assert g.status == "ok", g
        assert (g.answer, g.retrieved_doc_ids) == (e.answer, e.retrieved_doc_ids)
        assert gold_rank(g.retrieved_doc_ids, q.doc_id) == gold_rank(
            e.retrieved_doc_ids, q.doc_id
        )
        assert g.latency_s is not None


@pytest.mark.parametrize("preset", list(ENDPOINTS))
def test_http_matches_in_process(
    served: RagHttpServer, in_process: list[SystemAnswer], preset: str
) -> None:
    cfg = HttpSystemConfig(
        preset=preset,  # type: ignore[arg-type]
        url=_url(served, ENDPOINTS[preset]),
        k=3,
        max_concurrency=3,
    )
    system = build_system(cfg, documents_path="unused", generator=None)
    _same(system.answer(QUESTIONS), in_process)
    assert all(
        gold_rank(a.retrieved_doc_ids, q.doc_id) == 1
        for q, a in zip(QUESTIONS, in_process, strict=True)
    )


# --- a fault-injecting proxy ---------------------------------------------------

Action = str  # "forward", "503", "429", "500", "404", "slow", "garbage", "drop"
TIMEOUT_S = 3.0
"""Client timeout: generous, as a normal answer on a busy 2-core box can take 1 s."""
SLOW_S = TIMEOUT_S + 0.5
"""How long a "slow" fault stalls before answering (past the client timeout)."""


class FaultProxy(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(
        self, upstream: tuple[str, int], plan: Callable[[str, int], Action]
    ) -> None:
        super().__init__(("127.0.0.1", 0), _ProxyHandler)
        self.upstream = upstream
        self.plan = plan
        self.attempts: Counter[str] = Counter()
        self.headers_seen: list[dict[str, str]] = []
        self.lock = threading.Lock()


class _ProxyHandler(BaseHTTPRequestHandler):
    server: FaultProxy
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def _reply(self, code: int, body: bytes, headers: dict[str, str]) -> None:
        try:
            self.send_response(code)
            for k, v in headers.items():
                self.send_header(k, v)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
        except OSError:
            pass  # the client gave up (timeout test)

    def do_POST(self) -> None:
        raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        body = json.loads(raw)
        question = body.get("question") or body["messages"][-1]["content"]
        with self.server.lock:
            self.server.attempts[question] += 1
            attempt = self.server.attempts[question]
            self.server.headers_seen.append(dict(self.headers.items()))
        action = self.server.plan(question, attempt)
        if action in ("503", "429"):
            self._reply(int(action), b'{"error": "busy"}', {"Retry-After": "0"})
        elif action in ("500", "404"):
            self._reply(int(action), b'{"error": "x"}', {})
        elif action == "garbage":
            self._reply(200, b"<html>gateway hiccup</html>", {})
        elif action == "drop":
            self.close_connection = True
        else:
            if action == "slow":
                time.sleep(SLOW_S)
            conn = http.client.HTTPConnection(*self.server.upstream, timeout=30)
            conn.request("POST", self.path, raw, {"Content-Type": "application/json"})
            resp = conn.getresponse()
            data = resp.read()
            conn.close()
            self._reply(resp.status, data, {"Content-Type": "application/json"})


@pytest.fixture
def proxy_factory(
    served: RagHttpServer,
) -> Iterator[Callable[[Callable[[str, int], Action]], FaultProxy]]:
    started: list[tuple[FaultProxy, threading.Thread]] = []

    def make(plan: Callable[[str, int], Action]) -> FaultProxy:
        proxy = FaultProxy(served.server_address[:2], plan)  # type: ignore[arg-type]
        thread = threading.Thread(target=proxy.serve_forever, daemon=True)
        thread.start()
        started.append((proxy, thread))
        return proxy

    yield make
    for proxy, thread in started:
        proxy.shutdown()
        proxy.server_close()
        thread.join(5)


def _http(proxy: FaultProxy, **kw: Any) -> HttpSystem:
    cfg = HttpSystemConfig(
        url=_url(proxy, "/v1/answer"),
        k=3,
        timeout_s=kw.pop("timeout_s", TIMEOUT_S),
        backoff_base_s=0.01,
        backoff_max_s=0.05,
        **kw,
    )
    return HttpSystem(cfg)


def test_transient_faults_are_retried(
    proxy_factory: Callable[[Callable[[str, int], Action]], FaultProxy],
    in_process: list[SystemAnswer],
) -> None:
    faults = {
        QUESTIONS[0].question: ["503", "503"],
        QUESTIONS[1].question: ["429", "garbage"],
        QUESTIONS[2].question: ["slow"],
        QUESTIONS[3].question: ["drop", "500"],
    }

    def plan(question: str, attempt: int) -> Action:
        script = faults.get(question, [])
        return script[attempt - 1] if attempt <= len(script) else "forward"

    proxy = proxy_factory(plan)
    got = _http(proxy, max_retries=3, max_concurrency=2).answer(QUESTIONS)
    _same(got, in_process)
    expected = {q.question: len(faults.get(q.question, [])) + 1 for q in QUESTIONS}
    assert dict(proxy.attempts) == expected


def test_persistent_failures_are_recorded_per_row(
    proxy_factory: Callable[[Callable[[str, int], Action]], FaultProxy],
    in_process: list[SystemAnswer],
) -> None:
    fixed = {
        QUESTIONS[0].question: "500",
        QUESTIONS[1].question: "404",
        QUESTIONS[2].question: "slow",
        QUESTIONS[3].question: "garbage",
    }
    proxy = proxy_factory(lambda q, attempt: fixed.get(q, "forward"))
    got = _http(proxy, max_retries=2).answer(QUESTIONS)
    assert [a.status for a in got] == [
        "http_500",
        "http_404",
        "timeout",
        "invalid_json",
        "ok",
    ]
    assert all(a.answer is None for a in got[:4])
    assert got[4].answer == in_process[4].answer
    attempts = proxy.attempts
    assert attempts[QUESTIONS[0].question] == 3  # 1 + max_retries
    assert attempts[QUESTIONS[1].question] == 1  # 4xx: no retry
    assert attempts[QUESTIONS[3].question] == 3


def test_connection_refused_is_a_row_status() -> None:
    with socket_free_port() as port:
        pass
    cfg = HttpSystemConfig(
        url=f"http://127.0.0.1:{port}/v1/answer",
        max_retries=1,
        backoff_base_s=0.01,
    )
    got = HttpSystem(cfg).answer(QUESTIONS[:2])
    assert [a.status for a in got] == ["connection_error", "connection_error"]


class socket_free_port:
    def __enter__(self) -> int:
        import socket

        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        return int(self.sock.getsockname()[1])

    def __exit__(self, *exc: object) -> None:
        self.sock.close()


def test_secret_headers_from_env_never_logged(
    proxy_factory: Callable[[Callable[[str, int], Action]], FaultProxy],
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    token = "tok-" + "9" * 20
    monkeypatch.setenv("CUBE_RAY_TEST_TOKEN", token)
    proxy = proxy_factory(lambda q, attempt: "503" if attempt == 1 else "forward")
    caplog.set_level(logging.DEBUG)
    got = _http(
        proxy,
        headers={"Authorization": "Bearer ${CUBE_RAY_TEST_TOKEN}"},
        max_retries=1,
    ).answer(QUESTIONS[:1])
    assert got[0].status == "ok"
    assert proxy.headers_seen[0]["Authorization"] == f"Bearer {token}"
    assert "retry" in caplog.text
    assert token not in caplog.text
    monkeypatch.delenv("CUBE_RAY_TEST_TOKEN")
    with pytest.raises(ConfigError, match="CUBE_RAY_TEST_TOKEN") as info:
        _http(proxy, headers={"Authorization": "Bearer ${CUBE_RAY_TEST_TOKEN}"})
    assert token not in str(info.value)


def test_custom_paths_and_id_pattern() -> None:
    payload = {
        "result": {
            "text": "A",
            "sources": [
                {"file": "d1.txt"},
                {"file": "d2.txt"},
                {"file": "d1.txt"},
                {"nofile": 1},
            ],
        }
    }

    def handler(request: httpx.Request) -> httpx.Response:
        sent = json.loads(request.content)
        assert sent == {"query": "Q?", "meta": {"id": "q9"}, "lang": "zh"}
        return httpx.Response(200, json=payload)

    cfg = HttpSystemConfig(
        url="http://svc.invalid/ask",
        body={"query": "{question}", "meta": {"id": "{question_id}"}, "lang": "zh"},
        answer_path="result.text",
        retrieved_path="result.sources[].file",
        id_pattern=r"^(.*)\.txt$",
    )
    system = HttpSystem(cfg, transport=httpx.MockTransport(handler))
    body_cfg = system.answer([QuestionIn("q9", "Q?", "d1")])
    assert body_cfg == [
        SystemAnswer("A", ["d1", "d2"], latency_s=body_cfg[0].latency_s)
    ]
    with pytest.raises(ConfigError, match="cannot parse"):
        HttpSystem(HttpSystemConfig(url="http://x", answer_path="a.[x"))


# --- the real command --------------------------------------------------------


def test_cli_serve_rag_subprocess(tmp_path: Path) -> None:
    records = tmp_path / "records.jsonl"
    records.write_text(
        "".join(
            json.dumps({"id": d, "body": t}, ensure_ascii=False) + "\n"
            for d, t in ZH_DOCS.items()
        ),
        encoding="utf-8",
    )
    config = tmp_path / "serve.yaml"
    config.write_text(
        f"""
corpus:
  path: {records}
  id_field: id
  fields: [body]
generator: {{backend: fake, name: gen}}
judges:
  j1: {{backend: fake}}
systems:
  - {{kind: builtin_rag, name: rag, k: 3}}
allow_fake_engines: true
output_dir: {tmp_path / "out"}
""",
        encoding="utf-8",
    )
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    env.pop("CUBE_RAY_PROMPT_KEY", None)
    proc = subprocess.Popen(
        [sys.executable, "-m", "cube_ray.cli", "serve-rag", str(config), "--port", "0"],
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        assert proc.stderr is not None
        line = ""
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            line = proc.stderr.readline()
            if "http://" in line or not line:
                break
        match = re.search(r"http://127\.0\.0\.1:(\d+)", line)
        assert match, f"no server line; got {line!r}"
        url = f"http://127.0.0.1:{match.group(1)}"
        assert httpx.get(url + "/health").json()["k"] == 3
        system = HttpSystem(
            HttpSystemConfig(preset="ragflow", url=url + ENDPOINTS["ragflow"], k=3)
        )
        via_http = system.answer(QUESTIONS)
        run_config = RunConfig.from_yaml(config)
        local = build_system(
            BuiltinRagSystemConfig(k=3),
            documents_path=str(tmp_path / "out" / "serve_rag" / "documents"),
            generator=FakeEngineConfig(name="gen"),
            # serve-rag answers in the corpus's language (Chinese here), and its
            # prompts carry the nonce derived from its config.
            answer_template=with_prompt_language(run_config).prompts.answer,
            nonce=derive_nonce(run_config.fingerprint()),
        ).answer(QUESTIONS)
        _same(via_http, local)
    finally:
        proc.terminate()
        proc.wait(10)


def test_cli_serve_rag_without_builtin_system(tmp_path: Path) -> None:
    from cube_ray.cli import main

    config = tmp_path / "c.yaml"
    config.write_text(
        f"""
corpus: {{path: {tmp_path / "r.jsonl"}}}
generator: {{backend: fake}}
judges: {{j: {{backend: fake}}}}
allow_fake_engines: true
""",
        encoding="utf-8",
    )
    assert main(["serve-rag", str(config)]) == 2
