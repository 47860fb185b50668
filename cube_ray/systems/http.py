r"""A deployed RAG service reached over HTTP (the usual system under test).

A request is built from a template (method, URL, headers, JSON body), where
``${ENV_NAME}`` in the URL and headers is read from the environment (secrets
stay out of configs and logs; the run config must declare the variable in
``env_vars``) and ``{question}`` / ``{question_id}`` in body
strings are replaced per question. The answer and the ranked retrieved ids are
read from the JSON response by dotted paths (:func:`resolve_path`).

Presets (fields set in the config override them):

* ``ragflow`` — RAGFlow's chat completions API
  (``POST /api/v1/chats/{chat_id}/completions``, body
  ``{"question": ..., "stream": false}``): answer at ``data.answer``, ids at
  ``data.reference.chunks[].document_id``; a non-zero ``code`` in the body is a
  failure (status ``service_code_<code>``). RAGFlow's ``document_id`` is its own
  id: upload each corpus record as a file named ``<doc_id>.txt`` and map with
  ``retrieved_path: data.reference.chunks[].document_name`` and
  ``id_pattern: '^(.*)\.txt$'``.
* ``openai_chat`` — an OpenAI-compatible chat endpoint that returns references
  (RAGFlow's ``/api/v1/chats_openai/{chat_id}/chat/completions`` with
  ``extra_body.reference: true``, or ``cube-ray serve-rag``): answer at
  ``choices[0].message.content``, ids at
  ``choices[0].message.reference.chunks[].document_id``.

Retrieved ids are de-duplicated keeping the first (best) position, since a
service that splits documents into chunks may return several chunks of one
document. Failures are recorded per question in ``status``: ``timeout``,
``connection_error``, ``http_<code>``, ``invalid_json``, ``service_code_<code>``,
``no_answer_in_response``, ``response_too_large``, ``error`` (retried:
timeouts, connection errors, 429, 5xx and invalid JSON, with exponential
backoff and jitter; ``Retry-After`` wins). ``timeout_s`` bounds each attempt
as a whole, body included, and a reply over
:data:`~cube_ray.http_reply.MAX_REPLY_BYTES` is not read
(:mod:`cube_ray.http_reply`); whatever a reply holds (invalid or deeply nested
JSON, bytes that do not decode, a wrong shape) marks its own question only.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import email.utils
import json
import logging
import random
import re
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from cube_ray.env import expand_env
from cube_ray.errors import ConfigError, MissingDependencyError
from cube_ray.http_reply import async_client, http_url_problem, send_bounded
from cube_ray.systems.base import QuestionIn, SystemAnswer
from cube_ray.systems.config import HttpSystemConfig

__all__ = ["PRESETS", "HttpSystem", "Preset", "resolve_path"]

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Preset:
    """Request body and response paths of a known API."""

    body: dict[str, Any]
    answer_path: str
    retrieved_path: str
    code_path: str | None = None
    """Path to a business status code; anything but 0 is a failure."""


PRESETS: dict[str, Preset] = {
    "custom": Preset(
        body={"question": "{question}", "question_id": "{question_id}"},
        answer_path="answer",
        retrieved_path="retrieved_doc_ids",
    ),
    "ragflow": Preset(
        body={"question": "{question}", "stream": False},
        answer_path="data.answer",
        retrieved_path="data.reference.chunks[].document_id",
        code_path="code",
    ),
    "openai_chat": Preset(
        body={
            "model": "model",
            "messages": [{"role": "user", "content": "{question}"}],
            "stream": False,
            "extra_body": {"reference": True},
        },
        answer_path="choices[0].message.content",
        retrieved_path="choices[0].message.reference.chunks[].document_id",
    ),
}
"""Known request/response layouts by preset name."""

_SEGMENT = re.compile(r"([^.\[\]]+)|\[(\d*)\]")


def _parse_path(path: str) -> list[tuple[str | None, str | None]]:
    parts: list[tuple[str | None, str | None]] = []
    for piece in path.split("."):
        if not piece:
            msg = f"response path {path!r} has an empty segment"
            raise ConfigError(msg)
        pos = 0
        for m in _SEGMENT.finditer(piece):
            if m.start() != pos:
                break
            parts.append((m.group(1), m.group(2)))
            pos = m.end()
        if pos != len(piece):
            msg = (
                f"response path {path!r}: cannot parse {piece!r}; use names, [n] "
                "for an index and [] to map over a list, e.g. data.items[].id"
            )
            raise ConfigError(msg)
    return parts


_MISSING = object()


def resolve_path(obj: Any, path: str) -> Any:
    """Follow a dotted path into parsed JSON; ``None`` when it is not there.

    ``name`` reads a key, ``[n]`` an index, ``[]`` maps the rest of the path over
    a list (elements lacking the rest are dropped).

    >>> doc = {"data": {"answer": "A", "chunks": [{"id": 1}, {"x": 0}, {"id": 3}]}}
    >>> resolve_path(doc, "data.answer")
    'A'
    >>> resolve_path(doc, "data.chunks[].id")
    [1, 3]
    >>> resolve_path(doc, "data.chunks[2].id"), resolve_path(doc, "data.nope")
    (3, None)
    """
    values: list[Any] = [obj]
    mapped = False
    for name, index in _parse_path(path):
        nxt: list[Any] = []
        for v in values:
            got: Any = _MISSING
            if name is not None:
                if isinstance(v, dict) and name in v:
                    got = v[name]
            elif index == "":
                if isinstance(v, list):
                    nxt.extend(v)
                continue
            elif index is not None and isinstance(v, list) and int(index) < len(v):
                got = v[int(index)]
            if got is not _MISSING:
                nxt.append(got)
        if index == "" and name is None:
            mapped = True
        if not mapped and not nxt:
            return None
        values = nxt
    return values if mapped else values[0]


def _fill(template: Any, question: QuestionIn) -> Any:
    if isinstance(template, str):
        return template.replace("{question}", question.question).replace(
            "{question_id}", question.question_id
        )
    if isinstance(template, dict):
        return {k: _fill(v, question) for k, v in template.items()}
    if isinstance(template, list):
        return [_fill(v, question) for v in template]
    return template


def _retry_after(value: str | None) -> float | None:
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


@dataclass(slots=True)
class _Outcome:
    answer: SystemAnswer
    retry: bool = False
    wait_s: float | None = None


class HttpSystem:
    """Ask a deployed RAG service each question over HTTP.

    Args:
        config: The system's configuration (URL, headers, body, paths, limits).
        transport: An httpx transport to use instead of the network (tests).
    """

    def __init__(self, config: HttpSystemConfig, *, transport: Any = None) -> None:
        try:
            # optional: httpx (the http extra), only once a client is built
            import httpx
        except ImportError as exc:
            raise MissingDependencyError(
                "httpx", extra="http", purpose="evaluating a RAG service over HTTP"
            ) from exc
        self._httpx = httpx
        self.name = config.name
        self.k = config.k
        self._config = config
        preset = PRESETS[config.preset]
        # A custom body replaces the default; a preset's body is merged into, so
        # that e.g. ``model`` or ``session_id`` can be set without repeating it.
        body = dict(preset.body)
        if config.body is not None:
            body = (
                dict(config.body)
                if config.preset == "custom"
                else {**body, **config.body}
            )
        self._body = body
        self._answer_path = config.answer_path or preset.answer_path
        self._retrieved_path = config.retrieved_path or preset.retrieved_path
        self._code_path = preset.code_path
        for p in (self._answer_path, self._retrieved_path):
            _parse_path(p)  # fail on a bad path now, not per row
        try:
            self._id_pattern = (
                re.compile(config.id_pattern) if config.id_pattern else None
            )
        except re.error as exc:
            msg = f"system {config.name!r}: id_pattern is not a valid regex: {exc}"
            raise ConfigError(msg) from exc
        # Secrets are resolved once; only the template URL is ever logged.
        self._url = expand_env(config.url, where=f"system {config.name!r} url")
        problem = http_url_problem(self._url)  # a ${NAME} URL, once expanded
        if problem is not None:
            msg = (
                f"system {config.name!r}: url, once its variables are read, is not "
                f"an http:// or https:// URL with a host ({problem}); set the "
                "variable to an http(s) URL"
            )
            raise ConfigError(msg)
        self._headers = {
            k: expand_env(v, where=f"system {config.name!r} header {k!r}")
            for k, v in config.headers.items()
        }
        self._transport = transport
        self._warned_no_ids = False
        self.last_reply: Any = None
        """The last reply parsed as JSON (``cube-ray check`` searches it)."""

    @property
    def answer_path(self) -> str:
        """Where the answer is read (the config's, else the preset's)."""
        return self._answer_path

    @property
    def retrieved_path(self) -> str:
        """Where the retrieved ids are read (the config's, else the preset's)."""
        return self._retrieved_path

    def answer(self, questions: Sequence[QuestionIn]) -> list[SystemAnswer]:
        """Ask every question, at most ``max_concurrency`` requests in flight."""
        if not questions:
            return []
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            return asyncio.run(self._answer_all(questions))
        # Called from inside an event loop (an async actor): use a fresh thread.
        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            return pool.submit(asyncio.run, self._answer_all(questions)).result()

    async def _answer_all(self, questions: Sequence[QuestionIn]) -> list[SystemAnswer]:
        cfg = self._config
        limits = self._httpx.Limits(max_connections=cfg.max_concurrency)
        sem = asyncio.Semaphore(cfg.max_concurrency)
        async with async_client(
            self._httpx,
            timeout_s=cfg.timeout_s,
            limits=limits,
            transport=self._transport,
            headers=self._headers,
        ) as client:

            async def one(q: QuestionIn) -> SystemAnswer:
                async with sem:
                    try:
                        return await self._ask(client, q)
                    except Exception as exc:
                        # One reply, whatever it holds, marks its question only.
                        log.warning(
                            "system %s: question %s failed: %s",
                            self.name,
                            q.question_id,
                            type(exc).__name__,
                        )
                        return SystemAnswer(None, status="error")

            return list(await asyncio.gather(*(one(q) for q in questions)))

    async def _ask(self, client: Any, question: QuestionIn) -> SystemAnswer:
        cfg = self._config
        started = time.perf_counter()
        body = _fill(self._body, question)
        outcome = _Outcome(SystemAnswer(None, status="not_sent"))
        for attempt in range(cfg.max_retries + 1):
            outcome = await self._attempt(client, body)
            if not outcome.retry or attempt == cfg.max_retries:
                break
            backoff = min(
                cfg.backoff_max_s, cfg.backoff_base_s * 2**attempt
            ) * random.uniform(0.5, 1.0)
            wait = outcome.wait_s if outcome.wait_s is not None else backoff
            log.info(
                "system %s: %s from %s, retry %d/%d in %.2fs",
                self.name,
                outcome.answer.status,
                cfg.url,
                attempt + 1,
                cfg.max_retries,
                wait,
            )
            await asyncio.sleep(min(wait, cfg.backoff_max_s))
        ans = outcome.answer
        return SystemAnswer(
            ans.answer,
            ans.retrieved_doc_ids,
            status=ans.status,
            latency_s=time.perf_counter() - started,
            prompt_tokens=ans.prompt_tokens,
            completion_tokens=ans.completion_tokens,
        )

    async def _attempt(self, client: Any, body: dict[str, Any]) -> _Outcome:
        httpx = self._httpx
        timeout_s = self._config.timeout_s
        try:
            # The deadline bounds the whole attempt (a reply trickling in byte by
            # byte); httpx alone times each read.
            if self._config.method == "GET":
                params = {k: v for k, v in body.items() if not isinstance(v, dict)}
                resp = await send_bounded(
                    client, "GET", self._url, timeout_s=timeout_s, params=params
                )
            else:
                resp = await send_bounded(
                    client, "POST", self._url, timeout_s=timeout_s, json=body
                )
        except (httpx.TimeoutException, asyncio.TimeoutError):
            return _Outcome(SystemAnswer(None, status="timeout"), retry=True)
        except httpx.TransportError:
            return _Outcome(SystemAnswer(None, status="connection_error"), retry=True)
        except httpx.HTTPError:  # DecodingError: a body that does not decompress
            return _Outcome(SystemAnswer(None, status="invalid_json"), retry=True)
        code = resp.status_code
        if code == 429 or code >= 500:
            return _Outcome(
                SystemAnswer(None, status=f"http_{code}"),
                retry=True,
                wait_s=_retry_after(resp.headers.get("retry-after")),
            )
        if code >= 400:
            return _Outcome(SystemAnswer(None, status=f"http_{code}"))
        if resp.too_large:
            return _Outcome(SystemAnswer(None, status="response_too_large"))
        try:
            data = json.loads(resp.body)
        # UnicodeDecodeError is a ValueError; RecursionError: deeply nested JSON.
        except (ValueError, RecursionError):
            return _Outcome(SystemAnswer(None, status="invalid_json"), retry=True)
        self.last_reply = data
        return _Outcome(self._parse(data))

    def _parse(self, data: Any) -> SystemAnswer:
        if self._code_path is not None:
            code = resolve_path(data, self._code_path)
            if code not in (None, 0):
                return SystemAnswer(None, status=f"service_code_{code}")
        answer = resolve_path(data, self._answer_path)
        raw_ids = resolve_path(data, self._retrieved_path)
        if raw_ids is None and not self._warned_no_ids:
            self._warned_no_ids = True
            log.warning(
                "system %s: no retrieved ids at %r in a response; counting it as "
                "nothing retrieved (check retrieved_path)",
                self.name,
                self._retrieved_path,
            )
        ids = self._ids(raw_ids)
        if not isinstance(answer, str) or not answer.strip():
            return SystemAnswer(None, ids, status="no_answer_in_response")
        return SystemAnswer(answer, ids)

    def _ids(self, raw: Any) -> list[str]:
        if raw is None:
            return []
        items = raw if isinstance(raw, list) else [raw]
        out: list[str] = []
        seen: set[str] = set()
        for item in items:
            if item is None or isinstance(item, (dict, list)):
                continue
            doc_id = str(item).strip()
            if self._id_pattern is not None:
                m = self._id_pattern.search(doc_id)
                if m:
                    doc_id = m.group(1) if m.groups() else m.group(0)
            if doc_id and doc_id not in seen:
                seen.add(doc_id)
                out.append(doc_id)
        return out

    def close(self) -> None:
        """Nothing held between calls (a client lives for one batch)."""
