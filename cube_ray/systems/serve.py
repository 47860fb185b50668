"""Serve a system under test (the built-in RAG) over HTTP, for tests and demos.

Endpoints (JSON in, JSON out):

* ``GET /health`` — ``{"status": "ok", "system": ..., "k": ...}``
* ``POST /v1/answer`` — body ``{"question": ..., "question_id": ...}``; reply
  ``{"answer", "retrieved_doc_ids", "status", "latency_s", "prompt_tokens",
  "completion_tokens"}`` (the ``custom`` preset of the HTTP adapter).
* ``POST /api/v1/chats/<chat_id>/completions`` — RAGFlow-shaped: body
  ``{"question": ...}``; reply ``{"code": 0, "data": {"answer", "reference":
  {"chunks": [{"id", "document_id", "document_name", "similarity"}]}}}``
  (the ``ragflow`` preset).
* ``POST /v1/chat/completions`` and
  ``POST /api/v1/chats_openai/<chat_id>/chat/completions`` — OpenAI-shaped: the
  last user message is the question; the reply's
  ``choices[0].message.reference.chunks[]`` lists the retrieved documents
  (the ``openai_chat`` preset).

Requests are answered one at a time (a lock around the system), because a
local engine is not safe to call from several threads.

Request bodies: ``Content-Length`` must be one plain decimal number; a negative,
malformed or repeated one is refused with 400, one over 1 MiB with 413, before
any byte of the body is read (the connection is then closed, so the unread
body is never taken for a request). A client that stops sending is dropped
after :data:`READ_TIMEOUT_S`. A client that goes away (a closed or reset
connection, a timeout) is one line in the log, not a traceback: it is the
client's doing and the server carries on.
"""

from __future__ import annotations

import json
import logging
import re
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from cube_ray.systems.base import QuestionIn, SystemAnswer, SystemUnderTest

__all__ = ["RagHttpServer", "make_server"]

log = logging.getLogger(__name__)

_RAGFLOW = re.compile(r"^/api/v1/chats/[^/]+/completions$")
_OPENAI = re.compile(r"^(/v1|/api/v1/chats_openai/[^/]+)/chat/completions$")
_MAX_BODY = 1 << 20
_LENGTH = re.compile(r"[0-9]{1,12}")
READ_TIMEOUT_S = 30.0
"""Seconds a connection may stay silent (a body shorter than its length)."""


def body_length(values: list[str] | None) -> int | None:
    """The request body's length from its ``Content-Length`` headers.

    None when absent (an empty body); raises ``ValueError`` when not one
    plain non-negative decimal number (``-1``, ``1e3``, ``0x10``, two
    different values).

    >>> body_length(["12"]), body_length(None), body_length(["7", "7"])
    (12, None, 7)
    >>> for bad in (["-1"], ["abc"], [" 1 2"], ["+5"], ["1", "2"], ["\u0661"]):
    ...     try:
    ...         body_length(bad)
    ...     except ValueError as exc:
    ...         print(exc)
    Content-Length '-1' is not a non-negative decimal number
    Content-Length 'abc' is not a non-negative decimal number
    Content-Length ' 1 2' is not a non-negative decimal number
    Content-Length '+5' is not a non-negative decimal number
    Content-Length given twice with different values
    Content-Length '١' is not a non-negative decimal number
    """
    if not values:
        return None
    if len(set(values)) > 1:
        msg = "Content-Length given twice with different values"
        raise ValueError(msg)
    value = values[0].strip(" \t")
    if not _LENGTH.fullmatch(value):
        msg = f"Content-Length {values[0]!r} is not a non-negative decimal number"
        raise ValueError(msg)
    return int(value)


class RagHttpServer(ThreadingHTTPServer):
    """A threading HTTP server holding one system under test."""

    daemon_threads = True

    def __init__(self, address: tuple[str, int], system: SystemUnderTest) -> None:
        super().__init__(address, _Handler)
        self.system = system
        self.lock = threading.Lock()
        self.requests_served = 0

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client that went away: one line; anything else: the traceback."""
        exc = sys.exc_info()[1]
        if isinstance(exc, ConnectionError | TimeoutError):
            host, port = client_address[:2]
            log.warning(
                "serve-rag: client %s:%s went away before its reply was sent "
                "(%s); carrying on",
                host,
                port,
                type(exc).__name__,
            )
            return
        super().handle_error(request, client_address)

    def ask(self, question: str, question_id: str | None) -> SystemAnswer:
        """Answer one question with the served system (serialised)."""
        qid = question_id or f"http-{time.time_ns()}"
        with self.lock:
            self.requests_served += 1
            return self.system.answer([QuestionIn(qid, question, "")])[0]


def make_server(
    system: SystemUnderTest, *, host: str = "127.0.0.1", port: int = 0
) -> RagHttpServer:
    """A server for ``system`` bound to ``host:port`` (0: a free port).

    Call ``serve_forever()`` (e.g. in a thread) and ``shutdown()``; the bound
    port is ``server.server_address[1]``.
    """
    return RagHttpServer((host, port), system)


def _chunks(answer: SystemAnswer) -> list[dict[str, Any]]:
    return [
        {
            "id": f"{doc_id}-0",
            "document_id": doc_id,
            "document_name": f"{doc_id}.txt",
            "rank": rank,
        }
        for rank, doc_id in enumerate(answer.retrieved_doc_ids, start=1)
    ]


class _Handler(BaseHTTPRequestHandler):
    server: RagHttpServer
    protocol_version = "HTTP/1.1"
    timeout = READ_TIMEOUT_S

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("%s - " + format, self.address_string(), *args)

    def _send(self, code: int, payload: dict[str, Any]) -> None:
        data = json.dumps(payload, ensure_ascii=False).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json; charset=utf-8")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:
        if self.path.rstrip("/") == "/health":
            system = self.server.system
            self._send(200, {"status": "ok", "system": system.name, "k": system.k})
        else:
            self._send(404, {"error": f"no such endpoint: GET {self.path}"})

    def _refuse(self, code: int, error: str) -> None:
        # The body is left unread: close, so it is never parsed as a request.
        self.close_connection = True
        self._send(code, {"error": error})

    def do_POST(self) -> None:
        try:
            length = body_length(self.headers.get_all("Content-Length")) or 0
        except ValueError as exc:
            self._refuse(400, str(exc))
            return
        if length > _MAX_BODY:
            self._refuse(413, f"request body too large (limit {_MAX_BODY} bytes)")
            return
        try:
            body = json.loads(self.rfile.read(length) or b"{}")
        except (ValueError, UnicodeDecodeError):
            self._send(400, {"error": "request body is not valid JSON"})
            return
        if not isinstance(body, dict):
            self._send(400, {"error": "request body must be a JSON object"})
            return
        path = self.path.split("?", 1)[0]
        if path == "/v1/answer":
            self._answer(body)
        elif _RAGFLOW.match(path):
            self._ragflow(body)
        elif _OPENAI.match(path):
            self._openai(body)
        else:
            self._send(404, {"error": f"no such endpoint: POST {path}"})

    def _question(self, body: dict[str, Any]) -> str | None:
        q = body.get("question")
        if not isinstance(q, str) or not q.strip():
            self._send(400, {"error": "body needs a non-empty 'question' string"})
            return None
        return q

    def _answer(self, body: dict[str, Any]) -> None:
        q = self._question(body)
        if q is None:
            return
        qid = body.get("question_id")
        a = self.server.ask(q, qid if isinstance(qid, str) else None)
        self._send(
            200,
            {
                "answer": a.answer,
                "retrieved_doc_ids": a.retrieved_doc_ids,
                "status": a.status,
                "latency_s": a.latency_s,
                "prompt_tokens": a.prompt_tokens,
                "completion_tokens": a.completion_tokens,
            },
        )

    def _ragflow(self, body: dict[str, Any]) -> None:
        q = self._question(body)
        if q is None:
            return
        a = self.server.ask(q, None)
        if a.answer is None:
            self._send(200, {"code": 100, "message": a.status})
            return
        reference = {"chunks": _chunks(a), "doc_aggs": []}
        self._send(
            200,
            {"code": 0, "data": {"answer": a.answer, "reference": reference}},
        )

    def _openai(self, body: dict[str, Any]) -> None:
        messages = body.get("messages")
        question = None
        if isinstance(messages, list):
            for m in reversed(messages):
                if isinstance(m, dict) and m.get("role") == "user":
                    content = m.get("content")
                    question = content if isinstance(content, str) else None
                    break
        if not question:
            self._send(400, {"error": "messages needs a user message with content"})
            return
        a = self.server.ask(question, None)
        if a.answer is None:
            self._send(500, {"error": {"message": a.status, "type": "server_error"}})
            return
        self._send(
            200,
            {
                "id": f"chatcmpl-{time.time_ns()}",
                "object": "chat.completion",
                "created": int(time.time()),
                "model": str(body.get("model") or self.server.system.name),
                "choices": [
                    {
                        "index": 0,
                        "message": {
                            "role": "assistant",
                            "content": a.answer,
                            "reference": {"chunks": _chunks(a)},
                        },
                        "finish_reason": "stop",
                    }
                ],
                "usage": {
                    "prompt_tokens": a.prompt_tokens,
                    "completion_tokens": a.completion_tokens,
                },
            },
        )
