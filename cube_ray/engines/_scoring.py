"""Reading a judge score from text or from score-token log-probabilities.

Pure functions shared by every backend (no engine imports), so the rules are
the same whichever engine produced the output.

How ``expected`` scores are read
--------------------------------
The score is decided by the **first generated token**. Under a choice
constraint ("0".."10"), the first token's distribution is restricted to the
first tokens of the eleven choices, so its log-probabilities are exactly the
judge's belief over scores, except for one ambiguity: when the tokenizer writes
"10" as "1" + "0" (Gemma, Qwen and most tokenizers that split digits), the first
token "1" covers both 1 and 10. Its mass is then split with the conditional
probability of "0" after "1" (``one_then_zero``), which the backend reads from
the second generated step (or, for vLLM, a one-token follow-up request). Where
the split is unknown it is attributed to 1 (documented bias; never silent 0).
Probabilities are renormalised over the score tokens present, so a top-k list
that lacks some of them, or an unconstrained model that puts mass on other
tokens, still yields a score in [0, 10].
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping

from cube_ray.engines.base import SCORE_CHOICES

__all__ = [
    "expected_value",
    "parse_score",
    "score_distribution",
    "split_one_ten",
]

_STRICT = re.compile(r"\s*(10|[0-9])\s*")
_SCORES: dict[str, int] = {c: int(c) for c in SCORE_CHOICES}


def parse_score(text: str | None) -> float | None:
    r"""The score if ``text`` is exactly one integer 0..10 (whitespace allowed).

    >>> parse_score(" 7\n"), parse_score("10"), parse_score("7/10"), parse_score("11")
    (7.0, 10.0, None, None)
    """
    if text is None:
        return None
    m = _STRICT.fullmatch(text)
    return float(m.group(1)) if m else None


def score_distribution(
    first_token_logprobs: Iterable[tuple[str, float]],
    *,
    ten_is_one_token: bool,
    one_then_zero: float | None = None,
) -> dict[int, float] | None:
    """Probabilities of the scores 0..10 from the first token's log-probabilities.

    Args:
        first_token_logprobs: ``(decoded token, logprob)`` pairs of the first
            generated position (top-k or constrained). Tokens are compared after
            stripping whitespace; duplicates (``"7"`` and ``" 7"``) add up;
            non-score tokens and ``-inf`` are ignored.
        ten_is_one_token: Whether "10" is a single token of this tokenizer; if
            not, the token "1" stands for both 1 and 10.
        one_then_zero: P("0" | first token "1"), to split the mass of "1" between
            1 and 10 when ``ten_is_one_token`` is false. ``None``: all to 1.

    Returns:
        Score -> probability, renormalised to sum to 1 over the scores present,
        or ``None`` when no score token has positive probability.

    >>> d = score_distribution([("3", math.log(0.2)), ("1", math.log(0.6)),
    ...     ("x", math.log(0.2))], ten_is_one_token=False, one_then_zero=0.5)
    >>> {k: round(v, 3) for k, v in sorted(d.items())}
    {1: 0.375, 3: 0.25, 10: 0.375}
    """
    mass: dict[int, float] = {}
    for token, logprob in first_token_logprobs:
        key = token.strip()
        if key not in _SCORES or logprob is None or math.isnan(logprob):
            continue
        p = math.exp(logprob)
        if p <= 0.0:
            continue
        value = _SCORES[key]
        mass[value] = mass.get(value, 0.0) + p
    if not ten_is_one_token and 1 in mass:
        mass = split_one_ten(mass, one_then_zero)
    total = sum(mass.values())
    if total <= 0.0:
        return None
    return {k: v / total for k, v in mass.items() if v > 0.0}


def split_one_ten(
    mass: Mapping[int, float], one_then_zero: float | None
) -> dict[int, float]:
    """Split the probability of the token "1" between the scores 1 and 10.

    >>> {k: round(v, 3) for k, v in split_one_ten({1: 0.4, 5: 0.6}, 0.25).items()}
    {5: 0.6, 1: 0.3, 10: 0.1}
    """
    out = dict(mass)
    q = 0.0 if one_then_zero is None else min(max(one_then_zero, 0.0), 1.0)
    p1 = out.pop(1, 0.0)
    # A "10" that is not one token cannot also be a first token; drop any.
    out.pop(10, None)
    out[1] = p1 * (1.0 - q)
    out[10] = p1 * q
    return out


def expected_value(distribution: Mapping[int, float]) -> float:
    """Probability-weighted mean score.

    >>> expected_value({0: 0.5, 10: 0.5})
    5.0
    """
    total = sum(distribution.values())
    return sum(k * p for k, p in distribution.items()) / total
