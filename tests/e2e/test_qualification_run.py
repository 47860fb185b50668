"""``cube-ray run`` with ``qualification`` (CUBE_METHOD.md section 12) end to end.

A real Ray run of real Guangdong records: the fault stage after the bounds, the
judges (a fake LLM judge and the reference judge, no LLM) scoring the faulted
answers, the ``qualification`` table, the summary keys and flags, and resume.
"""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pytest
import yaml

from cube_ray import schema
from cube_ray.cli import main
from cube_ray.pipeline import part_files
from cube_ray.qualification import KINDS
from cube_ray.qualification._table import QUALIFICATION_SCHEMA
from cube_ray.sample import doc_hash
from tests.pipeline_helpers import fake_config, make_corpus, make_qa_file

N_DOCS = 12
QUESTIONS = 8


def _read(table_dir: Path) -> pa.Table:
    import pyarrow.parquet as pq

    return pa.concat_tables(
        [pq.read_table(f) for f in part_files(table_dir)], promote_options="default"
    )


def _same(a: object, b: object) -> bool:
    """Equal JSON documents, floats to 1e-9 (the run reads lean tables: the
    summation order may differ in the last digit)."""
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, float) and isinstance(b, float):
        return a == pytest.approx(b, rel=1e-9, abs=1e-12)
    return bool(a == b)


def test_dry_run_lists_the_qualification_stages(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    corpus, ids = make_corpus(tmp_path, 5)
    extra = {"qualification": {"questions": 3, "kinds": ["number", "omission"]}}
    cfg = fake_config(tmp_path, corpus, make_qa_file(tmp_path, ids), extra=extra)
    code = main(["run", str(cfg), "--out", str(tmp_path / "run"), "--dry-run"])
    out = capsys.readouterr().out
    assert code == 0
    lines = {line.split()[0]: line.split() for line in out.splitlines() if line}
    assert lines["qualification"][1:5] == ["fault", "generator", "(no", "LLM)"]
    # 3 questions x 2 kinds x (a fault and its control) x 4 dimensions per judge.
    assert lines["qualification:j1"][2] == str(3 * 2 * 2 * 4)


def test_bad_qualification_config_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    corpus, ids = make_corpus(tmp_path, 3)
    extra = {"qualification": {"questions": 3, "kinds": ["number", "typo"]}}
    cfg = fake_config(tmp_path, corpus, make_qa_file(tmp_path, ids), extra=extra)
    code = main(["run", str(cfg), "--out", str(tmp_path / "run")])
    err = capsys.readouterr().err
    assert code == 2
    assert "qualification.kinds" in err
    assert not (tmp_path / "run").exists()


@pytest.mark.ray
@pytest.mark.timeout(900)
@pytest.mark.parametrize("waves", [1, 2])
def test_run_writes_the_qualification_table_and_summary(
    tmp_path: Path, waves: int
) -> None:
    """With ``ray.waves: 2`` the sample and the faults are the same as in one wave."""
    corpus, ids = make_corpus(tmp_path, N_DOCS)
    qa = make_qa_file(tmp_path, ids)
    extra = {
        "qualification": {"questions": QUESTIONS, "seed": 3},
        "aggregate": {
            "require_qualification": True,
            "require_separation": False,  # j1 (random scores) is left out for faults
            "weights": "equal",
        },
    }
    cfg_path = fake_config(tmp_path, corpus, qa, judges=1, extra=extra)
    cfg = yaml.safe_load(cfg_path.read_text(encoding="utf-8"))
    cfg["ray"].update({"waves": waves, "overlap": waves > 1})
    cfg["judges"]["reference"] = {
        "backend": "reference",
        "measures": {
            "relevance": "support",
            "specificity": "support",
            "completeness": "coverage",
            "quality": "coverage",
        },
    }
    cfg_path.write_text(yaml.safe_dump(cfg, allow_unicode=True), encoding="utf-8")
    run_dir = tmp_path / "run"
    args = ["run", str(cfg_path), "--out", str(run_dir), "--no-progress"]
    assert main(args) == 0

    table = _read(run_dir / "qualification")
    assert set(QUALIFICATION_SCHEMA.names) <= set(table.column_names)
    rows = table.to_pylist()
    # The sample: the first QUESTIONS questions in the seeded order.
    sampled = sorted(ids, key=lambda d: doc_hash(3, d))[:QUESTIONS]
    assert {r[schema.QUESTION_ID] for r in rows} == set(sampled)
    assert len(rows) == QUESTIONS * 2 * len(KINDS)  # each fault and its control
    answers = {
        r[schema.QUESTION_ID]: r[schema.ANSWER]
        for r in _read(run_dir / "answers").to_pylist()
        if r[schema.SYSTEM] == schema.FULL
    }
    built = [r for r in rows if r[schema.STATUS] == "ok"]
    assert built  # the fake generator's one-line answers still take an appended claim
    for r in built:
        assert r["original"] == answers[r[schema.QUESTION_ID]]
        start, end = r["span_start"], r["span_end"]
        assert r["original"][start:end] == r["span_original"]
        assert r["faulted"] == (
            r["original"][:start] + r["span_replacement"] + r["original"][end:]
        )
    skipped = {k: 0 for k in KINDS}
    for r in rows:
        if r[schema.STATUS] != "ok" and r["kind"] in KINDS:
            skipped[r["kind"]] += 1
    # A control is built exactly for the faults that are judged.
    kinds = {(r[schema.QUESTION_ID], r["kind"]): r[schema.STATUS] for r in rows}
    for (qid, kind), status in kinds.items():
        if kind in KINDS:
            assert (status == "ok") == (kinds[(qid, f"{kind}:control")] == "ok")

    scores = _read(run_dir / "qualification_scores").to_pylist()
    judged = {(r[schema.QUESTION_ID], r[schema.SYSTEM]) for r in scores}
    assert judged == {(r[schema.QUESTION_ID], r["kind"]) for r in built}
    assert {r[schema.JUDGE] for r in scores} == {"j1", "reference"}
    assert len(scores) == len(built) * 2 * 4

    summary = json.loads((run_dir / "summary.json").read_text(encoding="utf-8"))
    for judge in ("j1", "reference"):
        block = summary["judges"][judge]["qualification"]
        assert set(block) == set(KINDS)
        for kind in KINDS:
            assert set(block[kind]) == {
                "relevance",
                "specificity",
                "completeness",
                "quality",
                "weighted",
            }
            for test in block[kind].values():
                assert set(test) == {
                    "n",
                    "skipped",
                    "no_control",
                    "drop",
                    "p_value",
                    "control_drop",
                    "control_p",
                    "net_drop",
                    "net_p",
                    "false_alarm",
                    "detected",
                    "drop_interval",
                    "control_drop_interval",
                    "net_drop_interval",
                }
                assert test["skipped"] == skipped[kind]
                assert test["n"] == QUESTIONS - skipped[kind]
    # Kinds with no faulted answer are not tested (not missed): flags say so.
    flags = {(f["judge"], f["flag"]) for f in summary["flags"] if "judge" in f}
    assert ("reference", "too few faults: number on relevance") in flags
    # require_qualification: a judge that misses a kind on the weighted total
    # is left out of the headline, with the reason.
    across = summary["across_judges"]["rag"]
    j1 = summary["judges"]["j1"]["qualification"]["unsupported"]["weighted"]
    assert j1["n"] >= 6
    assert not j1["detected"]  # random scores do not notice the appended claim
    assert "j1" not in across["judges"]
    assert across["excluded"]["j1"]["code"] == "misses_faults"
    assert across["excluded"]["j1"]["text"].startswith("misses faults")
    # The report's qualification section, in plain words.
    report = (run_dir / "report.md").read_text(encoding="utf-8")
    assert "Judge qualification (controlled faults)" in report
    assert "j1 does not notice an added claim the guide does not make" in report
    manifest = json.loads((run_dir / "manifest.json").read_text(encoding="utf-8"))
    assert manifest["rows"]["qualification"] == QUESTIONS * 2 * len(KINDS)
    # `cube-ray aggregate RUN_DIR` recomputes the same summary: the run's
    # config (manifest.json) gives the qualification and require_qualification.
    again_path = tmp_path / "aggregated.json"
    assert main(["aggregate", str(run_dir), "--out", str(again_path)]) == 0
    aggregated = json.loads(again_path.read_text(encoding="utf-8"))
    assert aggregated.pop("inputs")["scores"] == str(run_dir / "scores")
    assert summary.get("inputs") is None
    assert _same(aggregated, {k: v for k, v in summary.items() if k != "inputs"})
    assert (
        aggregated["judges"]["j1"]["qualification"]
        == (summary["judges"]["j1"]["qualification"])
    )

    # Resume: nothing is redone.
    log = tmp_path / "calls.log"
    assert main([*args, "--call-log", str(log)]) == 0
    assert not log.exists() or "judge" not in log.read_text(encoding="utf-8")
    again = json.loads((run_dir / "summary.json").read_text(encoding="utf-8"))
    assert (
        again["judges"]["j1"]["qualification"]
        == summary["judges"]["j1"]["qualification"]
    )
