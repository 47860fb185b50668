"""Full-bound-style answers composed from a document, with no generator.

The tests, ``benchmarks/qualification.py`` and the hand-checked fault examples
need realistic answers grounded in one document, built deterministically:
for a field document (the Guangdong guides) the sentences a guide-reading
assistant writes from its fields (agency, materials, time limits, place,
phone); for a passage, its first sentences.
"""

from __future__ import annotations

import hashlib

from cube_ray.qualification._document import (
    SENTENCE_END,
    GoldDocument,
    split_items,
    strip_label,
)

__all__ = ["compose_answer"]


def _field(doc: GoldDocument, *names: str) -> str | None:
    for name in names:
        if doc.fields.get(name):
            return strip_label(doc.fields[name]) or None
    return None


def _zh_answer(doc: GoldDocument) -> str:
    name = _field(doc, "事项名称")
    agency = _field(doc, "实施机构")
    materials = split_items(doc.fields.get("申请材料", ""))
    legal, promised = _field(doc, "法定办结时限"), _field(doc, "承诺办结时限")
    place, phone = _field(doc, "办理地点"), _field(doc, "咨询电话")
    opening = f"根据办事指南，“{name}”由{agency}负责办理。" if name and agency else ""
    material_part = ""
    if len(materials) >= 2:
        items = "\n".join(f"{i}. {m}" for i, m in enumerate(materials, 1))
        material_part = f"办理该事项需要提交以下材料：\n{items}\n"
    elif materials:
        material_part = f"申请人需要提交{materials[0]}。"
    rest = []
    if legal and promised:
        rest.append(f"法定办结时限为{legal}，承诺办结时限为{promised}。")
    elif legal or promised:
        rest.append(f"办结时限为{legal or promised}。")
    if place:
        rest.append(f"办理地点：{place}。")
    if doc.fields.get("网上预约") == "是":
        rest.append("该事项可以网上预约办理。")
    if phone:
        rest.append(f"如有疑问，可以拨打咨询电话{phone}。")
    # Answers to a materials question open with the list (a list-item cut).
    materials_first = int(hashlib.sha256(doc.doc_id.encode()).hexdigest(), 16) % 2
    head = [material_part, opening] if materials_first else [opening, material_part]
    return "".join([*head, *rest]).strip()


def compose_answer(doc: GoldDocument) -> str:
    r"""A grounded answer written from ``doc`` alone.

    >>> text = "事项名称: 开办\n实施机构: 省厅\n承诺办结时限: 7(工作日)"
    >>> doc = GoldDocument.of("1", text)
    >>> compose_answer(doc)
    '根据办事指南，“开办”由省厅负责办理。办结时限为7(工作日)。'
    >>> compose_answer(GoldDocument.of("2", "Paris is big. It is old. It has a river."))
    'Paris is big. It is old.'
    """
    if doc.fields and doc.language == "zh":
        return _zh_answer(doc)
    ends = [m.end() for m in SENTENCE_END.finditer(doc.text)]
    starts = [0, *ends]
    bounds = zip(starts, [*ends, len(doc.text)], strict=True)
    sentences = [doc.text[a:b].strip() for a, b in bounds]
    sentences = [s for s in sentences if s]
    out: list[str] = []
    for s in sentences:
        if out and (len(out) >= 2 or len(" ".join([*out, s])) > 400):
            break
        out.append(s)
    return " ".join(out)
