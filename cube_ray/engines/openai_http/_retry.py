"""One request with retries: the status policy, ``Retry-After`` and the backoff.

* 429, 5xx, timeouts, connection errors and malformed JSON bodies are retried
  up to ``max_retries`` times, waiting ``Retry-After`` when the server sends it,
  else an exponential backoff (``backoff_base_s * 2.0**attempt``, capped at
  ``backoff_max_s``) with jitter;
* 401, 403 and 404 are engine-fatal and raise :class:`Fatal`;
* another 4xx fails its row at once, and so does a reply over the byte limit
  (the same request would get the same reply).
"""

from __future__ import annotations

import asyncio
import email.utils
import logging
import random
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from cube_ray.engines.openai_http._reply import Reply, parse_body
from cube_ray.engines.openai_http._request import endpoint_path
from cube_ray.engines.openai_http._usage import UsageMeter
from cube_ray.http_reply import MAX_REPLY_BYTES, send_bounded

if TYPE_CHECKING:
    from cube_ray.engines.config import OpenAIHttpEngineConfig

__all__ = [
    "FATAL_STATUS",
    "KEY_REFUSED",
    "RETRY_AFTER_MAX_S",
    "Fatal",
    "Requester",
    "backoff_s",
    "retry_after_s",
]

logger = logging.getLogger("cube_ray.engines.openai_http")

FATAL_STATUS = frozenset({401, 403, 404})
"""HTTP statuses that no retry can fix and that every request would hit."""
KEY_REFUSED = frozenset({401, 403})
"""Of those, the API refusing the key (missing, wrong, revoked, not allowed)."""
RETRY_AFTER_MAX_S = 300.0
"""Longest ``Retry-After`` honoured; longer values are cut to this."""


class Fatal(Exception):
    """Raised inside the event loop; re-raised as EngineError outside it."""


def retry_after_s(value: str | None) -> float | None:
    """Seconds from a ``Retry-After`` header (delta-seconds or HTTP date).

    Examples:
        >>> retry_after_s("2.5"), retry_after_s("-1"), retry_after_s("9999")
        (2.5, 0.0, 300.0)
        >>> retry_after_s(None), retry_after_s("soon")
        (None, None)
    """
    if not value:
        return None
    try:
        seconds = float(value)
    except ValueError:
        try:
            when = email.utils.parsedate_to_datetime(value)
        except (TypeError, ValueError):
            return None
        seconds = when.timestamp() - time.time()
    return min(max(seconds, 0.0), RETRY_AFTER_MAX_S)


def backoff_s(attempt: int, *, base_s: float, max_s: float) -> float:
    """The wait before retry ``attempt + 1``: half fixed, half jitter.

    Examples:
        >>> 2.0 <= backoff_s(2, base_s=1.0, max_s=60.0) <= 4.0
        True
        >>> 5.0 <= backoff_s(10, base_s=1.0, max_s=10.0) <= 10.0
        True
    """
    backoff = min(max_s, base_s * 2.0**attempt)
    return backoff / 2 + random.uniform(0, backoff / 2)


class Requester:
    """POSTs one payload with retries; never raises but :class:`Fatal`.

    Args:
        config: The engine config (endpoint, retries, backoff, deadline).
        httpx: The ``httpx`` module (imported by the engine, lazily).
        meter: Counts requests, retries and reported tokens.
        redact: Masks the API key in (and cuts) a detail text.
    """

    def __init__(
        self,
        config: OpenAIHttpEngineConfig,
        *,
        httpx: Any,
        meter: UsageMeter,
        redact: Callable[[str], str],
    ) -> None:
        self.config = config
        self._httpx = httpx
        self._meter = meter
        self._redact = redact

    async def post(self, client: Any, payload: Any) -> Reply:
        """The reply to ``payload``, or the last failure once retries run out."""
        cfg = self.config
        last = Reply(None, status="http_error", detail="no attempt made")
        for attempt in range(cfg.max_retries + 1):
            self._meter.request(attempt=attempt)
            done, last, wait = await self._attempt(client, payload)
            if done or attempt == cfg.max_retries:
                return last
            if wait is None:
                wait = backoff_s(
                    attempt, base_s=cfg.backoff_base_s, max_s=cfg.backoff_max_s
                )
            logger.info(
                "request failed (%s); retry %d/%d in %.2fs",
                last.status,
                attempt + 1,
                cfg.max_retries,
                wait,
            )
            await asyncio.sleep(wait)
        return last

    async def _attempt(
        self, client: Any, payload: Any
    ) -> tuple[bool, Reply, float | None]:
        """One try: (final?, its reply, the wait a server asked for)."""
        httpx = self._httpx
        cfg = self.config
        path = endpoint_path(cfg)
        try:
            # httpx times each phase; the deadline bounds the whole request
            # (a reply trickling in byte by byte), the byte limit its size.
            resp = await send_bounded(
                client, "POST", path, timeout_s=cfg.timeout_s, json=payload
            )
        except (httpx.TimeoutException, asyncio.TimeoutError) as exc:
            return False, Reply(None, status="timeout", detail=type(exc).__name__), None
        except httpx.TransportError as exc:
            detail = self._redact(f"{type(exc).__name__}: {exc}")
            return False, Reply(None, status="connect_error", detail=detail), None
        except httpx.HTTPError as exc:  # DecodingError: a body not readable
            reply = Reply(None, status="malformed_response", detail=type(exc).__name__)
            return False, reply, None
        code = resp.status_code
        # An error body is kept as its length only: it may echo the key.
        said = f"HTTP {code} ({resp.size} bytes)"
        if code in KEY_REFUSED:
            msg = (
                f"the API rejected the key (HTTP {code}) at {cfg.base_url} "
                f"({path}, model {cfg.model!r}); check the API key in "
                f"{cfg.api_key_env or '(no api_key_env)'}, and that it may use "
                "that model"
            )
            raise Fatal(msg)
        if code in FATAL_STATUS:
            msg = (
                f"engine {cfg.model!r}: {said} from {cfg.base_url} "
                f"({path}); check base_url, model and the API key in "
                f"{cfg.api_key_env or '(no api_key_env)'}"
            )
            raise Fatal(msg)
        if code == 429 or code >= 500:
            wait = retry_after_s(resp.headers.get("retry-after"))
            return False, Reply(None, status="http_error", detail=said), wait
        if code >= 400:
            # A bad request (e.g. prompt too long) fails only this row.
            return True, Reply(None, status="http_error", detail=said), None
        if resp.too_large:
            # Not retried: the same request would get the same reply.
            detail = f"{said}: over {MAX_REPLY_BYTES} bytes, not read"
            return True, Reply(None, status="response_too_large", detail=detail), None
        parsed = parse_body(resp.body, api=cfg.api, redact=self._redact)
        if parsed.status != "ok":
            return False, parsed, None
        self._meter.tokens(
            prompt=parsed.prompt_tokens, completion=parsed.completion_tokens
        )
        return True, parsed, None
