"""The engine: generate and score over the request, retry and reading collaborators.

The class owns the config, the key, the counters and the per-row flow (the
request, then for unconstrained scores the parse retries); building bodies
(``_request``), sending with retries (``_retry``), the client (``_client``),
reading bodies (``_reply``) and reading scores (``_scores``) live beside it.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from cube_ray.credentials import redact
from cube_ray.engines._scoring import parse_score
from cube_ray.engines.base import (
    SCORE_CHOICES,
    Generation,
    SamplingParams,
    ScoreMode,
    ScoreResult,
)
from cube_ray.engines.openai_http._batch import BatchClient, BatchLedger, BatchRunner
from cube_ray.engines.openai_http._client import gather_rows
from cube_ray.engines.openai_http._reply import RAW_MAX_CHARS, Reply, add_tokens
from cube_ray.engines.openai_http._request import (
    PREVIOUS_MAX_CHARS,
    build_payload,
    choices_body,
    logprobs_body,
)
from cube_ray.engines.openai_http._retry import Fatal, Requester
from cube_ray.engines.openai_http._scores import (
    argmax_score,
    expected_scores,
    line_scores,
    yes_no_score,
)
from cube_ray.engines.openai_http._usage import UsageMeter
from cube_ray.env import secret
from cube_ray.errors import EngineError, MissingDependencyError
from cube_ray.http_reply import run_sync
from cube_ray.protocols import scores_regex

if TYPE_CHECKING:
    from cube_ray.engines.config import OpenAIHttpEngineConfig

__all__ = ["OpenAIHttpEngine"]

logger = logging.getLogger("cube_ray.engines.openai_http")


class OpenAIHttpEngine:
    """Engine over an OpenAI-compatible endpoint; see the package docstring.

    Args:
        config: The engine config.
        transport: An ``httpx`` transport for tests (default: real network).
    """

    def __init__(
        self, config: OpenAIHttpEngineConfig, *, transport: Any = None
    ) -> None:
        try:
            # optional: httpx (the http extra), only once a client is built
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
        self._meter = UsageMeter()
        self.usage = self._meter.usage
        self._requester = Requester(
            config, httpx=httpx, meter=self._meter, redact=self._redact
        )
        self._closed = False
        self._batches: BatchRunner | None = None
        self._next_ids: list[str] | None = None
        self._calls = 0

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
        self._meter.statuses([g.status for g in out])
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
            body.update(choices_body(SCORE_CHOICES))
        if mode == "expected":
            body.update(logprobs_body(cfg))
        replies = self._batch(prompts, body, score=True)
        if mode == "expected":
            out = expected_scores(
                cfg,
                prompts,
                body,
                replies,
                batch=lambda ps, b: self._batch(ps, b, score=False),
                scrub=self._scrub,
            )
        else:
            out = [argmax_score(reply, self._scrub) for reply in replies]
        self._meter.statuses([r.status for r in out])
        return out

    def _protocol_body(self, mode: ScoreMode, max_tokens: int) -> dict[str, Any]:
        cfg = self.config
        if mode == "expected" and not cfg.logprobs:
            msg = (
                f"engine {self.name!r}: score_mode 'expected' needs logprobs; set "
                "`logprobs: true` in the engine config (the server must support it)"
            )
            raise EngineError(msg)
        body: dict[str, Any] = {"max_tokens": max_tokens, "temperature": 0.0}
        if mode == "expected":
            body.update(logprobs_body(cfg))
        return body

    def yes_no(
        self, prompts: Sequence[str], *, words: tuple[str, str], mode: ScoreMode
    ) -> list[ScoreResult]:
        """P(yes) per prompt (protocol ``checklist``).

        ``expected``: from the top logprobs of the first non-blank token,
        normalised over the two words; ``argmax`` (or an API without
        logprobs): 1 or 0 from the word the reply says, else ``parse_error``.
        Constrained to the two words when ``guided_choice`` is on.
        """
        body = self._protocol_body(mode, self.config.score_max_tokens)
        if self.config.guided_choice:
            body.update(choices_body(words))
        replies = self._batch(prompts, body, score=False)
        out = [
            yes_no_score(
                reply,
                self._scrub,
                words=words,
                expected=mode == "expected",
                min_mass=self.config.min_score_mass,
            )
            for reply in replies
        ]
        self._meter.statuses([r.status for r in out])
        return out

    def score_lines(
        self, prompts: Sequence[str], *, count: int, mode: ScoreMode
    ) -> list[list[ScoreResult]]:
        """``count`` scores per prompt, one a line (``all_dimensions``).

        Constrained by a regular expression when ``guided_choice`` is on
        (``guided_regex`` / ``structured_outputs.regex``); ``expected`` reads
        the logprobs at each score position.
        """
        body = self._protocol_body(mode, self.config.score_max_tokens * count)
        if self.config.guided_choice:
            regex = scores_regex(count)
            body.update({"guided_regex": regex, "structured_outputs": {"regex": regex}})
        replies = self._batch(prompts, body, score=False)
        out = [
            line_scores(
                reply,
                self._scrub,
                count=count,
                expected=mode == "expected",
                ten_is_one_token=self.config.ten_is_one_token,
                min_mass=self.config.min_score_mass,
            )
            for reply in replies
        ]
        self._meter.statuses([r[0].status for r in out])
        return out

    def close(self) -> None:
        """Nothing persistent to release (clients live per call); idempotent."""
        self._closed = True

    # -- internals ----------------------------------------------------------

    def _scrub(self, text: str | None) -> str | None:
        """A reply's text without the key (a hostile server may echo it)."""
        return None if text is None else redact(text, self._key)

    def _redact(self, text: str) -> str:
        # The key also in its base64 and URL-encoded forms (credentials.redact),
        # masked before the cut so no part of it survives at the edge.
        return redact(text, self._key)[:RAW_MAX_CHARS]

    # -- the Batch API (batch: true) -----------------------------------------

    def attach_batches(self, ledger: BatchLedger) -> None:
        """Send through the Batch API, recording each batch in ``ledger``.

        The stage runner calls it on the driver for an engine with ``batch:
        true`` (``cube_ray.pipeline.batch_stage``); until then such an engine
        refuses to send.
        """
        client = BatchClient(
            self.config,
            httpx=self._httpx,
            key=self._key,
            transport=self._transport,
            redact=self._redact,
        )
        self._batches = BatchRunner(client, ledger, meter=self._meter)

    def name_requests(self, keys: Sequence[str]) -> None:
        """The row keys of the next call's prompts (their ``custom_id``s).

        A stage names them just before it calls the engine; a call whose
        prompts are not one per key (protocol calls, follow-ups) numbers its
        requests instead.
        """
        self._next_ids = list(keys)

    def _request_ids(self, n: int) -> list[str]:
        ids, self._next_ids = self._next_ids, None
        if ids is not None and len(ids) == n and len(set(ids)) == n:
            return ids
        self._calls += 1
        return [f"call{self._calls}-{i}" for i in range(n)]

    def _via_batches(
        self, prompts: Sequence[str], body: dict[str, Any], *, score: bool
    ) -> list[Reply]:
        """Like the direct path, through the Batch API.

        The same bodies, the same reader, the same parse retries (each round
        one more batch).
        """
        if self._batches is None:
            msg = (
                f"engine {self.name!r} has batch: true: its requests go through "
                "the Batch API of a `cube-ray run` stage, whose stages run on the "
                "driver (cube_ray.pipeline.batch_stage); set batch: false for a "
                "direct use (`cube-ray judges check`, `engines check`)"
            )
            raise EngineError(msg)
        cfg = self.config
        ids = self._request_ids(len(prompts))
        replies = self._batches.run(
            [build_payload(cfg, p, body, None) for p in prompts], ids
        )
        for attempt in range(1, cfg.parse_retries + 1 if score else 1):
            again = [
                i
                for i, r in enumerate(replies)
                if r.status == "ok" and parse_score(r.text) is None
            ]
            if not again:
                break
            payloads = [
                build_payload(
                    cfg, prompts[i], body, (replies[i].text or "")[:PREVIOUS_MAX_CHARS]
                )
                for i in again
            ]
            got = self._batches.run(
                payloads, [f"{ids[i]}#retry{attempt}" for i in again]
            )
            for i, reply in zip(again, got, strict=True):
                if reply.status != "ok":
                    continue  # as the direct path: the unparsable reply stays
                first = replies[i]
                reply.prompt_tokens = add_tokens(
                    first.prompt_tokens, reply.prompt_tokens
                )
                reply.completion_tokens = add_tokens(
                    first.completion_tokens, reply.completion_tokens
                )
                replies[i] = reply
        return replies

    def _batch(
        self, prompts: Sequence[str], body: dict[str, Any], *, score: bool
    ) -> list[Reply]:
        if self._closed:
            msg = f"engine {self.name!r} is closed"
            raise EngineError(msg)
        if not prompts:
            return []
        if self.config.batch:
            return self._via_batches(prompts, body, score=score)
        try:
            return run_sync(
                lambda: gather_rows(
                    self.config,
                    prompts,
                    # Looked up per row, so a test can wrap ``_one``.
                    lambda client, prompt: self._one(client, prompt, body, score=score),
                    httpx=self._httpx,
                    key=self._key,
                    transport=self._transport,
                    redact=self._redact,
                )
            )
        except Fatal as exc:
            raise EngineError(self._redact(str(exc))) from None

    async def _one(
        self, client: Any, prompt: str, body: dict[str, Any], *, score: bool
    ) -> Reply:
        """One row: the request with retries, then (scores) the parse retries."""
        start = time.perf_counter()
        post = self._requester.post
        reply = await post(client, build_payload(self.config, prompt, body, None))
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
            payload = build_payload(self.config, prompt, body, previous)
            again = await post(client, payload)
            if again.status != "ok":
                break
            again.prompt_tokens = add_tokens(reply.prompt_tokens, again.prompt_tokens)
            again.completion_tokens = add_tokens(
                reply.completion_tokens, again.completion_tokens
            )
            reply = again
        reply.latency_s = time.perf_counter() - start
        return reply
