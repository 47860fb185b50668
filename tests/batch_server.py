"""An OpenAI-compatible server with a Batch API, on 127.0.0.1, for the tests.

A real ``http.server`` in a thread (:func:`serve`), as the other stubs:

* ``POST /v1/chat/completions`` (and ``/v1/completions``): one direct reply
  from :func:`answer`, counted, so a test can assert that a batch engine sent
  none;
* ``POST /v1/files`` (multipart, purpose ``batch``), ``GET
  /v1/files/{id}/content``;
* ``POST /v1/batches``, ``GET /v1/batches/{id}``, ``GET /v1/batches``: a batch
  goes ``validating`` -> ``in_progress`` -> its outcome, one step per status
  request; while :attr:`BatchState.hold` is clear it stays ``in_progress``.
  The outcome is :attr:`BatchState.outcome`: ``completed`` (every line
  answered by :func:`answer`; a request whose prompt holds ``[[fail]]`` goes
  to the error file with a 400, one holding ``[[drop]]`` is in neither file),
  ``expired`` (the first half answered, then
  the window ends), ``failed`` (validation failed, no file) or ``cancelled``;
* ``GET /v1/models``: the preflight's check.

Every request is counted by ``"METHOD /path"`` with ids replaced by ``{id}``
(:attr:`BatchState.calls`), and the ``Authorization`` headers are kept.
"""

from __future__ import annotations

import email
import email.policy
import hashlib
import json
import math
import re
import threading
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from typing import Any

from tests.local_http import serving

__all__ = ["BatchState", "answer", "prompt_of", "serve"]

Answer = Callable[[dict[str, Any]], tuple[int, dict[str, Any]]]


def prompt_of(body: dict[str, Any]) -> str:
    """The prompt text of a chat or completions body."""
    if "messages" in body:
        return "\n".join(str(m["content"]) for m in body["messages"])
    return str(body.get("prompt", ""))


def answer(body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    """A deterministic reply: a score (with logprobs when asked) or a text.

    A request of at most 16 ``max_tokens`` is a score: ``hash % 11``, with
    top logprobs over it and the next score when ``logprobs`` is asked (so
    ``expected`` scores are not integers). Otherwise a short text. A prompt
    holding ``[[fail]]`` gets a 400. The reply depends on the prompt less
    its nonce (16 hex digits), so two run configs get the same replies.
    """
    prompt = prompt_of(body)
    if "[[fail]]" in prompt:
        return 400, {"error": {"code": "invalid_prompt", "message": "no"}}
    # Not the run's prompt-tag nonce: runs of two configs get the same replies.
    plain = re.sub(r"[0-9a-f]{16}", "", prompt)
    h = int(hashlib.sha256(plain.encode()).hexdigest(), 16)
    choice: dict[str, Any] = {"index": 0, "finish_reason": "stop"}
    if int(body.get("max_tokens") or 512) <= 16:
        score = h % 11
        text = str(score)
        if body.get("logprobs"):
            other = str((score + 3) % 11)
            step = {
                "token": text,
                "logprob": math.log(0.7),
                "top_logprobs": [
                    {"token": text, "logprob": math.log(0.7)},
                    {"token": other, "logprob": math.log(0.3)},
                ],
            }
            choice["logprobs"] = {"content": [step]}
    else:
        text = f"第{h % 97}条：按规定办理，材料齐全后{h % 20 + 1}个工作日内办结。"
    if "messages" in body:
        choice["message"] = {"role": "assistant", "content": text}
    else:
        choice["text"] = text
    usage = {"prompt_tokens": len(prompt), "completion_tokens": len(text)}
    return 200, {
        "id": f"cmpl-{h % 10**8}",
        "object": "chat.completion",
        "model": body.get("model"),
        "choices": [choice],
        "usage": usage,
    }


@dataclass
class BatchState:
    """What the server holds and counts; the test steers it."""

    outcome: str = "completed"
    """``completed``, ``expired``, ``failed`` or ``cancelled``."""
    hold: threading.Event = field(default_factory=threading.Event)
    """Clear: batches stay ``in_progress`` (``serve(held=True)``)."""
    answer: Answer = answer
    provider: Callable[[bytes], bytes] | None = None
    """Turns an input file into the output file (vLLM's ``run_batch``), in a
    thread; the batch is ``in_progress`` until it returns. None: :attr:`answer`."""
    fail_create: int = 0
    """``POST /batches`` answers 500 this many times first."""
    models: tuple[str, ...] = ("judge", "gen")
    calls: Counter[str] = field(default_factory=Counter)
    authorizations: set[str | None] = field(default_factory=set)
    files: dict[str, bytes] = field(default_factory=dict)
    batches: dict[str, dict[str, Any]] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def step(self, batch: dict[str, Any]) -> None:
        """Move a batch one status on (called on each status request)."""
        status = batch["status"]
        if status == "validating":
            batch["status"] = "in_progress"
        elif status == "in_progress" and self.provider is not None:
            self._provide(batch)
        elif status == "in_progress" and self.hold.is_set():
            self._finish(batch)
        total = batch["request_counts"]["total"]
        if batch["status"] == "in_progress":
            batch["request_counts"]["completed"] = total // 2

    def _provide(self, batch: dict[str, Any]) -> None:
        """Run :attr:`provider` over the input file; finish when it returns."""
        job = batch.setdefault("_job", {})
        if "thread" not in job:
            data = self.files[batch["input_file_id"]]
            provider = self.provider
            assert provider is not None

            def run() -> None:
                job["out"] = provider(data)

            job["thread"] = threading.Thread(target=run, daemon=True)
            job["thread"].start()
        elif not job["thread"].is_alive():
            out = job.get("out")
            if out is None:
                batch["status"] = "failed"
                return
            file_id = f"file-{len(self.files) + 1}"
            self.files[file_id] = out
            batch["output_file_id"] = file_id
            batch["request_counts"]["completed"] = len(out.splitlines())
            batch["status"] = "completed"

    def _finish(self, batch: dict[str, Any]) -> None:
        lines = [json.loads(x) for x in self.files[batch["input_file_id"]].splitlines()]
        if self.outcome == "failed":
            batch["status"] = "failed"
            batch["errors"] = {
                "data": [{"code": "invalid_json_line", "message": "line 1"}]
            }
            return
        if self.outcome == "cancelled":
            batch["status"] = "cancelled"
            return
        if self.outcome == "expired":
            lines = lines[: len(lines) // 2]
        out, err = [], []
        for i, line in enumerate(lines):
            if "[[drop]]" in prompt_of(line["body"]):
                continue  # a line the provider lost: in neither file
            code, body = self.answer(line["body"])
            row = {
                "id": f"batch_req_{i}",
                "custom_id": line["custom_id"],
                "response": {"status_code": code, "request_id": f"r{i}", "body": body},
                "error": None,
            }
            (out if code == 200 else err).append(json.dumps(row, ensure_ascii=False))
        counts = batch["request_counts"]
        counts.update(completed=len(out), failed=len(err))
        for name, rows in (("output_file_id", out), ("error_file_id", err)):
            if rows:
                file_id = f"file-{len(self.files) + 1}"
                self.files[file_id] = ("\n".join(rows) + "\n").encode()
                batch[name] = file_id
        batch["status"] = self.outcome


class _Handler(BaseHTTPRequestHandler):
    state: BatchState

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet."""

    def _send(self, code: int, payload: Any) -> None:
        data = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _count(self) -> str:
        path = self.path.split("?", 1)[0].removeprefix("/v1")
        name = re.sub(r"/(file|batch)[-_][^/]+", "/{id}", path)
        with self.state.lock:
            self.state.calls[f"{self.command} {name}"] += 1
            self.state.authorizations.add(self.headers.get("Authorization"))
        return path

    def do_GET(self) -> None:
        path = self._count()
        state = self.state
        with state.lock:
            if path == "/models":
                self._send(200, {"data": [{"id": m} for m in state.models]})
            elif path == "/batches":
                listed = [
                    {k: v for k, v in b.items() if k != "_job"}
                    for b in state.batches.values()
                ]
                self._send(200, {"data": listed})
            elif path.startswith("/batches/"):
                batch = state.batches.get(path.removeprefix("/batches/"))
                if batch is None:
                    self._send(404, {"error": {"message": "no such batch"}})
                    return
                state.step(batch)
                self._send(200, {k: v for k, v in batch.items() if k != "_job"})
            elif path.startswith("/files/") and path.endswith("/content"):
                data = state.files.get(path.split("/")[2])
                if data is None:
                    self._send(404, {"error": {"message": "no such file"}})
                else:
                    self._send(200, data)
            else:
                self._send(404, {"error": {"message": "not found"}})

    def do_POST(self) -> None:
        path = self._count()
        state = self.state
        raw = self.rfile.read(int(self.headers["Content-Length"]))
        if path in ("/chat/completions", "/completions"):
            code, body = state.answer(json.loads(raw))
            self._send(code, body)
            return
        with state.lock:
            if path == "/files":
                ctype = self.headers["Content-Type"]
                msg = email.message_from_bytes(
                    b"Content-Type: " + ctype.encode() + b"\r\n\r\n" + raw,
                    policy=email.policy.HTTP,
                )
                parts = {
                    p.get_param("name", header="content-disposition"): p.get_payload(
                        decode=True
                    )
                    for p in msg.iter_parts()  # type: ignore[attr-defined]
                }
                assert parts.get("purpose") == b"batch", parts.keys()
                file_id = f"file-{len(state.files) + 1}"
                state.files[file_id] = parts["file"]
                self._send(200, {"id": file_id, "object": "file", "purpose": "batch"})
            elif path == "/batches" and state.fail_create > 0:
                state.fail_create -= 1
                self._send(500, {"error": {"message": "try later"}})
            elif path == "/batches":
                req = json.loads(raw)
                data = state.files[req["input_file_id"]]
                batch_id = f"batch_{len(state.batches) + 1}"
                state.batches[batch_id] = {
                    "id": batch_id,
                    "object": "batch",
                    "endpoint": req["endpoint"],
                    "input_file_id": req["input_file_id"],
                    "completion_window": req["completion_window"],
                    "status": "validating",
                    "output_file_id": None,
                    "error_file_id": None,
                    "errors": None,
                    "request_counts": {
                        "total": len(data.splitlines()),
                        "completed": 0,
                        "failed": 0,
                    },
                }
                self._send(200, state.batches[batch_id])
            else:
                self._send(404, {"error": {"message": "not found"}})


@contextmanager
def serve(
    state: BatchState | None = None, *, held: bool = False
) -> Iterator[tuple[str, BatchState]]:
    """A running server: its ``/v1`` base URL and its state.

    ``held``: its batches stay ``in_progress`` until ``state.hold`` is set.
    """
    state = state or BatchState()
    if not held:
        state.hold.set()
    with serving(type("Handler", (_Handler,), {"state": state})) as url:
        yield url, state
