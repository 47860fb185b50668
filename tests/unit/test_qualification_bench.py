"""benchmarks/qualification.py: judge choice, resumable checkpoint, refusals.

The reference judge (no LLM) on the 120 shipped Guangdong records; the
embedded judge is only resolved (config, prompt set), never loaded.
"""

from __future__ import annotations

import importlib.util
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
spec = importlib.util.spec_from_file_location(
    "qualification_bench_unit", ROOT / "benchmarks" / "qualification.py"
)
assert spec is not None
assert spec.loader is not None
bench = importlib.util.module_from_spec(spec)
sys.modules["qualification_bench_unit"] = bench
spec.loader.exec_module(bench)

ARGS = ["--records", "6", "--corpus", str(bench.SAMPLE)]


class CountingJudge:
    """The reference judge, counting the items it scores."""

    def __init__(self, config: Any) -> None:
        from cube_ray.engines import build_engine

        self._inner = build_engine(config)
        self.items = 0

    def judge_items(self, items: Sequence[Any]) -> list[Any]:
        self.items += len(items)
        return list(self._inner.judge_items(items))

    def close(self) -> None:
        self._inner.close()


def _run(argv: list[str]) -> tuple[int, int]:
    """Exit code and number of items judged."""
    judges: list[CountingJudge] = []

    def factory(config: Any) -> CountingJudge:
        judges.append(CountingJudge(config))
        return judges[-1]

    code = bench.main(argv, engine_factory=factory)
    return code, sum(j.items for j in judges)


def test_cut_short_run_reports_done_records_and_resumes_to_the_full_result(
    tmp_path: Path,
) -> None:
    work = tmp_path / "work"
    code, judged = _run([*ARGS, "--work", str(work), "--stop-after", "2"])
    assert code == 0
    lines = (work / bench.SCORES).read_text(encoding="utf-8").splitlines()
    assert len(lines) == 2
    partial = json.loads((work / bench.RESULT).read_text(encoding="utf-8"))
    assert partial["records"] == 6
    assert partial["records_done"] == 2
    # 4 dimensions x (the original + a faulted copy and its control per pair
    # built on those 2 records)
    built_on_2 = sum(partial["built_on_done"].values())
    assert judged == 4 * (2 + 2 * built_on_2)
    assert partial["scores"] == judged
    assert all(n <= 2 for n in partial["scored"].values())
    assert partial["reference"]["entity"]["relevance"]["n"] == 2

    first = [json.loads(x)["question_id"] for x in lines]
    # A torn last line (a kill mid-write) is dropped and its record redone.
    with (work / bench.SCORES).open("a", encoding="utf-8") as fh:
        fh.write('{"question_id": "torn", "orig')
    code, judged = _run([*ARGS, "--work", str(work)])
    assert code == 0
    done = json.loads((work / bench.RESULT).read_text(encoding="utf-8"))
    assert done["records_done"] == 6
    assert judged == done["scores"] - partial["scores"]  # only the 4 new records
    lines = (work / bench.SCORES).read_text(encoding="utf-8").splitlines()
    ids = [json.loads(x)["question_id"] for x in lines]
    assert ids[:2] == first
    assert len(set(ids)) == len(ids) == 6
    assert "torn" not in ids

    # Nothing left: a rerun judges nothing and reports the same figures.
    code, judged = _run([*ARGS, "--work", str(work)])
    assert (code, judged) == (0, 0)

    fresh = tmp_path / "fresh.json"
    assert _run([*ARGS, "--out", str(fresh)])[0] == 0
    whole = json.loads(fresh.read_text(encoding="utf-8"))
    assert whole["reference"] == done["reference"]
    assert whole["built"] == done["built"] == done["built_on_done"]


def test_rerun_with_other_settings_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    work = tmp_path / "work"
    base = [*ARGS, "--work", str(work), "--stop-after", "1"]
    assert _run(base)[0] == 0
    capsys.readouterr()
    code, judged = _run([*base, "--dimensions", "relevance"])
    assert (code, judged) == (2, 0)
    err = capsys.readouterr().err
    assert str(work / bench.SETTINGS) in err
    assert "dimensions" in err
    assert "another --work folder" in err
    assert len((work / bench.SCORES).read_text().splitlines()) == 1


def test_dimensions_option_limits_the_table(tmp_path: Path) -> None:
    out = tmp_path / "r.json"
    code, judged = _run([*ARGS, "--dimensions", "relevance", "--out", str(out)])
    assert code == 0
    res = json.loads(out.read_text(encoding="utf-8"))
    assert res["dimensions"] == ["relevance"]
    assert set(res["reference"]["number"]) == {"relevance", "weighted"}
    assert judged == res["scores"] == 6 + 2 * sum(res["built"].values())


def test_embedded_judge_is_the_demo_judge_with_the_chinese_prompt_set() -> None:
    from cube_ray.engines import EmbeddedEngineConfig

    config, rubrics, template, dims = bench.judge_setup("embedded", None)
    assert isinstance(config, EmbeddedEngineConfig)
    assert config.score_mode == "expected"
    assert template == "zh/judge"
    # relevance carries number, entity, negation, unsupported; completeness omission
    assert dims == ["relevance", "completeness"]
    assert rubrics["relevance"].startswith("评分标准")
    with pytest.raises(bench.SettingsMismatchError, match="fluency"):
        bench.judge_setup("embedded", ["fluency"])
    with pytest.raises(bench.SettingsMismatchError, match="fluency"):
        bench.judge_setup("reference", ["fluency"])


def test_measures_option_gives_a_dimension_the_fact_check(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    work = tmp_path / "work"
    out = tmp_path / "r.json"
    args = [*ARGS, "--dimensions", "relevance,completeness"]
    code, _ = _run(
        [*args, "--measures", "relevance=facts", "--work", str(work), "--out", str(out)]
    )
    assert code == 0
    res = json.loads(out.read_text(encoding="utf-8"))
    assert res["measures"] == {"relevance": "facts", "completeness": "coverage"}
    # The fact check sees a changed number, which support misses (BENCHMARKS.md).
    assert res["reference"]["number"]["relevance"]["drop"] >= 0.5
    assert "| relevance (facts) |" in capsys.readouterr().out
    # Resuming without the option would mix two measures: refused.
    assert _run([*args, "--work", str(work)])[0] == 2
    assert "measures" in capsys.readouterr().err
    for bad in ("relevance=bleu", "quality=facts", "relevance"):
        assert _run([*args, "--measures", bad])[0] == 2
        assert "--measures" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("protocol", "baseline", "per_answer"),
    [
        ("checklist", "none", 10),  # relevance and completeness: five items each
        ("all_dimensions", "none", 1),
        ("score", "none", 2),
    ],
)
def test_protocol_option_judges_the_embedded_judge_under_it(
    tmp_path: Path, protocol: str, baseline: str, per_answer: int
) -> None:
    from cube_ray.engines.fake import FakeEngine

    config, _, template, _ = bench.judge_setup("embedded", None, protocol=protocol)
    assert config.protocol == protocol
    assert (
        template
        == {
            "score": "zh/judge",
            "checklist": "zh/judge_checklist",
            "all_dimensions": "zh/judge_dimensions",
        }[protocol]
    )
    engines: list[FakeEngine] = []

    def factory(config: Any) -> FakeEngine:
        engines.append(FakeEngine("qwen", seed=1))
        return engines[-1]

    out = tmp_path / "r.json"
    argv = [*ARGS, "--judge", "embedded", "--protocol", protocol, "--out", str(out)]
    assert bench.main([*argv, "--baseline", baseline], engine_factory=factory) == 0
    res = json.loads(out.read_text(encoding="utf-8"))
    assert (res["protocol"], res["baseline"]) == (protocol, baseline)
    answers = 6 + sum(res["built"].values())
    assert res["scores"] == 2 * answers
    assert engines[0].calls == per_answer * answers
    assert set(res["qwen"]) >= {"number", "omission"}


def test_checklist_baseline_asks_the_empty_answer_once_per_question(
    tmp_path: Path,
) -> None:
    from cube_ray.engines.fake import FakeEngine

    engines: list[FakeEngine] = []

    def factory(config: Any) -> FakeEngine:
        engines.append(FakeEngine("qwen", seed=1))
        return engines[-1]

    out = tmp_path / "r.json"
    argv = [*ARGS, "--judge", "embedded", "--protocol", "checklist"]
    argv += ["--baseline", "empty_answer", "--out", str(out)]
    assert bench.main(argv, engine_factory=factory) == 0
    res = json.loads(out.read_text(encoding="utf-8"))
    answers = 6 + sum(res["built"].values())
    assert engines[0].calls == 10 * answers + 10 * 6
    with pytest.raises(bench.SettingsMismatchError, match="--protocol"):
        bench.judge_setup("reference", None, protocol="checklist")
