"""Permissions and obligations in a text, and whether each is negative.

需要/无需, 可以/不可以, 须/无须, must/need not, can/cannot: the words whose
polarity a reader acts on. One lexicon, pure functions, no I/O; the fact check
(:mod:`cube_ray.facts`) compares them with the gold document's. It covers every
word that the ``negation`` fault of CUBE_METHOD.md section 12 flips, and every
word it flips one into (tested against :func:`cube_ray.qualification.negation_fault`),
plus the restatements that keep a polarity (may, has to).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Final

from cube_ray.language import CJK

__all__ = ["EN_WORDS", "ZH_WORDS", "PolarityWord", "is_negative", "polarity_words"]

ZH_WORDS: Final = (
    "不需要",
    "无需",
    "无须",
    "不必",
    "不用",
    "需要",
    "必须",
    "不可以",
    "可以",
    "不能",
    "不得",
    "不允许",
    "允许",
    "禁止",
    "应当",
    "须",
    "需",
)
"""Chinese permissions and obligations, affirmative and negative."""
_ZH_GUARDS: Final = {
    "需要": (r"(?<![所必])", ""),
    "须": (r"(?<![必无])", r"(?!知)"),
    "需": (r"(?<![所必无])", r"(?![要求])"),
}
"""Context in which a word is not a permission (所需 "required", 须知 "notice")."""
EN_WORDS: Final = (
    "cannot",
    "can not",
    "can't",
    "can’t",
    "can",
    "may not",
    "may",
    "must not",
    "mustn't",
    "must",
    "need not",
    "needn't",
    "do not need to",
    "does not need to",
    "don't need to",
    "doesn't need to",
    "will not need to",
    "will need to",
    "needs to",
    "need to",
    "do not have to",
    "does not have to",
    "don't have to",
    "doesn't have to",
    "has to",
    "have to",
    "is not required",
    "are not required",
    "is required",
    "are required",
    "is not allowed",
    "are not allowed",
    "is allowed",
    "are allowed",
    "should not",
    "should",
)
"""English permissions and obligations, affirmative and negative."""
_NEGATIVE = re.compile(r"[不无未禁]|\bnot\b|n't|n’t|\bcannot\b", re.IGNORECASE)


def is_negative(word: str) -> bool:
    """Whether a permission or obligation word denies (无需, cannot, need not).

    >>> [is_negative(w) for w in ("需要", "无须", "不可以", "禁止", "must", "need not")]
    [False, True, True, True, False, True]
    """
    return _NEGATIVE.search(word) is not None


def _pattern(
    words: Iterable[str], guards: Mapping[str, tuple[str, str]], *, en: bool
) -> re.Pattern[str]:
    """One alternation of the words, longest first (不需要 before 需要)."""
    parts = []
    for word in sorted(words, key=len, reverse=True):
        body = re.escape(word)
        if en:  # a capital first letter at a sentence start; whole words only
            body = f"[{word[0]}{word[0].upper()}]{re.escape(word[1:])}"
            body = rf"(?<![A-Za-z'’-]){body}(?![A-Za-z'’-])"
        before, after = guards.get(word, ("", ""))
        parts.append(f"(?:{before}{body}{after})")
    return re.compile("|".join(parts))


_ZH = _pattern(ZH_WORDS, _ZH_GUARDS, en=False)
_EN = _pattern(EN_WORDS, {}, en=True)


@dataclass(frozen=True)
class PolarityWord:
    """One permission or obligation: where it is, the word, its polarity."""

    start: int
    end: int
    word: str
    negative: bool


def polarity_words(text: str) -> list[PolarityWord]:
    """The permissions and obligations of a text, left to right.

    Chinese words when the text has a CJK character, English words otherwise.

    >>> words = polarity_words("无需到场，可以网上办理，所需材料")
    >>> [(w.word, w.negative) for w in words]
    [('无需', True), ('可以', False)]
    >>> words = polarity_words("You need not come; fees can wait.")
    >>> [(w.word, w.negative) for w in words]
    [('need not', True), ('can', False)]
    """
    pattern = _ZH if CJK.search(text) else _EN
    return [
        PolarityWord(m.start(), m.end(), m.group(0), is_negative(m.group(0)))
        for m in pattern.finditer(text)
    ]
