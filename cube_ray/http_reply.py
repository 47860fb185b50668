"""cube_ray's one HTTP client: bounded requests, no redirects, http(s) only.

Every request cube_ray makes goes through here: the OpenAI-compatible engine,
the HTTP system, the embedding client of dense retrieval (on a client from
:func:`async_client`) and the start-up checks of the preflight
(:func:`fetch`). So a hostile or broken server meets the same rules whichever
of them calls it:

* **http and https only**: every configured base URL is checked when the
  config loads (:func:`check_http_url`), so ``file:///etc/passwd`` is refused
  before any read;
* **no redirects**: a ``3xx`` reply is returned as it is, never followed, so
  the ``Authorization`` header never reaches another host or port;
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
from urllib.parse import urlsplit

__all__ = [
    "MAX_REPLY_BYTES",
    "BoundedReply",
    "async_client",
    "check_http_url",
    "fetch",
    "http_url_problem",
    "run_sync",
    "send_bounded",
]

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


def http_url_problem(url: str) -> str | None:
    """Why ``url`` is not an http(s) URL cube_ray may call, or None.

    A URL that starts with a ``${NAME}`` placeholder is checked once the
    variable is read (:func:`check_http_url` again, where it is expanded).

    >>> http_url_problem("http://127.0.0.1:8000/v1") is None
    True
    >>> http_url_problem("${RAG_URL}/chat") is None
    True
    >>> http_url_problem("file:///etc/passwd#x")
    "its scheme is 'file'"
    >>> http_url_problem("https:///v1")
    'it names no host'
    >>> http_url_problem("//127.0.0.1:8000/v1")
    'it has no scheme'
    """
    if url.startswith("${"):
        return None
    try:
        parts = urlsplit(url.strip())
    except ValueError as exc:
        return f"it does not parse ({exc})"
    if not parts.scheme:
        return "it has no scheme"
    if parts.scheme.lower() not in ("http", "https"):
        return f"its scheme is {parts.scheme!r}"
    if not parts.hostname:
        return "it names no host"
    return None


def check_http_url(url: str, *, field: str) -> str:
    """``url``, or ValueError when it is not an http(s) URL with a host.

    Raised as a config error naming ``field`` (the URL itself is not echoed:
    it may hold a credential that another check refuses).
    """
    problem = http_url_problem(url)
    if problem is not None:
        msg = (
            f"{field} must be an http:// or https:// URL with a host, but "
            f"{problem}; write it as http://HOST:PORT/PATH (cube_ray calls no "
            "other kind of URL)"
        )
        raise ValueError(msg)
    return url


def async_client(httpx: Any, *, timeout_s: float, **kwargs: Any) -> Any:
    """An ``httpx.AsyncClient`` with cube_ray's rules: redirects not followed.

    Args:
        httpx: The ``httpx`` module (imported lazily by the caller).
        timeout_s: Each phase's timeout (connect, each read); the whole
            request's deadline is :func:`send_bounded`'s.
        **kwargs: ``base_url``, ``headers``, ``limits``, ``transport``.
    """
    return httpx.AsyncClient(
        timeout=httpx.Timeout(timeout_s), follow_redirects=False, **kwargs
    )


def fetch(
    method: str,
    url: str,
    *,
    timeout_s: float,
    headers: dict[str, str] | None = None,
    max_bytes: int = MAX_REPLY_BYTES,
    **kwargs: Any,
) -> BoundedReply:
    """One request from synchronous code, under every rule of this module.

    For the start-up checks: a fresh client (:func:`async_client`), the whole
    request under ``timeout_s`` and the body under ``max_bytes``.

    Raises:
        ValueError: ``url`` is not http(s) (nothing is sent).
        asyncio.TimeoutError: The deadline passed.
        httpx.HTTPError: Transport errors, httpx timeouts, undecodable bodies.
    """
    # optional: httpx (the http extra), only once a client is built
    import httpx

    check_http_url(url, field="url")

    async def go() -> BoundedReply:
        async with async_client(httpx, timeout_s=timeout_s, headers=headers) as c:
            return await send_bounded(
                c, method, url, timeout_s=timeout_s, max_bytes=max_bytes, **kwargs
            )

    return run_sync(go)


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
