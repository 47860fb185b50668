"""Reading a 2xx body: the text, the logprobs and the usage, or ``malformed_response``.

Pure functions over bytes; no request is sent here. A body that is not a reply
(invalid or deeply nested JSON, wrong shapes, undecodable bytes) becomes a
``malformed_response`` :class:`Reply` for its row alone, with the start of the
body as its detail (passed through the caller's redaction first).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from cube_ray.engines._scoring import valid_logprob

__all__ = ["RAW_MAX_CHARS", "Reply", "add_tokens", "parse_body", "read_logprobs"]

RAW_MAX_CHARS = 500
"""Raw texts of failures are cut to this length."""

Steps = list[list[tuple[str, float]]]


@dataclass
class Reply:
    """One completed request: text or a failure status, plus what was reported."""

    text: str | None
    status: str = "ok"
    detail: str | None = None
    top_logprobs: Steps | None = None
    """Per generated position, the ``(token, logprob)`` alternatives."""
    tokens: list[str] | None = None
    """Per generated position, the token the model chose."""
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    latency_s: float = 0.0


def parse_body(
    body: bytes, *, api: Literal["chat", "completions"], redact: Callable[[str], str]
) -> Reply:
    """Text, logprobs and usage from a 2xx body, or ``malformed_response``.

    Args:
        body: The reply's bytes.
        api: Which endpoint answered (the text sits in different places).
        redact: Masks the key in (and cuts) the detail of a malformed body.

    Examples:
        >>> ok = b'{"choices": [{"text": " 7"}], "usage": {"prompt_tokens": 3}}'
        >>> r = parse_body(ok, api="completions", redact=str)
        >>> (r.status, r.text, r.prompt_tokens, r.completion_tokens)
        ('ok', ' 7', 3, None)
        >>> parse_body(b'{"choices": []}', api="chat", redact=str).status
        'malformed_response'
    """
    try:
        data = json.loads(body)
        choice = data["choices"][0]
        content = choice["message"]["content"] if api == "chat" else choice["text"]
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
        # when it is masked (by ``redact``, before the cut).
        text = body[: 8 * RAW_MAX_CHARS].decode("utf-8", errors="replace")
        return Reply(
            None,
            status="malformed_response",
            detail=redact(f"{type(exc).__name__}: {text}"),
        )
    steps, tokens = read_logprobs(block)
    return Reply(
        content,
        top_logprobs=steps,
        tokens=tokens,
        prompt_tokens=_int(usage.get("prompt_tokens")),
        completion_tokens=_int(usage.get("completion_tokens")),
    )


def read_logprobs(block: Any) -> tuple[Steps | None, list[str] | None]:
    """Per generated position, the alternatives and the chosen token.

    Alternatives whose logprob is not one (NaN, infinite, positive, not a
    number: ``valid_logprob``) are left out; a block of the wrong shape
    gives no logprobs at all (the row is then ``no_logprobs``).

    Examples:
        >>> read_logprobs({"tokens": ["7"], "top_logprobs": [{"7": -0.1, "8": "x"}]})
        ([[('7', -0.1)]], ['7'])
        >>> read_logprobs({"content": "not a list"})
        (None, None)
    """
    if not isinstance(block, dict):
        return None, None
    steps: Steps = []
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
                steps.append([x for t, lp in (pos or {}).items() for x in alt(t, lp)])
                if i < len(chosen):
                    tokens.append(str(chosen[i]))
    except (KeyError, TypeError, ValueError, AttributeError):
        return None, None
    if len(tokens) != len(steps):
        tokens = []  # positions unknown: the score is read at the first
    return [_dedupe(s) for s in steps] or None, tokens or None


def add_tokens(a: int | None, b: int | None) -> int | None:
    """Sum of two token counts, None when neither was reported.

    Examples:
        >>> add_tokens(None, None), add_tokens(None, 4), add_tokens(2, 4)
        (None, 4, 6)
    """
    if a is None and b is None:
        return None
    return (a or 0) + (b or 0)


def _dedupe(alts: list[tuple[str, float]]) -> list[tuple[str, float]]:
    # The chosen token is usually also listed among the alternatives.
    seen: dict[str, float] = {}
    for token, lp in alts:
        seen.setdefault(token, lp)
    return list(seen.items())


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None
