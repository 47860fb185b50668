"""The five fault kinds of CUBE_METHOD.md section 12, one pure function each.

Each kind takes the original answer, its gold document, donor documents (other
documents of the corpus) and a random generator seeded from
``(seed, question_id, kind)`` (:func:`fault_rng`), and returns a
:class:`Fault` with exactly one change region (:class:`Span`), or None when the
kind cannot be applied to that answer (counted as *skipped*).

Size: about 670 lines, one module on purpose: the five kinds share ``Span``,
``Fault``, the seeded generator and the registry (``make_fault``), and are read
side by side (one section each, ``# --- <kind>``); none is over 250 lines.
"""

from __future__ import annotations

import hashlib
import random
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Final, Literal, get_args

from cube_ray.qualification._document import (
    SENTENCE_END,
    GoldDocument,
    balanced,
    split_items,
    strip_label,
)
from cube_ray.qualification._numbers import (
    number_tokens,
    number_values,
    plausible_other,
)

__all__ = [
    "FAULT_KINDS",
    "KINDS",
    "Fault",
    "FaultFn",
    "FaultKind",
    "Span",
    "entity_fault",
    "fault_rng",
    "make_fault",
    "negation_fault",
    "number_fault",
    "omission_fault",
    "unsupported_fault",
]


@dataclass(frozen=True)
class Span:
    """The one change: ``answer[start:end]`` (``original``) became ``replacement``."""

    start: int
    end: int
    original: str
    replacement: str


@dataclass(frozen=True)
class Fault:
    """A faulted copy of an answer and the span that was changed."""

    kind: str
    answer: str
    faulted: str
    span: Span

    def __post_init__(self) -> None:
        s = self.span
        rebuilt = self.answer[: s.start] + s.replacement + self.answer[s.end :]
        if rebuilt != self.faulted or self.answer[s.start : s.end] != s.original:
            msg = f"a {self.kind} fault's span does not describe its change: {s}"
            raise ValueError(msg)
        if self.faulted == self.answer:
            msg = f"a {self.kind} fault left the answer unchanged"
            raise ValueError(msg)


FaultFn = Callable[
    [str, GoldDocument, Sequence[GoldDocument], random.Random], "Fault | None"
]
"""``(answer, gold, donors, rng) -> Fault | None``."""


def fault_rng(seed: int, question_id: str, kind: str) -> random.Random:
    """The random generator of one (seed, question, kind): the same on every run.

    >>> fault_rng(0, "q1", "number").random() == fault_rng(0, "q1", "number").random()
    True
    >>> fault_rng(0, "q1", "number").random() == fault_rng(1, "q1", "number").random()
    False
    """
    digest = hashlib.sha256(f"{seed}:{question_id}:{kind}".encode()).digest()
    return random.Random(int.from_bytes(digest[:8], "big"))


def _replace(kind: str, answer: str, start: int, end: int, new: str) -> Fault:
    span = Span(start, end, answer[start:end], new)
    return Fault(kind, answer, answer[:start] + new + answer[end:], span)


# --- number -------------------------------------------------------------------


def number_fault(
    answer: str,
    gold: GoldDocument,
    donors: Sequence[GoldDocument],
    rng: random.Random,
) -> Fault | None:
    r"""One number of the answer that the gold document also has, changed.

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
    return _replace(
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


def _at_sentence_start(text: str, pos: int) -> bool:
    """Whether ``pos`` begins a sentence (or the text, or a quoted title).

    >>> [_at_sentence_start("Ab. Cd ef", p) for p in (0, 4, 7)]
    [True, True, False]
    """
    return (
        re.search(r"(?:^|[.!?。！？\n][\"'”’)]*\s*)[\"'“‘(]*$", text[:pos]) is not None
    )


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
            if " " in phrase or not _at_sentence_start(doc.text, m.start()):
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
                return _replace("entity", answer, start, end, pick)
    return None


# --- negation -----------------------------------------------------------------

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
        if not m.group(0)[0].isupper() or _at_sentence_start(answer, m.start())
    ]
    if not matches:
        return None
    m = rng.choice(matches)
    word = m.group(0)
    new = flips[word.lower()] if word.lower() in flips else flips[word]
    if word[0].isupper():
        new = new[0].upper() + new[1:]
    return _replace("negation", answer, m.start(), m.end(), new)


# --- omission -----------------------------------------------------------------

_INTRO_END = re.compile(r"[:：]\s*$")


def omission_fault(
    answer: str,
    gold: GoldDocument,
    donors: Sequence[GoldDocument],
    rng: random.Random,
) -> Fault | None:
    r"""The answer cut to its first sentence, or to its first list item.

    A first line that introduces a list (ends with a colon) keeps its first item.

    >>> gold, rng = GoldDocument.of("g", "x"), fault_rng(0, "q", "x")
    >>> omission_fault("需要以下材料：\n1. 身份证\n2. 申请表", gold, [], rng).faulted
    '需要以下材料：\n1. 身份证'
    >>> omission_fault("Paris is in France. It is big.", gold, [], rng).faulted
    'Paris is in France.'
    >>> omission_fault("一句话。", gold, [], rng) is None
    True
    """
    lines = list(re.finditer(r"[^\n]*\S[^\n]*", answer))
    if not lines:
        return None
    first = lines[0]
    m = SENTENCE_END.search(answer, first.start(), first.end())
    cut = m.end() if m else first.end()
    if cut == first.end() and _INTRO_END.search(first.group(0)) and len(lines) > 1:
        cut = lines[1].end()  # a list's introduction and its first item
    if cut is None or not answer[cut:].strip():
        return None
    return _replace("omission", answer, cut, len(answer), "")


# --- unsupported --------------------------------------------------------------

_ZH_TEMPLATES: Final = (
    ("材料", "此外，申请时还须提交{value}。"),
    ("时限", "该事项的{label}为{value}。"),
    ("时间", "该事项的{label}为{value}。"),
    ("费", "办理该事项需缴纳费用：{value}。"),
    ("地点", "办理地点为{value}。"),
    ("电话", "{label}为{value}。"),
)
"""Chinese sentences for a donor's specific, by the field's label."""


def _zh_claims(
    gold: GoldDocument, answer: str, donors: Sequence[GoldDocument]
) -> list[str]:
    """Claims from donors; those that would not restate a field the answer has.

    A new material, or a field whose gold value the answer does not mention,
    adds an unsupported specific; restating a time limit the answer already
    gives would be a contradiction (a ``number`` fault) instead.
    """
    out: list[str] = []
    restating: list[str] = []
    for donor in donors:
        if donor.doc_id == gold.doc_id:
            continue
        for label, value in donor.fields.items():
            for key, template in _ZH_TEMPLATES:
                if key not in label:
                    continue
                pieces = split_items(value) if key == "材料" else [value]
                gold_value = gold.fields.get(label)
                fresh = key == "材料" or not gold_value or gold_value not in answer
                for piece in pieces:
                    piece = strip_label(piece)
                    if (
                        2 <= len(piece) <= 60
                        and balanced(piece)
                        and piece not in gold.text
                        and piece not in answer
                    ):
                        claim = template.format(label=label, value=piece)
                        (out if fresh else restating).append(claim)
                break
    return out or restating


def _en_claims(
    gold: GoldDocument, answer: str, donors: Sequence[GoldDocument]
) -> list[str]:
    out = []
    known = number_values(gold.text) | number_values(answer)
    for donor in donors:
        if donor.doc_id == gold.doc_id:
            continue
        if donor.fields:
            out += [
                f"In addition, the {label} is {value}."
                for label, value in donor.fields.items()
                if value not in gold.text
                and len(value) <= 60
                and number_values(value) - known
            ]
            continue
        ends = [m.end() for m in SENTENCE_END.finditer(donor.text)]
        for a, b in zip([0, *ends], ends, strict=False):  # sentence by sentence
            sentence = donor.text[a:b].strip()
            if (
                20 <= len(sentence) <= 200
                and sentence[0].isupper()
                and balanced(sentence)
                and sentence.count('"') % 2 == 0
                and number_values(sentence) - known
            ):
                out.append(sentence)
    return out


def unsupported_fault(
    answer: str,
    gold: GoldDocument,
    donors: Sequence[GoldDocument],
    rng: random.Random,
) -> Fault | None:
    """One confident sentence appended whose specific comes from another document.

    >>> gold = GoldDocument.of("g", "承诺办结时限: 7(工作日)")
    >>> donor = GoldDocument.of("d", "承诺办结时限: 15(工作日)")
    >>> rng = fault_rng(0, "q", "u")
    >>> unsupported_fault("7个工作日办结。", gold, [donor], rng).faulted
    '7个工作日办结。该事项的承诺办结时限为15(工作日)。'
    """
    zh = gold.language == "zh"
    claims = (_zh_claims if zh else _en_claims)(gold, answer, donors)
    if not claims:
        return None
    claim = rng.choice(claims)
    stripped = answer.rstrip()
    if zh:
        sep = "" if re.search(r"[。！？.!?]$", stripped) else "。"
    else:
        sep = " " if re.search(r"[.!?]$", stripped) else ". "
    end = len(stripped)
    return _replace("unsupported", answer, end, len(answer), sep + claim)


# --- the registry -------------------------------------------------------------

FaultKind = Literal["number", "entity", "negation", "omission", "unsupported"]
"""A fault kind's name (config ``qualification.kinds``, ``dimensions[].detects``)."""

FAULT_KINDS: Final[dict[str, FaultFn]] = {
    "number": number_fault,
    "entity": entity_fault,
    "negation": negation_fault,
    "omission": omission_fault,
    "unsupported": unsupported_fault,
}
"""Each fault kind of CUBE_METHOD.md section 12 and its function."""
KINDS: Final[tuple[FaultKind, ...]] = get_args(FaultKind)
"""The fault kinds in their canonical order."""
assert set(KINDS) == set(FAULT_KINDS)


def make_fault(
    kind: str,
    answer: str,
    gold: GoldDocument,
    *,
    donors: Sequence[GoldDocument],
    seed: int,
    question_id: str,
) -> Fault | None:
    """The fault of one kind for one answer, deterministic from (seed, question, kind).

    Returns None (skipped) when the kind does not apply to the answer.

    >>> gold = GoldDocument.of("g", "承诺办结时限: 7(工作日)")
    >>> a, b = (
    ...     make_fault("number", "7个工作日。", gold, donors=[], seed=1, question_id=q)
    ...     for q in ("q", "q")
    ... )
    >>> a == b and a.faulted != "7个工作日。"
    True
    """
    if kind not in FAULT_KINDS:
        msg = f"unknown fault kind {kind!r}; expected one of {list(KINDS)}"
        raise ValueError(msg)
    if not answer or not answer.strip():
        return None
    fn = FAULT_KINDS[kind]
    return fn(answer, gold, donors, fault_rng(seed, question_id, kind))
