"""Controls of the controlled faults (CUBE_METHOD.md section 12, "Controls").

On real Guangdong guides (the package's 120-record sample) and English
passages: every control keeps every fact (number values, gold field values,
polarity), sits where its fault is and changes the length about as much; it is
deterministic; a fault without one is ``no_control``. Then the simulation of
``benchmarks/qualification_controls.py``: an oracle judge is detected on every
kind tested with no false alarm, a length judge and an any-edit judge on none
(the any-edit judge with a false alarm on every kind), a blind judge on at most
alpha of the kinds.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

from cube_ray.qualification import (
    KINDS,
    GoldDocument,
    compose_answer,
    control_kind,
    keeps_facts,
    length_matched,
    make_control,
    make_fault,
    negators,
    number_values,
)
from cube_ray.qualification._fault import Fault, replace_span
from cube_ray.qualification._table import fault_rows
from tests.qualification_data import ARES, english_documents, guangdong_documents

ROOT = Path(__file__).resolve().parents[2]
spec = importlib.util.spec_from_file_location(
    "qualification_controls_bench", ROOT / "benchmarks" / "qualification_controls.py"
)
assert spec is not None
assert spec.loader is not None
bench = importlib.util.module_from_spec(spec)
sys.modules["qualification_controls_bench"] = bench
spec.loader.exec_module(bench)


@pytest.fixture(scope="module")
def zh_docs() -> list[GoldDocument]:
    return guangdong_documents()


def _pairs(
    docs: list[GoldDocument], answers: dict[str, str], seed: int = 0
) -> list[tuple[GoldDocument, Fault, Fault | None]]:
    out = []
    for gold in docs:
        for kind in KINDS:
            fault = make_fault(
                kind,
                answers[gold.doc_id],
                gold,
                donors=docs[:50],
                seed=seed,
                question_id=gold.doc_id,
            )
            if fault is None:
                continue
            control = make_control(fault, gold, seed=seed, question_id=gold.doc_id)
            out.append((gold, fault, control))
    return out


def test_every_control_keeps_the_facts_and_matches_its_fault(
    zh_docs: list[GoldDocument],
) -> None:
    answers = {d.doc_id: compose_answer(d) for d in zh_docs}
    pairs = _pairs(zh_docs, answers)
    built: dict[str, int] = {}
    for gold, fault, control in pairs:
        if control is None:
            continue
        kind = fault.kind
        built[kind] = built.get(kind, 0) + 1
        assert control.kind == control_kind(kind)
        original, edited = fault.answer, control.faulted
        assert edited != original
        assert edited != fault.faulted
        added = control.span.replacement if kind == "unsupported" else ""
        assert keeps_facts(original, edited, gold, added=added)
        assert length_matched(fault, control)
        if kind in ("number", "negation"):  # the same span, written another way
            assert control.span.start == fault.span.start
            assert control.span.end == fault.span.end
        if kind == "number":
            assert number_values(edited) == number_values(original)
        if kind in ("number", "entity", "negation"):
            assert negators(edited) == negators(original)
        if kind == "unsupported":  # appended at the end, like its fault
            assert edited.startswith(original.rstrip())
            added = number_values(control.span.replacement)
            assert added <= number_values(gold.text)
    # Every kind but omission has a control on most composed answers; an
    # omission has none (each sentence carries a fact).
    assert built.get("number", 0) >= 60
    assert built.get("entity", 0) >= 40
    assert built.get("negation", 0) >= 100
    assert built.get("unsupported", 0) >= 100
    assert built.get("omission", 0) == 0


def test_deterministic_from_seed_question_and_kind(
    zh_docs: list[GoldDocument],
) -> None:
    answers = {d.doc_id: compose_answer(d) for d in zh_docs[:30]}
    a = _pairs(zh_docs[:30], answers, seed=4)
    b = _pairs(zh_docs[:30], answers, seed=4)
    assert [(f, c) for _, f, c in a] == [(f, c) for _, f, c in b]


def test_each_kind_of_control_by_hand() -> None:
    gold = GoldDocument.of(
        "g",
        "实施机构: 广东省公安厅\n承诺办结时限: 15(工作日)\n申请材料: 身份证、申请表",
    )
    donor = GoldDocument.of("d", "实施机构: 广东省民政厅\n承诺办结时限: 20(工作日)")

    def control(kind: str, answer: str) -> str | None:
        fault = make_fault(kind, answer, gold, donors=[donor], seed=0, question_id="q")
        assert fault is not None, kind
        c = make_control(fault, gold, seed=0, question_id="q")
        return None if c is None else c.faulted

    assert control("number", "需15个工作日。") == "需十五个工作日。"
    assert control("entity", "请到广东省公安厅办理。") == "请到「广东省公安厅」办理。"
    assert control("negation", "需要提交身份证。") == "须提交身份证。"
    answer = "需要提交身份证。办结需15个工作日。" + bench.CLOSING
    assert control("omission", answer) == "需要提交身份证。办结需15个工作日。"
    # A closing too short to match the cut: no control, the pair is skipped.
    assert control("omission", "需要提交身份证。办结需15个工作日。谢谢！") is None
    claim = control("unsupported", "需15个工作日。")
    assert claim is not None
    assert claim.startswith("需15个工作日。")
    assert claim[len("需15个工作日。") :] in {
        "该事项的承诺办结时限为15(工作日)。",
        "此外，申请时还须提交身份证。",
        "此外，申请时还须提交申请表。",
    }


def test_english_controls() -> None:
    gold = GoldDocument.of("g", "The office can issue 2,000 permits a year.")
    fault = replace_span("negation", "You can apply.", 4, 7, "cannot")
    c = make_control(fault, gold, seed=0, question_id="q")
    assert c is not None
    assert c.faulted == "You may apply."
    fault = replace_span("number", "It issues 2,000 permits.", 10, 15, "1,000")
    c = make_control(fault, gold, seed=0, question_id="q")
    assert c is not None
    assert c.faulted == "It issues 2000 permits."


@pytest.mark.skipif(not ARES.is_file(), reason=f"needs the shared data {ARES}")
def test_english_passages_controls_keep_the_facts() -> None:
    docs = english_documents(limit=120)
    answers = {d.doc_id: compose_answer(d) for d in docs}
    made = 0
    for gold, fault, control in _pairs(docs, answers):
        if control is None:
            continue
        made += 1
        unsupported = fault.kind == "unsupported"
        added = control.span.replacement if unsupported else ""
        assert keeps_facts(fault.answer, control.faulted, gold, added=added)
        assert length_matched(fault, control)
    assert made >= 100


def test_a_fault_without_a_control_is_no_control_and_not_judged() -> None:
    gold = GoldDocument.of("g", "申请材料: 身份证\n承诺办结时限: 7(工作日)")
    rows = fault_rows(
        [("q", "g", "需要身份证。时限为7个工作日。", gold)],
        donors=[],
        kinds=["omission"],
        seed=0,
    )
    assert [(r["kind"], r["status"]) for r in rows] == [
        ("omission", "no_control"),
        ("omission:control", "skipped"),
    ]
    assert rows[0]["faulted"] == "需要身份证。"  # what the judge was not shown


def test_mechanical_checks_refuse_what_changes_a_fact() -> None:
    gold = GoldDocument.of("g", "实施机构: 省公安厅\n承诺办结时限: 15(工作日)")
    answer = "由省公安厅办理，需要15个工作日。"
    assert keeps_facts(answer, "由「省公安厅」办理，须十五个工作日。", gold)
    assert not keeps_facts(answer, "由省公安厅办理，需要16个工作日。", gold)
    assert not keeps_facts(answer, "由省厅办理，需要15个工作日。", gold)
    assert not keeps_facts(answer, "由省公安厅办理，无需15个工作日。", gold)


# --- the simulation -------------------------------------------------------------


@pytest.fixture(scope="module")
def studies(zh_docs: list[GoldDocument]) -> dict[str, list[dict[str, object]]]:
    from cube_ray.qualification import seeded_sample

    by_id = {d.doc_id: d for d in zh_docs}
    out: dict[str, list[dict[str, object]]] = {}
    for style in ("composed", "brief"):
        out[style] = []
        for seed in range(8):
            chosen = seeded_sample(((d, d) for d in by_id), size=50, seed=seed)
            docs = [by_id[q] for q in chosen]
            out[style].append(bench.simulate(docs, style=style, seed=seed))
    return out


def test_oracle_is_detected_on_every_kind_tested_without_false_alarms(
    studies: dict[str, list[dict[str, object]]],
) -> None:
    for style, runs in studies.items():
        over = bench.summarize_seeds(runs)["oracle"]
        assert over["tests"] >= 8 * 4, style
        assert over["detected"] == over["tests"], (style, over)
        assert over["false_alarms"] == 0, (style, over)
    # Omission is tested where the answer has fact-free text to remove.
    brief = bench.summarize_seeds(studies["brief"])["oracle"]["per_kind"]
    assert brief["omission"]["tests"] == 8


def test_any_edit_judge_is_detected_on_no_kind_and_raises_false_alarms(
    studies: dict[str, list[dict[str, object]]],
) -> None:
    for style, runs in studies.items():
        over = bench.summarize_seeds(runs)["any_edit"]
        assert over["tests"] >= 8 * 4
        assert over["detected"] == 0, (style, over)
        assert over["false_alarms"] == over["tests"], (style, over)


def test_length_judge_is_detected_on_no_kind_of_composed_answers(
    studies: dict[str, list[dict[str, object]]],
) -> None:
    over = bench.summarize_seeds(studies["composed"])["length"]
    assert over["tests"] >= 8 * 4
    assert over["detected"] == 0, over
    assert over["false_alarms"] == 0, over
    # Brief answers: every kind but omission, whose control may be 20 % (plus
    # 4 characters) shorter than the cut (BENCHMARKS.md).
    brief = bench.summarize_seeds(studies["brief"])["length"]["per_kind"]
    assert all(brief[k]["detected"] == 0 for k in brief if k != "omission")


def test_blind_judge_is_detected_on_at_most_alpha_of_the_kinds(
    studies: dict[str, list[dict[str, object]]],
) -> None:
    tests = detected = 0
    for runs in studies.values():
        over = bench.summarize_seeds(runs)["blind"]
        tests += over["tests"]
        detected += over["detected"]
    assert tests >= 60
    assert detected / tests <= bench.ALPHA, (detected, tests)


# --- the summary, the report and the console show the certificate ----------------


def _summary() -> object:
    import polars as pl

    from cube_ray import schema
    from cube_ray.aggregate import AggregateOptions, QualificationInput, summarize

    qids = [f"q{i}" for i in range(8)]
    answers = pl.DataFrame(
        {
            schema.QUESTION_ID: qids * 3,
            schema.SYSTEM: ["zero"] * 8 + ["full"] * 8 + ["rag"] * 8,
            schema.RANK: [None] * 16 + [1] * 8,
        },
        schema_overrides={schema.RANK: pl.Int32},
    )
    cols = [
        schema.QUESTION_ID,
        schema.SYSTEM,
        schema.JUDGE,
        schema.DIMENSION,
        schema.SCORE,
        schema.STATUS,
    ]
    bound = {"zero": 1.0, "full": 8.0, "rag": 6.0}
    scores = pl.DataFrame(
        [
            (q, s, j, "relevance", v + (i % 2), "ok")
            for j in ("sees", "any")
            for i, q in enumerate(qids)
            for s, v in bound.items()
        ],
        schema=cols,
        orient="row",
    )
    # "sees" drops 3 after the fault only; "any" drops 3 after any edit.
    edited = {"sees": {"number": 5.0, "number:control": 8.0}, "any": {"number": 5.0}}
    edited["any"]["number:control"] = 5.0
    qscores = pl.DataFrame(
        [
            (q, kind, j, "relevance", v + (i % 2), "ok")
            for j, per in edited.items()
            for i, q in enumerate(qids)
            for kind, v in per.items()
        ],
        schema=cols,
        orient="row",
    )
    faults = pl.DataFrame(
        {
            schema.QUESTION_ID: qids * 2 + ["q8", "q8"],
            "kind": ["number"] * 8
            + ["number:control"] * 8
            + ["number", "number:control"],
            schema.STATUS: ["ok"] * 16 + ["no_control", "skipped"],
        }
    )
    return summarize(
        answers,
        scores,
        options=AggregateOptions(weights="equal"),
        qualification=QualificationInput(
            faults=faults,
            scores=qscores,
            expected={"relevance": ["number"]},
            min_drop=0.5,
        ),
    )


def test_summary_certificate_flags_report_and_console() -> None:
    from cube_ray.aggregate import Summary
    from cube_ray.commands.judges import _fault_table
    from cube_ray.report._data import RunData
    from cube_ray.report._qualification import qualification_section
    from cube_ray.report._render import render_markdown

    summary = _summary()
    assert isinstance(summary, Summary)
    sees = summary.judges["sees"].qualification
    assert sees is not None
    t = sees["number"]["weighted"]
    assert (t.n, t.skipped, t.no_control) == (8, 1, 1)
    assert (t.drop, t.control_drop, t.net_drop) == (3.0, 0.0, 3.0)
    assert t.detected is True
    assert t.false_alarm is False
    assert t.net_drop_interval is not None
    assert t.net_drop_interval.low == t.net_drop_interval.high == 3.0
    anyone = summary.judges["any"].qualification
    assert anyone is not None
    a = anyone["number"]["relevance"]
    assert (a.drop, a.control_drop, a.net_drop) == (3.0, 3.0, 0.0)
    assert a.detected is False
    assert a.false_alarm is True
    flags = {(f.judge, f.flag) for f in summary.flags}
    assert ("any", "punishes harmless edits: number control on relevance") in flags
    assert ("any", "misses faults: number on relevance") in flags
    assert not any(j == "sees" and "number" in f for j, f in flags)
    # The JSON reads back (the same model, the same figures).
    again = Summary.from_json(summary.model_dump(mode="json"))
    assert again.judges["any"].qualification == anyone

    section = qualification_section(RunData(run_dir=Path("run"), summary=summary))
    assert section is not None
    text = render_markdown(title="t", meta=[], sections=[section], footer="")
    assert "sees: certificate on the weighted total" in text
    assert "+3.00 [3.00, 3.00]" in text
    assert "any punishes harmless edits (the controls of number)" in text
    assert "any does not notice a changed number" in text

    block = summary.model_dump(mode="json")["judges"]["any"]["qualification"]
    printed = "\n".join(_fault_table(block))
    assert "+0.00/1 !" in printed
    assert (
        "number           n   8  net drop +0.00 [+0.00, +0.00]  not detected" in printed
    )
    assert "false alarms: relevance, weighted" in printed


def test_a_summary_written_before_controls_still_reads() -> None:
    from cube_ray.aggregate import Qualification

    old = Qualification.model_validate(
        {"n": 8, "skipped": 0, "drop": 3.0, "p_value": 0.004, "detected": True}
    )
    assert old.net_drop is None
    assert old.false_alarm is None
    assert old.net_drop_interval is None
