"""The negation kind: one permission or obligation flipped to its opposite."""

from __future__ import annotations

import random
import re
from collections.abc import Mapping, Sequence
from typing import Final

from cube_ray.qualification._document import GoldDocument
from cube_ray.qualification._fault import (
    Fault,
    at_sentence_start,
    replace_span,
)

__all__ = ["negation_fault"]


_ZH_FLIPS: Final = {
    "不需要": "需要",
    "无需": "需要",
    "无须": "必须",
    "不必": "必须",
    "需要": "不需要",
    "必须": "无须",
    "不可以": "可以",
    "可以": "不可以",
    "不能": "能",
    "不得": "可以",
    "不允许": "允许",
    "允许": "不允许",
    "应当": "无需",
    "须": "无须",
    "需": "无需",
}
"""Chinese permissions and obligations and their opposites."""
_ZH_GUARDS: Final = {
    "需要": (r"(?<![所必])", ""),
    "须": (r"(?<![必无])", r"(?!知)"),
    "需": (r"(?<![所必无])", r"(?![要求])"),
}
"""Context in which a word is not a permission (所需 "required", 须知 "notice")."""
_EN_FLIPS: Final = {
    "cannot": "can",
    "can not": "can",
    "can't": "can",
    "can’t": "can",
    "must not": "must",
    "mustn't": "must",
    "need not": "must",
    "needn't": "must",
    "do not need to": "need to",
    "does not need to": "needs to",
    "don't need to": "need to",
    "doesn't need to": "needs to",
    "will need to": "will not need to",
    "is not required": "is required",
    "are not required": "are required",
    "is required": "is not required",
    "are required": "are not required",
    "is not allowed": "is allowed",
    "are not allowed": "are allowed",
    "is allowed": "is not allowed",
    "are allowed": "are not allowed",
    "may not": "may",
    "should not": "should",
    "should": "should not",
    "must": "need not",
    "needs to": "does not need to",
    "need to": "do not need to",
    "can": "cannot",
}
"""English permissions and obligations and their opposites."""


def _flip_pattern(
    flips: Mapping[str, str], guards: Mapping[str, tuple[str, str]], *, en: bool
) -> re.Pattern[str]:
    """One alternation of the words, longest first (不需要 before 需要)."""
    parts = []
    for word in sorted(flips, key=len, reverse=True):
        body = re.escape(word)
        if en:  # a capital first letter at a sentence start
            body = f"[{word[0]}{word[0].upper()}]{re.escape(word[1:])}"
            body = rf"(?<![A-Za-z'’-]){body}(?![A-Za-z'’-])"
        before, after = guards.get(word, ("", ""))
        parts.append(f"(?:{before}{body}{after})")
    return re.compile("|".join(parts))


_ZH_PATTERN = _flip_pattern(_ZH_FLIPS, _ZH_GUARDS, en=False)
_EN_PATTERN = _flip_pattern(_EN_FLIPS, {}, en=True)


def negation_fault(
    answer: str,
    gold: GoldDocument,
    donors: Sequence[GoldDocument],
    rng: random.Random,
) -> Fault | None:
    """One permission or obligation flipped (需要/不需要, can/cannot, must/need not).

    >>> from cube_ray.qualification import fault_rng
    >>> answer = "申请人不需要到场，可以网上办理。"
    >>> rng = fault_rng(3, "q", "negation")
    >>> f = negation_fault(answer, GoldDocument.of("g", "x"), [], rng)
    >>> f.span.original in ("不需要", "可以")
    True
    >>> negation_fault("The fee is 10 EUR.", GoldDocument.of("g", "x"), [],
    ...                fault_rng(0, "q", "negation")) is None
    True
    """
    pattern, flips = (
        (_EN_PATTERN, _EN_FLIPS)
        if gold.language == "en" and not _ZH_PATTERN.search(answer)
        else (_ZH_PATTERN, _ZH_FLIPS)
    )
    # A capital (Must, Can) is a permission only at a sentence start.
    matches = [
        m
        for m in pattern.finditer(answer)
        if not m.group(0)[0].isupper() or at_sentence_start(answer, m.start())
    ]
    if not matches:
        return None
    m = rng.choice(matches)
    word = m.group(0)
    new = flips[word.lower()] if word.lower() in flips else flips[word]
    if word[0].isupper():
        new = new[0].upper() + new[1:]
    return replace_span("negation", answer, m.start(), m.end(), new)
