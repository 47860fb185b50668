"""The client's lifecycle: one ``httpx.AsyncClient`` per batch, bounded concurrency.

Each batch runs on its own event loop (:func:`cube_ray.http_reply.run_sync`)
with one client and at most ``max_concurrency`` requests in flight; the client
is closed when the batch ends, so nothing outlives a call and the engine is safe
in a Ray actor. Whatever one row's coroutine raises (but :class:`Fatal`) marks
that row ``error``; a fatal error or a cancellation cancels the whole batch.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any

from cube_ray.engines.openai_http._reply import Reply
from cube_ray.engines.openai_http._retry import Fatal
from cube_ray.http_reply import async_client

if TYPE_CHECKING:
    from cube_ray.engines.config import OpenAIHttpEngineConfig

__all__ = ["gather_rows"]

logger = logging.getLogger("cube_ray.engines.openai_http")

RowFn = Callable[[Any, str], Awaitable[Reply]]
"""One row's coroutine: ``(client, prompt) -> Reply``."""


async def gather_rows(
    config: OpenAIHttpEngineConfig,
    prompts: Sequence[str],
    row: RowFn,
    *,
    httpx: Any,
    key: str | None,
    transport: Any,
    redact: Callable[[str], str],
) -> list[Reply]:
    """Run ``row`` over every prompt on one client; replies in prompt order.

    Args:
        config: The engine config (URL, deadline, concurrency).
        prompts: One row each.
        row: The row's coroutine (request, retries, parse retries).
        httpx: The ``httpx`` module.
        key: The API key, placed only in the ``Authorization`` header.
        transport: An ``httpx`` transport for tests (None: the network).
        redact: Masks the key in (and cuts) an error's text.
    """
    headers = {"Content-Type": "application/json"}
    if key:
        headers["Authorization"] = f"Bearer {key}"
    limits = httpx.Limits(
        max_connections=config.max_concurrency,
        max_keepalive_connections=config.max_concurrency,
    )
    sem = asyncio.Semaphore(config.max_concurrency)
    async with async_client(
        httpx,
        timeout_s=config.timeout_s,
        base_url=config.base_url.rstrip("/") + "/",
        headers=headers,
        limits=limits,
        transport=transport,
    ) as client:

        async def one(prompt: str) -> Reply:
            async with sem:
                try:
                    return await row(client, prompt)
                except Fatal:
                    raise
                except Exception as exc:
                    # Whatever one reply does, it marks its own row only.
                    logger.warning("request failed: %s", type(exc).__name__)
                    return Reply(
                        None,
                        status="error",
                        detail=redact(f"{type(exc).__name__}: {exc}"),
                    )

        tasks = [asyncio.ensure_future(one(p)) for p in prompts]
        try:
            return list(await asyncio.gather(*tasks))
        except BaseException:
            for task in tasks:
                task.cancel()
            with contextlib.suppress(BaseException):
                await asyncio.gather(*tasks, return_exceptions=True)
            raise
