"""Batch API files: the request lines we write, the output lines we read back.

Pure functions over bytes; nothing is sent here (``_batch`` sends). The format
is OpenAI's Batch API, which vLLM's ``python -m
vllm.entrypoints.openai.run_batch`` reads and writes too:

* a request line: ``{"custom_id", "method": "POST", "url": "/v1/chat/completions",
  "body": <exactly the body the engine sends directly>}``;
* an output (or error) line: ``{"custom_id", "response": {"status_code",
  "body"}, "error"}``. A 200 body is read by the same
  :func:`~cube_ray.engines.openai_http._reply.parse_body` as a direct reply,
  so scores, logprobs and token counts come out the same.

A line that failed becomes the row status ``batch_error``; rows that have no
line get the status of their batch (:data:`BATCH_STATUSES`).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any, Literal

from cube_ray.engines.openai_http._reply import Reply, parse_body

__all__ = [
    "BATCH_STATUSES",
    "STATUS_BATCH_ERROR",
    "STATUS_BATCH_MISSING",
    "missing_status",
    "read_lines",
    "request_line",
    "split_lines",
]

STATUS_BATCH_ERROR = "batch_error"
"""A request whose line came back in the error file, or with a non-200 status."""
STATUS_BATCH_MISSING = "batch_missing"
"""A request of a completed batch that has no line in either file."""
BATCH_STATUSES: dict[str, str] = {
    "completed": STATUS_BATCH_MISSING,
    "expired": "batch_expired",
    "failed": "batch_failed",
    "cancelled": "batch_cancelled",
}
"""A finished batch's status -> the status of its requests that have no line.

An expired batch keeps the lines it finished (OpenAI returns them); the rest
are ``batch_expired``. ``--retry-failed`` sends every such row again."""


def missing_status(batch_status: str) -> str:
    """The row status of a request without a line in a finished batch.

    >>> missing_status("expired"), missing_status("completed")
    ('batch_expired', 'batch_missing')
    >>> missing_status("weird")
    'batch_failed'
    """
    return BATCH_STATUSES.get(batch_status, "batch_failed")


def request_line(custom_id: str, url: str, body: dict[str, Any]) -> bytes:
    r"""One JSONL request line (its trailing newline included).

    >>> request_line("q1/rag", "/v1/chat/completions", {"model": "m"})
    b'{"custom_id":"q1/rag","method":"POST","url":"/v1/chat/completions","body":{"model":"m"}}\n'
    """
    line = {"custom_id": custom_id, "method": "POST", "url": url, "body": body}
    text = json.dumps(line, ensure_ascii=False, separators=(",", ":"))
    return text.encode() + b"\n"


def split_lines(
    lines: Sequence[bytes], *, max_requests: int, max_bytes: int
) -> list[range]:
    r"""Consecutive runs of ``lines`` that fit one input file each.

    Raises ValueError naming the request when one line alone is too large.

    >>> split_lines([b"ab\n"] * 5, max_requests=2, max_bytes=100)
    [range(0, 2), range(2, 4), range(4, 5)]
    >>> split_lines([b"ab\n"] * 5, max_requests=10, max_bytes=7)
    [range(0, 2), range(2, 4), range(4, 5)]
    >>> split_lines([], max_requests=1, max_bytes=1)
    []
    """
    out: list[range] = []
    start, size = 0, 0
    for i, line in enumerate(lines):
        if len(line) > max_bytes:
            msg = (
                f"request {i} is {len(line)} bytes, more than one batch input file "
                f"may hold ({max_bytes} bytes, batch_api.max_file_mb)"
            )
            raise ValueError(msg)
        if i > start and (i - start >= max_requests or size + len(line) > max_bytes):
            out.append(range(start, i))
            start, size = i, 0
        size += len(line)
    if len(lines) > start:
        out.append(range(start, len(lines)))
    return out


def _error_detail(line: dict[str, Any], code: Any) -> str:
    """What a failed line says: its status code and error code, not its text.

    An error's message may quote the request (or echo a key): like a direct
    error reply, only its length is kept.
    """
    error = line.get("error")
    if not isinstance(error, dict):
        body = (line.get("response") or {}).get("body")
        error = body.get("error") if isinstance(body, dict) else None
    parts = []
    if code is not None:
        parts.append(f"HTTP {code}")
    if isinstance(error, dict):
        if isinstance(error.get("code"), str):
            parts.append(f"code {error['code'][:80]}")
        message = error.get("message")
        if isinstance(message, str):
            parts.append(f"message of {len(message)} characters")
    return "batch line failed: " + (", ".join(parts) or "no error given")


def read_lines(
    data: bytes,
    *,
    api: Literal["chat", "completions"],
    redact: Callable[[str], str],
) -> dict[str, Reply]:
    r"""custom_id -> reply, from an output or error file's JSONL bytes.

    A line with ``status_code`` 200 is read by ``parse_body`` (the direct
    path's reader); any other line is ``batch_error``. Lines that are not
    JSON objects with a string ``custom_id`` are skipped (their rows stay
    missing, so they get their batch's status).

    >>> out = (b'{"custom_id": "a", "response": {"status_code": 200, "body": '
    ...        b'{"choices": [{"message": {"content": "7"}}], "usage": '
    ...        b'{"prompt_tokens": 5, "completion_tokens": 1}}}, "error": null}\n'
    ...        b'{"custom_id": "b", "response": {"status_code": 400, "body": '
    ...        b'{"error": {"code": "bad", "message": "xyz"}}}, "error": null}\n'
    ...        b'not json\n')
    >>> got = read_lines(out, api="chat", redact=str)
    >>> got["a"].status, got["a"].text, got["a"].prompt_tokens
    ('ok', '7', 5)
    >>> got["b"].status, got["b"].detail
    ('batch_error', 'batch line failed: HTTP 400, code bad, message of 3 characters')
    """
    out: dict[str, Reply] = {}
    for raw in data.splitlines():
        if not raw.strip():
            continue
        try:
            line = json.loads(raw)
        except (ValueError, RecursionError):
            continue
        if not isinstance(line, dict) or not isinstance(line.get("custom_id"), str):
            continue
        response = line.get("response")
        response = response if isinstance(response, dict) else {}
        code = response.get("status_code")
        body = response.get("body")
        if code == 200 and line.get("error") is None and body is not None:
            payload = body if isinstance(body, bytes | str) else json.dumps(body)
            reply = parse_body(
                payload.encode() if isinstance(payload, str) else payload,
                api=api,
                redact=redact,
            )
        else:
            reply = Reply(
                None, status=STATUS_BATCH_ERROR, detail=_error_detail(line, code)
            )
        out[line["custom_id"]] = reply
    return out
