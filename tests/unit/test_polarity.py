"""The polarity lexicon agrees with the negation fault generator (section 12)."""

from __future__ import annotations

import pytest

from cube_ray.polarity import polarity_words
from cube_ray.qualification import (
    GoldDocument,
    compose_answer,
    fault_rng,
    negation_fault,
)
from tests.qualification_data import guangdong_documents

EN_ANSWERS = [
    "You can apply online. You must bring a passport.",
    "Applicants need not attend. A photo is required.",
    "You cannot pay by card, and you should not send cash.",
    "Pets are not allowed. Visitors may not park here.",
    "You will need to sign. Children do not need to sign.",
    "The owner needs to sign. Copies are allowed.",
    "Staff must not open it; you needn't wait.",
]


def _flips(answer: str, doc: GoldDocument, seeds: int) -> list[tuple[str, str, int]]:
    out = []
    for seed in range(seeds):
        fault = negation_fault(answer, doc, [], fault_rng(seed, "q", "negation"))
        if fault is not None:
            out.append((answer, fault.faulted, fault.span.start))
    return out


def _cases() -> list[tuple[str, str, int]]:
    cases = []
    for doc in guangdong_documents():
        cases += _flips(compose_answer(doc), doc, 3)
    en = GoldDocument.of("en", "Paris is in France.")
    for answer in EN_ANSWERS:
        cases += _flips(answer, en, 12)
    return cases


def test_every_flipped_word_is_read_with_the_opposite_polarity() -> None:
    cases = _cases()
    assert len(cases) >= 300
    words = set()
    for answer, faulted, start in cases:
        [before] = [w for w in polarity_words(answer) if w.start == start]
        [after] = [w for w in polarity_words(faulted) if w.start == start]
        assert before.negative != after.negative, (answer, faulted)
        words |= {before.word.lower(), after.word.lower()}
    # Both languages, both directions.
    assert {"需要", "不需要", "可以", "不可以", "must", "need not"} <= words


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("所需材料、须知、需求", []),
        ("可以直接办理，须到场", [False, False]),
        ("You may apply, or you have to wait.", [False, False]),
        ("You don't have to wait; it is not allowed.", [True, True]),
    ],
)
def test_restatements_and_non_permissions(text: str, expected: list[bool]) -> None:
    assert [w.negative for w in polarity_words(text)] == expected
