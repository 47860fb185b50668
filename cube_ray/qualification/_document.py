"""A gold document as the fault generator sees it: its text and its fields.

cube_ray's documents are ``label: value`` lines, one per configured corpus field
(``cube_ray.corpus.record_to_document``); a passage corpus (one text field, an
English Wikipedia passage) has no such structure and is one field, ``text``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from cube_ray.language import Language, detect_language

__all__ = [
    "SENTENCE_END",
    "GoldDocument",
    "balanced",
    "parse_fields",
    "split_items",
    "strip_label",
]

_LABEL = re.compile(r"^([^:：\n]{1,30})[:：]\s?(.*)$")
"""A ``label: value`` line: a short label without sentence punctuation."""
_SENTENCE_PUNCT = re.compile(r"[。！？.!?,，;；]")
LIST_SEPARATORS = "、；;"
SENTENCE_END = re.compile(
    r"[。！？!?]+[”’」』)）]*"
    r"|(?<!^\d)(?<!^\d\d)(?<!\b[A-Z])(?<!\b(?:Dr|Mr|Ms|St|Jr|Sr|Ph|Co|vs|No))"
    r"(?<!\bMrs)(?<!\betc)\.(?=\s|$)[”’\")]*",
    re.MULTILINE,
)
"""A sentence's end: not the ``1.`` of a list item, not ``Dr.``, ``Ph. D.``.

>>> [m.end() for m in SENTENCE_END.finditer("Dr. Li was a Ph. D. student. 1. Yes")]
[28]
"""
"""Separators between the items of a list field (corpus ``list_separator``)."""


def parse_fields(text: str) -> dict[str, str]:
    r"""The ``label -> value`` fields of a document's text; ``{}`` for a passage.

    A text is a field document when every non-empty line is a ``label: value``
    line with a short label (at most 30 characters, no sentence punctuation).

    >>> parse_fields("事项名称: 开办\n承诺办结时限: 7(工作日)")
    {'事项名称': '开办', '承诺办结时限': '7(工作日)'}
    >>> parse_fields("Google was founded in 1998. It is big.")
    {}
    >>> parse_fields("Note: the fee is 10 EUR.\nIt can change.")
    {}
    """
    fields: dict[str, str] = {}
    for line in text.splitlines():
        if not line.strip():
            continue
        m = _LABEL.match(line)
        if m is None or _SENTENCE_PUNCT.search(m.group(1)):
            return {}
        label, value = m.group(1).strip(), m.group(2).strip()
        if value:
            fields.setdefault(label, value)
    return fields


def split_items(value: str) -> list[str]:
    """The items of a list field value (``、``/``；``-separated), stripped.

    >>> split_items("身份证、营业执照；申请表")
    ['身份证', '营业执照', '申请表']
    """
    items = re.split(f"[{re.escape(LIST_SEPARATORS)}]", value)
    return [s.strip() for s in items if s.strip()]


def strip_label(value: str) -> str:
    """A value without the label some records repeat inside it.

    >>> strip_label("办理地点：广州市东风中路305号")
    '广州市东风中路305号'
    >>> strip_label("广州市")
    '广州市'
    """
    return re.sub(r"^[^:：\s]{1,8}[:：]\s*", "", value).strip()


_PAIRS: tuple[tuple[str, str], ...] = (
    ("(", ")"),
    ("（", "）"),
    ("《", "》"),
    ("〈", "〉"),
    ("[", "]"),
    ("【", "】"),
    ("“", "”"),
)


def balanced(text: str) -> bool:
    """Whether every bracket or quote pair of ``text`` is closed in it.

    A list item split at a ``、`` inside brackets is not a whole item.

    >>> balanced("授权委托书等）"), balanced("《申请表》(txt格式)")
    (False, True)
    """
    return all(text.count(a) == text.count(b) for a, b in _PAIRS)


@dataclass(frozen=True)
class GoldDocument:
    """One document: its id, text and fields (label -> value)."""

    doc_id: str
    text: str
    fields: dict[str, str] = field(default_factory=dict)
    language: Language = "en"

    @classmethod
    def of(cls, doc_id: str, text: str) -> GoldDocument:
        """A document from its id and text (fields parsed, language detected).

        >>> GoldDocument.of("1", "事项名称: 开办").fields
        {'事项名称': '开办'}
        >>> GoldDocument.of("2", "Paris is in France.").language
        'en'
        """
        return cls(doc_id, text, parse_fields(text), detect_language([text]))
