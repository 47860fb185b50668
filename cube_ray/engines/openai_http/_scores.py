"""Scores from replies: argmax, and expected scores with the "1"/"10" split.

The split P("0" | "1") comes from the reply's next step when the model wrote
"1" first; else, where it could move the score by more than
``SPLIT_TOLERANCE``, from one follow-up request: constrained to ("1", "10")
with ``guided_choice`` (which forces "1" first, as the vLLM engine does), or
the prompt plus "1" on the completions API. A chat endpoint without a
constraint cannot be made to continue after "1", so there the row falls back
to argmax (``argmax_fallback``).

The follow-up requests are sent through the ``batch`` callable the engine
passes in; everything else here is pure.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from cube_ray.engines._scoring import (
    parse_score,
    read_expected,
    read_score_lines,
    read_yes_no,
    score_mass,
    split_matters,
    zero_share,
)
from cube_ray.engines.base import ScoreResult
from cube_ray.engines.openai_http._reply import Reply, add_tokens
from cube_ray.engines.openai_http._request import choices_body, logprobs_body

if TYPE_CHECKING:
    from cube_ray.engines.config import OpenAIHttpEngineConfig

__all__ = [
    "SplitRead",
    "argmax_score",
    "expected_scores",
    "line_scores",
    "row_fields",
    "yes_no_score",
]

Scrub = Callable[[str | None], str | None]
"""Masks the API key in a reply's text."""
Batch = Callable[[Sequence[str], dict[str, Any]], list[Reply]]
"""Sends one request per prompt with the given body (no parse retries)."""


@dataclass
class SplitRead:
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
    def of(cls, reply: Reply, *, ten_is_one_token: bool | None) -> SplitRead | None:
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

    def can_follow(self, config: OpenAIHttpEngineConfig) -> bool:
        """Whether one follow-up request can read the split for this row."""
        if config.guided_choice:
            # Constrained to ("1", "10") the model writes "1" first: nothing new
            # if it already did.
            return self.chosen != "1"
        return config.api == "completions" and bool(self.one_token)

    def add_follow_up(self, again: Reply, *, constrained: bool) -> None:
        """Read the split from a follow-up reply (see the module docstring)."""
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


def row_fields(reply: Reply, scrub: Scrub) -> dict[str, Any]:
    """The fields every result of a reply carries (raw text, tokens, latency)."""
    return {
        "raw": scrub(reply.text) if reply.status == "ok" else reply.detail,
        "prompt_tokens": reply.prompt_tokens,
        "completion_tokens": reply.completion_tokens,
        "latency_s": reply.latency_s,
    }


def argmax_score(reply: Reply, scrub: Scrub) -> ScoreResult:
    """The score the reply's text states, or ``parse_error`` (never 0)."""
    common = row_fields(reply, scrub)
    if reply.status != "ok":
        return ScoreResult(None, status=reply.status, **common)
    value = parse_score(reply.text)
    status = "ok" if value is not None else "parse_error"
    return ScoreResult(value, status=status, **common)


def expected_scores(
    config: OpenAIHttpEngineConfig,
    prompts: Sequence[str],
    body: dict[str, Any],
    replies: list[Reply],
    *,
    batch: Batch,
    scrub: Scrub,
) -> list[ScoreResult]:
    """Expected scores; reads the "1"/"10" split where it matters.

    Args:
        config: The engine config.
        prompts: The rows' prompts, as first sent.
        body: The body they were sent with.
        replies: Their replies (token counts of follow-ups are added to them).
        batch: Sends the follow-up requests.
        scrub: Masks the API key in a reply's text.
    """
    reads = [SplitRead.of(r, ten_is_one_token=config.ten_is_one_token) for r in replies]
    follow = [
        (j, read)
        for j, read in enumerate(reads)
        if read is not None and read.can_follow(config) and read.needs_split()
    ]
    if follow:
        follow_body: dict[str, Any]
        if config.guided_choice:
            follow_body = {**body, **choices_body(("1", "10"))}
            follow_prompts = [prompts[j] for j, _ in follow]
        else:  # completions: continue the prompt after the token "1"
            follow_body = {"max_tokens": 1, "temperature": 0.0}
            follow_body.update(logprobs_body(config))
            follow_prompts = [prompts[j] + read.one_token for j, read in follow]
        extra = batch(follow_prompts, follow_body)
        for (j, pending), again in zip(follow, extra, strict=True):
            pending.add_follow_up(again, constrained=config.guided_choice)
            first = replies[j]
            first.prompt_tokens = add_tokens(first.prompt_tokens, again.prompt_tokens)
            first.completion_tokens = add_tokens(
                first.completion_tokens, again.completion_tokens
            )
    out = []
    for reply, read in zip(replies, reads, strict=True):
        common = row_fields(reply, scrub)
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
                min_mass=config.min_score_mass,
            )
            common["raw"] = scrub(got.raw)
            out.append(ScoreResult(got.score, status=got.status, **common))
    return out


# -- judging protocols (CUBE_METHOD.md section 14) ---------------------------


def yes_no_score(
    reply: Reply,
    scrub: Scrub,
    *,
    words: tuple[str, str],
    expected: bool,
    min_mass: float,
) -> ScoreResult:
    """P(yes) of a yes/no reply (protocol ``checklist``).

    From the first non-blank token's logprobs (``expected``), else 1 or 0 from
    the text's word (an API without logprobs).
    """
    common = row_fields(reply, scrub)
    if reply.status != "ok":
        return ScoreResult(None, status=reply.status, **common)
    first: list[tuple[str, float]] | None = None
    if expected:
        steps = reply.top_logprobs or []
        tokens = reply.tokens or []
        pos = next((i for i, t in enumerate(tokens) if t.strip()), 0)
        first = list(steps[pos]) if pos < len(steps) else []
    got = read_yes_no(first, text=reply.text, words=words, min_mass=min_mass)
    return ScoreResult(got.p_yes, status=got.status, **common)


def line_scores(
    reply: Reply,
    scrub: Scrub,
    *,
    count: int,
    expected: bool,
    ten_is_one_token: bool | None,
    min_mass: float,
) -> list[ScoreResult]:
    """The ``count`` scores of a one-score-a-line reply (``read_score_lines``).

    Each carries the whole call's token counts.
    """
    common = row_fields(reply, scrub)
    if reply.status != "ok":
        return [ScoreResult(None, status=reply.status, **common)] * count
    readings = read_score_lines(
        reply.tokens,
        reply.top_logprobs,
        text=reply.text,
        count=count,
        ten_is_one_token=ten_is_one_token,
        min_mass=min_mass,
        expected=expected,
    )
    # An ok row keeps the whole reply (every row of the answer shows all lines).
    return [
        ScoreResult(
            r.score,
            status=r.status,
            **{**common, "raw": common["raw"] if r.status == "ok" else scrub(r.raw)},
        )
        for r in readings
    ]
