"""A hostile HTTP server on 127.0.0.1 for the tests: replies that break clients.

One server plays both an OpenAI-compatible judge (``/v1/chat/completions``)
and a RAG service of the ``custom`` preset (``/v1/answer``). What it sends
for a request is picked by a ``[[name]]`` marker in the request body when
there is one, else round-robin over ``cycle`` (for runs whose prompts the
test does not write). Every reply is real bytes on a real socket.
"""

from __future__ import annotations

import base64
import contextlib
import json
import re
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import quote

MARKER = re.compile(r"\[\[([a-z0-9_]+)\]\]")

HUGE_BYTES = 9 * 2**20
"""A reply over the client's 8 MiB limit, sent without Content-Length."""
NEST_DEPTH = 200_000
"""Nesting that makes Python's JSON parser raise RecursionError."""


def _score_reply(logprob: str, *, token: str = "7") -> bytes:
    """A chat reply "7" whose every logprob is the literal JSON text ``logprob``."""
    # Written by hand: json.dumps cannot write Infinity for a chosen key, and
    # 1000 / Infinity / NaN must reach the client as the server sent them.
    top = ", ".join(
        f'{{"token": "{t}", "logprob": {logprob}}}' for t in (token, "8", "3")
    )
    message = {"role": "assistant", "content": token}
    head = json.dumps({"message": message})[:-1]  # the choice, left open
    step = f'{{"token": "{token}", "logprob": {logprob}, "top_logprobs": [{top}]}}'
    usage = '"usage": {"prompt_tokens": 5, "completion_tokens": 1}'
    choice = f'{head}, "logprobs": {{"content": [{step}]}}}}'
    return f'{{"choices": [{choice}], {usage}}}'.encode()


def _ok_score() -> bytes:
    return json.dumps(
        {
            "choices": [
                {
                    "message": {"role": "assistant", "content": "7"},
                    "logprobs": {
                        "content": [
                            {
                                "token": "7",
                                "logprob": -0.2,
                                "top_logprobs": [
                                    {"token": "7", "logprob": -0.2},
                                    {"token": "8", "logprob": -1.8},
                                ],
                            }
                        ]
                    },
                }
            ],
            "usage": {"prompt_tokens": 5, "completion_tokens": 1},
        }
    ).encode()


class HostileServer(ThreadingHTTPServer):
    """Counts what it was asked; ``hits[name]`` per behaviour."""

    daemon_threads = True

    def __init__(self, cycle: list[str]) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.cycle = cycle
        self.lock = threading.Lock()
        self.n = 0
        self.hits: Counter[str] = Counter()
        self.auth: list[str | None] = []
        self.bytes_sent: Counter[str] = Counter()

    @property
    def url(self) -> str:
        host, port = self.server_address[:2]
        return f"http://{host!s}:{port}"

    def pick(self, body: str) -> str:
        m = MARKER.search(body)
        with self.lock:
            if m:
                name = m.group(1)
            else:
                name = self.cycle[self.n % len(self.cycle)]
                self.n += 1
            self.hits[name] += 1
        return name


class _Handler(BaseHTTPRequestHandler):
    server: HostileServer
    protocol_version = "HTTP/1.0"  # close-delimited bodies need no length

    def log_message(self, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        # The preflight's readiness probe of an HTTP model endpoint.
        if self.path.endswith("/models"):
            self._send(200, b'{"object": "list", "data": [{"id": "hostile"}]}')
        else:
            self._send(404, b'{"error": "not found"}')

    def do_POST(self) -> None:
        raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        body = raw.decode("utf-8", errors="replace")
        with self.server.lock:
            self.server.auth.append(self.headers.get("Authorization"))
        name = self.server.pick(body)
        judge = self.path.endswith("/chat/completions")
        # The client may stop reading (a too-large or too-slow reply).
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            self._behave(name, judge=judge, body=body)

    def _send(
        self,
        code: int,
        payload: bytes,
        *,
        length: bool = True,
        headers: dict[str, str] | None = None,
    ) -> None:
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        if length:
            self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def _answer(self, body: str) -> bytes:
        try:
            qid = json.loads(body).get("question_id")
        except ValueError:
            qid = None
        return json.dumps(
            {"answer": "答复：按规定办理。", "retrieved_doc_ids": [qid] if qid else []},
            ensure_ascii=False,
        ).encode()

    def _behave(self, name: str, *, judge: bool, body: str) -> None:
        behaviours: dict[str, Callable[[], None]] = {
            "ok": lambda: self._send(200, _ok_score() if judge else self._answer(body)),
            "inf": lambda: self._send(200, _score_reply("Infinity")),
            "nan": lambda: self._send(200, _score_reply("NaN")),
            "big": lambda: self._send(200, _score_reply("1000")),
            "bigint": lambda: self._send(200, _score_reply("1" + "0" * 400)),
            "nested": lambda: self._send(200, b"[" * NEST_DEPTH + b"]" * NEST_DEPTH),
            "notjson": lambda: self._send(200, b'{"choices": [{"message": '),
            "badutf8": lambda: self._send(200, b'{"answer": "\xff\xfe\xfa"}'),
            "shape": lambda: self._send(200, b'{"choices": "x", "usage": []}'),
            "shape2": lambda: self._send(
                200,
                b'{"choices": [{"message": {"content": "7"}, "logprobs": '
                b'{"content": [5, "x"]}}]}',
            ),
            "gzip": lambda: self._send(
                200, b"this is not gzip" * 8, headers={"Content-Encoding": "gzip"}
            ),
            "huge": self._huge,
            "drip": self._drip,
            "echo": self._echo,
            "textecho": self._text_echo,
        }
        behaviours[name]()

    def _huge(self) -> None:
        """9 MiB of a valid-looking JSON string, close-delimited (no length)."""
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        chunk = b"x" * 65536
        self.wfile.write(b'{"answer": "')
        sent = 0
        while sent < HUGE_BYTES:
            self.wfile.write(chunk)
            sent += len(chunk)
            with self.server.lock:
                self.server.bytes_sent["huge"] += len(chunk)
        self.wfile.write(b'"}')

    def _drip(self) -> None:
        """One byte a second for a minute (each read is well within a timeout)."""
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        for _ in range(60):
            self.wfile.write(b" ")
            self.wfile.flush()
            time.sleep(1.0)
        self.wfile.write(b"{}")

    def _text_echo(self) -> None:
        """A 200 whose reply text holds the key, URL-encoded and in base64."""
        auth = self.headers.get("Authorization") or ""
        key = auth.removeprefix("Bearer ")
        b64 = base64.b64encode(f"key={key};".encode()).decode()
        text = f"I got {quote(key, safe='')} and {b64}"
        payload = {"choices": [{"message": {"role": "assistant", "content": text}}]}
        self._send(200, json.dumps(payload).encode())

    def _echo(self) -> None:
        """A 500 whose body echoes the Authorization header, plain and base64."""
        auth = self.headers.get("Authorization") or ""
        b64 = base64.b64encode(auth.encode()).decode()
        payload = json.dumps({"error": f"bad request from {auth}", "b64": b64})
        self._send(500, payload.encode())


@contextmanager
def hostile_server(cycle: list[str] | None = None) -> Iterator[HostileServer]:
    """A running :class:`HostileServer`; shut down afterwards."""
    server = HostileServer(cycle or ["ok"])
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)
