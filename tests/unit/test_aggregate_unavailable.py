"""Failed answers: a set with no usable answer gives a verdict, not an error.

CUBE_METHOD.md section 10: failed answers are left out of their set, counted
and flagged; a bound (or system) none of whose answers is usable leaves the
figures that need it null, with the reason, and the run has no verdict. Also:
the stage lines' outcome counts and warning, and the engine fingerprint that
ignores transport settings (raising ``timeout_s`` redoes only failed rows).
"""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import polars as pl
import pytest

from cube_ray.aggregate import (
    AggregateOptions,
    incomplete_reasons,
    summarize as summarize_typed,
    unavailable_sets,
)
from cube_ray.config import engine_fingerprint
from cube_ray.engines.config import OpenAIHttpEngineConfig
from cube_ray.errors import INCOMPLETE_EXIT_CODE, InputError
from cube_ray.pipeline.outcomes import failure_warning, outcome_counts
from cube_ray.report import console_lines
from cube_ray.report._data import RunData

N = 12


def summarize(answers: pl.DataFrame, scores: pl.DataFrame, **kw: Any) -> Any:
    """The summary as summary.json holds it (a JSON mapping)."""
    return summarize_typed(answers, scores, **kw).model_dump(mode="json")


def _why(code: str, text: str) -> dict[str, str]:
    return {"code": code, "text": text}


DIMS = ("a", "b")
OPTS = AggregateOptions()


def _study() -> tuple[pl.DataFrame, pl.DataFrame]:
    """Two judges that separate the bounds well; every answer ok."""
    qids = [f"q{i:02d}" for i in range(N)]
    ranks = [1 + i % 3 if i % 4 else 0 for i in range(N)]
    answers = pl.DataFrame(
        {
            "question_id": qids * 3,
            "system": ["zero"] * N + ["full"] * N + ["rag"] * N,
            "rank": [None] * (2 * N) + ranks,
            "status": ["ok"] * (3 * N),
        },
        schema_overrides={"rank": pl.Int32},
    )

    def score(system: str, i: int) -> float:
        if system == "rag":  # better the higher the gold document ranks
            return 9.0 - ranks[i] if ranks[i] else 3.0
        return {"zero": 2.0, "full": 8.0}[system] + i % 3

    rows = [
        {
            "question_id": q,
            "system": s,
            "judge": j,
            "dimension": d,
            "score": score(s, i) - (j == "j2"),
            "status": "ok",
        }
        for j in ("j1", "j2")
        for d in DIMS
        for s in ("zero", "full", "rag")
        for i, q in enumerate(qids)
    ]
    return answers, pl.DataFrame(rows)


def _fail(answers: pl.DataFrame, system: str, status: str = "timeout") -> pl.DataFrame:
    return answers.with_columns(
        status=pl.when(pl.col("system") == system)
        .then(pl.lit(status))
        .otherwise(pl.col("status"))
    )


def _no_answer(scores: pl.DataFrame, system: str) -> pl.DataFrame:
    """What the judge stage writes for a failed answer."""
    failed = pl.col("system") == system
    return scores.with_columns(
        score=pl.when(failed).then(None).otherwise(pl.col("score")),
        status=pl.when(failed).then(pl.lit("no_answer")).otherwise(pl.col("status")),
    )


def test_a_complete_study_has_a_verdict() -> None:
    answers, scores = _study()
    out = summarize(answers, scores, options=AggregateOptions(trim=0.0))
    assert out["across_judges"]["rag"]["cube"]["mean"] is not None
    assert out["across_judges"]["rag"]["reason"] is None
    assert incomplete_reasons(out) == {}
    assert unavailable_sets(answers) == {}


@pytest.mark.parametrize("bound", ["zero", "full"])
def test_a_failed_bound_gives_no_verdict_with_its_reason(bound: str) -> None:
    answers, scores = _study()
    answers = _fail(answers, bound)
    scores = _no_answer(scores, bound)
    out = summarize(answers, scores, options=AggregateOptions(trim=0.0))
    json.dumps(out, allow_nan=False)
    reason = f"{bound} bound unavailable: {N} of {N} answers failed (timeout)"
    for judge in ("j1", "j2"):
        block = out["judges"][judge]
        assert block["cube"]["rag"] is None
        assert block["normalized"]["rag"] == {"a": None, "b": None, "weighted": None}
        assert block["null_reasons"]["rag"] == {
            f: _why("bound_unavailable", reason) for f in ["a", "b", "weighted"]
        }
        # The other bound and the system keep their figures.
        other = "full" if bound == "zero" else "zero"
        assert block["trimmed_means"]["rag"][other]["weighted"] is not None
        assert block["trimmed_means"]["rag"][bound]["weighted"] is None
    across = out["across_judges"]["rag"]
    assert across["reason"] == _why("bound_unavailable", reason)
    assert across["judges"] == []
    assert across["excluded"] == {
        j: _why("bound_unavailable", reason) for j in ("j1", "j2")
    }
    assert across["cube"] == {"mean": None, "sd": None, "n_judges": 0}
    assert out["counts"]["unavailable"][bound] == N
    kinds = sorted((f["flag"], f.get("system")) for f in out["flags"])
    # Section 10's flag with count and share, the set's own flag with its
    # code; nothing said about separation (there was nothing to test).
    assert kinds == [("bound unavailable", bound), ("unavailable answers", bound)]
    want = {"flag": "unavailable answers", "system": bound, "count": N, "share": 1.0}
    assert any(want.items() <= f.items() for f in out["flags"])
    assert incomplete_reasons(out) == {"rag": reason}


def test_statuses_are_counted_in_the_reason() -> None:
    answers, scores = _study()
    statuses = ["timeout"] * 7 + ["http_error"] * 4 + ["connect_error"]
    answers = answers.with_columns(
        status=pl.when(pl.col("system") == "zero")
        .then(pl.Series(statuses * 3))
        .otherwise(pl.col("status"))
    )
    out = summarize(answers, scores, options=AggregateOptions())
    assert out["across_judges"]["rag"]["reason"]["text"] == (
        f"zero bound unavailable: {N} of {N} answers failed "
        "(7 timeout, 4 http_error, 1 connect_error)"
    )


def test_a_failed_system_and_both_bounds() -> None:
    answers, scores = _study()
    out = summarize(_fail(answers, "rag"), scores, options=AggregateOptions())
    reason = f"system rag unavailable: {N} of {N} answers failed (timeout)"
    assert out["across_judges"]["rag"]["reason"] == _why("system_unavailable", reason)
    assert out["judges"]["j1"]["cube"]["rag"] is None
    flags = {f["flag"] for f in out["flags"]}
    # No weights were estimated from a system with no answer: no fallback flag.
    assert flags == {"system unavailable", "unavailable answers"}
    # Every answer failed: still a summary, every reason listed.
    everything = answers.with_columns(status=pl.lit("connect_error"))
    out = summarize(everything, scores, options=AggregateOptions())
    assert out["judge_names"] == ["j1", "j2"]
    assert out["across_judges"]["rag"]["reason"]["text"] == "; ".join(
        f"{what} unavailable: {N} of {N} answers failed (connect_error)"
        for what in ("zero bound", "full bound", "system rag")
    )


def test_a_bound_never_produced_is_still_an_input_error() -> None:
    answers, scores = _study()
    # No zero rows at all (not failed ones): an input error, as before.
    with pytest.raises(InputError, match="no rows of system 'zero'"):
        summarize(
            answers,
            scores.filter(pl.col("system") != "zero"),
            options=AggregateOptions(),
        )
    # Zero answers ok but never judged: also an input error.
    with pytest.raises(InputError, match="no rows of system 'full'"):
        summarize(
            answers,
            scores.filter(pl.col("system") != "full"),
            options=AggregateOptions(),
        )


def test_console_says_no_verdict_with_the_reason() -> None:
    answers, scores = _study()
    out = summarize_typed(
        _fail(answers, "zero"), _no_answer(scores, "zero"), options=AggregateOptions()
    )
    run = RunData(run_dir=Path("runs/x"), summary=out)
    lines = console_lines(run)
    reason = f"zero bound unavailable: {N} of {N} answers failed (timeout)"
    assert lines[0] == f"rag: no verdict — {reason}; no CuBE, recall@8 0.750"
    # No "left out" line per judge: the reason is the same for all, said above.
    assert not any("left out" in line for line in lines)
    assert lines[-1].startswith("flags: bound unavailable ×1, unavailable answers ×1")


def test_outcome_counts_and_the_warning_threshold() -> None:
    assert outcome_counts({"timeout": 5, "ok": 1}) == "1 ok, 5 timeout"
    gen = OpenAIHttpEngineConfig(base_url="http://h/v1", model="m", timeout_s=60)
    kwargs: dict[str, Any] = {
        "owners": [("generator", gen)],
        "table": "answers",
        "rerun": "cube-ray run c.yaml --out r --retry-failed",
    }
    # 20 % failed is tolerated (flagged in the summary); more is a warning.
    assert failure_warning("answers:bounds", {"ok": 8, "timeout": 2}, **kwargs) is None
    line = failure_warning("answers:bounds", {"ok": 7, "timeout": 3}, **kwargs)
    assert line is not None
    assert line.startswith("answers:bounds: 3 of 10 rows failed (3 timeout)")
    assert "raise generator.timeout_s (now 60 s" in line
    assert line.endswith("cube-ray run c.yaml --out r --retry-failed")
    # Another status: no timeout_s advice, the table and log to read.
    line = failure_warning("answers:bounds", {"http_error": 4}, **kwargs)
    assert line is not None
    assert "timeout_s" not in line
    assert "raw text in the answers table" in line
    # A system without timeout_s (a QA file) is named without advice on it.
    qa = SimpleNamespace(kind="qa_file", path="qa.jsonl")
    line = failure_warning(
        "answers:rag",
        {"timeout": 4},
        owners=[("systems[rag]", qa)],
        table="answers",
        rerun="R",
    )
    assert line is not None
    assert "in systems[rag] (qa_file)" in line
    assert "timeout_s" not in line
    # Rows that failed upstream are the earlier stage's to warn about.
    assert failure_warning("scores:j1", {"no_answer": 9, "ok": 1}, **kwargs) is None


def test_transport_settings_do_not_change_the_engine_fingerprint() -> None:
    gen = OpenAIHttpEngineConfig(base_url="http://h/v1", model="m")
    slower = gen.model_copy(
        update={"timeout_s": 600.0, "max_retries": 1, "max_concurrency": 2}
    )
    assert engine_fingerprint(gen) == engine_fingerprint(slower)
    other_model = gen.model_copy(update={"model": "m2"})
    assert engine_fingerprint(gen) != engine_fingerprint(other_model)


def test_incomplete_exit_code_is_its_own() -> None:
    assert INCOMPLETE_EXIT_CODE not in (0, 1, 2, 3, 130)
