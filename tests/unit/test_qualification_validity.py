"""The qualification test is itself valid (CUBE_METHOD.md section 12).

Real faults of real Guangdong guides (the package's sample), scored through the
real judge stage and the summary's statistics, by two test judges:

* a judge that *sees* the fault: it scores a faulted answer 2 points below the
  original (give or take a point), on every dimension, and a control (a
  harmless edit that keeps every fact) like the original. It must be detected,
  net of the controls, on every expected kind (``dimensions[].detects``
  defaults) that the composed answers allow a control for, and on the weighted
  total; ``omission`` has none on these answers (every sentence carries a
  fact), so it is skipped and counted, untested rather than missed;
* a *blind* judge: its scores depend on the question and dimension and on
  noise, never on the answer. Over repeated seeds its false detections must
  stay at or below ``alpha``.
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Sequence
from dataclasses import dataclass

import polars as pl
import pyarrow as pa
import pytest

from cube_ray import schema
from cube_ray.aggregate import QualificationInput, summarize
from cube_ray.aggregate._qualification import fault_detection, fixed_weights
from cube_ray.config import DEFAULT_DETECTS, AggregateOptions
from cube_ray.corpus import stable_hash
from cube_ray.engines.base import JudgeItem, ScoreResult
from cube_ray.qualification import (
    KINDS,
    GoldDocument,
    compose_answer,
    is_control,
    seeded_sample,
)
from cube_ray.qualification._table import fault_rows
from cube_ray.stages import JudgeStage, judge_inputs
from cube_ray.stages.inputs import DOC_HASH
from cube_ray.stages.qualify import qualification_judge_inputs
from tests.qualification_data import guangdong_documents

DIMS = ("relevance", "specificity", "completeness", "quality")
N_QUESTIONS = 50
ALPHA = 0.05


@dataclass(frozen=True)
class _Config:
    """What the judge stage reads of an engine config."""

    score_mode: str = "argmax"


def _base(item: JudgeItem) -> int:
    digest = hashlib.sha256(f"{item.question}:{item.dimension}".encode()).digest()
    return 5 + digest[0] % 5  # 5..9


class SeeingJudge:
    """Scores an original answer (or a control) 5..9, a faulted copy 1-3 lower."""

    name = "seeing"

    def __init__(self, originals: set[str], seed: int) -> None:
        """``originals``: the answers and their controls (what is not a fault)."""
        self.originals = originals
        self.rng = random.Random(seed)

    def judge_items(self, items: Sequence[JudgeItem]) -> list[ScoreResult]:
        out = []
        for it in items:
            score = _base(it)
            if it.answer not in self.originals:
                score -= 2 + self.rng.choice([-1, 0, 1])
            out.append(ScoreResult(float(score), raw=str(score)))
        return out

    def close(self) -> None:
        """Nothing to release."""


class BlindJudge:
    """Scores the question and dimension, plus noise: never the answer."""

    name = "blind"

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)

    def judge_items(self, items: Sequence[JudgeItem]) -> list[ScoreResult]:
        return [
            ScoreResult(float(min(10, max(0, _base(it) + self.rng.randint(-2, 2)))))
            for it in items
        ]

    def close(self) -> None:
        """Nothing to release."""


@pytest.fixture(scope="module")
def docs() -> list[GoldDocument]:
    return guangdong_documents()


def _qualification(
    docs: list[GoldDocument], seed: int
) -> tuple[pa.Table, pa.Table, pa.Table]:
    """Judge inputs of the sampled full answers and of their faults; the table."""
    by_id = {d.doc_id: d for d in docs}
    chosen = seeded_sample(((d, d) for d in by_id), size=N_QUESTIONS, seed=seed)
    gold = [by_id[q] for q in chosen]
    items = [(g.doc_id, g.doc_id, compose_answer(g), g) for g in gold]
    rows = fault_rows(items, donors=gold, kinds=KINDS, seed=seed)
    question = {g.doc_id: f"如何办理{g.fields.get('事项名称', '')}？" for g in gold}
    full = pa.table(
        {
            schema.QUESTION_ID: [g.doc_id for g in gold],
            schema.SYSTEM: [schema.FULL] * len(gold),
            schema.ANSWER: [a for _, _, a, _ in items],
            schema.QUESTION: [question[g.doc_id] for g in gold],
            schema.TEXT: [g.text for g in gold],
            DOC_HASH: [stable_hash(g.text) for g in gold],
        }
    )
    ok = [r for r in rows if r[schema.STATUS] == schema.STATUS_OK]
    faults = pa.table(
        {
            schema.QUESTION_ID: [r[schema.QUESTION_ID] for r in ok],
            "kind": [r["kind"] for r in ok],
            "faulted": [r["faulted"] for r in ok],
            schema.QUESTION: [question[r[schema.QUESTION_ID]] for r in ok],
            schema.TEXT: [by_id[r[schema.QUESTION_ID]].text for r in ok],
            DOC_HASH: [stable_hash(by_id[r[schema.QUESTION_ID]].text) for r in ok],
        }
    )
    table = pa.Table.from_pylist(
        [{k: r[k] for k in (schema.QUESTION_ID, "kind", schema.STATUS)} for r in rows]
    )
    return full, faults, table


def _score(
    engine: object, name: str, full: pa.Table, faults: pa.Table
) -> tuple[pl.DataFrame, pl.DataFrame]:
    fps = {d: d for d in DIMS}
    stage = JudgeStage(
        name,
        _Config(),
        rubrics={d: f"rubric {d}" for d in DIMS},
        engine_factory=lambda _cfg: engine,
    )
    orig = stage(judge_inputs(full, judge=name, fingerprints=fps, dimensions=DIMS))
    faulted = stage(
        qualification_judge_inputs(
            faults, judge=name, fingerprints=fps, dimensions=DIMS
        )
    )
    a, b = pl.from_arrow(orig), pl.from_arrow(faulted)
    assert isinstance(a, pl.DataFrame)
    assert isinstance(b, pl.DataFrame)
    return a, b


def _expected() -> dict[str, list[str]]:
    return {d: list(DEFAULT_DETECTS[d]) for d in DIMS}


def _unchanged(full: pa.Table, faults: pa.Table) -> set[str]:
    """The original answers and their controls: what a seeing judge keeps."""
    controls = [
        a
        for k, a in zip(
            faults.column("kind").to_pylist(),
            faults.column("faulted").to_pylist(),
            strict=True,
        )
        if is_control(k)
    ]
    return {*full.column(schema.ANSWER).to_pylist(), *controls}


TESTED = ["number", "entity", "negation", "unsupported"]
"""The kinds with controls on composed answers (omission: none, skipped)."""


def _detection(
    engine: object, name: str, docs: list[GoldDocument], seed: int
) -> list[dict[str, object]]:
    full, faults, table = _qualification(docs, seed)
    orig, faulted = _score(engine, name, full, faults)
    frame = pl.from_arrow(table)
    assert isinstance(frame, pl.DataFrame)
    return fault_detection(
        orig,
        faulted,
        frame,
        weights=fixed_weights("equal", [name], DIMS),
        min_drop=0.5,
        alpha=ALPHA,
    )


def test_a_judge_that_sees_the_fault_is_detected_on_every_expected_kind(
    docs: list[GoldDocument],
) -> None:
    full, faults, table = _qualification(docs, 0)
    det = _detection(SeeingJudge(_unchanged(full, faults), 0), "seeing", docs, 0)
    got = {(r["kind"], r["figure"]): r for r in det}
    expected = _expected()
    for dim, kinds in [*expected.items(), ("weighted", list(KINDS))]:
        for kind in kinds:
            if kind not in TESTED:
                assert (kind, dim) not in got  # no pair: skipped, not missed
                continue
            test = got[(kind, dim)]
            assert test["detected"], test
            assert not test["false_alarm"], test
            # Most sampled guides take every kind (entity: a control where
            # the donor's name is about as long as the swapped one).
            assert test["n"] >= 15, test
            assert 1.0 <= test["net_drop"] <= 3.0  # type: ignore[operator]
            assert test["control_drop"] == 0.0
    assert all(r["detected"] for r in det)
    omission = [r for r in table.to_pylist() if r["kind"] == "omission"]
    assert all(r["status"] in ("no_control", "skipped") for r in omission)


def test_a_blind_judge_is_detected_on_no_kind_beyond_alpha(
    docs: list[GoldDocument],
) -> None:
    tests = detections = alarms = 0
    for seed in range(30):
        det = _detection(BlindJudge(seed), "blind", docs, seed)
        tests += len(det)
        detections += sum(bool(r["detected"]) for r in det)
        alarms += sum(bool(r["false_alarm"]) for r in det)
        assert len(det) == len(TESTED) * (len(DIMS) + 1)
    rate = detections / tests
    print(f"blind judge: {detections} false detections in {tests} tests")
    assert rate <= ALPHA, f"{detections} false detections in {tests} tests"
    assert alarms / tests <= ALPHA, f"{alarms} false alarms in {tests} tests"


def test_summary_keys_flags_and_headline_exclusion(docs: list[GoldDocument]) -> None:
    """Through ``summarize``: the seeing judge stays in, the blind one is out."""
    full, faults, table = _qualification(docs, 1)
    originals = _unchanged(full, faults)
    frames = [
        _score(SeeingJudge(originals, 1), "seeing", full, faults),
        _score(BlindJudge(1), "blind", full, faults),
    ]
    qids = full.column(schema.QUESTION_ID).to_pylist()
    # The bounds and one system, so the summary has something to normalise.
    answers = pl.DataFrame(
        {
            schema.QUESTION_ID: qids * 3,
            schema.SYSTEM: ["zero"] * len(qids)
            + ["full"] * len(qids)
            + ["rag"] * len(qids),
            schema.RANK: [None] * (2 * len(qids)) + [1] * len(qids),
        },
        schema_overrides={schema.RANK: pl.Int32},
    )
    bound_rows = []
    for judge in ("seeing", "blind"):
        for q in qids:
            for d in DIMS:
                bound_rows.append((q, "zero", judge, d, 1.0, "ok"))
                bound_rows.append((q, "rag", judge, d, 6.0, "ok"))
    cols = [
        schema.QUESTION_ID,
        schema.SYSTEM,
        schema.JUDGE,
        schema.DIMENSION,
        schema.SCORE,
        schema.STATUS,
    ]
    extra = pl.DataFrame(bound_rows, schema=cols, orient="row")
    scores = pl.concat([extra, *[f[0].select(cols) for f in frames]])
    qscores = pl.concat([f[1].select(cols) for f in frames])
    frame = pl.from_arrow(table)
    assert isinstance(frame, pl.DataFrame)
    summary = summarize(
        answers,
        scores,
        options=AggregateOptions(weights="equal", require_qualification=True),
        qualification=QualificationInput(
            faults=frame, scores=qscores, expected=_expected(), min_drop=0.5
        ),
    ).model_dump(mode="json")
    seeing = summary["judges"]["seeing"]["qualification"]
    assert all(seeing[k]["weighted"]["detected"] for k in TESTED)
    assert seeing["omission"]["weighted"]["n"] == 0
    assert seeing["omission"]["weighted"]["no_control"] > 0
    assert set(seeing["omission"]) == {*DIMS, "weighted"}
    blind = summary["judges"]["blind"]["qualification"]
    assert not any(blind[k]["weighted"]["detected"] for k in KINDS)
    flags = {f["flag"] for f in summary["flags"] if f.get("judge") == "blind"}
    assert "misses faults: negation on relevance" in flags
    # No omission could be controlled on these answers: untested, not missed.
    assert "too few faults: omission on completeness" in flags
    assert "misses faults: omission on completeness" not in flags
    assert not any(
        f["flag"].startswith("misses faults")
        for f in summary["flags"]
        if f.get("judge") == "seeing"
    )
    across = summary["across_judges"]["rag"]
    assert across["judges"] == ["seeing"]
    assert across["excluded"]["blind"]["code"] == "misses_faults"
    assert across["excluded"]["blind"]["text"].startswith("misses faults")
