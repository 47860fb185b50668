"""Tokenisers for BM25: jieba (rjieba) for Chinese, a plain word split for English.

Both lower-case and NFKC-normalise first (full-width ``５０％`` becomes ``50%``),
drop tokens without a letter, digit or CJK character, and drop a short list of
stopwords. The language is decided once per corpus (:func:`detect_language`) and
recorded with the index, so queries are tokenised exactly as the documents were.
"""

from __future__ import annotations

import re
import threading
import unicodedata
from collections.abc import Sequence
from typing import Any

from cube_ray.errors import MissingDependencyError
from cube_ray.language import CJK, Language, detect_language

__all__ = [
    "TOKENIZER_VERSION",
    "Language",
    "char_bigrams",
    "detect_language",
    "tokenize",
    "tokenize_many",
]


TOKENIZER_VERSION = "2"
"""Bumped whenever tokenisation changes, so that cached indexes are rebuilt."""

_CJK = CJK
_KEEP = re.compile(r"[0-9a-z\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]")
_EN_WORD = re.compile(r"[0-9a-z]+")

_EN_STOP = frozenset(
    [
        "a",
        "an",
        "and",
        "are",
        "as",
        "at",
        "be",
        "but",
        "by",
        "for",
        "from",
        "has",
        "have",
        "how",
        "i",
        "if",
        "in",
        "into",
        "is",
        "it",
        "its",
        "of",
        "on",
        "or",
        "that",
        "the",
        "their",
        "then",
        "there",
        "these",
        "they",
        "this",
        "to",
        "was",
        "were",
        "what",
        "when",
        "where",
        "which",
        "who",
        "why",
        "will",
        "with",
        "do",
        "does",
        "did",
        "can",
        "could",
        "should",
        "would",
        "my",
        "me",
        "you",
        "your",
        "we",
    ]
)
# Function words and question words that carry no topic in citizen questions.
_ZH_STOP = frozenset(
    [
        "的",
        "了",
        "是",
        "在",
        "和",
        "与",
        "及",
        "或",
        "等",
        "吗",
        "呢",
        "吧",
        "啊",
        "么",
        "什么",
        "怎么",
        "怎样",
        "如何",
        "哪些",
        "哪个",
        "哪里",
        "多少",
        "几",
        "有",
        "有没有",
        "对",
        "为",
        "被",
        "把",
        "将",
        "也",
        "都",
        "就",
        "而",
        "及其",
        "以及",
        "其",
        "该",
        "此",
        "这",
        "那",
        "这个",
        "那个",
        "这些",
        "那些",
        "我",
        "我们",
        "你",
        "你们",
        "他",
        "她",
        "它",
        "他们",
        "请问",
        "需要",
        "可以",
        "能",
        "能否",
        "是否",
    ]
)

_segmenter_lock = threading.Lock()
_segmenter: Any = None


def _load_segmenter() -> Any:
    """rjieba: jieba's dictionary and algorithm (jieba-rs), about 20x faster."""
    global _segmenter
    if _segmenter is None:
        with _segmenter_lock:
            if _segmenter is None:
                try:
                    # optional: rjieba (the retrieval extra), only for Chinese text
                    import rjieba
                except ImportError as exc:
                    raise MissingDependencyError(
                        "rjieba",
                        extra="retrieval",
                        purpose="Chinese tokenisation for the built-in RAG",
                    ) from exc
                rjieba.cut_for_search("预热")  # loads the dictionary once
                _segmenter = rjieba
    return _segmenter


def _normalise(text: str) -> str:
    return unicodedata.normalize("NFKC", text).lower()


def tokenize(text: str, *, language: Language) -> list[str]:
    """Split one text into BM25 terms.

    Chinese uses jieba's search mode (through rjieba), which adds the
    sub-words of long words (``中华人民共和国`` also yields ``中华``, ``人民``,
    ``共和国``), so a question phrased with a shorter word still matches.
    Segments without a CJK character (phone numbers, URLs, English words) are
    split into letter/digit runs, as in English.

    >>> tokenize("How do I RENEW my passport?", language="en")
    ['renew', 'passport']
    >>> tokenize("办理护照需要什么材料？", language="zh")
    ['办理', '护照', '材料']
    >>> tokenize("咨询电话：020-12345", language="zh")
    ['咨询', '电话', '咨询电话', '020', '12345']
    """
    norm = _normalise(text)
    if language == "en":
        return [w for w in _EN_WORD.findall(norm) if w not in _EN_STOP]
    out = []
    for tok in _load_segmenter().cut_for_search(norm):
        tok = tok.strip()
        if not tok:
            continue
        for piece in (tok,) if _CJK.search(tok) else _EN_WORD.findall(tok):
            if _KEEP.search(piece) and piece not in _ZH_STOP and piece not in _EN_STOP:
                out.append(piece)
    return out


_ZH_STOP_CHARS = frozenset(w for w in _ZH_STOP if len(w) == 1)
_RUN = re.compile(r"[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]+|[0-9a-z]+")


def char_bigrams(text: str) -> list[str]:
    """Content units without a dictionary: CJK character bigrams and Latin words.

    Each run of CJK characters gives its overlapping bigrams (a lone character
    gives itself); letter/digit runs give themselves. Stopwords of either
    language are dropped, and so are bigrams with a one-character stopword
    (``和营`` in ``报告和营业执照`` spans a junction, not a term). No
    segmenter is needed, so the units are the same on every machine.

    >>> char_bigrams("请问办理护照需要7个工作日吗？")
    ['问办', '办理', '理护', '护照', '照需', '7', '个工', '工作', '作日']
    """
    out: list[str] = []
    for m in _RUN.finditer(_normalise(text)):
        piece = m.group()
        if not _CJK.match(piece):
            if piece not in _EN_STOP:
                out.append(piece)
            continue
        grams = (
            [piece]
            if len(piece) == 1
            else [piece[i : i + 2] for i in range(len(piece) - 1)]
        )
        out.extend(
            g for g in grams if g not in _ZH_STOP and not _ZH_STOP_CHARS & set(g)
        )
    return out


def tokenize_many(texts: Sequence[str], *, language: Language) -> list[list[str]]:
    """:func:`tokenize` over a sequence of texts."""
    return [tokenize(t or "", language=language) for t in texts]
