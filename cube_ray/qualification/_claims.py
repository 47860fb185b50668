"""Claim kinds: a claim of the answer left out, or an unsupported one added.

``omission``: the answer cut to its first sentence (or list item).
``unsupported``: one confident sentence appended whose specific comes from a
donor document, not from the gold one.
"""

from __future__ import annotations

import random
import re
from collections.abc import Sequence
from typing import Final

from cube_ray.qualification._document import (
    SENTENCE_END,
    GoldDocument,
    balanced,
    split_items,
    strip_label,
)
from cube_ray.qualification._fault import Fault, replace_span
from cube_ray.qualification._numbers import number_values

__all__ = [
    "claim_template",
    "omission_fault",
    "supported_claims",
    "unsupported_fault",
]


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

    >>> from cube_ray.qualification import fault_rng
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
    return replace_span("omission", answer, cut, len(answer), "")


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
                f"{_EN_FIELD_HEAD}{label} is {value}."
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


def claim_template(claim: str) -> str:
    """Which template a claim was written by: its key, or ``sentence``.

    >>> claim_template("该事项的承诺办结时限为7(工作日)。")
    '时限'
    >>> claim_template("In addition, the fee is 5 EUR."), claim_template("It rains.")
    ('field', 'sentence')
    """
    for key, template in _ZH_TEMPLATES:
        pattern = re.escape(template)
        for field in (re.escape("{label}"), re.escape("{value}")):
            pattern = pattern.replace(field, ".+")
        if re.fullmatch(pattern, claim, re.DOTALL):
            return key
    return "field" if claim.startswith(_EN_FIELD_HEAD) else "sentence"


_EN_FIELD_HEAD = "In addition, the "


def supported_claims(gold: GoldDocument) -> list[str]:
    r"""Claims of the unsupported kind's templates whose specific is the gold's.

    The control of an ``unsupported`` fault (CUBE_METHOD.md section 12): the
    same kind of confident sentence, supported by the document.

    >>> gold = GoldDocument.of("g", "承诺办结时限: 7(工作日)\n申请材料: 身份证、申请表")
    >>> supported_claims(gold)  # doctest: +NORMALIZE_WHITESPACE
    ['该事项的承诺办结时限为7(工作日)。', '此外，申请时还须提交身份证。',
     '此外，申请时还须提交申请表。']
    """
    out: list[str] = []
    if gold.language == "zh" and gold.fields:
        for label, value in gold.fields.items():
            for key, template in _ZH_TEMPLATES:
                if key not in label:
                    continue
                pieces = split_items(value) if key == "材料" else [value]
                for piece in pieces:
                    piece = strip_label(piece)
                    if 2 <= len(piece) <= 60 and balanced(piece):
                        out.append(template.format(label=label, value=piece))
                break
        return out
    if gold.fields:
        return [
            f"{_EN_FIELD_HEAD}{label} is {value}."
            for label, value in gold.fields.items()
            if len(value) <= 60 and number_values(value)
        ]
    ends = [m.end() for m in SENTENCE_END.finditer(gold.text)]
    for a, b in zip([0, *ends], ends, strict=False):
        sentence = gold.text[a:b].strip()
        if (
            20 <= len(sentence) <= 200
            and sentence[0].isupper()
            and balanced(sentence)
            and sentence.count('"') % 2 == 0
            and number_values(sentence)
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

    >>> from cube_ray.qualification import fault_rng
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
    return replace_span("unsupported", answer, end, len(answer), sep + claim)
