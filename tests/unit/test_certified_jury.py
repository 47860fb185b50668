"""The headline from certified judges only (issue 33 item 5, CUBE_METHOD.md §12).

``qualification.judges`` chooses who is qualified (checked at load: an unknown
name is an error naming the judges); a judge not qualified holds no
certificate; ``aggregate.require_qualification`` leaves it out of the
headline with that reason; ``qualification.certify_on`` says whether the
weighted total or each dimension must detect its expected kinds; a judge
none of whose kinds could be tested holds none either. The console's result
line names each headline judge with the kinds its certificate shows, and says
so plainly when no LLM judge holds one.
"""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import polars as pl
import pytest

from cube_ray import schema
from cube_ray.aggregate import (
    NO_CERTIFICATE,
    NO_CERTIFIED_JUDGE,
    UNQUALIFIED_JUDGE,
    AggregateOptions,
    QualificationInput,
    Summary,
    summarize,
)
from cube_ray.cli import main
from cube_ray.config import QualificationConfig, RunConfig
from cube_ray.report import console_lines
from cube_ray.report._data import RunData
from cube_ray.report._format import jury_sentence
from tests.pipeline_helpers import fake_config, make_corpus, make_qa_file

_COLS = [
    schema.QUESTION_ID,
    schema.SYSTEM,
    schema.JUDGE,
    schema.DIMENSION,
    schema.SCORE,
    schema.STATUS,
]
_DIMS = ("relevance", "completeness")


def _summary(
    n: int = 8,
    *,
    qualified: tuple[str, ...] | None = ("sees", "flat"),
    certify_on: str = "weighted",
    require: bool = True,
    separation: bool = True,
) -> Summary:
    """Three judges that separate the bounds on two dimensions.

    After a changed number, ``sees`` drops 3 points on both dimensions (net
    of its control); ``flat`` drops 3 on relevance only (its completeness
    cannot see a number), so its weighted drop is 1.5, below ``min_drop`` 2;
    ``other`` is not qualified unless ``qualified`` names it.
    """
    qids = [f"q{i}" for i in range(n)]
    answers = pl.DataFrame(
        {
            schema.QUESTION_ID: qids * 3,
            schema.SYSTEM: ["zero"] * n + ["full"] * n + ["rag"] * n,
            schema.RANK: [None] * (2 * n) + [1] * n,
        },
        schema_overrides={schema.RANK: pl.Int32},
    )
    bound = {"zero": 1.0, "full": 8.0, "rag": 6.0}
    scores = pl.DataFrame(
        [
            (q, s, j, d, v + (i % 2), "ok")
            for j in ("sees", "flat", "other")
            for d in _DIMS
            for i, q in enumerate(qids)
            for s, v in bound.items()
        ],
        schema=_COLS,
        orient="row",
    )
    # Faulted answer and its control, per judge and dimension.
    edited = {
        ("sees", "relevance"): (5.0, 8.0),
        ("sees", "completeness"): (5.0, 8.0),
        ("flat", "relevance"): (5.0, 8.0),
        ("flat", "completeness"): (8.0, 8.0),  # a number cannot move it
    }
    qscores = pl.DataFrame(
        [
            (q, kind, j, d, v + (i % 2), "ok")
            for (j, d), (fault, control) in edited.items()
            for i, q in enumerate(qids)
            for kind, v in (("number", fault), ("number:control", control))
        ],
        schema=_COLS,
        orient="row",
    )
    faults = pl.DataFrame(
        {
            schema.QUESTION_ID: qids * 2,
            "kind": ["number"] * n + ["number:control"] * n,
            schema.STATUS: ["ok"] * (2 * n),
        }
    )
    return summarize(
        answers,
        scores,
        options=AggregateOptions(
            weights="equal",
            require_qualification=require,
            require_separation=separation,
        ),
        qualification=QualificationInput(
            faults=faults,
            scores=qscores,
            expected={"relevance": ["number"], "completeness": []},
            min_drop=2.0,  # flat's weighted drop (1.5) misses it
            judges=qualified,
            certify_on=certify_on,
        ),
    )


def test_a_judge_not_qualified_holds_no_certificate_and_leaves_the_headline() -> None:
    summary = _summary()
    judges = summary.judges
    assert judges["sees"].certified is True
    assert judges["flat"].certified is False  # misses number on the weighted total
    assert judges["other"].certified is False
    assert judges["other"].qualification is None  # never qualified: no block
    across = summary.across_judges["rag"]
    assert across.judges == ["sees"]
    assert across.excluded["other"].code == NO_CERTIFICATE
    assert across.excluded["other"].text.startswith("not qualified in this run")
    assert across.excluded["flat"].code == UNQUALIFIED_JUDGE
    # Without require_qualification every separated judge stays (flags kept).
    kept = _summary(require=False)
    assert sorted(kept.across_judges["rag"].judges) == ["flat", "other", "sees"]
    assert kept.judges["other"].certified is False


def test_certify_on_dimensions_asks_each_dimension_for_its_own_kinds() -> None:
    summary = _summary(certify_on="dimensions")
    # flat's relevance catches the number; its completeness is expected to
    # catch nothing, so the half drop on the weighted total does not count.
    assert summary.judges["flat"].certified is True
    assert sorted(summary.across_judges["rag"].judges) == ["flat", "sees"]


def test_a_judge_with_nothing_tested_holds_no_certificate() -> None:
    # Five pairs: too few for a Wilcoxon test (p = 1), so no kind is tested;
    # require_separation off, so the bounds' p = 1 does not leave them out first.
    summary = _summary(n=5, separation=False)
    assert summary.judges["sees"].certified is False
    assert summary.judges["flat"].certified is False
    across = summary.across_judges["rag"]
    assert across.judges == []
    assert across.excluded["sees"].code == NO_CERTIFICATE
    assert "too few faults" in across.excluded["sees"].text
    assert across.reason is not None
    assert across.reason.code == NO_CERTIFIED_JUDGE


def test_no_certified_judge_says_so() -> None:
    summary = _summary(qualified=("flat",))
    across = summary.across_judges["rag"]
    assert across.judges == []
    assert across.reason is not None
    assert across.reason.code == NO_CERTIFIED_JUDGE
    text = jury_sentence(RunData(run_dir=Path("run"), summary=summary), "rag")
    assert "holds a certificate" in text
    assert "aggregate.require_qualification" in text


def _manifest(kinds: dict[str, str]) -> Any:
    """A stand-in manifest: only its recorded config's judge backends are read."""
    return SimpleNamespace(
        config={"judges": {j: {"backend": b} for j, b in kinds.items()}}
    )


def test_the_result_line_names_the_certified_judges_and_what_they_caught() -> None:
    summary = _summary(qualified=("sees",))
    backends = {"sees": "reference", "flat": "vllm", "other": "vllm"}
    run = RunData(run_dir=Path("run"), summary=summary, manifest=_manifest(backends))
    lines = console_lines(run)
    assert "(1 of 3 judges: sees (certified here: changed numbers); " in lines[0]
    assert (
        "jury: no LLM judge holds a certificate on this run (flat, other); the "
        "headline's jury is deterministic (sees, no LLM)"
    ) in lines
    assert any(x.strip().startswith("left out: other: not qualified") for x in lines)
    sentence = jury_sentence(run, "rag")
    assert "sees (certified here: changed numbers)" in sentence
    # Without require_qualification the uncertified LLM judges stay in the
    # headline, and the line says so instead of calling the jury deterministic.
    kept = RunData(
        run_dir=Path("run"),
        summary=_summary(qualified=("sees",), require=False),
        manifest=_manifest(backends),
    )
    assert (
        "jury: no LLM judge holds a certificate on this run (flat, other); the "
        "headline still averages flat, other (aggregate.require_qualification is off)"
    ) in console_lines(kept)
    # An LLM judge with a certificate: no such line.
    run = RunData(
        run_dir=Path("run"),
        summary=summary,
        manifest=_manifest(dict.fromkeys(backends, "vllm")),
    )
    assert not any(x.startswith("jury: ") for x in console_lines(run))
    # Without qualification the line is as before.
    plain = summarize(
        pl.DataFrame(
            {
                schema.QUESTION_ID: ["q1"] * 3,
                schema.SYSTEM: ["zero", "full", "rag"],
                schema.RANK: [None, None, 1],
            },
            schema_overrides={schema.RANK: pl.Int32},
        ),
        pl.DataFrame(
            [
                ("q1", s, "j", "relevance", v, "ok")
                for s, v in (("zero", 1.0), ("full", 8.0), ("rag", 6.0))
            ],
            schema=_COLS,
            orient="row",
        ),
        options=AggregateOptions(require_separation=False),
    )
    line = console_lines(RunData(run_dir=Path("run"), summary=plain))[0]
    assert "(1 of 1 judges: j; one judge" in line
    assert plain.judges["j"].certified is None


def test_qualification_judges_are_checked_at_load(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    corpus, ids = make_corpus(tmp_path, 3)
    extra = {"qualification": {"questions": 3, "judges": ["j1", "judge9"]}}
    cfg = fake_config(tmp_path, corpus, make_qa_file(tmp_path, ids), extra=extra)
    assert main(["run", str(cfg), "--out", str(tmp_path / "run"), "--dry-run"]) == 2
    err = capsys.readouterr().err
    assert "qualification.judges lists ['judge9'], which is not a judge" in err
    assert "judges: ['j1', 'j2']" in err
    assert not (tmp_path / "run").exists()
    with pytest.raises(ValueError, match="more than once"):
        QualificationConfig(judges=["j1", "j1"])
    with pytest.raises(ValueError):
        QualificationConfig(judges=[])


def test_qualification_judges_choose_the_qualification_stages(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    corpus, ids = make_corpus(tmp_path, 5)
    extra = {"qualification": {"questions": 3, "kinds": ["number"], "judges": ["j2"]}}
    cfg = fake_config(tmp_path, corpus, make_qa_file(tmp_path, ids), extra=extra)
    assert main(["run", str(cfg), "--out", str(tmp_path / "run"), "--dry-run"]) == 0
    stages = {x.split()[0] for x in capsys.readouterr().out.splitlines() if x}
    assert "qualification:j2" in stages
    assert "qualification:j1" not in stages
    config = RunConfig.from_yaml(cfg)
    assert config.qualification is not None
    assert config.qualification.qualified(list(config.judges)) == ["j2"]
    with pytest.raises(ValueError, match=r"qualification\.judges lists"):
        RunConfig.model_validate(
            {**config.model_dump(), "qualification": {"judges": ["nobody"]}}
        )
