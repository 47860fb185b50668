"""Building request bodies: the payload, the score constraint, the logprobs keys.

Pure functions of the engine config; nothing is sent here.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from cube_ray.engines.config import OpenAIHttpEngineConfig

__all__ = [
    "PREVIOUS_MAX_CHARS",
    "REMINDER",
    "build_payload",
    "choices_body",
    "endpoint_path",
    "logprobs_body",
]

REMINDER = "Reply with only one integer from 0 to 10, and nothing else."
"""The follow-up sent when an unconstrained score does not parse."""
PREVIOUS_MAX_CHARS = 2000
"""Most of an unparsable reply quoted back in a parse retry."""


def choices_body(choices: Sequence[str]) -> dict[str, Any]:
    """Body keys that constrain the output to ``choices`` on vLLM servers.

    Examples:
        >>> choices_body(("1", "10"))["structured_outputs"]
        {'choice': ['1', '10']}
    """
    # Old vLLM servers read guided_choice, new ones structured_outputs; each
    # ignores the other key.
    return {
        "guided_choice": list(choices),
        "structured_outputs": {"choice": list(choices)},
    }


def logprobs_body(config: OpenAIHttpEngineConfig) -> dict[str, Any]:
    """Body keys that ask for the top logprobs (their shape differs per API)."""
    if config.api == "chat":
        return {"logprobs": True, "top_logprobs": config.top_logprobs}
    return {"logprobs": config.top_logprobs}


def endpoint_path(config: OpenAIHttpEngineConfig) -> str:
    """The path under ``base_url`` that requests are POSTed to."""
    return "chat/completions" if config.api == "chat" else "completions"


def build_payload(
    config: OpenAIHttpEngineConfig,
    prompt: str,
    body: dict[str, Any],
    previous: str | None,
) -> dict[str, Any]:
    """The JSON of one request; with ``previous``, a parse retry quoting it.

    Args:
        config: The engine config (model, API, ``extra_body``).
        prompt: The row's prompt.
        body: The engine's own fields (sampling, constraint, logprobs).
        previous: The unparsable reply to quote back with :data:`REMINDER`.
    """
    # extra_body first: the engine's own fields (SCORING_KEYS) always win.
    payload: dict[str, Any] = {**config.extra_body, "model": config.model, **body}
    if config.api == "chat":
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
