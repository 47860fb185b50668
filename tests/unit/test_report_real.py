"""The report of a small run over real Guangdong service items.

The run directory is built here, not by ``cube-ray run`` (which needs models):
documents, questions and the zero/full/system answers are written from the
first 48 records of /work/shared/data/guangdong_service_items/records.jsonl
(real item names, agencies, materials and time limits); retrieval ranks and
judge scores are synthetic but follow the method's logic (good retrieval, good
answer, high score). ``summary.json`` comes from ``cube_ray.aggregate.summarize``
on the tables read back with ``cube_ray.tables``, as ``cube-ray aggregate``
would write it.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from cube_ray import schema
from cube_ray.report import write_report

RECORDS = (
    Path(__file__).resolve().parents[3]
    / "shared"
    / "data"
    / "guangdong_service_items"
    / "records.jsonl"
)
pytestmark = pytest.mark.skipif(
    not RECORDS.is_file(), reason=f"Guangdong corpus not found at {RECORDS}"
)
N_RECORDS = 48
FIELDS = [
    ("TASK_NAME", "事项名称"),
    ("DEPT_NAME", "实施机关"),
    ("accept_standard", "受理条件"),
    ("material_intro", "申请材料"),
    ("handle_time", "法定办结时限"),
    ("handle_time_limit", "承诺办结时限"),
    ("handle_location", "办理地点"),
    ("consult_phone", "咨询电话"),
]
DIMS = ["relevance", "specificity", "completeness", "quality"]
JUDGES = {"local-qwen": 0.0, "api-judge": -0.8}


def _value(rec: dict[str, Any], key: str) -> str:
    v = rec.get(key)
    if isinstance(v, list):
        v = "、".join(str(x) for x in v)
    v = "" if v is None else str(v).strip()
    return "" if v in ("", "无") else v


def _full_answer(rec: dict[str, Any]) -> str:
    parts = [f"“{_value(rec, 'TASK_NAME')}”由{_value(rec, 'DEPT_NAME')}办理。"]
    if m := _value(rec, "material_intro"):
        parts.append(f"需要提交：{m}。")
    if t := _value(rec, "handle_time_limit"):
        parts.append(f"承诺办结时限为{t}。")
    return "".join(parts)


def _write(table: pl.DataFrame, arrow_schema: pa.Schema, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(table.to_arrow().cast(arrow_schema), path)


def _build_run(root: Path) -> Path:
    with RECORDS.open(encoding="utf-8") as fh:
        records = [json.loads(next(fh)) for _ in range(N_RECORDS)]
    rng = np.random.default_rng(42)
    doc_ids = [r["TASK_CODE"] for r in records]
    texts = [
        "\n".join(f"{label}: {_value(r, k)}" for k, label in FIELDS if _value(r, k))
        for r in records
    ]
    _write(
        pl.DataFrame(
            {
                schema.DOC_ID: doc_ids,
                schema.TITLE: [r["TASK_NAME"] for r in records],
                schema.TEXT: texts,
                schema.CONTENT_HASH: [str(hash(t)) for t in texts],
            }
        ),
        schema.DOCUMENTS_SCHEMA,
        root / "documents" / "part-0.parquet",
    )
    qids = [f"q{i:03d}" for i in range(N_RECORDS)]
    _write(
        pl.DataFrame(
            {
                schema.QUESTION_ID: qids,
                schema.DOC_ID: doc_ids,
                schema.QUESTION: [
                    f"我想办理{r['TASK_NAME']}，需要准备哪些材料？多久能办完？"
                    for r in records
                ],
            }
        ),
        schema.QUESTIONS_SCHEMA,
        root / "questions" / "part-0.parquet",
    )
    zero = "您好，一般需要携带本人身份证件和申请表，到相关主管部门窗口咨询办理。"
    answers: list[dict[str, Any]] = []
    quality: dict[tuple[str, str], float] = {}
    for i, (qid, rec) in enumerate(zip(qids, records, strict=True)):
        answers.append(
            {"question_id": qid, "doc_id": doc_ids[i], "system": "zero", "answer": zero}
        )
        answers.append(
            {
                "question_id": qid,
                "doc_id": doc_ids[i],
                "system": "full",
                "answer": _full_answer(rec),
            }
        )
        quality[(qid, "zero")], quality[(qid, "full")] = 4.0, 8.5
        for system, choices in (
            ("rag@bm25", [1, 1, 1, 2, 3, 5, 8, 0, 0, 0]),
            ("rag@hybrid", [1, 1, 1, 1, 2, 2, 4, 6, 0]),
        ):
            rank = int(rng.choice(choices))
            others = [d for d in doc_ids if d != doc_ids[i]]
            retrieved = list(rng.choice(others, 8, replace=False))
            if rank:
                retrieved[rank - 1] = doc_ids[i]
            if rank == 1 and i % 9 == 0:
                retrieved = [doc_ids[i]]  # only the gold document: +1 bonus
            if 1 <= rank <= 3:
                text, q = _full_answer(rec), 8.0 - 0.3 * rank
            elif rank:
                text, q = (
                    f"{_value(rec, 'TASK_NAME')}可向{_value(rec, 'DEPT_NAME')}咨询。",
                    6.0,
                )
            else:
                text, q = _full_answer(records[doc_ids.index(retrieved[0])]), 3.0
            answers.append(
                {
                    "question_id": qid,
                    "doc_id": doc_ids[i],
                    "system": system,
                    "answer": text,
                    "retrieved_doc_ids": retrieved,
                    "rank": rank,
                }
            )
            quality[(qid, system)] = q
    answers_df = pl.DataFrame(
        answers,
        schema={
            "question_id": pl.String,
            "doc_id": pl.String,
            "system": pl.String,
            "answer": pl.String,
            "retrieved_doc_ids": pl.List(pl.String),
            "rank": pl.Int32,
        },
    )
    _write(answers_df, schema.ANSWERS_SCHEMA, root / "answers" / "part-0.parquet")

    rows = []
    for (qid, system), q in quality.items():
        for judge, offset in JUDGES.items():
            for di, dim in enumerate(DIMS):
                score: float | None = float(
                    np.clip(round(q + offset + rng.normal(0, 1.0) - 0.3 * di), 0, 10)
                )
                status, raw = "ok", str(score)
                if (
                    judge == "api-judge"
                    and qid in ("q005", "q017")
                    and dim == "quality"
                ):
                    score, status, raw = None, "parse_error", "评分：很好"
                rows.append(
                    {
                        "question_id": qid,
                        "system": system,
                        "judge": judge,
                        "dimension": dim,
                        "score": score,
                        "status": status,
                        "raw": raw,
                    }
                )
    _write(
        pl.DataFrame(rows, schema_overrides={"score": pl.Float64}),
        schema.SCORES_SCHEMA,
        root / "scores" / "part-0.parquet",
    )

    from cube_ray.aggregate import AggregateOptions, summarize
    from cube_ray.tables import read_answers, read_scores

    summary = summarize(
        read_answers(root / "answers"),
        read_scores(root / "scores"),
        options=AggregateOptions(k=8),
    )
    summary.write(root / "summary.json")

    # Two human raters for the first 16 questions, every set and dimension.
    scores = pl.DataFrame(rows).filter(
        (pl.col("judge") == "local-qwen") & pl.col("question_id").is_in(qids[:16])
    )
    human = pl.concat(
        [
            scores.select("question_id", "system", "dimension").with_columns(
                (scores["score"].fill_null(5) + rng.integers(-1, 2, scores.height))
                .clip(0, 10)
                .alias("score"),
                pl.lit(rater).alias("rater"),
            )
            for rater in ("r1", "r2")
        ]
    )
    human.write_csv(root / "human.csv")
    return root


@pytest.fixture(scope="module")
def real_report(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Any]:
    root = _build_run(tmp_path_factory.mktemp("gd") / "gd-run")
    paths = write_report(
        root, human_ratings=root / "human.csv", baselines=True, n_resamples=300
    )
    return root, paths


def test_real_run_headline_and_sections(real_report: tuple[Path, Any]) -> None:
    root, paths = real_report
    summary = json.loads((root / "summary.json").read_text())
    md = paths.markdown.read_text()
    html = paths.html.read_text()
    for system, across in summary["across_judges"].items():
        row = next(
            line for line in md.splitlines() if line.startswith(f"| {system} | ")
        )
        assert f"| {across['cube']['mean']:.2f} | {across['cube']['sd']:.2f} |" in row
    # The synthetic judges reward retrieval, so CuBE is well inside (0, 100).
    for across in summary["across_judges"].values():
        assert 10 < across["cube"]["mean"] < 100
    assert set(re.findall(r'data-plot="([^"]+)"', html)) == {
        "fig-cube",
        "fig-histograms",
        "fig-rank",
        "fig-correlation",
        "fig-bounds",
        "fig-variants",
    }
    # The parse errors are counted by status.
    assert "parse_error" in md


def test_real_run_worst_cases_show_real_text(real_report: tuple[Path, Any]) -> None:
    root, paths = real_report
    html = paths.html.read_text()
    docs = pl.read_parquet(root / "documents")
    titles = docs[schema.TITLE].to_list()
    worst = html[html.index('<section id="worst">') :]
    shown = [t for t in titles if t in worst]
    assert len(shown) >= 10
    assert "我想办理" in worst  # the question text
    assert "missed retrievals" in worst


def test_real_run_humans_and_baselines(real_report: tuple[Path, Any]) -> None:
    _, paths = real_report
    md = paths.markdown.read_text()
    humans = md[md.index("## Human ratings") : md.index("## Reference-based")]
    cube_rows = [
        line for line in humans.splitlines() if line.startswith("| rag@bm25 | 16 |")
    ]
    assert len(cube_rows) == 1
    human_cube = cube_rows[0].split("|")[3].strip()
    assert human_cube != "n/a"
    agreement = [
        line for line in humans.splitlines() if line.startswith("| local-qwen | all |")
    ]
    pearson = float(agreement[0].split("|")[4])
    assert pearson > 0.8  # the humans were simulated from local-qwen's scores
    baselines = md[md.index("## Reference-based") : md.index("*The jury's mean score")]
    rouge = {
        line.split("|")[1].strip(): float(line.split("|")[4])
        for line in baselines.splitlines()
        if line.startswith(("| zero |", "| rag@"))
    }
    assert rouge["zero"] < rouge["rag@bm25"]
    assert rouge["zero"] < rouge["rag@hybrid"]
