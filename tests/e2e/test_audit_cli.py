"""``cube-ray audit`` end to end: the real console script on a sampled run dir.

The run dir is the worked example's tables (120 questions, two systems and
the bounds, three judges, four dimensions) with real Chinese text: the gold
documents are Guangdong service records, sampled 120 of 200 by region as
``cube-ray run`` samples them (``sample/``), the questions and answers are
written from the records. No engine runs.
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import shutil
import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest

from cube_ray.audit import AuditKey
from cube_ray.sample import SampleState, sample_block, sample_order, write_sample

SHARED = Path(__file__).resolve().parents[3] / "shared"
WORKED = SHARED / "examples" / "worked"
RECORDS = SHARED / "data" / "guangdong_service_items" / "records.jsonl"
POPULATION, SAMPLE, SEED = 200, 120, 11

pytestmark = pytest.mark.skipif(
    not (RECORDS.is_file() and (WORKED / "answers.parquet").is_file()),
    reason=f"the shared worked example or Guangdong records are not under {SHARED}",
)


def cube_ray(*args: str | Path) -> subprocess.CompletedProcess[str]:
    script = Path(sys.executable).parent / "cube-ray"
    command = (
        [str(script)] if script.exists() else [sys.executable, "-m", "cube_ray.cli"]
    )
    return subprocess.run(
        [*command, *map(str, args)], capture_output=True, text=True, timeout=300
    )


def _hash(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def _text(record: dict[str, str]) -> str:
    fields = ("TASK_NAME", "DEPT_NAME", "AREA_CODE_TEXT", "handle_time_limit")
    return "\n".join(f"{f}: {record[f]}" for f in fields if record.get(f))


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    run = tmp_path_factory.mktemp("audit") / "run"
    lines = RECORDS.read_text(encoding="utf-8").splitlines()[:POPULATION]
    records = [json.loads(x) for x in lines]
    ids = [r["TASK_CODE"] for r in records]
    by_id = {r["TASK_CODE"]: r for r in records}
    strata = [r["AREA_CODE_TEXT"] or "(missing)" for r in records]
    order = sample_order(ids, strata, seed=SEED)
    block = sample_block(order, size=SAMPLE, seed=SEED, fields=["AREA_CODE_TEXT"])
    write_sample(
        run / "sample",
        order,
        SampleState(
            size=SAMPLE, seed=SEED, fields=("AREA_CODE_TEXT",), population_fp="x",
            block=block,
        ),
    )  # fmt: skip
    sampled = order.head(SAMPLE)["doc_id"].to_list()
    documents = pl.DataFrame(
        {
            "doc_id": ids,
            "title": [r["TASK_NAME"] for r in records],
            "text": [_text(r) for r in records],
            "content_hash": [_hash(_text(r)) for r in records],
        }
    )
    answers = pl.read_parquet(WORKED / "answers.parquet")
    qids = sorted(answers["question_id"].unique().to_list())
    gold = dict(zip(qids, sampled, strict=True))
    texts = {
        "zero": "一般需要带上身份证到政务服务中心咨询。",
        "full": "由{DEPT_NAME}办理，承诺时限{handle_time_limit}。",
        "rag@bm25": "- 办理事项：{TASK_NAME}\n- 地点：请咨询当地窗口",
        "rag@hybrid": "={TASK_NAME}由{DEPT_NAME}负责，详情见“广东政务服务网”。",
    }
    answers = answers.with_columns(
        pl.col("question_id").replace_strict(gold).alias("doc_id"),
        pl.struct("question_id", "system")
        .map_elements(
            lambda r: texts[r["system"]].format(**by_id[gold[r["question_id"]]]),
            return_dtype=pl.String,
        )
        .alias("answer"),
    )
    questions = pl.DataFrame(
        {
            "question_id": qids,
            "doc_id": [gold[q] for q in qids],
            "question": [f"请问{by_id[gold[q]]['TASK_NAME']}怎么办理？" for q in qids],
        }
    )
    for name, frame in (
        ("documents", documents),
        ("questions", questions),
        ("answers", answers),
    ):
        (run / name).mkdir(parents=True)
        frame.write_parquet(run / name / "part-00000.parquet")
    (run / "scores").mkdir()
    shutil.copy(WORKED / "scores.parquet", run / "scores" / "part-00000.parquet")
    return run


def read_sheet(path: Path) -> list[list[str]]:
    return list(csv.reader(io.StringIO(path.read_text(encoding="utf-8-sig"))))


def write_sheet(path: Path, rows: list[list[str]]) -> None:
    buffer = io.StringIO()
    csv.writer(buffer).writerows(rows)
    path.write_text(buffer.getvalue(), encoding="utf-8-sig")  # Excel's "CSV UTF-8"


def bad(result: subprocess.CompletedProcess[str], *patterns: str) -> None:
    assert result.returncode == 2, (result.returncode, result.stdout, result.stderr)
    assert "Traceback" not in result.stderr, result.stderr
    assert result.stderr.startswith("cube-ray: error: "), result.stderr
    for pattern in patterns:
        assert pattern in result.stderr, result.stderr


def test_draw_fill_import(run_dir: Path, tmp_path: Path) -> None:
    result = cube_ray("audit", run_dir, "--size", 12)
    assert result.returncode == 0, result.stderr
    assert "stratified by AREA_CODE_TEXT" in result.stdout
    folder = run_dir / "audit"
    sheet = folder / "audit-12.csv"
    assert sheet.read_bytes().startswith(b"\xef\xbb\xbf")
    assert {p.name for p in folder.iterdir()} == {
        "audit-12.csv", "audit-12.key.json", "audit-12.rubrics.txt", "audit-12.xlsx",
    }  # fmt: skip
    key = AuditKey.read(folder / "audit-12.key.json")
    rows = read_sheet(sheet)
    header = rows[0]
    assert header[:5] == ["row", "question no.", "question", "gold document", "answer"]
    # the worked tables carry no config: the packaged Chinese rubrics
    assert header[5].startswith("relevance (0-10): 相关性：")
    assert [d.name for d in key.dimensions] == [
        "relevance", "specificity", "completeness", "quality",
    ]  # fmt: skip
    assert len(rows) - 1 == len(key.rows) == 12 * 4
    rubrics = (folder / "audit-12.rubrics.txt").read_text(encoding="utf-8")
    assert "评分标准：相关性。" in rubrics
    # Chinese text survives: the sheet holds the gold documents as written
    docs = pl.read_parquet(run_dir / "documents" / "part-00000.parquet")
    text = dict(docs.select("doc_id", "text").iter_rows())
    answers = pl.read_parquet(run_dir / "answers" / "part-00000.parquet")
    gold = dict(answers.select("question_id", "doc_id").unique().iter_rows())
    said = {
        (q, s): a
        for q, s, a in answers.select("question_id", "system", "answer").iter_rows()
    }
    for row, k in zip(rows[1:], key.rows, strict=True):
        assert row[0] == k.row
        assert row[3] == text[gold[k.question_id]]
        answer = said[(k.question_id, k.system)]
        assert row[4] == ("'" + answer if answer[0] in "=-" else answer)
    assert "rag@" not in sheet.read_text(encoding="utf-8-sig")

    # score the first 8 questions in full, leave 4 empty
    filled = [header]
    for i, row in enumerate(rows[1:]):
        scores = [str((i + d) % 11) for d in range(4)] if i < 8 * 4 else [""] * 4
        filled.append([*row[:5], *scores])
    done = tmp_path / "filled.csv"
    write_sheet(done, filled)
    key_file = folder / "audit-12.key.json"
    result = cube_ray("audit", run_dir, "--import", done, "--key", key_file)
    assert result.returncode == 0, result.stderr
    assert "imported 8 scored questions (4 left empty), 128 scores" in result.stdout
    human = pl.read_csv(folder / "human.csv")
    assert human.columns == ["question_id", "system", "dimension", "score"]
    assert human.height == 8 * 4 * 4
    first = key.rows[0]
    got = human.filter(
        pl.col("question_id") == first.question_id, pl.col("system") == first.system
    )
    assert got["score"].to_list() == [0, 1, 2, 3]

    # the existing human-figures path reads it
    from cube_ray.aggregate import AggregateOptions, compare_with_humans
    from cube_ray.report import read_human_ratings
    from cube_ray.tables import read_answers, read_scores

    ratings = read_human_ratings(folder / "human.csv")
    assert ratings.height == 128
    assert set(ratings["rater"]) == {"rater-1"}
    figures = compare_with_humans(
        ratings,
        answers=read_answers(run_dir / "answers"),
        scores=read_scores(run_dir / "scores"),
        judges=["judge-a", "judge-b", "judge-c"],
        dimensions=[d.name for d in key.dimensions],
        options=AggregateOptions(),
    )
    assert figures.n_items == 128
    assert set(figures.cube["system"]) == {"rag@bm25", "rag@hybrid"}
    assert set(figures.cube["questions"]) == {8}
    # each judge is paired with the humans on every rated answer it scored
    keys = ["question_id", "system", "dimension"]
    scored = (
        read_scores(run_dir / "scores")
        .join(ratings.select(keys), on=keys, how="semi")
        .filter(pl.col("score").is_not_null())
        .group_by("judge")
        .len()
    )
    pooled = figures.agreement.filter(pl.col("dimension") == "all")
    assert dict(pooled.select("judge", "n").iter_rows()) == dict(scored.iter_rows())

    # a bad cell: exit 2, the file, row and column named, human.csv kept
    before = (folder / "human.csv").read_bytes()
    filled[5][7] = "8分"
    write_sheet(done, filled)
    bad(
        cube_ray("audit", run_dir, "--import", done),
        str(done), "row 6, column H ('completeness (0-10):", "'8分' is not a number",
    )  # fmt: skip
    assert (folder / "human.csv").read_bytes() == before

    # the sheet is never overwritten
    bad(cube_ray("audit", run_dir, "--size", 12), "audit-12.csv", "--out DIR")


def test_nested_and_stratified(run_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "nested"
    for size in (10, 40):
        result = cube_ray("audit", run_dir, "--size", size, "--out", out)
        assert result.returncode == 0, result.stderr
    small = AuditKey.read(out / "audit-10.key.json")
    large = AuditKey.read(out / "audit-40.key.json")
    assert small.seed == large.seed == SEED  # the run sample's seed
    # every row of the small sheet is the same row of the large one
    pairs = {(r.row, r.question_id, r.system) for r in large.rows}
    assert {(r.row, r.question_id, r.system) for r in small.rows} <= pairs
    sheet_small = read_sheet(out / "audit-10.csv")
    sheet_large = read_sheet(out / "audit-40.csv")
    assert sheet_small == sheet_large[: len(sheet_small)]
    # each stratum's share of 40 within +-1 of proportional
    assert large.population == SAMPLE
    assert sum(s["size"] for s in large.strata.values()) == 40
    for stratum in large.strata.values():
        share = 40 * stratum["population"] / SAMPLE
        assert abs(stratum["size"] - share) <= 1
    # two keys: the import picks the one whose row count fits the sheet
    rows = read_sheet(out / "audit-10.csv")
    filled = [rows[0], *([*r[:5], "5", "5", "5", "5"] for r in rows[1:])]
    write_sheet(out / "audit-10.csv", filled)
    result = cube_ray("audit", run_dir, "--import", out / "audit-10.csv", "--out", out)
    assert result.returncode == 0, result.stderr
    assert "audit-10.key.json" in result.stdout
    assert pl.read_csv(out / "human.csv").height == 10 * 4 * 4
    # the sheet of another run: its answers are not this run's
    other = tmp_path / "other"
    shutil.copytree(run_dir, other, ignore=shutil.ignore_patterns("audit"))
    answers = pl.read_parquet(other / "answers" / "part-00000.parquet")
    answers.with_columns(pl.col("question_id") + "x").write_parquet(
        other / "answers" / "part-00000.parquet"
    )
    bad(
        cube_ray("audit", other, "--import", out / "audit-10.csv", "--key",
                 out / "audit-10.key.json", "--out", tmp_path / "o2"),
        "audit-10.key.json names question", "drawn from another run dir",
    )  # fmt: skip
    assert not (tmp_path / "o2").exists()


def test_workbook_draw_fill_import(run_dir: Path, tmp_path: Path) -> None:
    import openpyxl

    out = tmp_path / "audit"
    result = cube_ray("audit", run_dir, "--size", 12, "--out", out)
    assert result.returncode == 0, result.stderr
    workbook = out / "audit-12.xlsx"
    assert f"{workbook}  (the same worksheet for Excel" in result.stdout
    rows = read_sheet(out / "audit-12.csv")
    book = openpyxl.load_workbook(workbook)
    sheet = book["audit"]
    # the CSV's cells, Chinese text intact
    got = [
        ["" if v is None else v for v in r] for r in sheet.iter_rows(values_only=True)
    ]
    assert got == rows
    docs = pl.read_parquet(run_dir / "documents" / "part-00000.parquet")
    texts = set(docs["text"])
    assert all(r[3] in texts for r in got[1:])
    assert any("广东省" in r[3] for r in got[1:])
    assert sheet.freeze_panes == "A2"
    assert str(sheet.data_validations.dataValidation[0].sqref) == " ".join(
        f"{c}2:{c}{len(rows)}" for c in "FGHI"
    )
    assert "评分标准：完整性" in sheet["H1"].comment.text

    # a rater scores the first 8 questions in Excel (numbers), leaves 4 empty
    filled = [rows[0]]
    for i, row in enumerate(rows[1:]):
        scores = [(i + d) % 11 for d in range(4)] if i < 8 * 4 else []
        for d, score in enumerate(scores):
            sheet.cell(row=i + 2, column=6 + d, value=score)
        filled.append([*row[:5], *(map(str, scores) if scores else [""] * 4)])
    done = tmp_path / "filled.xlsx"
    book.save(done)
    write_sheet(tmp_path / "filled.csv", filled)
    key = out / "audit-12.key.json"
    result = cube_ray("audit", run_dir, "--import", done, "--key", key, "--out", out)
    assert result.returncode == 0, result.stderr
    assert "imported 8 scored questions (4 left empty), 128 scores" in result.stdout
    result = cube_ray(
        "audit", run_dir, "--import", tmp_path / "filled.csv", "--key", key,
        "--out", tmp_path / "from-csv",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    human = (out / "human.csv").read_bytes()
    assert human == (tmp_path / "from-csv" / "human.csv").read_bytes()

    # a bad cell: exit 2, the file, sheet, row and column named, human.csv kept
    sheet["H6"] = "8分"
    book.save(done)
    bad(
        cube_ray("audit", run_dir, "--import", done, "--key", key, "--out", out),
        f"file {done}, sheet 'audit': row 6, column H ('completeness (0-10):",
        "'8分' is not a number",
    )
    assert (out / "human.csv").read_bytes() == human


def test_without_openpyxl(run_dir: Path, tmp_path: Path) -> None:
    def cli(*args: str | Path) -> subprocess.CompletedProcess[str]:
        code = (
            "import sys\nsys.modules['openpyxl'] = None\n"
            "from cube_ray.cli import main\nsys.exit(main(sys.argv[1:]))\n"
        )
        return subprocess.run(
            [sys.executable, "-c", code, *map(str, args)],
            capture_output=True, text=True, timeout=300,
        )  # fmt: skip

    out = tmp_path / "audit"
    result = cli("audit", run_dir, "--size", 3, "--out", out)
    assert result.returncode == 0, result.stderr
    assert "XLSX not written" in result.stdout
    assert "pip install 'cube-ray[report]'" in result.stdout
    assert {p.suffix for p in out.iterdir()} == {".csv", ".json", ".txt"}
    workbook = tmp_path / "filled.xlsx"
    workbook.write_bytes(b"PK\x03\x04")
    bad(
        cli("audit", run_dir, "--import", workbook, "--out", out),
        f"file {workbook}: an .xlsx sheet needs the Python package 'openpyxl'",
    )
    assert not (out / "human.csv").exists()
