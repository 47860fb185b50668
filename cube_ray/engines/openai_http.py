"""An OpenAI-compatible HTTP engine (API models, ``vllm serve``, Ollama).

The engine is synchronous and batch-oriented like every engine; inside, each
call runs its own asyncio event loop with one ``httpx.AsyncClient`` and at most
``max_concurrency`` requests in flight, so it is safe in a Ray actor (and in a
thread whose loop is already running: the batch then runs on a helper thread).

Failure handling, per request:

* 429, 5xx, timeouts, connection errors and malformed JSON bodies are retried
  up to ``max_retries`` times, waiting ``Retry-After`` when the server sends it,
  else an exponential backoff (``backoff_base_s * 2**attempt``, capped at
  ``backoff_max_s``) with jitter;
* 401, 403 and 404 are engine-fatal (wrong key, URL or model: every request
  would fail) and raise :class:`~cube_ray.errors.EngineError`;
* what still fails becomes a row status (``http_error``, ``timeout``,
  ``connect_error``, ``malformed_response``) with a short raw text;
* an unconstrained score that is not exactly one integer 0..10 is asked again
  with a reminder, ``parse_retries`` times, then stored as ``parse_error`` with
  the raw text (never 0).

The API key is read from the environment variable named by ``api_key_env`` and
only ever placed in the ``Authorization`` header: it is redacted from every raw
text, status and exception message this module produces.
"""

from __future__ import annotations

import asyncio
import contextlib
import email.utils
import json
import logging
import math
import random
import threading
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

from cube_ray.engines._scoring import expected_value, parse_score, score_distribution
from cube_ray.engines.base import (
    SCORE_CHOICES,
    Generation,
    SamplingParams,
    ScoreMode,
    ScoreResult,
)
from cube_ray.env import secret
from cube_ray.errors import EngineError, MissingDependencyError

if TYPE_CHECKING:
    from cube_ray.engines.config import OpenAIHttpEngineConfig

__all__ = ["OpenAIHttpEngine", "Usage"]

logger = logging.getLogger(__name__)

T = TypeVar("T")

FATAL_STATUS = frozenset({401, 403, 404})
"""HTTP statuses that no retry can fix and that every request would hit."""
RETRY_AFTER_MAX_S = 300.0
"""Longest ``Retry-After`` honoured; longer values are cut to this."""
REMINDER = "Reply with only one integer from 0 to 10, and nothing else."
"""The follow-up sent when an unconstrained score does not parse."""
RAW_MAX_CHARS = 500
"""Raw texts of failures are cut to this length."""


@dataclass
class Usage:
    """Token and request counters of one engine (all calls so far)."""

    requests: int = 0
    """HTTP requests sent, retries included."""
    retries: int = 0
    """Requests that were retries."""
    prompt_tokens: int = 0
    """Sum of ``usage.prompt_tokens`` reported by the server."""
    completion_tokens: int = 0
    """Sum of ``usage.completion_tokens`` reported by the server."""
    statuses: dict[str, int] = field(default_factory=dict)
    """How many rows ended with each status."""


@dataclass
class _Reply:
    """One completed request: text or a failure status, plus what was reported."""

    text: str | None
    status: str = "ok"
    detail: str | None = None
    top_logprobs: list[list[tuple[str, float]]] | None = None
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    latency_s: float = 0.0


class _Fatal(Exception):
    """Raised inside the event loop; re-raised as EngineError outside it."""


def _retry_after_s(value: str | None) -> float | None:
    """Seconds from a ``Retry-After`` header (delta-seconds or HTTP date)."""
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


def _run_sync(factory: Callable[[], Awaitable[T]]) -> T:
    """Run a coroutine to completion on a fresh event loop.

    If this thread already runs a loop (Jupyter, an async actor), the batch runs
    on a helper thread with its own loop instead of nesting loops.
    """
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(_as_coro(factory))
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            box["value"] = asyncio.run(_as_coro(factory))
        except BaseException as exc:
            box["error"] = exc

    thread = threading.Thread(target=target, name="cube-ray-http", daemon=True)
    thread.start()
    thread.join()
    if "error" in box:
        raise box["error"]
    return box["value"]  # type: ignore[no-any-return]


async def _as_coro(factory: Callable[[], Awaitable[T]]) -> T:
    return await factory()


class OpenAIHttpEngine:
    """Engine over an OpenAI-compatible endpoint; see the module docstring.

    Args:
        config: The engine config.
        transport: An ``httpx`` transport for tests (default: real network).
    """

    def __init__(
        self, config: OpenAIHttpEngineConfig, *, transport: Any = None
    ) -> None:
        try:
            import httpx
        except ImportError as exc:  # pragma: no cover - depends on the install
            raise MissingDependencyError(
                "httpx", extra="http", purpose="The openai_http engine backend"
            ) from exc
        self._httpx = httpx
        self.config = config
        self.name = config.model
        self._transport = transport
        self._key: str | None = None
        if config.api_key_env:
            self._key = secret(config.api_key_env)
            if self._key is None:
                msg = (
                    f"engine {config.model!r}: the environment variable "
                    f"{config.api_key_env!r} (api_key_env) is not set; export the "
                    "API key in it before the run"
                )
                raise EngineError(msg)
        self.usage = Usage()
        self._usage_lock = threading.Lock()
        self._closed = False

    @classmethod
    def from_config(cls, config: OpenAIHttpEngineConfig) -> OpenAIHttpEngine:
        """Build the engine (no request is sent)."""
        return cls(config)

    # -- public API ---------------------------------------------------------

    def generate(
        self, prompts: Sequence[str], *, sampling: SamplingParams
    ) -> list[Generation]:
        """One completion per prompt; failures become row statuses."""
        body: dict[str, Any] = {
            "max_tokens": sampling.max_tokens,
            "temperature": sampling.temperature,
            "top_p": sampling.top_p,
        }
        if sampling.seed is not None:
            body["seed"] = sampling.seed
        if sampling.stop:
            body["stop"] = list(sampling.stop)
        replies = self._batch(prompts, body, score=False)
        out = []
        for reply in replies:
            text = reply.text if reply.status == "ok" else None
            out.append(
                Generation(
                    text,
                    status=reply.status,
                    prompt_tokens=reply.prompt_tokens,
                    completion_tokens=reply.completion_tokens,
                    latency_s=reply.latency_s,
                )
            )
        self._count([g.status for g in out])
        return out

    def score(self, prompts: Sequence[str], *, mode: ScoreMode) -> list[ScoreResult]:
        """One score per prompt, constrained when ``guided_choice`` is on."""
        cfg = self.config
        if mode == "expected" and not cfg.logprobs:
            msg = (
                f"engine {self.name!r}: score_mode 'expected' needs logprobs; set "
                "`logprobs: true` in the engine config (the server must support it)"
            )
            raise EngineError(msg)
        body: dict[str, Any] = {
            "max_tokens": cfg.score_max_tokens,
            "temperature": 0.0,
        }
        if cfg.guided_choice:
            choices = list(SCORE_CHOICES)
            # Old vLLM servers read guided_choice, new ones structured_outputs;
            # each ignores the other key.
            body["guided_choice"] = choices
            body["structured_outputs"] = {"choice": choices}
        if mode == "expected":
            if cfg.api == "chat":
                body["logprobs"] = True
                body["top_logprobs"] = cfg.top_logprobs
            else:
                body["logprobs"] = cfg.top_logprobs
        replies = self._batch(prompts, body, score=True)
        out = [self._to_score(reply, mode) for reply in replies]
        self._count([r.status for r in out])
        return out

    def close(self) -> None:
        """Nothing persistent to release (clients live per call); idempotent."""
        self._closed = True

    # -- internals ----------------------------------------------------------

    def _to_score(self, reply: _Reply, mode: ScoreMode) -> ScoreResult:
        common: dict[str, Any] = {
            "raw": reply.text if reply.status == "ok" else reply.detail,
            "prompt_tokens": reply.prompt_tokens,
            "completion_tokens": reply.completion_tokens,
            "latency_s": reply.latency_s,
        }
        if reply.status != "ok":
            return ScoreResult(None, status=reply.status, **common)
        value = parse_score(reply.text)
        if value is None:
            # Also in expected mode: if the text is not a score, the first
            # token's logprobs are not a distribution over scores.
            return ScoreResult(None, status="parse_error", **common)
        if mode == "expected" and reply.top_logprobs:
            first = reply.top_logprobs[0]
            split = None
            text = (reply.text or "").strip()
            if text.startswith("1") and len(reply.top_logprobs) >= 2:
                second = reply.top_logprobs[1]
                total = sum(_exp(lp) for _, lp in second)
                zero = sum(_exp(lp) for t, lp in second if t.strip() == "0")
                split = zero / total if total > 0 else None
            ten_single = any(t.strip() == "10" for t, _ in first)
            dist = score_distribution(
                first, ten_is_one_token=ten_single, one_then_zero=split
            )
            if dist is not None:
                return ScoreResult(round(expected_value(dist), 6), **common)
        if mode == "expected":
            # The text is a valid score but no score token had logprobs.
            return ScoreResult(None, status="no_logprobs", **common)
        return ScoreResult(value, **common)

    def _count(self, statuses: Sequence[str]) -> None:
        with self._usage_lock:
            for status in statuses:
                self.usage.statuses[status] = self.usage.statuses.get(status, 0) + 1

    def _redact(self, text: str) -> str:
        if self._key and self._key in text:
            text = text.replace(self._key, "***")
        return text[:RAW_MAX_CHARS]

    def _batch(
        self, prompts: Sequence[str], body: dict[str, Any], *, score: bool
    ) -> list[_Reply]:
        if self._closed:
            msg = f"engine {self.name!r} is closed"
            raise EngineError(msg)
        if not prompts:
            return []
        try:
            return _run_sync(lambda: self._gather(prompts, body, score=score))
        except _Fatal as exc:
            raise EngineError(self._redact(str(exc))) from None

    async def _gather(
        self, prompts: Sequence[str], body: dict[str, Any], *, score: bool
    ) -> list[_Reply]:
        httpx = self._httpx
        cfg = self.config
        headers = {"Content-Type": "application/json"}
        if self._key:
            headers["Authorization"] = f"Bearer {self._key}"
        limits = httpx.Limits(
            max_connections=cfg.max_concurrency,
            max_keepalive_connections=cfg.max_concurrency,
        )
        sem = asyncio.Semaphore(cfg.max_concurrency)
        async with httpx.AsyncClient(
            base_url=cfg.base_url.rstrip("/") + "/",
            headers=headers,
            timeout=httpx.Timeout(cfg.timeout_s),
            limits=limits,
            transport=self._transport,
        ) as client:

            async def one(prompt: str) -> _Reply:
                async with sem:
                    return await self._one(client, prompt, body, score=score)

            tasks = [asyncio.ensure_future(one(p)) for p in prompts]
            try:
                return list(await asyncio.gather(*tasks))
            except BaseException:
                for task in tasks:
                    task.cancel()
                with contextlib.suppress(BaseException):
                    await asyncio.gather(*tasks, return_exceptions=True)
                raise

    def _payload(self, prompt: str, body: dict[str, Any], previous: str | None) -> Any:
        cfg = self.config
        # extra_body first: the engine's own fields (SCORING_KEYS) always win.
        payload: dict[str, Any] = {**cfg.extra_body, "model": cfg.model, **body}
        if cfg.api == "chat":
            messages = [{"role": "user", "content": prompt}]
            if previous is not None:
                messages += [
                    {"role": "assistant", "content": previous},
                    {"role": "user", "content": REMINDER},
                ]
            payload["messages"] = messages
        else:
            if previous is not None:
                prompt = f"{prompt} {previous}\n{REMINDER}\n"
            payload["prompt"] = prompt
        return payload

    async def _one(
        self, client: Any, prompt: str, body: dict[str, Any], *, score: bool
    ) -> _Reply:
        """One row: the request with retries, then (scores) the parse retries."""
        start = time.perf_counter()
        reply = await self._request(client, self._payload(prompt, body, None))
        attempts = 0
        while (
            score
            and reply.status == "ok"
            and parse_score(reply.text) is None
            and attempts < self.config.parse_retries
        ):
            attempts += 1
            logger.info("score did not parse; asking again (%d)", attempts)
            again = await self._request(
                client, self._payload(prompt, body, reply.text or "")
            )
            if again.status != "ok":
                break
            again.prompt_tokens = _add(reply.prompt_tokens, again.prompt_tokens)
            again.completion_tokens = _add(
                reply.completion_tokens, again.completion_tokens
            )
            reply = again
        reply.latency_s = time.perf_counter() - start
        return reply

    async def _request(self, client: Any, payload: Any) -> _Reply:
        """POST with retries; never raises except for engine-fatal statuses."""
        httpx = self._httpx
        cfg = self.config
        path = "chat/completions" if cfg.api == "chat" else "completions"
        last = _Reply(None, status="http_error", detail="no attempt made")
        for attempt in range(cfg.max_retries + 1):
            wait: float | None = None
            with self._usage_lock:
                self.usage.requests += 1
                self.usage.retries += attempt > 0
            try:
                # httpx times each phase; wait_for bounds the whole request too.
                resp = await asyncio.wait_for(
                    client.post(path, json=payload), timeout=cfg.timeout_s
                )
            except (httpx.TimeoutException, asyncio.TimeoutError) as exc:
                last = _Reply(None, status="timeout", detail=type(exc).__name__)
            except httpx.TransportError as exc:
                last = _Reply(
                    None,
                    status="connect_error",
                    detail=self._redact(f"{type(exc).__name__}: {exc}"),
                )
            else:
                code = resp.status_code
                if code in FATAL_STATUS:
                    msg = (
                        f"engine {self.name!r}: HTTP {code} from {cfg.base_url} "
                        f"({path}); check base_url, model and the API key in "
                        f"{cfg.api_key_env or '(no api_key_env)'}: "
                        f"{resp.text[:200]}"
                    )
                    raise _Fatal(msg)
                if code == 429 or code >= 500:
                    wait = _retry_after_s(resp.headers.get("retry-after"))
                    last = _Reply(
                        None,
                        status="http_error",
                        detail=self._redact(f"HTTP {code}: {resp.text}"),
                    )
                elif code >= 400:
                    # A bad request (e.g. prompt too long) fails only this row.
                    return _Reply(
                        None,
                        status="http_error",
                        detail=self._redact(f"HTTP {code}: {resp.text}"),
                    )
                else:
                    parsed = self._parse(resp.text)
                    if parsed.status == "ok":
                        return parsed
                    last = parsed
            if attempt == cfg.max_retries:
                break
            if wait is None:
                backoff = min(cfg.backoff_max_s, cfg.backoff_base_s * 2**attempt)
                wait = backoff / 2 + random.uniform(0, backoff / 2)
            logger.info(
                "request failed (%s); retry %d/%d in %.2fs",
                last.status,
                attempt + 1,
                cfg.max_retries,
                wait,
            )
            await asyncio.sleep(wait)
        return last

    def _parse(self, text: str) -> _Reply:
        """Text, logprobs and usage from a 2xx body, or ``malformed_response``."""
        try:
            data = json.loads(text)
            choice = data["choices"][0]
            if self.config.api == "chat":
                content = choice["message"]["content"]
            else:
                content = choice["text"]
            if not isinstance(content, str):
                raise TypeError("content is not a string")
        except (ValueError, KeyError, IndexError, TypeError) as exc:
            return _Reply(
                None,
                status="malformed_response",
                detail=self._redact(f"{type(exc).__name__}: {text}"),
            )
        usage = data.get("usage") or {}
        reply = _Reply(
            content,
            top_logprobs=self._logprobs(choice.get("logprobs")),
            prompt_tokens=_int(usage.get("prompt_tokens")),
            completion_tokens=_int(usage.get("completion_tokens")),
        )
        with self._usage_lock:
            self.usage.prompt_tokens += reply.prompt_tokens or 0
            self.usage.completion_tokens += reply.completion_tokens or 0
        return reply

    def _logprobs(self, block: Any) -> list[list[tuple[str, float]]] | None:
        """Per generated position, the ``(token, logprob)`` alternatives."""
        if not isinstance(block, dict):
            return None
        steps: list[list[tuple[str, float]]] = []
        try:
            if isinstance(block.get("content"), list):  # chat API
                for pos in block["content"]:
                    alts = [
                        (str(a["token"]), float(a["logprob"]))
                        for a in pos.get("top_logprobs") or []
                    ]
                    alts.append((str(pos["token"]), float(pos["logprob"])))
                    steps.append(alts)
            elif isinstance(block.get("top_logprobs"), list):  # completions API
                for pos in block["top_logprobs"]:
                    steps.append([(str(t), float(lp)) for t, lp in (pos or {}).items()])
        except (KeyError, TypeError, ValueError):
            return None
        return [_dedupe(s) for s in steps] or None


def _dedupe(alts: list[tuple[str, float]]) -> list[tuple[str, float]]:
    # The chosen token is usually also listed among the alternatives.
    seen: dict[str, float] = {}
    for token, lp in alts:
        seen.setdefault(token, lp)
    return list(seen.items())


def _exp(logprob: float) -> float:
    return math.exp(logprob) if logprob > -math.inf else 0.0


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _add(a: int | None, b: int | None) -> int | None:
    if a is None and b is None:
        return None
    return (a or 0) + (b or 0)
