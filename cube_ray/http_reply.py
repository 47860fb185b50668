"""One HTTP request with a whole-request deadline and a byte limit on the reply.

Shared by the OpenAI-compatible engine, the HTTP system and the embedding
client of dense retrieval, so a hostile or broken server meets the same bounds
whichever of them calls it:

* **deadline**: ``httpx`` times each phase (connect, each read), so a server
  that sends one byte a second never trips its read timeout; the whole
  request, body included, runs under ``asyncio.wait_for`` instead, and ends
  in ``timeout_s`` at most (:class:`asyncio.TimeoutError`).
* **byte limit**: the body is read in chunks and dropped as soon as it passes
  ``max_bytes`` (or at once when ``Content-Length`` says it will), so a 50 MB
  reply is neither held in memory nor stored nor sent back in a retry. The
  limit counts decoded bytes, so a small gzip bomb is caught too.

Errors are the caller's to map to row statuses: ``httpx.HTTPError`` (transport,
timeout, ``DecodingError`` for a body that does not decompress) and
``asyncio.TimeoutError``.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, TypeVar

__all__ = ["MAX_REPLY_BYTES", "BoundedReply", "run_sync", "send_bounded"]

T = TypeVar("T")

MAX_REPLY_BYTES = 8 * 2**20
"""Largest reply body read (8 MiB); a longer one is ``response_too_large``."""


@dataclass(frozen=True, slots=True)
class BoundedReply:
    """A reply's status, headers and body (empty when it was too large)."""

    status_code: int
    headers: Any
    """The reply's ``httpx.Headers`` (case-insensitive)."""
    body: bytes
    size: int
    """Bytes read (a lower bound of the body's length when ``too_large``)."""
    too_large: bool = False

    @property
    def text(self) -> str:
        """The body as text (undecodable bytes replaced)."""
        return self.body.decode("utf-8", errors="replace")


def _declared_length(headers: Any) -> int | None:
    value = headers.get("content-length")
    if value is None or not value.strip().isdigit():
        return None
    return int(value)


async def send_bounded(
    client: Any,
    method: str,
    url: str,
    *,
    timeout_s: float,
    max_bytes: int = MAX_REPLY_BYTES,
    **kwargs: Any,
) -> BoundedReply:
    """Send one request on an ``httpx.AsyncClient`` and read a bounded reply.

    Args:
        client: The client (its own timeouts still apply per phase).
        method: HTTP method.
        url: URL or path relative to the client's ``base_url``.
        timeout_s: Deadline for the whole request, reply body included.
        max_bytes: Most body bytes read; beyond, the reply is ``too_large``.
        **kwargs: Passed to ``client.build_request`` (``json``, ``params``).

    Raises:
        asyncio.TimeoutError: The deadline passed.
        httpx.HTTPError: Transport errors, httpx timeouts, undecodable bodies.
    """

    async def go() -> BoundedReply:
        request = client.build_request(method, url, **kwargs)
        resp = await client.send(request, stream=True)
        try:
            declared = _declared_length(resp.headers)
            if declared is not None and declared > max_bytes:
                return BoundedReply(resp.status_code, resp.headers, b"", declared, True)
            chunks: list[bytes] = []
            size = 0
            async for chunk in resp.aiter_bytes():
                size += len(chunk)
                if size > max_bytes:
                    return BoundedReply(resp.status_code, resp.headers, b"", size, True)
                chunks.append(chunk)
            return BoundedReply(resp.status_code, resp.headers, b"".join(chunks), size)
        finally:
            await resp.aclose()

    return await asyncio.wait_for(go(), timeout=timeout_s)


def run_sync(factory: Callable[[], Awaitable[T]]) -> T:
    """Run ``factory()``'s coroutine to completion from synchronous code.

    On a fresh event loop; if this thread already runs one (an async actor,
    Jupyter), on a helper thread with its own loop instead of nesting loops.
    """

    async def main() -> T:
        return await factory()

    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(main())
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, main()).result()
