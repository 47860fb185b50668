"""The language of a corpus: Chinese or English, from its share of CJK characters.

One rule, used by the built-in RAG (which tokeniser) and by the prompts (which
packaged prompt set, ``prompts.language: auto``).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Literal

__all__ = ["CJK", "Language", "detect_language"]

Language = Literal["zh", "en"]
"""The languages cube_ray has prompt sets and tokenisers for."""

CJK = re.compile(r"[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]")
"""One CJK ideograph (unified, extension A, compatibility)."""
_LATIN = re.compile(r"[A-Za-z]")


def detect_language(texts: Iterable[str]) -> Language:
    """``zh`` if CJK characters make up at least a fifth of Latin letters, else ``en``.

    >>> detect_language(["居民身份证换领", "ID card"])
    'zh'
    >>> detect_language(["Passport renewal", "Fees: 10 EUR"])
    'en'
    >>> detect_language([])
    'en'
    """
    cjk = latin = 0
    for text in texts:
        cjk += len(CJK.findall(text))
        latin += len(_LATIN.findall(text))
    if cjk == 0:
        return "en"
    # A CJK character carries about as much as a short English word.
    return "zh" if cjk * 5 >= latin else "en"
