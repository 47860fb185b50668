"""The fault generator (CUBE_METHOD.md section 12) on real documents.

Guangdong guides from the package's own sample (examples/data); English
Wikipedia passages from ../shared/data/ares_nq (skipped when absent). The
checked-in examples (tests/data/qualification/faults.jsonl, hand-checked: one
controlled change each) must be exactly what the generator builds today.
"""

from __future__ import annotations

import json
import random
from collections import Counter

import pytest

from cube_ray.qualification import (
    FAULT_KINDS,
    KINDS,
    GoldDocument,
    compose_answer,
    entity_fault,
    fault_rng,
    make_fault,
    negation_fault,
    number_fault,
    number_tokens,
    omission_fault,
    unsupported_fault,
)
from tests.qualification_data import (
    ARES,
    FAULTS,
    PER_KIND,
    english_documents,
    examples,
    guangdong_documents,
)

needs_ares = pytest.mark.skipif(
    not ARES.is_file(),
    reason=f"English corpus {ARES} absent (../shared/data is not in a fresh clone)",
)


def only_changed_inside(answer: str, faulted: str, start: int, end: int) -> bool:
    """The texts differ, and only in one region: ``answer[start:end]``.

    Computed from the texts alone (common prefix and suffix, independently),
    not from the fault's own bookkeeping.
    """
    prefix = 0
    while prefix < min(len(answer), len(faulted)) and answer[prefix] == faulted[prefix]:
        prefix += 1
    suffix = 0
    while (
        suffix < min(len(answer), len(faulted))
        and answer[len(answer) - 1 - suffix] == faulted[len(faulted) - 1 - suffix]
    ):
        suffix += 1
    return answer != faulted and prefix >= start and suffix >= len(answer) - end


@pytest.fixture(scope="module")
def zh_docs() -> list[GoldDocument]:
    return guangdong_documents()


def test_every_kind_applies_to_most_real_guides(zh_docs: list[GoldDocument]) -> None:
    built: Counter[str] = Counter()
    for gold in zh_docs[:60]:
        answer = compose_answer(gold)
        for kind in KINDS:
            f = make_fault(
                kind, answer, gold, donors=zh_docs, seed=3, question_id=gold.doc_id
            )
            if f is not None:
                built[kind] += 1
                assert f.kind == kind
                assert only_changed_inside(
                    f.answer, f.faulted, f.span.start, f.span.end
                )
    assert all(built[k] >= 50 for k in KINDS), built


def test_deterministic_from_seed_question_and_kind(zh_docs: list[GoldDocument]) -> None:
    gold = zh_docs[1]
    answer = compose_answer(gold)

    def fault(seed: int, qid: str, kind: str) -> str | None:
        f = make_fault(kind, answer, gold, donors=zh_docs, seed=seed, question_id=qid)
        return None if f is None else f.faulted

    for kind in KINDS:
        assert fault(1, "q", kind) == fault(1, "q", kind)
    # Another seed or question draws another fault for some kind.
    assert any(fault(1, "q", k) != fault(2, "q", k) for k in ("number", "entity"))
    assert any(fault(1, "q", k) != fault(1, "r", k) for k in ("number", "entity"))


def test_number_that_appears_twice_changes_once() -> None:
    gold = GoldDocument.of("g", "法定办结时限: 20(工作日)\n承诺办结时限: 20(工作日)")
    answer = "法定办结时限为20个工作日，承诺办结时限为20个工作日。"
    for seed in range(10):
        f = number_fault(answer, gold, [], fault_rng(seed, "q", "number"))
        assert f is not None
        assert f.faulted.count("20") == 1  # one occurrence changed, one kept
        assert only_changed_inside(answer, f.faulted, f.span.start, f.span.end)


def test_digits_of_phone_numbers_and_dates_are_not_separate_numbers() -> None:
    gold = GoldDocument.of(
        "g", "咨询电话: 020-83134173\n日期: 2021年3月5日\n时限: 3(工作日)"
    )
    answer = "请于2021年3月5日前办理，3个工作日办结，电话020-83134173。"
    tokens = [(t.text, t.sort) for t in number_tokens(answer)]
    assert tokens == [
        ("2021", "year"),
        ("3", "month"),
        ("5", "day"),
        ("3", "arabic"),
        ("020-83134173", "phone"),
    ]
    for seed in range(30):
        f = number_fault(answer, gold, [], fault_rng(seed, "q", "number"))
        assert f is not None
        new = f.span.replacement
        if f.span.original == "020-83134173":
            assert new.startswith("020-831341")
            assert len(new) == 12
        if f.span.start == 7:  # the month stays a month
            assert 1 <= int(new) <= 12
        if f.span.start == 9:  # the day stays a day
            assert 1 <= int(new) <= 28


def test_full_width_digits_stay_full_width() -> None:
    gold = GoldDocument.of("g", "承诺办结时限: ５(工作日)\n收费: ２００元")
    answer = "承诺５个工作日内办结，收费２００元。"
    seen = set()
    for seed in range(20):
        f = number_fault(answer, gold, [], fault_rng(seed, "q", "number"))
        assert f is not None
        assert all("０" <= c <= "９" for c in f.span.replacement)
        seen.add(f.span.original)
    assert seen == {"５", "２００"}


def test_chinese_numerals_with_units() -> None:
    gold = GoldDocument.of("g", "承诺办结时限: 20(工作日)")
    answer = "一次性告知后，二十个工作日内办结。"
    f = number_fault(answer, gold, [], fault_rng(0, "q", "number"))
    assert f is not None
    assert f.span.original == "二十"
    assert "一次性" in f.faulted  # not a number


def test_number_absent_from_the_document_is_skipped() -> None:
    gold = GoldDocument.of("g", "承诺办结时限: 7(工作日)")
    assert number_fault("3个工作日办结。", gold, [], fault_rng(0, "q", "n")) is None


def test_overlapping_entity_spans_take_the_longest() -> None:
    gold = GoldDocument.of("g", "实施机构: 广东省公安厅\n行政区划: 广东省")
    donor = GoldDocument.of("d", "实施机构: 广东省民政厅\n行政区划: 广州市")
    answer = "由广东省公安厅负责。"
    for seed in range(10):
        f = entity_fault(answer, gold, [donor], fault_rng(seed, "q", "entity"))
        assert f is not None
        # 广东省 inside 广东省公安厅 is never swapped on its own.
        assert f.span.original == "广东省公安厅"
        assert f.faulted == "由广东省民政厅负责。"


def test_entity_swaps_a_list_item_for_an_item_of_the_same_field() -> None:
    gold = GoldDocument.of("g", "申请材料: 居民身份证、申请表")
    donor = GoldDocument.of("d", "申请材料: 营业执照、授权委托书")
    answer = "需要提交：\n1. 居民身份证\n2. 申请表"
    f = entity_fault(answer, gold, [donor], fault_rng(0, "q", "entity"))
    assert f is not None
    assert f.span.original in {"居民身份证", "申请表"}
    assert f.span.replacement in {"营业执照", "授权委托书"}


def test_negation_flips_and_guards() -> None:
    gold = GoldDocument.of("g", "x")
    assert negation_fault("所需材料见须知。", gold, [], fault_rng(0, "q", "n")) is None
    f = negation_fault("申请人无须到场。", gold, [], fault_rng(0, "q", "n"))
    assert f is not None
    assert f.faulted == "申请人必须到场。"
    en = GoldDocument.of("e", "Applicants can apply online.")
    f = negation_fault("You can apply online.", en, [], fault_rng(0, "q", "n"))
    assert f is not None
    assert f.faulted == "You cannot apply online."
    f = negation_fault("Must you apply? You must not.", en, [], fault_rng(1, "q", "n"))
    assert f is not None
    assert f.span.original in {"Must", "must not"}
    assert negation_fault("a can-do attitude", en, [], fault_rng(0, "q", "n")) is None


def test_omission_needs_a_second_unit() -> None:
    gold = GoldDocument.of("g", "x")
    assert omission_fault("只有一句话。", gold, [], fault_rng(0, "q", "o")) is None
    f = omission_fault("第一句。第二句。", gold, [], fault_rng(0, "q", "o"))
    assert f is not None
    assert f.faulted == "第一句。"


def test_unsupported_specific_is_not_in_the_gold_document(
    zh_docs: list[GoldDocument],
) -> None:
    for gold in zh_docs[:30]:
        answer = compose_answer(gold)
        f = unsupported_fault(answer, gold, zh_docs, fault_rng(0, gold.doc_id, "u"))
        assert f is not None
        assert f.faulted.startswith(answer.rstrip())
        claim = f.span.replacement
        assert claim
        assert claim.strip() not in gold.text


def test_kind_that_does_not_apply_returns_none() -> None:
    gold = GoldDocument.of("g", "Paris is in France.")
    rng = random.Random(0)
    assert all(fn("", gold, [], rng) is None for fn in (number_fault, negation_fault))
    assert (
        make_fault("omission", "   ", gold, donors=[], seed=0, question_id="q") is None
    )
    with pytest.raises(ValueError, match="unknown fault kind"):
        make_fault("typo", "x", gold, donors=[], seed=0, question_id="q")
    assert set(FAULT_KINDS) == set(KINDS)


@needs_ares
def test_english_passages() -> None:
    docs = english_documents(limit=120)
    built: Counter[str] = Counter()
    for gold in docs:
        answer = compose_answer(gold)
        for kind in KINDS:
            f = make_fault(
                kind, answer, gold, donors=docs, seed=0, question_id=gold.doc_id
            )
            if f is not None:
                built[kind] += 1
                assert only_changed_inside(
                    f.answer, f.faulted, f.span.start, f.span.end
                )
    # Wikipedia passages rarely grant or forbid anything: negation is rare.
    assert built["negation"] >= 1
    assert all(built[k] >= 60 for k in KINDS if k != "negation"), built


def _checked_in() -> list[dict[str, object]]:
    return [json.loads(x) for x in FAULTS.read_text(encoding="utf-8").splitlines()]


def test_checked_in_examples_have_exactly_one_change_region() -> None:
    rows = _checked_in()
    per = Counter((r["lang"], r["kind"]) for r in rows)
    assert all(per[("zh", k)] == PER_KIND for k in KINDS), per
    # Wikipedia passages rarely grant or forbid: 18 of 400 give a negation.
    assert all(per[("en", k)] >= PER_KIND - 2 for k in KINDS), per
    for r in rows:
        answer, faulted = str(r["answer"]), str(r["faulted"])
        start, end = int(str(r["start"])), int(str(r["end"]))
        assert answer[start:end] == r["original"]
        assert faulted == answer[:start] + str(r["replacement"]) + answer[end:]
        assert only_changed_inside(answer, faulted, start, end), r


def test_checked_in_examples_are_the_generators_output() -> None:
    rows = _checked_in()
    zh = [r for r in rows if r["lang"] == "zh"]
    assert zh == examples(guangdong_documents(), "zh")


@needs_ares
def test_checked_in_english_examples_are_the_generators_output() -> None:
    rows = _checked_in()
    en = [r for r in rows if r["lang"] == "en"]
    assert en == examples(english_documents(), "en")
