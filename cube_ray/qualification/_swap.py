"""Substitution kinds: a number, or a named value, swapped for another.

``number``: a number the answer shares with its gold document, changed to a
plausible other. ``entity``: a span equal to a gold field value (an agency, a
material, a place; a passage's proper-noun phrase), replaced by the same
field's value in a donor document.
"""

from __future__ import annotations

import random
import re
from collections.abc import Sequence

from cube_ray.qualification._document import GoldDocument, split_items, strip_label
from cube_ray.qualification._fault import (
    Fault,
    at_sentence_start,
    replace_span,
)
from cube_ray.qualification._numbers import (
    number_tokens,
    number_values,
    plausible_other,
)

__all__ = ["entity_fault", "number_fault"]


# --- number -------------------------------------------------------------------


def number_fault(
    answer: str,
    gold: GoldDocument,
    donors: Sequence[GoldDocument],
    rng: random.Random,
) -> Fault | None:
    r"""One number of the answer that the gold document also has, changed.

    >>> from cube_ray.qualification import fault_rng
    >>> gold = GoldDocument.of("d", "承诺办结时限: 7(工作日)\n咨询电话: 020-34121084")
    >>> answer = "7个工作日内办结，另需3份复印件。"
    >>> f = number_fault(answer, gold, [], fault_rng(0, "q", "number"))
    >>> f.span.original, f.span.start, f.faulted[1:] == answer[1:]
    ('7', 0, True)
    """
    known = number_values(gold.text)
    tokens = [t for t in number_tokens(answer) if t.value in known]
    if not tokens:
        return None
    token = rng.choice(tokens)
    return replace_span(
        "number", answer, token.start, token.end, plausible_other(token, rng)
    )


# --- entity -------------------------------------------------------------------

_YES_NO = frozenset({"是", "否", "有", "无", "yes", "no", "Yes", "No"})
_PROPER = re.compile(r"\b[A-Z][^\W\d_]+(?:\s+(?:of\s+|the\s+|de\s+)?[A-Z][^\W\d_]+)*")
_COMMON_CAPS = frozenset(
    [
        "The",
        "A",
        "An",
        "In",
        "On",
        "At",
        "It",
        "Its",
        "This",
        "That",
        "These",
        "Those",
        "He",
        "She",
        "They",
        "We",
        "You",
        "I",
        "As",
        "For",
        "By",
        "From",
        "To",
        "Of",
        "And",
        "But",
        "Or",
        "If",
        "When",
        "While",
        "After",
        "Before",
        "During",
        "Since",
        "Yes",
        "No",
        "There",
        "Here",
        "However",
        "Also",
        "Then",
        "Thus",
        "According",
        "Have",
        "Has",
        "Had",
        "Do",
        "Does",
        "Did",
        "Is",
        "Are",
        "Was",
        "Were",
        "What",
        "Who",
        "Whom",
        "How",
        "Why",
        "Where",
        "Which",
        "My",
        "Your",
        "Our",
        "Their",
        "His",
        "Her",
        "One",
        "Some",
        "Most",
        "All",
        "Many",
        "Each",
        "Every",
        "Both",
        "Other",
        "Such",
        "Not",
        "No",
        "January",
        "February",
        "March",
        "April",
        "May",
        "June",
        "July",
        "August",
        "September",
        "October",
        "November",
        "December",
        "Monday",
        "Tuesday",
        "Wednesday",
        "Thursday",
        "Friday",
        "Saturday",
        "Sunday",
    ]
)
"""Capitalised words that begin sentences or name dates, not entities."""
_PASSAGE_LABEL = "name"
"""The field of a proper-noun phrase of a passage (a document with no fields)."""


def _names_something(piece: str) -> bool:
    """Whether a value names an agency, material, place or item, not a number.

    >>> values = ["30(工作日)", "020-8313", "省级", "广州市东风中路305号"]
    >>> [_names_something(v) for v in values]
    [False, False, True, True]
    """
    letters = re.sub(r"[\d\W_]", "", piece)
    return len(letters) >= 2 and piece not in _YES_NO and letters not in _UNIT_WORDS


_UNIT_WORDS = frozenset(
    {"工作日", "自然日", "个工作日", "日", "天", "小时", "元", "个月"}
)


def _entity_values(doc: GoldDocument) -> list[tuple[str, str]]:
    """(label, value) pairs an entity fault may swap: field values and list items.

    A passage's pairs are its proper-noun phrases (label ``name``).
    """
    if not doc.fields:
        out = []
        for m in _PROPER.finditer(doc.text):
            phrase = m.group(0)
            head, _, tail = phrase.partition(" ")
            if head in _COMMON_CAPS and tail:  # "These Dutch" -> "Dutch"
                phrase = tail
            # A capitalised first word of a sentence is no name by itself.
            if phrase in _COMMON_CAPS or len(phrase) < 3:
                continue
            if " " in phrase or not at_sentence_start(doc.text, m.start()):
                out.append((_PASSAGE_LABEL, phrase))
        return list(dict.fromkeys(out))
    pairs: list[tuple[str, str]] = []
    for label, value in doc.fields.items():
        value = strip_label(value)
        items = split_items(value)
        for piece in [value, *items] if len(items) > 1 else [value]:
            if _names_something(piece):
                pairs.append((label, piece))
    return list(dict.fromkeys(pairs))


def _occurrences(
    answer: str, pairs: Sequence[tuple[str, str]]
) -> list[tuple[int, int, str]]:
    """Non-overlapping (start, end, label) of the values in the answer.

    Where values overlap, the longest wins (广东省公安厅 over 广东省).
    """
    found: list[tuple[int, int, str]] = []
    for label, value in pairs:
        start = answer.find(value)
        while start >= 0:
            found.append((start, start + len(value), label))
            start = answer.find(value, start + 1)
    found.sort(key=lambda x: (-(x[1] - x[0]), x[0]))
    kept: list[tuple[int, int, str]] = []
    for s, e, label in found:
        if all(e <= ks or s >= ke for ks, ke, _ in kept):
            kept.append((s, e, label))
    return sorted(kept)


def entity_fault(
    answer: str,
    gold: GoldDocument,
    donors: Sequence[GoldDocument],
    rng: random.Random,
) -> Fault | None:
    r"""A span equal to a gold field value, replaced by that field's value elsewhere.

    >>> from cube_ray.qualification import fault_rng
    >>> gold = GoldDocument.of("g", "实施机构: 广东省公安厅\n办理地点: 广州")
    >>> donor = GoldDocument.of("d", "实施机构: 广东省民政厅\n办理地点: 深圳")
    >>> rng = fault_rng(0, "q", "entity")
    >>> f = entity_fault("请到广东省公安厅办理。", gold, [donor], rng)
    >>> f.faulted, f.span.original
    ('请到广东省民政厅办理。', '广东省公安厅')
    """
    spots = _occurrences(answer, _entity_values(gold))
    if not spots:
        return None
    order = list(donors)
    rng.shuffle(order)
    for start, end, label in rng.sample(spots, len(spots)):
        original = answer[start:end]
        is_item = strip_label(gold.fields.get(label, original)) != original
        for donor in order:
            if donor.doc_id == gold.doc_id:
                continue
            if label == _PASSAGE_LABEL:
                options = [v for lab, v in _entity_values(donor) if lab == label]
            else:
                value = donor.fields.get(label)
                if value is None:
                    continue
                value = strip_label(value)
                options = split_items(value) if is_item else [value]
            options = [
                o
                for o in options
                if o != original and o not in gold.text and o not in answer
            ]
            # A swapped name reads naturally when it is as long as the original.
            same = [o for o in options if len(o.split()) == len(original.split())]
            if options:
                pick = rng.choice(same or options)
                return replace_span("entity", answer, start, end, pick)
    return None
