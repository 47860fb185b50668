"""Controls: for each fault, a harmless edit of the same answer (section 12).

A drop after an edit does not show that a judge noticed the *fault*: a judge
that scores length, or marks down any change, "detects" omissions and
appended claims too. Each fault therefore gets a **control**: an edit of the
same original answer, of the same family, position and size, that keeps every
fact:

- ``number`` -> the same number in another surface form in the same span
  (15 <-> 十五, 2000 <-> 2,000, 3日 <-> 三日, half- <-> full-width digits);
- ``entity`` -> the same span set in 「」 (quotes in English), else ``reorder``;
- ``negation`` -> the same permission or obligation restated with the same
  polarity (可以 -> 可以直接, 需要 -> 须; can -> may, must -> has to);
- ``omission`` -> sentences or list items that carry no fact of the gold
  document removed (a greeting, a closing), else ``reorder``;
- ``unsupported`` -> the same kind of confident sentence appended, its
  specific taken from the gold document (supported).

Every control is checked mechanically (:func:`keeps_facts`: the same number
values, the same gold field values, the same polarity) and against its fault's
length change (:func:`length_matched`); a fault without such a control is not
judged (its pair is skipped and counted). Deterministic from
``(seed, question_id, kind)`` like the faults.
"""

from __future__ import annotations

import random
import re
import unicodedata
from collections.abc import Callable, Iterator
from itertools import pairwise
from typing import Final

from cube_ray.qualification._claims import claim_template, supported_claims
from cube_ray.qualification._document import SENTENCE_END, GoldDocument
from cube_ray.qualification._fault import Fault, fault_rng, replace_span
from cube_ray.qualification._negation import _EN_PATTERN, _ZH_PATTERN
from cube_ray.qualification._numbers import (
    NumberToken,
    int_to_chinese,
    number_tokens,
    number_values,
)
from cube_ray.qualification._swap import _entity_values

__all__ = [
    "CONTROL_SUFFIX",
    "LENGTH_SLACK",
    "LENGTH_TOLERANCE",
    "control_kind",
    "fault_kind_of",
    "is_control",
    "keeps_facts",
    "length_matched",
    "make_control",
    "negators",
    "reorder_control",
]

CONTROL_SUFFIX: Final = ":control"
"""A control's kind is its fault's kind with this suffix (``number:control``):
the ``kind`` of its row in the ``qualification`` table and the ``system`` of
its scores."""
LENGTH_TOLERANCE: Final = 0.2
"""A control's length change may differ from its fault's by this share of the
fault's change (plus :data:`LENGTH_SLACK`)."""
LENGTH_SLACK: Final = 4
"""Characters of difference always allowed: a substitution of a few characters
(十五 for 15, 须 for 需要, may for can) is as long as its fault."""


def control_kind(kind: str) -> str:
    """The kind of the control of fault ``kind``.

    >>> control_kind("number"), is_control("number:control"), is_control("number")
    ('number:control', True, False)
    >>> fault_kind_of("number:control"), fault_kind_of("number")
    ('number', 'number')
    """
    return kind + CONTROL_SUFFIX


def is_control(kind: str) -> bool:
    """Whether ``kind`` names a control (see :func:`control_kind`)."""
    return kind.endswith(CONTROL_SUFFIX)


def fault_kind_of(kind: str) -> str:
    """The fault kind of a control's kind (a fault kind is its own)."""
    return kind.removesuffix(CONTROL_SUFFIX)


# --- the mechanical checks ----------------------------------------------------

_ZH_NEGATORS = re.compile(r"[不无没未非勿]|禁止")
_EN_NEGATORS = re.compile(
    r"(?<![A-Za-z])(?:not|never|no|cannot|none|neither|nor)(?![A-Za-z])|n['’]t",
    re.IGNORECASE,
)


def negators(text: str) -> int:
    """Negation markers in a text (不/无/没/未/非/勿/禁止; not, n't, cannot, never, no).

    The polarity check of a control: a restated permission keeps the count
    (需要 -> 须, 不需要 -> 无需, can -> may), a flipped one changes it.

    >>> negators("不需要到场，无需预约"), negators("You cannot and mustn't.")
    (2, 2)
    >>> negators("须提交")
    0
    """
    return len(_ZH_NEGATORS.findall(text)) + len(_EN_NEGATORS.findall(text))


def _gold_values(gold: GoldDocument, text: str) -> set[str]:
    """The gold field values ``text`` names (widths folded: ２０２１ is 2021)."""
    folded = unicodedata.normalize("NFKC", text)
    values = (unicodedata.normalize("NFKC", v) for _, v in _entity_values(gold))
    return {v for v in values if v in folded}


def keeps_facts(
    answer: str, edited: str, gold: GoldDocument, *, added: str = ""
) -> bool:
    r"""Whether ``edited`` keeps every fact of ``answer``, mechanically checked.

    The same number values (an appended supported claim may add the gold
    document's), every gold field value the answer names, and the same polarity
    (negation count; ``added``: gold text an appended claim brings, whose
    negations are the document's).

    >>> gold = GoldDocument.of("g", "实施机构: 省公安厅\n承诺办结时限: 15(工作日)")
    >>> answer = "省公安厅办理，需要15个工作日。"
    >>> keeps_facts(answer, "省公安厅办理，须十五个工作日。", gold)
    True
    >>> keeps_facts(answer, "省公安厅办理，不需要15个工作日。", gold)
    False
    >>> keeps_facts(answer, "省民政厅办理，需要15个工作日。", gold)
    False
    >>> keeps_facts(answer, "省公安厅办理，需要20个工作日。", gold)
    False
    """
    before, after = number_values(answer), number_values(edited)
    if not before <= after or not after <= before | number_values(gold.text):
        return False
    if not _gold_values(gold, answer) <= _gold_values(gold, edited):
        return False
    return negators(edited) == negators(answer) + negators(added)


def length_matched(fault: Fault, control: Fault) -> bool:
    """Whether the control changes the answer's length about as much as the fault.

    ``|change(control) - change(fault)| <= 20 % of |change(fault)| + 4 chars``.

    >>> from cube_ray.qualification._fault import replace_span
    >>> answer = "A. B is here. C is there. The end."
    >>> cut = replace_span("omission", answer, 2, len(answer), "")
    >>> swap = replace_span("omission:control", answer, 0, 1, "Z")
    >>> length_matched(cut, swap)
    False
    >>> near = replace_span("omission:control", answer, 2, len(answer) - 5, "")
    >>> length_matched(cut, near)
    True
    """
    df = len(fault.faulted) - len(fault.answer)
    dc = len(control.faulted) - len(control.answer)
    return abs(dc - df) <= LENGTH_TOLERANCE * abs(df) + LENGTH_SLACK


# --- number: the same value in another surface form -----------------------------

_FULL = "０１２３４５６７８９"
_TO_FULL = str.maketrans("0123456789-", _FULL + "－")
_TO_HALF = str.maketrans(_FULL + "－", "0123456789-")
_ZH_UNIT_AFTER = re.compile(
    r"(?:个工作日|工作日|个自然日|自然日|个月|个小时|小时|日|天|月|年|周|元|万元|次|份|项|人|岁|分钟)"
)


def _number_forms(text: str, token: NumberToken) -> list[str]:
    """Other surface forms of a number token, the most natural first."""
    raw = token.text
    half = raw.translate(_TO_HALF)
    full_width = half != raw
    zh = re.search(r"[\u4e00-\u9fff]", text) is not None
    out: list[str] = []
    if token.sort == "chinese":
        assert isinstance(token.value, float)
        out.append(str(int(token.value)))
    elif token.sort != "phone" and re.fullmatch(r"[\d,]+", half):
        n = int(half.replace(",", ""))
        unit_after = _ZH_UNIT_AFTER.match(text, token.end) is not None
        # A year is read digit by digit (二〇二一年): only its width changes.
        if zh and unit_after and not full_width and token.sort != "year" and n < 10**8:
            out.append(int_to_chinese(n).replace("二千", "两千"))
        if token.sort != "year" and n >= 1000 and not half.startswith("0"):
            out.append(half.replace(",", "") if "," in half else f"{n:,}")
    if zh:
        out.append(half if full_width else raw.translate(_TO_FULL))
    return [o for o in dict.fromkeys(out) if o != raw]


def number_control(
    fault: Fault, gold: GoldDocument, rng: random.Random
) -> Iterator[Fault]:
    r"""The fault's number written another way, in the same span.

    >>> from cube_ray.qualification._fault import replace_span
    >>> f = replace_span("number", "需15个工作日，费用2000元。", 1, 3, "30")
    >>> gold = GoldDocument.of("g", "承诺办结时限: 15(工作日)")
    >>> [c.faulted for c in number_control(f, gold, random.Random(0))][:2]
    ['需十五个工作日，费用2000元。', '需１５个工作日，费用2000元。']
    """
    s = fault.span
    token = next((t for t in number_tokens(fault.answer) if t.start == s.start), None)
    if token is None or token.end != s.end:
        return
    for form in _number_forms(fault.answer, token):
        yield replace_span(fault.kind, fault.answer, s.start, s.end, form)


# --- entity: the same span quoted ----------------------------------------------

_OPEN_QUOTES = "「“\"《'‘『"


def entity_control(
    fault: Fault, gold: GoldDocument, rng: random.Random
) -> Iterator[Fault]:
    """The swapped span set in 「」 (quotes in English); else ``reorder``.

    >>> from cube_ray.qualification._fault import replace_span
    >>> f = replace_span("entity", "请到省公安厅办理。", 2, 6, "省民政厅")
    >>> next(entity_control(f, GoldDocument.of("g", "实施机构: 省公安厅"),
    ...                     random.Random(0))).faulted
    '请到「省公安厅」办理。'
    """
    s, text = fault.span, fault.answer
    quoted = s.start > 0 and text[s.start - 1] in _OPEN_QUOTES
    if not quoted:
        zh = gold.language == "zh" or re.search(r"[\u4e00-\u9fff]", s.original)
        new = f"「{s.original}」" if zh else f"“{s.original}”"
        yield replace_span(fault.kind, text, s.start, s.end, new)
    yield from reorder_control(fault, gold, rng)


# --- negation: the same polarity restated ---------------------------------------

_ZH_SAME: Final[dict[str, tuple[str, ...]]] = {
    "不需要": ("无需", "不用"),
    "无需": ("不需要",),
    "无须": ("无需", "不必"),
    "不必": ("无需",),
    "需要": ("须", "需"),
    "必须": ("须", "务必"),
    "不可以": ("不能", "不得"),
    "可以": ("可以直接", "可"),
    "不能": ("不可以", "不得"),
    "不得": ("不能", "不可以"),
    "不允许": ("不准许", "不准"),
    "允许": ("准许",),
    "应当": ("应", "须"),
    "须": ("必须", "需要"),
    "需": ("需要", "须"),
}
"""Chinese permissions and obligations restated with the same polarity."""
_EN_SAME: Final[dict[str, tuple[str, ...]]] = {
    "cannot": ("may not",),
    "can not": ("may not",),
    "can't": ("may not",),
    "can’t": ("may not",),
    "must not": ("may not",),
    "mustn't": ("must not",),
    "need not": ("needn't",),
    "needn't": ("need not",),
    "do not need to": ("need not",),
    "does not need to": ("need not",),
    "don't need to": ("need not",),
    "doesn't need to": ("need not",),
    "will need to": ("will have to",),
    "is not required": ("is not needed",),
    "are not required": ("are not needed",),
    "is required": ("is needed",),
    "are required": ("are needed",),
    "is not allowed": ("is not permitted",),
    "are not allowed": ("are not permitted",),
    "is allowed": ("is permitted",),
    "are allowed": ("are permitted",),
    "may not": ("cannot",),
    "should not": ("ought not to",),
    "should": ("ought to",),
    "must": ("have to",),
    "needs to": ("has to",),
    "need to": ("have to",),
    "can": ("may",),
}
"""English permissions and obligations restated with the same polarity."""


def _en_restated(word: str, before: str) -> tuple[str, ...]:
    options = _EN_SAME.get(word.lower(), ())
    if word.lower() == "must":  # has to after he/she/it, have to otherwise
        singular = re.search(
            r"\b(?:he|she|it|this|that|which|who)\s+$|\b(?:applicant|person|office)\s+$",
            before,
            re.IGNORECASE,
        )
        options = ("has to",) if singular else ("have to",)
    if word[0].isupper():
        options = tuple(o[0].upper() + o[1:] for o in options)
    return options


def negation_control(
    fault: Fault, gold: GoldDocument, rng: random.Random
) -> Iterator[Fault]:
    """The flipped word restated with its own polarity, in the same span.

    >>> from cube_ray.qualification._fault import replace_span
    >>> f = replace_span("negation", "需要提交身份证。", 0, 2, "不需要")
    >>> next(negation_control(f, GoldDocument.of("g", "x"), random.Random(0))).faulted
    '须提交身份证。'
    >>> f = replace_span("negation", "You must apply.", 4, 8, "need not")
    >>> next(negation_control(f, GoldDocument.of("g", "x y"), random.Random(0))).faulted
    'You have to apply.'
    """
    s, text = fault.span, fault.answer
    word = s.original
    options = _ZH_SAME.get(word) or _en_restated(word, text[: s.start])
    for new in options:
        if text[s.end :].startswith(new[len(word) :]) and new.startswith(word):
            continue  # 可以直接 before 直接: a doubled word
        yield replace_span(fault.kind, text, s.start, s.end, new)


# --- omission: fact-free units removed, else reorder ----------------------------

_UNIT = re.compile(r"[^\n]+")


def _units(text: str) -> list[tuple[int, int]]:
    """(start, end) of each sentence or list item, with its trailing space."""
    out: list[tuple[int, int]] = []
    for line in _UNIT.finditer(text):
        start = line.start()
        ends = [m.end() for m in SENTENCE_END.finditer(text, line.start(), line.end())]
        for end in [*ends, line.end()]:
            piece = text[start:end]
            if end > start and piece.strip():
                out.append((start + len(piece) - len(piece.lstrip()), end))
            start = end
    merged = []
    for a, b in out:  # trailing whitespace and the newline belong to the unit
        while b < len(text) and text[b] in " \t\n":
            b += 1
        merged.append((a, b))
    return merged


def _fact_free(unit: str, gold: GoldDocument) -> bool:
    """A unit that carries no fact: no number, no gold value, no permission."""
    if number_tokens(unit) or _gold_values(gold, unit):
        return False
    if _ZH_PATTERN.search(unit) or _EN_PATTERN.search(unit):
        return False
    return bool(re.search(r"\w", unit))


def omission_control(
    fault: Fault, gold: GoldDocument, rng: random.Random
) -> Iterator[Fault]:
    r"""Fact-free sentences or list items removed, as much as the fault cut.

    Units after the fault's cut first (the same position), then earlier ones
    (a greeting), until the removed length matches the fault's; else
    ``reorder``.

    >>> from cube_ray.qualification._fault import replace_span
    >>> answer = "需要身份证。时限为7个工作日。感谢您的耐心阅读，祝您一切顺利！"
    >>> f = replace_span("omission", answer, 6, len(answer), "")
    >>> gold = GoldDocument.of("g", "申请材料: 身份证\n承诺办结时限: 7(工作日)")
    >>> next(omission_control(f, gold, random.Random(0))).faulted
    '需要身份证。时限为7个工作日。'
    """
    text, cut = fault.answer, fault.span.start
    units = [(a, b) for a, b in _units(text) if _fact_free(text[a:b], gold)]
    # The first unit is what the fault keeps: never the control's to remove.
    first = _units(text)[:1]
    units = [u for u in units if u not in first]
    ordered = sorted(units, key=lambda u: (u[0] < cut, -u[0] if u[0] < cut else u[0]))
    target = len(fault.answer) - len(fault.faulted)
    chosen: list[tuple[int, int]] = []
    for unit in ordered:
        chosen.append(unit)
        removed = sum(b - a for a, b in chosen)
        if removed >= (1 - LENGTH_TOLERANCE) * target - LENGTH_SLACK:
            break
    if chosen:
        chosen.sort()
        start, end = chosen[0][0], chosen[-1][1]
        kept, pos = [], start
        for a, b in chosen:
            kept.append(text[pos:a])
            pos = b
        yield replace_span(fault.kind, text, start, end, "".join(kept))
    yield from reorder_control(fault, gold, rng)


# --- reorder -------------------------------------------------------------------

_LIST_ITEM = re.compile(r"^([ \t]*(?:\d+[.、)）]|[-*•])[ \t]*)(.+)$", re.MULTILINE)


def _adjacent_items(text: str) -> list[tuple[int, int, int, int]]:
    """(start1, end1, start2, end2) of adjacent swappable pieces' contents."""
    pairs: list[tuple[int, int, int, int]] = []
    items = list(_LIST_ITEM.finditer(text))
    for m1, m2 in pairwise(items):
        if text[m1.end() : m2.start()] == "\n":
            pairs.append((m1.start(2), m1.end(2), m2.start(2), m2.end(2)))
    for series in re.finditer(
        r"[^、，,。；;：:\n（）()“”「」]+(?:、[^、，,。；;：:\n（）()“”「」]+)+", text
    ):
        pieces = list(re.finditer(r"[^、]+", series.group(0)))
        # The first piece holds the words before the list (需要身份证).
        for p1, p2 in pairwise(pieces[1:]):
            off = series.start()
            pairs.append(
                (off + p1.start(), off + p1.end(), off + p2.start(), off + p2.end())
            )
    units = _units(text)
    for (a1, b1), (a2, b2) in pairwise(units):
        u1, u2 = text[a1:b1].rstrip(), text[a2:b2].rstrip()
        if (
            "\n" not in text[a1:b2].rstrip()
            and not u1.endswith((":", "："))
            and u1[-1:] in "。！？.!?"
            and u2[-1:] in "。！？.!?"
        ):
            pairs.append((a1, a1 + len(u1), a2, a2 + len(u2)))
    return pairs


def reorder_control(
    fault: Fault, gold: GoldDocument, rng: random.Random
) -> Iterator[Fault]:
    r"""Two adjacent list items, series items or sentences swapped, nearest first.

    >>> from cube_ray.qualification._fault import replace_span
    >>> answer = "材料：\n1. 身份证\n2. 申请表"
    >>> f = replace_span("entity", answer, 7, 10, "户口本")
    >>> next(reorder_control(f, GoldDocument.of("g", "x"), random.Random(0))).faulted
    '材料：\n1. 申请表\n2. 身份证'
    """
    text, at = fault.answer, fault.span.start
    pairs = sorted(
        _adjacent_items(text), key=lambda p: (min(abs(p[0] - at), abs(p[2] - at)), p)
    )
    for a1, b1, a2, b2 in pairs:
        first, second = text[a1:b1], text[a2:b2]
        if first == second:
            continue
        new = second + text[b1:a2] + first
        yield replace_span(fault.kind, text, a1, b2, new)


# --- unsupported: a supported claim appended ------------------------------------


def unsupported_control(
    fault: Fault, gold: GoldDocument, rng: random.Random
) -> Iterator[Fault]:
    """The same kind of sentence appended, its specific from the gold document.

    Claims built from the gold document by the fault's own templates, the
    fault's template first, then nearest in length to the fault's sentence.

    >>> from cube_ray.qualification._claims import unsupported_fault
    >>> gold = GoldDocument.of("g", "承诺办结时限: 7(工作日)")
    >>> donor = GoldDocument.of("d", "承诺办结时限: 15(工作日)")
    >>> f = unsupported_fault("7个工作日办结。", gold, [donor], random.Random(0))
    >>> next(unsupported_control(f, gold, random.Random(0))).faulted
    '7个工作日办结。该事项的承诺办结时限为7(工作日)。'
    """
    claims = supported_claims(gold)
    replacement = fault.span.replacement
    appended = replacement.strip()
    sep = replacement[: replacement.find(appended)]
    key = claim_template(appended)
    ordered = sorted(
        claims,
        key=lambda c: (claim_template(c) != key, abs(len(c) - len(appended)), c),
    )
    for claim in ordered:
        yield replace_span(
            fault.kind, fault.answer, fault.span.start, fault.span.end, sep + claim
        )


# --- registry ------------------------------------------------------------------

ControlFn = Callable[[Fault, GoldDocument, random.Random], Iterator[Fault]]
_CONTROLS: Final[dict[str, ControlFn]] = {
    "number": number_control,
    "entity": entity_control,
    "negation": negation_control,
    "omission": omission_control,
    "unsupported": unsupported_control,
}


def make_control(
    fault: Fault, gold: GoldDocument, *, seed: int, question_id: str
) -> Fault | None:
    """The control of a fault, or None (the pair is skipped).

    The first candidate of the kind's rule that keeps every fact
    (:func:`keeps_facts`) and matches the fault's length change
    (:func:`length_matched`).

    >>> from cube_ray.qualification import make_fault
    >>> gold = GoldDocument.of("g", "承诺办结时限: 15(工作日)")
    >>> fault = make_fault("number", "需15个工作日。", gold, donors=[], seed=0,
    ...                    question_id="q")
    >>> control = make_control(fault, gold, seed=0, question_id="q")
    >>> control.kind, control.faulted
    ('number:control', '需十五个工作日。')
    """
    kind = control_kind(fault.kind)
    rng = fault_rng(seed, question_id, kind)
    for candidate in _CONTROLS[fault.kind](fault, gold, rng):
        control = Fault(kind, candidate.answer, candidate.faulted, candidate.span)
        if control.faulted == fault.faulted:
            continue
        added = control.span.replacement if fault.kind == "unsupported" else ""
        if keeps_facts(fault.answer, control.faulted, gold, added=added) and (
            length_matched(fault, control)
        ):
            return control
    return None
