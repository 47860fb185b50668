"""An OpenAI-compatible HTTP engine (API models, ``vllm serve``, Ollama).

Size: about 680 lines and one class of about 420, on purpose: the class is one
request/retry state machine (status handling, backoff, parse retries, the
expected-score follow-ups) whose branches share the client, the semaphore and
the counters; the pure parts (score reading, secrets) live in ``_scoring`` and
``cube_ray.security``.

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
* each request has a whole-request deadline (``timeout_s``, body included) and
  a byte limit on its reply (:mod:`cube_ray.http_reply`); a longer reply is
  ``response_too_large`` and is neither kept nor sent back;
* what still fails becomes a row status (``http_error``, ``timeout``,
  ``connect_error``, ``malformed_response``, ``response_too_large``, ``error``)
  with a short raw text: an error status's body is kept as its length only (it
  may echo the key); a 2xx body that is not a reply (invalid or deeply nested
  JSON, wrong shapes, undecodable bytes) is ``malformed_response`` for its row
  alone; no reply raises out of a batch;
* an unconstrained score that is not exactly one integer 0..10 is asked again
  with a reminder, ``parse_retries`` times, then stored as ``parse_error`` with
  the raw text (never 0);
* ``expected`` scores follow :func:`~cube_ray.engines._scoring.read_expected`
  (``low_score_mass`` below ``min_score_mass``); the "1"/"10" split is read
  from the next step or one follow-up request where the endpoint allows it,
  else the row is ``argmax_fallback`` (see :meth:`OpenAIHttpEngine._expected`).

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
import random
import threading
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

from cube_ray.credentials import redact
from cube_ray.engines._scoring import (
    parse_score,
    read_expected,
    score_mass,
    split_matters,
    valid_logprob,
    zero_share,
)
from cube_ray.engines.base import (
    SCORE_CHOICES,
    Generation,
    SamplingParams,
    ScoreMode,
    ScoreResult,
)
from cube_ray.env import secret
from cube_ray.errors import EngineError, MissingDependencyError
from cube_ray.http_reply import MAX_REPLY_BYTES, send_bounded

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
PREVIOUS_MAX_CHARS = 2000
"""Most of an unparsable reply quoted back in a parse retry."""


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
    """Per generated position, the ``(token, logprob)`` alternatives."""
    tokens: list[str] | None = None
    """Per generated position, the token the model chose."""
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    latency_s: float = 0.0


@dataclass
class _SplitRead:
    """What one valid score reply says about its score position and "1"/"10"."""

    first: list[tuple[str, float]]
    """Alternatives at the score position (the first non-blank token)."""
    chosen: str
    """The token chosen there, stripped."""
    one_token: str
    """The most likely alternative there that is "1" (with its spacing), or ""."""
    ten_is_one_token: bool | None
    """Known or learnt from this reply; None if unknown."""
    one_then_zero: float | None = None
    """P("0" | "1"), where read."""

    @classmethod
    def of(cls, reply: _Reply, *, ten_is_one_token: bool | None) -> _SplitRead | None:
        """None unless the reply is ``ok`` and its text a valid score."""
        if reply.status != "ok" or parse_score(reply.text) is None:
            return None
        steps = reply.top_logprobs or []
        tokens = reply.tokens or []
        # Leading whitespace tokens ("\n7") do not hold the score.
        pos = next((i for i, t in enumerate(tokens) if t.strip()), 0)
        first = steps[pos] if pos < len(steps) else []
        chosen = tokens[pos].strip() if pos < len(tokens) else ""
        ones = [(lp, t) for t, lp in first if t.strip() == "1"]
        read = cls(
            first,
            chosen,
            max(ones)[1] if ones else "",
            ten_is_one_token,
        )
        if read.ten_is_one_token is None:
            if chosen == "10":
                read.ten_is_one_token = True
            elif chosen == "1" and (reply.text or "").strip() == "10":
                read.ten_is_one_token = False
        if chosen == "1" and pos + 1 < len(steps):
            read.one_then_zero = zero_share(steps[pos + 1])
        return read

    def needs_split(self) -> bool:
        """Whether P("0" | "1") is unread and can move the score noticeably."""
        return self.one_then_zero is None and split_matters(
            score_mass(self.first), ten_is_one_token=self.ten_is_one_token
        )

    def add_follow_up(self, again: _Reply, *, constrained: bool) -> None:
        """Read the split from a follow-up reply (see ``_expected``)."""
        if again.status != "ok" or not again.top_logprobs:
            return
        if not constrained:  # the prompt already ends with "1"
            self.one_then_zero = zero_share(again.top_logprobs[0])
            return
        chosen = (again.tokens or [""])[0].strip()
        if chosen == "10":
            self.ten_is_one_token = True
        elif chosen == "1" and len(again.top_logprobs) >= 2:
            self.one_then_zero = zero_share(again.top_logprobs[1])


def _choices(choices: Sequence[str]) -> dict[str, Any]:
    """Body keys that constrain the output to ``choices`` on vLLM servers."""
    # Old vLLM servers read guided_choice, new ones structured_outputs; each
    # ignores the other key.
    return {
        "guided_choice": list(choices),
        "structured_outputs": {"choice": list(choices)},
    }


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
            text = self._scrub(reply.text) if reply.status == "ok" else None
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
            body.update(_choices(SCORE_CHOICES))
        if mode == "expected":
            body.update(self._logprobs_body())
        replies = self._batch(prompts, body, score=True)
        if mode == "expected":
            out = self._expected(prompts, body, replies)
        else:
            out = [self._argmax(reply) for reply in replies]
        self._count([r.status for r in out])
        return out

    def close(self) -> None:
        """Nothing persistent to release (clients live per call); idempotent."""
        self._closed = True

    # -- internals ----------------------------------------------------------

    def _logprobs_body(self) -> dict[str, Any]:
        cfg = self.config
        if cfg.api == "chat":
            return {"logprobs": True, "top_logprobs": cfg.top_logprobs}
        return {"logprobs": cfg.top_logprobs}

    def _common(self, reply: _Reply) -> dict[str, Any]:
        return {
            "raw": self._scrub(reply.text) if reply.status == "ok" else reply.detail,
            "prompt_tokens": reply.prompt_tokens,
            "completion_tokens": reply.completion_tokens,
            "latency_s": reply.latency_s,
        }

    def _argmax(self, reply: _Reply) -> ScoreResult:
        common = self._common(reply)
        if reply.status != "ok":
            return ScoreResult(None, status=reply.status, **common)
        value = parse_score(reply.text)
        status = "ok" if value is not None else "parse_error"
        return ScoreResult(value, status=status, **common)

    def _expected(
        self, prompts: Sequence[str], body: dict[str, Any], replies: list[_Reply]
    ) -> list[ScoreResult]:
        """Expected scores; reads the "1"/"10" split where it matters.

        The split P("0" | "1") comes from the reply's next step when the model
        wrote "1" first; else, where it could move the score by more than
        ``SPLIT_TOLERANCE``, from one follow-up request: constrained to ("1",
        "10") with ``guided_choice`` (which forces "1" first, as the vLLM
        engine does), or the prompt plus "1" on the completions API. A chat
        endpoint without a constraint cannot be made to continue after "1", so
        there the row falls back to argmax (``argmax_fallback``).
        """
        cfg = self.config
        reads = [
            _SplitRead.of(r, ten_is_one_token=cfg.ten_is_one_token) for r in replies
        ]
        follow = [
            (j, read)
            for j, read in enumerate(reads)
            if read is not None and self._can_follow(read) and read.needs_split()
        ]
        if follow:
            follow_body: dict[str, Any]
            if cfg.guided_choice:
                follow_body = {**body, **_choices(("1", "10"))}
                follow_prompts = [prompts[j] for j, _ in follow]
            else:  # completions: continue the prompt after the token "1"
                follow_body = {"max_tokens": 1, "temperature": 0.0}
                follow_body.update(self._logprobs_body())
                follow_prompts = [prompts[j] + read.one_token for j, read in follow]
            extra = self._batch(follow_prompts, follow_body, score=False)
            for (j, pending), again in zip(follow, extra, strict=True):
                pending.add_follow_up(again, constrained=cfg.guided_choice)
                first = replies[j]
                first.prompt_tokens = _add(first.prompt_tokens, again.prompt_tokens)
                first.completion_tokens = _add(
                    first.completion_tokens, again.completion_tokens
                )
        out = []
        for reply, read in zip(replies, reads, strict=True):
            common = self._common(reply)
            if reply.status != "ok":
                out.append(ScoreResult(None, status=reply.status, **common))
            elif read is None:
                # The text is not a score, so the first token's logprobs are
                # not a distribution over scores either.
                out.append(ScoreResult(None, status="parse_error", **common))
            else:
                got = read_expected(
                    read.first,
                    text=reply.text,
                    ten_is_one_token=read.ten_is_one_token,
                    one_then_zero=read.one_then_zero,
                    min_mass=cfg.min_score_mass,
                )
                common["raw"] = self._scrub(got.raw)
                out.append(ScoreResult(got.score, status=got.status, **common))
        return out

    def _can_follow(self, read: _SplitRead) -> bool:
        if self.config.guided_choice:
            # Constrained to ("1", "10") the model writes "1" first: nothing new
            # if it already did.
            return read.chosen != "1"
        return self.config.api == "completions" and bool(read.one_token)

    def _count(self, statuses: Sequence[str]) -> None:
        with self._usage_lock:
            for status in statuses:
                self.usage.statuses[status] = self.usage.statuses.get(status, 0) + 1

    def _scrub(self, text: str | None) -> str | None:
        """A reply's text without the key (a hostile server may echo it)."""
        return None if text is None else redact(text, self._key)

    def _redact(self, text: str) -> str:
        # The key also in its base64 and URL-encoded forms (credentials.redact),
        # masked before the cut so no part of it survives at the edge.
        return redact(text, self._key)[:RAW_MAX_CHARS]

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
                    try:
                        return await self._one(client, prompt, body, score=score)
                    except _Fatal:
                        raise
                    except Exception as exc:
                        # Whatever one reply does, it marks its own row only.
                        logger.warning("request failed: %s", type(exc).__name__)
                        return _Reply(
                            None,
                            status="error",
                            detail=self._redact(f"{type(exc).__name__}: {exc}"),
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
            # Only the start of a long reply goes back (a hostile 8 MB text
            # is not resent).
            previous = (reply.text or "")[:PREVIOUS_MAX_CHARS]
            again = await self._request(client, self._payload(prompt, body, previous))
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
                # httpx times each phase; the deadline bounds the whole request
                # (a reply trickling in byte by byte), the byte limit its size.
                resp = await send_bounded(
                    client, "POST", path, timeout_s=cfg.timeout_s, json=payload
                )
            except (httpx.TimeoutException, asyncio.TimeoutError) as exc:
                last = _Reply(None, status="timeout", detail=type(exc).__name__)
            except httpx.TransportError as exc:
                last = _Reply(
                    None,
                    status="connect_error",
                    detail=self._redact(f"{type(exc).__name__}: {exc}"),
                )
            except httpx.HTTPError as exc:  # DecodingError: a body not readable
                last = _Reply(
                    None, status="malformed_response", detail=type(exc).__name__
                )
            else:
                code = resp.status_code
                # An error body is kept as its length only: it may echo the key.
                said = f"HTTP {code} ({resp.size} bytes)"
                if code in FATAL_STATUS:
                    msg = (
                        f"engine {self.name!r}: {said} from {cfg.base_url} "
                        f"({path}); check base_url, model and the API key in "
                        f"{cfg.api_key_env or '(no api_key_env)'}"
                    )
                    raise _Fatal(msg)
                if code == 429 or code >= 500:
                    wait = _retry_after_s(resp.headers.get("retry-after"))
                    last = _Reply(None, status="http_error", detail=said)
                elif code >= 400:
                    # A bad request (e.g. prompt too long) fails only this row.
                    return _Reply(None, status="http_error", detail=said)
                elif resp.too_large:
                    # Not retried: the same request would get the same reply.
                    return _Reply(
                        None,
                        status="response_too_large",
                        detail=f"{said}: over {MAX_REPLY_BYTES} bytes, not read",
                    )
                else:
                    parsed = self._parse(resp.body)
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

    def _parse(self, body: bytes) -> _Reply:
        """Text, logprobs and usage from a 2xx body, or ``malformed_response``."""
        try:
            data = json.loads(body)
            choice = data["choices"][0]
            if self.config.api == "chat":
                content = choice["message"]["content"]
            else:
                content = choice["text"]
            if not isinstance(content, str):
                raise TypeError("content is not a string")
            usage = data.get("usage") or {}
            if not isinstance(usage, dict):
                raise TypeError("usage is not an object")
            block = choice.get("logprobs")
        # RecursionError: deeply nested JSON; UnicodeDecodeError is a ValueError.
        except (
            ValueError,
            KeyError,
            IndexError,
            TypeError,
            AttributeError,
            RecursionError,
        ) as exc:
            # Enough of the body that a key starting in the kept part is whole
            # when it is masked (in _redact, before the cut).
            text = body[: 8 * RAW_MAX_CHARS].decode("utf-8", errors="replace")
            return _Reply(
                None,
                status="malformed_response",
                detail=self._redact(f"{type(exc).__name__}: {text}"),
            )
        steps, tokens = self._logprobs(block)
        reply = _Reply(
            content,
            top_logprobs=steps,
            tokens=tokens,
            prompt_tokens=_int(usage.get("prompt_tokens")),
            completion_tokens=_int(usage.get("completion_tokens")),
        )
        with self._usage_lock:
            self.usage.prompt_tokens += reply.prompt_tokens or 0
            self.usage.completion_tokens += reply.completion_tokens or 0
        return reply

    @staticmethod
    def _logprobs(
        block: Any,
    ) -> tuple[list[list[tuple[str, float]]] | None, list[str] | None]:
        """Per generated position, the alternatives and the chosen token.

        Alternatives whose logprob is not one (NaN, infinite, positive, not a
        number: ``valid_logprob``) are left out; a block of the wrong shape
        gives no logprobs at all (the row is then ``no_logprobs``).
        """
        if not isinstance(block, dict):
            return None, None
        steps: list[list[tuple[str, float]]] = []
        tokens: list[str] = []

        def alt(token: Any, logprob: Any) -> list[tuple[str, float]]:
            lp = valid_logprob(logprob)
            return [] if lp is None else [(str(token), lp)]

        try:
            if isinstance(block.get("content"), list):  # chat API
                for pos in block["content"]:
                    alts = [
                        x
                        for a in pos.get("top_logprobs") or []
                        for x in alt(a["token"], a["logprob"])
                    ]
                    alts += alt(pos["token"], pos["logprob"])
                    steps.append(alts)
                    tokens.append(str(pos["token"]))
            elif isinstance(block.get("top_logprobs"), list):  # completions API
                chosen = block.get("tokens") or []
                for i, pos in enumerate(block["top_logprobs"]):
                    steps.append(
                        [x for t, lp in (pos or {}).items() for x in alt(t, lp)]
                    )
                    if i < len(chosen):
                        tokens.append(str(chosen[i]))
        except (KeyError, TypeError, ValueError, AttributeError):
            return None, None
        if len(tokens) != len(steps):
            tokens = []  # positions unknown: the score is read at the first
        return [_dedupe(s) for s in steps] or None, tokens or None


def _dedupe(alts: list[tuple[str, float]]) -> list[tuple[str, float]]:
    # The chosen token is usually also listed among the alternatives.
    seen: dict[str, float] = {}
    for token, lp in alts:
        seen.setdefault(token, lp)
    return list(seen.items())


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _add(a: int | None, b: int | None) -> int | None:
    if a is None and b is None:
        return None
    return (a or 0) + (b or 0)
