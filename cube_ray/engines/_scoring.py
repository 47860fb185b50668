"""Reading a judge score from text or from score-token log-probabilities.

Pure functions shared by every backend (no engine imports), so the rules are
the same whichever engine produced the output: both the vLLM and the HTTP
engine turn first-token log-probabilities into an ``expected`` score with
:func:`read_expected` and nothing else.

How ``expected`` scores are read
--------------------------------
The score is decided by the **first generated token**. Under a choice
constraint ("0".."10"), the first token's distribution is restricted to the
first tokens of the eleven choices, so its log-probabilities are exactly the
judge's belief over scores. Without a constraint the model may put mass on
other tokens ("Sure", "**"); the score tokens' share of the first token's
probability is the **score mass**. Below ``min_score_mass`` the row gets the
status ``low_score_mass`` and no score: a distribution renormalised from a
small remainder says little about what the judge meant. Above it,
probabilities are renormalised over the score tokens present.

One ambiguity remains: when the tokenizer writes "10" as "1" + "0" (Gemma,
Qwen and most tokenizers that split digits), the first token "1" covers both 1
and 10. Its mass is then split with the conditional probability of "0" after
"1" (``one_then_zero``, see :func:`zero_share`), which the backend reads from
the second generated step or from a follow-up request. The split is needed
only where it can matter: moving all of "1"'s share from 1 to 10 shifts the
expected score by ``9 * share``; at most :data:`SPLIT_TOLERANCE` points, the
mass counts as 1. Where it matters and the backend could not read the split,
the row falls back to the greedy (argmax) score with the status
``argmax_fallback``; it is never silently biased, and never 0.

Log-probabilities come from a server and are checked before use
(:func:`valid_logprob`): NaN, infinities and positive values (a probability
above 1) are ignored, so a hostile or broken reply can only leave a row
without a score (``no_logprobs``), never make a NaN score or raise.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from cube_ray.engines.base import (
    SCORE_CHOICES,
    STATUS_ARGMAX_FALLBACK,
    STATUS_LOW_SCORE_MASS,
    STATUS_NO_LOGPROBS,
)

__all__ = [
    "SPLIT_TOLERANCE",
    "ExpectedReading",
    "YesNoReading",
    "expected_value",
    "parse_score",
    "read_expected",
    "read_score_lines",
    "read_yes_no",
    "score_distribution",
    "score_mass",
    "score_starts",
    "split_matters",
    "split_one_ten",
    "valid_logprob",
    "yes_no_mass",
    "yes_no_word",
    "zero_share",
]

SPLIT_TOLERANCE = 0.05
"""Largest shift of an expected score (points on 0..10) an unread "1"/"10"
split may cause; above it the split must be read, or the row falls back."""

LOGPROB_SLACK = 1e-6
"""Positive log-probabilities up to this are float rounding of a certain token
(read as 0); larger ones are not log-probabilities and are ignored."""


def valid_logprob(logprob: object) -> float | None:
    """A log-probability as a float <= 0, or None when it is not one.

    >>> [valid_logprob(x) for x in (-0.5, 0.0, 1e-9, 1000.0, float("inf"))]
    [-0.5, 0.0, 0.0, None, None]
    >>> [valid_logprob(x) for x in (float("nan"), -float("inf"), "x", True, None)]
    [None, -inf, None, None, None]
    >>> valid_logprob(10**400), valid_logprob(-(10**400))
    (None, None)
    """
    if isinstance(logprob, bool) or not isinstance(logprob, int | float):
        return None
    try:
        value = float(logprob)
    except OverflowError:  # a JSON integer of 400 digits
        return None
    if math.isnan(value) or value == math.inf or value > LOGPROB_SLACK:
        return None
    return min(value, 0.0)


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


def score_mass(first_token_logprobs: Iterable[tuple[str, float]]) -> dict[int, float]:
    """Probability of each score token at the first position, not renormalised.

    Tokens are compared after stripping whitespace; duplicates (``"7"`` and
    ``" 7"``) add up; non-score tokens, ``-inf`` and what is not a
    log-probability (:func:`valid_logprob`) are ignored.

    >>> m = score_mass([("7", math.log(0.5)), (" 7", math.log(0.1)),
    ...     ("Sure", math.log(0.3)), ("3", -math.inf), ("4", math.inf),
    ...     ("5", 1000.0), ("6", math.nan)])
    >>> {k: round(v, 3) for k, v in m.items()}
    {7: 0.6}
    """
    mass: dict[int, float] = {}
    for token, raw in first_token_logprobs:
        key = str(token).strip()
        logprob = valid_logprob(raw)
        if key not in _SCORES or logprob is None:
            continue
        p = math.exp(logprob)
        if p <= 0.0:
            continue
        mass[_SCORES[key]] = mass.get(_SCORES[key], 0.0) + p
    return mass


def score_distribution(
    first_token_logprobs: Iterable[tuple[str, float]],
    *,
    ten_is_one_token: bool,
    one_then_zero: float | None = None,
) -> dict[int, float] | None:
    """Probabilities of the scores 0..10 from the first token's log-probabilities.

    Args:
        first_token_logprobs: ``(decoded token, logprob)`` pairs of the first
            generated position (top-k or constrained); see :func:`score_mass`.
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
    mass = score_mass(first_token_logprobs)
    if not ten_is_one_token and 1 in mass:
        mass = split_one_ten(mass, one_then_zero)
    return _normalised(mass)


def _normalised(mass: Mapping[int, float]) -> dict[int, float] | None:
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


def split_matters(
    mass: Mapping[int, float],
    *,
    ten_is_one_token: bool | None,
    tolerance: float = SPLIT_TOLERANCE,
) -> bool:
    """Whether the "1"/"10" split can move the expected score beyond ``tolerance``.

    Args:
        mass: Score-token probabilities of the first position (:func:`score_mass`).
        ten_is_one_token: Known tokenizer property, or ``None`` when unknown; a
            "10" among the first position's tokens then proves it is one token.
        tolerance: Points on the 0..10 scale.

    >>> split_matters({7: 0.9, 1: 0.1}, ten_is_one_token=False)
    True
    >>> split_matters({7: 0.999, 1: 0.001}, ten_is_one_token=None)
    False
    >>> split_matters({7: 0.8, 1: 0.1, 10: 0.1}, ten_is_one_token=None)
    False
    """
    if ten_is_one_token or (ten_is_one_token is None and 10 in mass):
        return False
    total = sum(mass.values())
    return total > 0.0 and 9.0 * mass.get(1, 0.0) / total > tolerance


def zero_share(step: Iterable[tuple[str, float]]) -> float:
    """P("0") at the step after a first token "1": the split ``one_then_zero``.

    The model's own conditional probability (not renormalised over the listed
    alternatives, which may be a top-k cut); clamped to [0, 1].

    >>> round(zero_share([("0", math.log(0.3)), ("<eos>", math.log(0.7))]), 3)
    0.3
    >>> zero_share([("<eos>", 0.0), ("0", -math.inf)])
    0.0
    >>> zero_share([("0", 1000.0), (" 0", math.inf), ("0", math.nan)])
    0.0
    """
    p = 0.0
    for token, raw in step:
        lp = valid_logprob(raw)
        if str(token).strip() == "0" and lp is not None:
            p += math.exp(lp)
    return min(max(p, 0.0), 1.0)


def expected_value(distribution: Mapping[int, float]) -> float:
    """Probability-weighted mean score.

    >>> expected_value({0: 0.5, 10: 0.5})
    5.0
    """
    total = sum(distribution.values())
    return sum(k * p for k, p in distribution.items()) / total


@dataclass(frozen=True, slots=True)
class ExpectedReading:
    """An ``expected`` score, or why there is none, and the text to keep as raw."""

    score: float | None
    """Score in 0..10 (the greedy score for ``argmax_fallback``), else None."""
    status: str
    """``ok``, ``low_score_mass``, ``no_logprobs`` or ``argmax_fallback``."""
    mass: float
    """Probability mass on the score tokens at the first position."""
    raw: str | None
    """The generated text, with a bracketed note when the status is not ``ok``."""


def read_expected(
    first_token_logprobs: Iterable[tuple[str, float]],
    *,
    text: str | None,
    ten_is_one_token: bool | None,
    one_then_zero: float | None,
    min_mass: float,
) -> ExpectedReading:
    """The ``expected`` score of one judge output; the one rule every engine uses.

    Args:
        first_token_logprobs: ``(token, logprob)`` pairs of the first position.
        text: The generated text (its greedy score is the fallback; already
            checked to be a valid score by the caller, or constrained).
        ten_is_one_token: Tokenizer property; ``None`` if unknown (see
            :func:`split_matters`).
        one_then_zero: P("0" | "1") where the backend could read it, else None.
        min_mass: Least score mass for a score (``min_score_mass``).

    Returns:
        ``ok`` with the rounded expected score; ``no_logprobs`` when no score
        token has probability; ``low_score_mass`` below ``min_mass``;
        ``argmax_fallback`` with the greedy score where an unread split matters.

    >>> lp = math.log
    >>> read_expected([("7", lp(.5)), ("8", lp(.3)), ("Sure", lp(.2))], text="7",
    ...     ten_is_one_token=True, one_then_zero=None, min_mass=0.5).score
    7.375
    >>> r = read_expected([("7", lp(.2)), ("Sure", lp(.8))], text="7",
    ...     ten_is_one_token=True, one_then_zero=None, min_mass=0.5)
    >>> r.score, r.status, r.raw
    (None, 'low_score_mass', '7 [score-token mass 0.2000 < min_score_mass 0.5]')
    >>> first = [("9", lp(.6)), ("1", lp(.4))]
    >>> read_expected(first, text="9", ten_is_one_token=False,
    ...     one_then_zero=0.5, min_mass=0.5).score
    7.6
    >>> r = read_expected(first, text="9", ten_is_one_token=False,
    ...     one_then_zero=None, min_mass=0.5)
    >>> r.score, r.status
    (9.0, 'argmax_fallback')
    """
    mass = score_mass(first_token_logprobs)
    total = sum(mass.values())
    if total <= 0.0:
        return ExpectedReading(
            None, STATUS_NO_LOGPROBS, 0.0, _note(text, "no score token has logprobs")
        )
    if total < min_mass:
        note = f"score-token mass {total:.4f} < min_score_mass {min_mass:g}"
        return ExpectedReading(None, STATUS_LOW_SCORE_MASS, total, _note(text, note))
    ten_single = ten_is_one_token if ten_is_one_token is not None else 10 in mass
    if not ten_single and 1 in mass:
        if one_then_zero is None and split_matters(
            mass, ten_is_one_token=ten_is_one_token
        ):
            share = mass[1] / total
            note = (
                f'P("1")={share:.4f} is 1 or 10 and the split could not be read '
                f"(moves the expected score by up to {9 * share:.2f}); argmax used"
            )
            greedy = parse_score(text)
            status = STATUS_ARGMAX_FALLBACK if greedy is not None else "parse_error"
            return ExpectedReading(greedy, status, total, _note(text, note))
        mass = split_one_ten(mass, one_then_zero)
    dist = _normalised(mass)
    assert dist is not None  # total > 0 and the split keeps the mass
    return ExpectedReading(round(expected_value(dist), 6), "ok", total, text)


def _note(text: str | None, note: str) -> str:
    return f"{text} [{note}]" if text else f"[{note}]"


# -- judging protocols (CUBE_METHOD.md section 14) ---------------------------

_WORD_EDGES = " \t\n\r\"'`*.,;:!?()[]{}。，；：！？「」『』“”‘’（）"


def _norm(token: str) -> str:
    return token.strip(_WORD_EDGES).casefold()


def yes_no_word(text: str | None, words: tuple[str, str]) -> bool | None:
    """True for the yes word, False for the no word, None for anything else.

    Case, spacing and punctuation around the word do not matter.

    >>> [yes_no_word(t, ("yes", "no")) for t in ("Yes.", " no", "maybe", None)]
    [True, False, None, None]
    >>> yes_no_word("是。", ("是", "否")), yes_no_word("**否**", ("是", "否"))
    (True, False)
    """
    if text is None:
        return None
    got = _norm(text)
    yes, no = (_norm(w) for w in words)
    if got == yes:
        return True
    return False if got == no else None


def yes_no_mass(
    first_token_logprobs: Iterable[tuple[str, float]], words: tuple[str, str]
) -> tuple[float, float]:
    """Probability of the yes and of the no word at the answer's first token.

    A token counts for a word when, without case, spacing and punctuation, it
    is a non-empty prefix of the word ("Yes", " yes", "YES" and the first piece
    "y" of a tokenizer that splits it); duplicates add up; what is not a
    log-probability is ignored (:func:`valid_logprob`). A token that is a
    prefix of both words counts for neither.

    >>> lp = math.log
    >>> y, n = yes_no_mass([("Yes", lp(.5)), (" yes", lp(.2)), ("No", lp(.1)),
    ...     ("Sure", lp(.2))], ("yes", "no"))
    >>> round(y, 3), round(n, 3)
    (0.7, 0.1)
    >>> round(yes_no_mass([("是", lp(.9)), ("否", lp(.05)), ("的", lp(.05))],
    ...     ("是", "否"))[1], 6)
    0.05
    >>> yes_no_mass([("y", math.nan), ("n", 5.0)], ("yes", "no"))
    (0.0, 0.0)
    """
    yes, no = (_norm(w) for w in words)
    p_yes = p_no = 0.0
    for token, raw in first_token_logprobs:
        key = _norm(str(token))
        logprob = valid_logprob(raw)
        if not key or logprob is None:
            continue
        is_yes, is_no = yes.startswith(key), no.startswith(key)
        if is_yes == is_no:
            continue
        if is_yes:
            p_yes += math.exp(logprob)
        else:
            p_no += math.exp(logprob)
    return p_yes, p_no


@dataclass(frozen=True, slots=True)
class YesNoReading:
    """P(yes) of one yes/no reply, or why there is none."""

    p_yes: float | None
    """P(yes) normalised over yes and no (0 or 1 when read from the text)."""
    status: str
    """``ok``, ``low_score_mass``, ``no_logprobs`` or ``parse_error``."""
    mass: float
    """Probability on the yes and no tokens at the first position."""


def read_yes_no(
    first_token_logprobs: Iterable[tuple[str, float]] | None,
    *,
    text: str | None,
    words: tuple[str, str],
    min_mass: float,
) -> YesNoReading:
    """P(yes) of a yes/no reply; the one rule every engine uses.

    With log-probabilities: P(yes) / (P(yes) + P(no)) at the first token, when
    the two hold at least ``min_mass`` (``min_score_mass``); without any
    (``None``: an API that gives none, or ``argmax`` mode): 1 or 0 from the
    text's word, ``parse_error`` for another text.

    >>> lp = math.log
    >>> r = read_yes_no([("是", lp(.6)), ("否", lp(.2)), ("x", lp(.2))],
    ...     text="是", words=("是", "否"), min_mass=0.5)
    >>> r.p_yes, r.status
    (0.75, 'ok')
    >>> read_yes_no([("x", lp(.9)), ("no", lp(.1))], text="x", words=("yes", "no"),
    ...     min_mass=0.5).status
    'low_score_mass'
    >>> read_yes_no(None, text="No.", words=("yes", "no"), min_mass=0.5).p_yes
    0.0
    >>> read_yes_no(None, text="perhaps", words=("yes", "no"), min_mass=0.5).status
    'parse_error'
    """
    if first_token_logprobs is None:
        said = yes_no_word(text, words)
        if said is None:
            return YesNoReading(None, "parse_error", 0.0)
        return YesNoReading(1.0 if said else 0.0, "ok", 1.0)
    p_yes, p_no = yes_no_mass(first_token_logprobs, words)
    total = p_yes + p_no
    if total <= 0.0:
        return YesNoReading(None, STATUS_NO_LOGPROBS, 0.0)
    if total < min_mass:
        return YesNoReading(None, STATUS_LOW_SCORE_MASS, total)
    return YesNoReading(round(p_yes / total, 6), "ok", total)


def score_starts(tokens: Sequence[str]) -> list[int]:
    r"""Where each score of a one-score-a-line reply starts: token indices.

    A score starts at a token holding a digit whose text so far ends a line (or
    is blank); the tokens after it on its line continue it ("1" then "0").

    >>> score_starts(["7", "\n", "1", "0", "\n", "\n", " 5"])
    [0, 2, 6]
    >>> score_starts(["Scores", ":", "\n", "8", "\n9"])
    [3]
    """
    starts: list[int] = []
    so_far = ""
    for i, token in enumerate(tokens):
        line_start = not so_far.strip() or so_far.endswith("\n")
        if line_start and token.strip()[:1].isdigit():
            starts.append(i)
        so_far += token
    return starts


def read_score_lines(
    tokens: Sequence[str] | None,
    steps: Sequence[Sequence[tuple[str, float]]] | None,
    *,
    text: str | None,
    count: int,
    ten_is_one_token: bool | None,
    min_mass: float,
    expected: bool,
) -> list[ExpectedReading]:
    r"""The ``count`` scores of a one-score-a-line reply (``all_dimensions``).

    The text must hold exactly ``count`` lines, each one integer 0..10, else
    every score is a ``parse_error``. ``expected``: each score is read with
    :func:`read_expected` at its position (:func:`score_starts`), the "1"/"10"
    split from the step after a "1"; without positions the scores are
    ``no_logprobs``.

    Args:
        tokens: The generated tokens (None: unknown).
        steps: Per generated token, its ``(token, logprob)`` alternatives.
        text: The reply.
        count: Scores expected (the dimensions).
        ten_is_one_token: Tokenizer property, None if unknown.
        min_mass: ``min_score_mass``.
        expected: Read expected scores (else the greedy ones of the text).

    >>> lp = math.log
    >>> toks = ["7", "\n", "1", "0"]
    >>> steps = [[("7", lp(.5)), ("9", lp(.5))], [("\n", 0.0)],
    ...     [("1", lp(.8)), ("2", lp(.2))], [("0", lp(.5)), ("\n", lp(.5))]]
    >>> [r.score for r in read_score_lines(toks, steps, text="7\n10", count=2,
    ...     ten_is_one_token=False, min_mass=0.5, expected=True)]
    [8.0, 4.8]
    >>> [r.status for r in read_score_lines(None, None, text="7\nten", count=2,
    ...     ten_is_one_token=None, min_mass=0.5, expected=False)]
    ['parse_error', 'parse_error']
    """
    lines = [line for line in (text or "").split("\n") if line.strip()]
    greedy = [parse_score(line) for line in lines]
    if len(lines) != count or any(g is None for g in greedy):
        note = _note(text, f"not {count} scores 0..10, one a line")
        return [ExpectedReading(None, "parse_error", 0.0, note)] * count
    if not expected:
        return [
            ExpectedReading(g, "ok", 1.0, line)
            for g, line in zip(greedy, lines, strict=True)
        ]
    starts = score_starts(tokens or [])
    if not steps or len(starts) != count or starts[-1] >= len(steps):
        note = _note(text, "score positions not found in the logprobs")
        return [ExpectedReading(None, STATUS_NO_LOGPROBS, 0.0, note)] * count
    out = []
    for pos, line in zip(starts, lines, strict=True):
        token = (tokens or [])[pos].strip()
        split = None
        if token == "1" and pos + 1 < len(steps):
            split = zero_share(steps[pos + 1])
        out.append(
            read_expected(
                steps[pos],
                text=line,
                ten_is_one_token=ten_is_one_token,
                one_then_zero=split,
                min_mass=min_mass,
            )
        )
    return out
