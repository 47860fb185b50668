"""A deterministic fact check of an answer against its gold document.

The reference judge's ``facts`` measure (:mod:`cube_ray.engines.reference`). An
n-gram overlap barely moves when a deadline, a fee or a phone number is changed
(one or two of a hundred bigrams) and not at all when a permission is flipped;
a reader is hurt most by exactly those. This module lists the answer's
*checkable facts*, each either supported by the document or not:

- **number**: every number token of the answer (``cube_ray.qualification``'s
  :func:`~cube_ray.qualification.number_tokens`: Arabic or Chinese numerals with
  a unit, date parts, phone numbers), compared **by value** with the
  document's: 15, 十五, 15个工作日, 十五个工作日 and ``15(工作日)`` are one value;
  2000, 2,000 and 两千元 are one; a phone number matches when one digit string
  ends the other (``020-34121084`` and ``34121084``). A number that only the
  question mentions is not checked (the answer may repeat what was asked).
- **entity**: a span that names something: the text inside quotes or
  title marks (“…”, 「…」, 《…》), and a span of Chinese text that ends like the
  name of an agency, place or material (…局, …厅, …中心, …委员会, …路, …窗口,
  …证, …申请表, …复印件; the list is :data:`NAME_ENDINGS`), taken from the
  start of its phrase (a phrase ends at punctuation, a connector such as
  和/或/由/到, and loses a leading verb such as 携带/提交/前往), or, in English,
  a capitalised proper-noun phrase. It is supported when the document contains
  it verbatim. A name from another document (another agency, a material this
  item does not need) is therefore unsupported; the judge needs no list of the
  corpus's values, only this document.
- **polarity**: a permission or obligation of the answer (需要/无需, 可以/不可以,
  须/无须, must/need not, can/cannot: :func:`cube_ray.polarity.polarity_words`,
  every word the ``negation`` fault of CUBE_METHOD.md section 12 flips) whose
  clause the document also states: a
  document clause with the same object (at least two shared character
  bigrams or content words), or a field the clause is about (its label's head,
  ``申请材料`` → 材料, or one of its values occurs in the clause; a value
  ``否``/``不支持``/``无…`` is negative, any other value affirmative). Supported
  when the polarities agree; a clause the document does not state is not
  checked.

Score (CUBE_METHOD.md section 4's 0-10 scale), with ``k`` supported facts out of
``n`` checkable ones: ``10 · k / (n + 1)``. The one in the denominator is a
prior of one unsupported fact: an answer has to earn its score with facts the
document confirms. An answer with no checkable fact scores 0 (it states
nothing the document confirms; a zero-bound answer that says "please ask the
office" must not score high by default, or the bounds of section 10 would not
separate); one confirmed fact scores 5, four 8, nine 9; each unsupported fact
costs its share. Pure functions, no I/O.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Final, Literal

from cube_ray.language import CJK
from cube_ray.polarity import polarity_words
from cube_ray.qualification import (
    number_tokens,
    parse_fields,
    split_items,
)
from cube_ray.qualification._document import strip_label

__all__ = [
    "NAME_ENDINGS",
    "Fact",
    "FactKind",
    "check_facts",
    "entity_facts",
    "facts_share",
    "number_facts",
    "polarity_facts",
]

FactKind = Literal["number", "entity", "polarity"]


@dataclass(frozen=True)
class Fact:
    """One checkable fact of an answer: where it is and whether it is supported."""

    kind: FactKind
    start: int
    end: int
    text: str
    supported: bool


# --- numbers ------------------------------------------------------------------

_MIN_PHONE = 5
"""Digits a phone number needs before one ending another counts as a match."""
_AREA_CODE = 3
"""Digits of an area code (``020``, ``0752``): a number with a leading zero."""
_HALF = str.maketrans("０１２３４５６７８９", "0123456789")


_UNIT = re.compile(
    r"[ \t(（]*(?P<unit>个工作日|工作日|个自然日|自然日|个月|个小时|小时|万元|元"
    r"|日|天|月|[\u3400-\u9fff])?"
)
_SAME_UNIT: Final = {
    "个工作日": "工作日",
    "个自然日": "日",
    "自然日": "日",
    "天": "日",
    "个月": "月",
    "个小时": "小时",
}
"""Unit spellings of one meaning (a day is 日 or 天; 个工作日 is 工作日)."""

Quantity = tuple[float, str | None]
"""A number's value and its unit: a unit, ``""`` (none, inside a text) or None
(none, the number ends its line: a bare field value whose label names the unit)."""


def _unit(text: str, end: int) -> str | None:
    r"""The unit after a number: a known one normalised, else the next CJK character.

    >>> texts = ("15(工作日)", "15个工作日", "15天", "14楼", "15-3", "15 \n")
    >>> [_unit(t, 2) for t in texts]
    ['工作日', '工作日', '日', '楼', '', None]
    """
    m = _UNIT.match(text, end)
    unit = m.group("unit") if m else None
    if unit is not None:
        return _SAME_UNIT.get(unit, unit)
    rest = text[end:].split("\n", 1)[0]
    return None if not rest.strip() else ""


def _values(text: str) -> tuple[set[Quantity], set[str]]:
    """The quantities of a text (万 scaled) and its phone numbers' digit strings."""
    values: set[Quantity] = set()
    phones: set[str] = set()
    for t in number_tokens(text):
        if isinstance(t.value, str):
            phones.add(t.value)
            continue
        unit = _unit(text, t.end)
        values.add((t.value, unit))
        if unit == "万元":
            values.add((t.value * 10_000, "元"))
    return values, phones


def _quantity_match(value: Quantity, values: set[Quantity]) -> bool:
    """Whether the document's quantities have this value in an agreeing unit.

    An answer's number without a unit matches the value in any unit; one with
    a unit needs the same unit, or a bare field value (unit None).

    >>> known = {(15.0, "工作日"), (4.0, "楼"), (1.0, ""), (30.0, None)}
    >>> answers = [(15.0, "工作日"), (4.0, "工作日"), (1.0, "工作日"), (30.0, "日"),
    ...            (15.0, "")]
    >>> [_quantity_match(v, known) for v in answers]
    [True, False, False, True, True]
    """
    number, unit = value
    return any(v == number and (not unit or u is None or u == unit) for v, u in values)


def _phone_match(digits: str, phones: set[str]) -> bool:
    """Whether a phone number equals or ends/is ended by one of ``phones``.

    >>> _phone_match("34121084", {"02034121084"}), _phone_match("12345", {"020"})
    (True, False)
    """
    return any(
        a.endswith(b)
        for p in phones
        for a, b in ((p, digits), (digits, p))
        if len(b) >= _MIN_PHONE
    )


def number_facts(answer: str, document: str, *, question: str = "") -> list[Fact]:
    r"""The answer's numbers, each supported when the document has its value.

    A number with a unit needs the value with that unit (4个工作日 is not
    supported by 4楼 nor by the 4 of 1-4号). A number only the question has is
    not checked.

    >>> doc = "承诺办结时限: 15(工作日)\n收费标准: 2000元\n咨询电话: 020-34121084"
    >>> answer = "十五个工作日办结，收费两千元，电话34121084，另需3份"
    >>> [(f.text, f.supported) for f in number_facts(answer, doc)]
    [('十五', True), ('两千', True), ('34121084', True), ('3', False)]
    >>> [f.supported for f in number_facts("2,000元，20个工作日", doc)]
    [True, False]
    >>> number_facts("30天够吗？不够。", doc, question="30天能办完吗？")
    []
    """
    values, phones = _values(document)
    asked, asked_phones = _values(question)
    out = []
    for t in number_tokens(answer):
        if isinstance(t.value, str):
            ok = _phone_match(t.value, phones)
            if not ok and _phone_match(t.value, asked_phones):
                continue
        else:
            # A date part's 年/月/日 is its place in a date, which 2021-03-05
            # writes without units.
            date = t.sort in ("year", "month", "day")
            quantity = (t.value, "" if date else _unit(answer, t.end))
            ok = _quantity_match(quantity, values)
            if not ok and t.text.startswith(("0", "０")) and len(t.text) >= _AREA_CODE:
                # An area code written apart, ``(020) 34121084``.
                digits = t.text.translate(_HALF)
                ok = any(p.startswith(digits) for p in phones)
            if not ok and _quantity_match((t.value, ""), asked):
                continue  # the question's number, repeated
        out.append(Fact("number", t.start, t.end, t.text, ok))
    return out


# --- entities -----------------------------------------------------------------

NAME_ENDINGS: Final = (
    # agencies
    "委员会|办公室|管理局|分局|局|厅|中心|政府|法院|检察院|院|事务所|研究所"
    "|派出所|公证处|处(?![理罚置于])|公司|银行|协会|学会|商会|大队|支队|总队|部(?![门分])"
    "|委|署|馆"
    # places
    "|省|市(?!场)|区(?!域|别)|县|镇|乡|村|街道|大道|路(?!径|线)|街|大厦|广场|大厅"
    "|窗口|楼|室"
    # materials
    "|证明|证书|执照|护照|证(?![件号])|申请书|书(?!面)|申请表|登记表|表(?![示达明现格])"
    "|函|复印件|原件|扫描件|副本|照片|合同|协议|报告|清单|凭证|发票|收据|图(?!片)|卡|册"
)
"""How the name of an agency, a place or a material ends (…局, …路, …证), not
where a common word goes on (部门, 市场, 证件)."""
_ENDING = re.compile(f"(?:{NAME_ENDINGS})")
_MIN_NAME = 3
"""Characters a name needs (证件, 本市, 全部 are words, not names)."""
_PHRASE = re.compile(r"[\u3400-\u9fff0-9０-９A-Za-z]+")
_CONNECTOR = re.compile(
    r"以及|或者|和|及|与|或|并|到|在|向|由|至|为|是"
    r"|需要|必须|应当|可以|携带|提交|提供|出示|填写|准备|前往|联系|拨打|致电|咨询|登录"
    r"|进入|访问"
)
"""Where a phrase's names end: connectors and the verbs before a name."""
_LEAD = re.compile(
    r"(?:请|您|你|办理|申请办理|需|须|应|可|能|还|另|直接|使用|通过|持|凭|带|去"
    r"|相关|有关|所需|其他|其它|以上|上述|以下|有效|本人|当地|各|该)+"
)
"""Words that open a phrase before a name (请, 携带's 带, 相关)."""
_QUOTED = re.compile(r"“([^”\n]{2,80})”|「([^」\n]{2,80})」|《([^》\n]{2,80})》")
_PROPER = re.compile(r"\b[A-Z][\w'’-]*(?:\s+(?:of|the|de|for)?\s*[A-Z][\w'’-]*)*")
_SENTENCE_START = re.compile(r"(?:^|[.!?:;]\s+|\n\s*)$")


_SUBMIT: Final = frozenset({"提交", "携带", "提供", "出示"})
"""Verbs whose object is a material, whatever its ending (提交申请请示公文)."""
_AND: Final = frozenset({"和", "及", "与", "或", "以及", "或者"})
_MIN_MATERIAL = 2
"""Characters of a material named as a verb's object (照片, 合同)."""


def _names(answer: str) -> list[tuple[int, int]]:
    """Spans of the answer that name an agency, place or material (Chinese).

    A span ends like a name (:data:`NAME_ENDINGS`), or is the object of a verb
    of submitting (提交, 携带, 提供, 出示) and the items joined to it by 和/及.

    >>> text = "请携带户口簿和照片到广州市公安局办理，可以网上预约。"
    >>> [text[a:b] for a, b in _names(text)]
    ['户口簿', '照片', '广州市公安局']
    """
    spans = []
    for phrase in _PHRASE.finditer(answer):
        text = phrase.group(0)
        marks = list(_CONNECTOR.finditer(text))
        starts = [(0, ""), *((m.end(), m.group(0)) for m in marks)]
        stops = [*(m.start() for m in marks), len(text)]
        material = False
        for (a, before), b in zip(starts, stops, strict=True):
            lead = _LEAD.match(text, a, b)
            start = lead.end() if lead else a
            material = before in _SUBMIT or (material and before in _AND)
            ends = [m.end() for m in _ENDING.finditer(text, start, b)]
            if material and b - start >= _MIN_MATERIAL:
                end = b
            elif ends and ends[-1] - start >= _MIN_NAME:
                end = ends[-1]
            else:
                continue
            spans.append((phrase.start() + start, phrase.start() + end))
    return spans


def _proper_nouns(answer: str) -> list[tuple[int, int]]:
    """Capitalised phrases of an English answer (a sentence's first word dropped).

    >>> text = "The office of Paris City Hall is open. Bring it."
    >>> [text[a:b] for a, b in _proper_nouns(text)]
    ['Paris City Hall']
    """
    spans = []
    for m in _PROPER.finditer(answer):
        start, end = m.start(), m.end()
        if _SENTENCE_START.search(answer[:start]):
            first = re.match(r"[\w'’-]+(?:\s+(?:of|the|de|for)\b)?\s*", m.group(0))
            start += first.end() if first else 0
        words = answer[start:end].split()
        while words and words[-1] in {"of", "the", "de", "for"}:
            end = answer.rfind(words.pop(), start, end)
        while end > start and answer[end - 1].isspace():
            end -= 1
        if end - start >= _MIN_NAME and answer[start].isupper():
            spans.append((start, end))
    return spans


_JOIN_GAP = re.compile(r"[\u3400-\u9fff0-9０-９A-Za-z()（）]*")
"""What may stand between two names of one: a phrase, a bracket."""


def _joined(
    answer: str, spans: list[tuple[int, int]], document: str
) -> list[tuple[int, int]]:
    """Neighbouring names of one phrase joined where the document has them joined.

    One name with a connector or a bracket inside (广东省发展和改革委员会,
    …委员会办公室（广东省人民防空办公室）) is one fact, as it is when quoted.

    >>> text = "由广东省发展和改革委员会办理"
    >>> spans = [(1, 4), (7, 12)]
    >>> [text[a:b] for a, b in _joined(text, spans, "广东省发展和改革委员会")]
    ['广东省发展和改革委员会']
    >>> [text[a:b] for a, b in _joined(text, spans, "广东省")]
    ['广东省', '改革委员会']
    """
    out: list[tuple[int, int]] = []
    for a, b in sorted(spans):
        if out:
            a0, b0 = out[-1]
            gap = answer[b0:a]
            if _JOIN_GAP.fullmatch(gap) and answer[a0:b] in document:
                out[-1] = (a0, b)
                continue
        out.append((a, b))
    return out


def entity_facts(answer: str, document: str) -> list[Fact]:
    r"""Named things of the answer, each supported when the document contains it.

    >>> doc = "实施机构: 广东省公安厅\n申请材料: 居民身份证、申请表\n事项名称: 护照"
    >>> answer = "“护照”由广东省民政厅办理，需携带居民身份证和户口本复印件。"
    >>> for f in entity_facts(answer, doc):
    ...     print(f.text, f.supported)
    护照 True
    广东省民政厅 False
    居民身份证 True
    户口本复印件 False
    >>> [(f.text, f.supported) for f in entity_facts("Ask Lyon City Hall.", "Paris")]
    [('Lyon City Hall', False)]
    """
    found: list[tuple[int, int]] = []
    for m in _QUOTED.finditer(answer):
        # A quoted name is one fact, whatever names it holds (“居民身份证换领”).
        group = next(i for i in (1, 2, 3) if m.group(i) is not None)
        found.append((m.start(group), m.end(group)))
    names = _names(answer) if CJK.search(answer) else _proper_nouns(answer)
    for a, b in _joined(answer, names, document):
        if all(b <= s or a >= e for s, e in found):
            found.append((a, b))
    return [
        Fact("entity", a, b, answer[a:b], answer[a:b].strip() in document)
        for a, b in sorted(found)
    ]


# --- polarity -----------------------------------------------------------------

_CLAUSE_END = re.compile(r"[，。；;,.！？!?\n：:（(]")
_NEGATIVE_VALUES: Final = frozenset(
    {"否", "无", "没有", "不支持", "不需要", "不可以", "不允许", "不能", "不是"}
    | {"no", "none", "false", "not supported", "not required"}
)
_NEGATIVE_START = re.compile(r"^(?:不|未|否|无需|无须|无要求|not\b|no\b)", re.I)
"""A negative field value: 不收费, 无需, not required (not 无线电频率许可)."""
_MIN_SHARED = 2
"""Bigrams (or English words) a document clause shares with the answer's."""
_STOPWORDS: Final = frozenset(
    {"the", "a", "an", "to", "of", "in", "on", "at", "for", "by", "with", "and"}
    | {"or", "be", "is", "are", "it", "this", "that", "your", "you", "any", "all"}
    | {"from", "as", "can"}
)


def _keys(text: str, *, zh: bool) -> set[str]:
    """Character bigrams of a Chinese clause, content words of an English one."""
    if zh:
        chars = re.sub(r"[^\u3400-\u9fff0-9A-Za-z]", "", text)
        return {chars[i : i + 2] for i in range(len(chars) - 1)}
    words = re.findall(r"[a-z][a-z'-]+", text.lower())
    return {w for w in words if w not in _STOPWORDS}


def _clauses(text: str, *, zh: bool) -> list[tuple[int, int, bool, str]]:
    """(start, end, negative, object) of each permission or obligation."""
    out = []
    for w in polarity_words(text):
        rest = text[w.end : w.end + 60]
        cut = _CLAUSE_END.search(rest)
        obj = rest[: cut.start()] if cut else rest
        if not zh:
            obj = " ".join(obj.split()[:8])
        out.append((w.start, w.end, w.negative, obj))
    return out


def _field_polarity(obj: str, fields: dict[str, str], *, zh: bool) -> set[bool]:
    """Polarities (negative?) of the fields a clause's object is about."""
    out = set()
    for label, value in fields.items():
        head = label[-2:] if zh else (label.lower().split() or [""])[-1]
        value = strip_label(value)
        items = [v for v in (value, *split_items(value)) if len(v) >= 2]
        if (head and head in (obj if zh else obj.lower())) or any(
            v in obj for v in items
        ):
            negative = (
                value.lower() in _NEGATIVE_VALUES
                or _NEGATIVE_START.search(value) is not None
            )
            out.add(negative)
    return out


def polarity_facts(answer: str, document: str) -> list[Fact]:
    r"""Permissions and obligations the document also states, each checked.

    >>> doc = "网上预约: 是\n快递送达: 不支持\n受理条件: 申请人无需到场。"
    >>> answer = "可以网上预约，需要到场，可以快递送达，可以咨询。"
    >>> [(f.text, f.supported) for f in polarity_facts(answer, doc)]
    [('可以', True), ('需要', False), ('可以', False)]
    >>> doc = "Applicants must not apply online. Fees can be paid by card."
    >>> answer = "You must apply online. Fees cannot be paid by card."
    >>> [(f.text, f.supported) for f in polarity_facts(answer, doc)]
    [('must', False), ('cannot', False)]
    """
    zh = CJK.search(answer) is not None
    fields = parse_fields(document)
    stated = [
        (_keys(obj, zh=zh), negative)
        for _, _, negative, obj in _clauses(document, zh=zh)
    ]
    out = []
    for start, end, negative, obj in _clauses(answer, zh=zh):
        keys = _keys(obj, zh=zh)
        shared = [(len(keys & k), neg) for k, neg in stated]
        best = max((n for n, _ in shared), default=0)
        # A short object (到场) is matched by all it has.
        enough = max(1, min(_MIN_SHARED, len(keys)))
        polarities = {neg for n, neg in shared if n == best and n >= enough}
        if not polarities:
            polarities = _field_polarity(obj, fields, zh=zh)
        if len(polarities) != 1:  # not stated, or stated both ways: not checkable
            continue
        out.append(
            Fact("polarity", start, end, answer[start:end], negative in polarities)
        )
    return out


# --- the measure --------------------------------------------------------------


def check_facts(answer: str, document: str, *, question: str = "") -> list[Fact]:
    r"""Every checkable fact of the answer (numbers, names, polarities), in order.

    >>> doc = "实施机构: 广州市公安局\n承诺办结时限: 7(工作日)\n网上预约: 是"
    >>> facts = check_facts("广州市公安局七个工作日办结，不可以网上预约。", doc)
    >>> for f in facts:
    ...     print(f.kind, f.text, f.supported)
    entity 广州市公安局 True
    number 七 True
    polarity 不可以 False
    """
    facts = [
        *number_facts(answer, document, question=question),
        *entity_facts(answer, document),
        *polarity_facts(answer, document),
    ]
    return sorted(facts, key=lambda f: (f.start, f.end))


def facts_share(facts: list[Fact]) -> float:
    """``k / (n + 1)``: supported facts over checkable ones plus one, 0..1.

    >>> ok, bad = Fact("number", 0, 1, "7", True), Fact("number", 0, 1, "8", False)
    >>> facts_share([]), facts_share([ok]), facts_share([ok] * 4 + [bad])
    (0.0, 0.5, 0.6666666666666666)
    """
    return sum(f.supported for f in facts) / (len(facts) + 1)
