"""HTTP model endpoints: each lists its model, and one timed probe request each.

``check_endpoints`` fails when a server is down or serves another model;
``probe_endpoints`` sends one request per ``openai_http`` engine, of the size
of its own requests, and warns (never fails) when it is slow. Both go through
cube_ray's one HTTP client (:func:`cube_ray.http_reply.fetch`): http(s) only,
no redirect followed (the key stays with the configured host), the whole
request under its timeout and the reply under a byte limit.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from typing import Any

from cube_ray.config import RunConfig
from cube_ray.engines.config import OpenAIHttpEngineConfig
from cube_ray.errors import ClusterError
from cube_ray.http_reply import MAX_REPLY_BYTES, BoundedReply, fetch
from cube_ray.preflight._resources import Say
from cube_ray.systems.kinds import system_kind

__all__ = [
    "MODELS_MAX_BYTES",
    "PROBE_PROMPT",
    "PROBE_TIMED_OUT",
    "PROBE_WARN_SHARE",
    "check_endpoints",
    "probe_endpoints",
    "probe_warning",
]


_Endpoint = tuple[str, str, str, str | None, float | None]
"""(config path, base URL, model, key variable, timeout) of one HTTP model."""


def _endpoints(config: RunConfig) -> list[_Endpoint]:
    """Every HTTP model of the config (:data:`_Endpoint`).

    The timeout is an engine's ``timeout_s`` (None for a system's endpoint).
    """
    out: list[_Endpoint] = []
    engines = [
        ("generator", config.generator),
        *((f"judges.{n}", e) for n, e in config.judges.items()),
    ]
    for where, engine in engines:
        if isinstance(engine, OpenAIHttpEngineConfig):
            out.append(
                (
                    where,
                    engine.base_url,
                    engine.model,
                    engine.api_key_env,
                    engine.timeout_s,
                )
            )
    for s in config.systems:
        out += [
            (e.field, e.base_url, e.model, e.api_key_env, None)
            for e in system_kind(s).endpoints(s)
        ]
    return out


MODELS_MAX_BYTES = 2**20
"""Largest ``GET /models`` reply read (1 MiB: a list of model names)."""


def _auth(key_env: str | None) -> dict[str, str]:
    key = os.environ.get(key_env) if key_env else None
    return {"Authorization": f"Bearer {key}"} if key else {}


def _send(
    method: str,
    url: str,
    *,
    key_env: str | None,
    timeout_s: float,
    max_bytes: int,
    **kwargs: Any,
) -> tuple[Any, str | None]:
    """One bounded request: (the JSON reply, None) or (None, what went wrong).

    The error never holds the key (it is only in a header).
    """
    # optional: httpx (the http extra), only once a client is built
    import httpx

    try:
        reply = fetch(
            method,
            url,
            timeout_s=timeout_s,
            headers=_auth(key_env),
            max_bytes=max_bytes,
            **kwargs,
        )
    except (TimeoutError, asyncio.TimeoutError):
        return None, PROBE_TIMED_OUT
    except (httpx.HTTPError, OSError, ValueError) as exc:
        return None, f"{type(exc).__name__}: {exc}"
    return _json(reply, max_bytes=max_bytes)


def _json(reply: BoundedReply, *, max_bytes: int) -> tuple[Any, str | None]:
    if 300 <= reply.status_code < 400:
        where = reply.headers.get("location", "?")
        return None, (
            f"answered HTTP {reply.status_code} (a redirect to {where!r}, not "
            "followed: the key goes to the configured URL only; set base_url to "
            "the final URL)"
        )
    if reply.status_code >= 400:
        return None, f"answered HTTP {reply.status_code}"
    if reply.too_large:
        return None, (
            f"replied with more than {max_bytes} bytes ({reply.size} read); not "
            "read further"
        )
    try:
        return json.loads(reply.body.decode("utf-8")), None
    except ValueError as exc:
        return None, f"replied with a body that is not JSON ({exc})"


def check_endpoints(config: RunConfig, *, timeout_s: float = 10.0) -> None:
    """Every HTTP model endpoint lists its configured model at ``GET /models``.

    Each request ends within ``timeout_s``, or the engine's own ``timeout_s``
    when shorter (reply included), and reads at most :data:`MODELS_MAX_BYTES`.

    Raises:
        ClusterError: Naming the engine, the URL and what came back.
    """
    problems = []
    for where, base, model, key_env, own in _endpoints(config):
        url = base.rstrip("/") + "/models"
        limit = min(timeout_s, own) if own is not None else timeout_s
        body, error = _send(
            "GET", url, key_env=key_env, timeout_s=limit, max_bytes=MODELS_MAX_BYTES
        )
        if error == PROBE_TIMED_OUT:
            error = f"failed (no complete reply within {limit:g} s)"
        elif error is not None and not error.startswith(("answered", "replied")):
            error = f"failed ({error})"
        if error is not None:
            problems.append(f"{where}: GET {url} {error}")
            continue
        data = body.get("data") if isinstance(body, dict) else None
        served = [str(m.get("id")) for m in data or [] if isinstance(m, dict)]
        if model not in served:
            problems.append(
                f"{where}: {url} serves {served}, not {model!r}; set the model "
                "to one of them"
            )
    if problems:
        raise ClusterError(
            "HTTP model endpoints are not ready:\n  - "
            + "\n  - ".join(problems)
            + "\nFix: start the server (or correct base_url / model) and retry"
        )


PROBE_WARN_SHARE = 0.5
"""A probe request that takes more than this share of its engine's
``timeout_s`` gets a warning: under the run's load (``max_concurrency``
requests per actor, longer prompts) real requests are slower than one probe."""
PROBE_PROMPT = (
    "Describe, step by step and in detail, how a citizen applies for a passport: "
    "eligibility, documents, where to apply, fees and processing time."
)
"""A request like the run's answers: one that asks for a long reply."""
PROBE_TIMED_OUT = "timed out"


def _probe_max_tokens(engine: OpenAIHttpEngineConfig, *, judge: bool) -> int:
    """``max_tokens`` of the engine's own requests (answers, or scores)."""
    return engine.score_max_tokens if judge else engine.sampling.max_tokens


def probe_warning(
    where: str,
    engine: OpenAIHttpEngineConfig,
    *,
    max_tokens: int,
    elapsed_s: float,
    completion_tokens: int | None,
    error: str | None = None,
) -> str | None:
    """The warning for one probe request, or None when it was quick enough.

    A reply shorter than ``max_tokens`` is scaled up to it (decode time grows
    with the tokens written), so a model that stopped early still shows how
    long a full-length answer would take.

    >>> from cube_ray.engines.config import OpenAIHttpEngineConfig as Http
    >>> gen = Http(base_url="http://h/v1", model="m", timeout_s=60)
    >>> print(probe_warning("generator", gen, max_tokens=512, elapsed_s=20.0,
    ...       completion_tokens=256))  # doctest: +NORMALIZE_WHITESPACE
    generator: a probe request to http://h/v1 took 20.0 s for 256 tokens; a
    reply of max_tokens 512 would take about 40 s, 67% of timeout_s (60 s, which
    bounds one request; up to max_concurrency 8 requests per actor share the
    server during the run). Raise generator.timeout_s before a long run.
    >>> probe_warning("generator", gen, max_tokens=512, elapsed_s=5.0,
    ...               completion_tokens=512) is None
    True
    """
    limit = engine.timeout_s
    shared = (
        f"which bounds one request; up to max_concurrency {engine.max_concurrency} "
        "requests per actor share the server during the run"
    )
    fix = f"Raise {where}.timeout_s before a long run."
    if error == PROBE_TIMED_OUT:
        return (
            f"{where}: a probe request to {engine.base_url} did not finish within "
            f"timeout_s ({limit:g} s, {shared}). {fix}"
        )
    if error is not None:
        return (
            f"{where}: a probe request to {engine.base_url} failed ({error}); the "
            "run's requests may fail the same way (their rows get a failure "
            "status). Check the server's log before a long run."
        )
    estimate = elapsed_s
    if completion_tokens and completion_tokens < max_tokens:
        estimate = elapsed_s * max_tokens / completion_tokens
    if estimate <= PROBE_WARN_SHARE * limit:
        return None
    took = f"took {elapsed_s:.1f} s"
    if completion_tokens:
        took += f" for {completion_tokens} tokens"
    scaled = (
        f"; a reply of max_tokens {max_tokens} would take about {estimate:.0f} s"
        if estimate != elapsed_s
        else ""
    )
    return (
        f"{where}: a probe request to {engine.base_url} {took}{scaled}, "
        f"{estimate / limit:.0%} of timeout_s ({limit:g} s, {shared}). {fix}"
    )


def _probe_request(
    engine: OpenAIHttpEngineConfig, max_tokens: int
) -> tuple[float, int | None, str | None]:
    """One request as the engine sends them: seconds, tokens written, error."""
    body: dict[str, Any] = {
        **engine.extra_body,
        "model": engine.model,
        "max_tokens": max_tokens,
        "temperature": 0,
    }
    if engine.api == "chat":
        path = "chat/completions"
        body["messages"] = [{"role": "user", "content": PROBE_PROMPT}]
    else:
        path, body["prompt"] = "completions", PROBE_PROMPT
    start = time.monotonic()
    reply, error = _send(
        "POST",
        engine.base_url.rstrip("/") + "/" + path,
        key_env=engine.api_key_env,
        timeout_s=engine.timeout_s,
        max_bytes=MAX_REPLY_BYTES,
        json=body,
    )
    elapsed = time.monotonic() - start
    if error is not None:
        return elapsed, None, error
    usage = reply.get("usage") if isinstance(reply, dict) else None
    tokens = usage.get("completion_tokens") if isinstance(usage, dict) else None
    return elapsed, tokens if isinstance(tokens, int) else None, None


def probe_endpoints(config: RunConfig, *, say: Say) -> None:
    """Time one request to each ``openai_http`` engine; warn when it is slow.

    Engines with ``batch: true`` are not probed (no direct request).

    One request per engine, of the size of its own requests (a long answer
    for the generator, a score for a judge), sent after ``check_endpoints``
    found the server. Slowness is a warning, not an error: the run may still
    fit, and the fix (``timeout_s``) is the user's choice.
    """
    engines = [
        ("generator", config.generator, False),
        *((f"judges.{n}", e, True) for n, e in config.judges.items()),
    ]
    for where, engine, judge in engines:
        # A Batch API engine sends no direct request (nor does its probe):
        # its requests wait hours anyway.
        if not isinstance(engine, OpenAIHttpEngineConfig) or engine.batch:
            continue
        max_tokens = _probe_max_tokens(engine, judge=judge)
        elapsed, tokens, error = _probe_request(engine, max_tokens)
        warning = probe_warning(
            where,
            engine,
            max_tokens=max_tokens,
            elapsed_s=elapsed,
            completion_tokens=tokens,
            error=error,
        )
        if warning is not None:
            say(f"warning: {warning}")
