"""The human audit: the draw (nested, within strata), the worksheet, the import.

Run dirs are written here from literal frames (no Ray, no engine): the
tables ``cube-ray run`` writes, and ``sample/`` for a sampled run.
"""

from __future__ import annotations

import csv
import io
import json
import subprocess
import sys
from pathlib import Path

import openpyxl  # the report extra, which `make test` installs: no skip
import polars as pl
import pytest

from cube_ray.audit import (
    AuditKey,
    audit_order,
    import_sheet,
    score_header,
    write_worksheet,
)
from cube_ray.config import RunConfig
from cube_ray.errors import InputError
from cube_ray.language import Language
from cube_ray.prompts import DEFAULT_DIMENSIONS, default_rubric
from cube_ray.report import read_human_ratings
from cube_ray.sample import SampleState, sample_block, sample_order, write_sample

SYSTEMS = ("zero", "full", "rag@bm25")
DIMS = ("relevance", "quality")


def make_run(
    root: Path, *, n: int = 30, strata: list[str] | None = None, seed: int = 3
) -> Path:
    """A run dir of ``n`` questions (one per document), three sets, two dimensions.

    With ``strata``, ``sample/`` holds a sample of every document (the run's
    sample is its whole population), document i in stratum ``strata[i]``.
    """
    ids = [f"d{i:03d}" for i in range(n)]
    qids = [f"q{i:03d}" for i in range(n)]
    tables = {
        "documents": pl.DataFrame(
            {
                "doc_id": ids,
                "title": ids,
                "text": [
                    f"事项名称: 居民身份证换领 {i}\n办理时限: {i} 个工作日"
                    for i in range(n)
                ],
                "content_hash": ids,
            }
        ),
        "questions": pl.DataFrame(
            {
                "question_id": qids,
                "doc_id": ids,
                "question": [f"问题 {i}？" for i in range(n)],
            }
        ),
        "answers": pl.DataFrame(
            {
                "question_id": [q for q in qids for _ in SYSTEMS],
                "doc_id": [d for d in ids for _ in SYSTEMS],
                "system": list(SYSTEMS) * n,
                "answer": [f"回答 {q} {j}" for q in qids for j in range(len(SYSTEMS))],
            }
        ),
        "scores": pl.DataFrame(
            {
                "question_id": [q for q in qids for _ in SYSTEMS for _ in DIMS],
                "system": [s for _ in qids for s in SYSTEMS for _ in DIMS],
                "judge": "a",
                "dimension": list(DIMS) * (n * len(SYSTEMS)),
                "score": 5.0,
                "status": "ok",
            }
        ),
    }
    for name, frame in tables.items():
        (root / name).mkdir(parents=True)
        frame.write_parquet(root / name / "part-00000.parquet")
    if strata is not None:
        order = sample_order(ids, strata, seed=seed)
        block = sample_block(order, size=n, seed=seed, fields=["area"])
        state = SampleState(
            size=n, seed=seed, fields=("area",), population_fp="x", block=block
        )
        write_sample(root / "sample", order, state)
    return root


def rows_of(path: Path) -> list[list[str]]:
    return list(csv.reader(io.StringIO(path.read_text(encoding="utf-8-sig"))))


def save(path: Path, rows: list[list[str]], *, delimiter: str = ",") -> Path:
    buffer = io.StringIO()
    csv.writer(buffer, delimiter=delimiter).writerows(rows)
    path.write_text(buffer.getvalue(), encoding="utf-8-sig")
    return path


# --- the draw -----------------------------------------------------------------


def test_order_is_nested_and_seeded() -> None:
    q = pl.DataFrame(
        {
            "question_id": [f"q{i}" for i in range(50)],
            "doc_id": [f"d{i}" for i in range(50)],
            "stratum": ["all"] * 50,
        }
    )
    order = audit_order(q, seed=1)["question_id"].to_list()
    shuffled = audit_order(q.reverse(), seed=1)["question_id"].to_list()
    assert order == shuffled  # the input's order does not matter
    assert order != audit_order(q, seed=2)["question_id"].to_list()
    assert order != sorted(order)
    # a question's place does not depend on the other questions drawn from
    kept = set(order[:20])
    sub = audit_order(q.filter(pl.col("question_id").is_in(list(kept))), seed=1)
    assert sub["question_id"].to_list() == order[:20]


def test_order_takes_each_stratum_in_proportion() -> None:
    sizes = {"广州市": 10, "深圳市": 30, "(missing)": 60}
    strata = [h for h, n in sizes.items() for _ in range(n)]
    q = pl.DataFrame(
        {
            "question_id": [f"q{i}" for i in range(100)],
            "doc_id": [f"d{i}" for i in range(100)],
            "stratum": strata,
        }
    )
    order = audit_order(q, seed=5)
    for m in range(1, 101):
        got = order.head(m)["stratum"].value_counts()
        counts = dict(got.iter_rows())
        for h, n in sizes.items():
            assert abs(counts.get(h, 0) - m * n / 100) < 1 + 1e-9, (m, h)


def test_questions_of_one_document_enter_together() -> None:
    q = pl.DataFrame(
        {
            "question_id": ["q2", "q1", "q3"],
            "doc_id": ["d1", "d1", "d2"],
            "stratum": ["all"] * 3,
        }
    )
    order = audit_order(q, seed=0)["question_id"].to_list()
    assert order.index("q2") == order.index("q1") + 1


# --- the worksheet ------------------------------------------------------------


def test_sheets_are_nested_and_stratified(tmp_path: Path) -> None:
    strata = ["A"] * 10 + ["B"] * 20 + ["C"] * 30
    run = make_run(tmp_path / "run", n=60, strata=strata, seed=9)
    small = write_worksheet(run, size=6)
    large = write_worksheet(run, size=24)
    assert small.audit.seed == large.audit.seed == 9
    assert small.audit.stratified_by == ["area"]
    assert {h: s["size"] for h, s in small.audit.strata.items()} == {
        "A": 1, "B": 2, "C": 3,
    }  # fmt: skip
    assert {h: s["size"] for h, s in large.audit.strata.items()} == {
        "A": 4, "B": 8, "C": 12,
    }  # fmt: skip
    assert large.audit.rows[: len(small.audit.rows)] == small.audit.rows
    assert rows_of(large.sheet)[: 1 + len(small.audit.rows)] == rows_of(small.sheet)
    other = write_worksheet(run, size=24, out_dir=tmp_path / "s2", seed=2)
    assert {r.question_id for r in other.audit.rows} != {
        r.question_id for r in large.audit.rows
    }


def test_size_beyond_the_run_takes_every_question(tmp_path: Path) -> None:
    run = make_run(tmp_path / "run", n=4)
    sheet = write_worksheet(run, size=10)
    assert (sheet.audit.questions, sheet.audit.population) == (4, 4)
    assert sheet.audit.strata == {"all": {"population": 4, "size": 4}}
    assert len(sheet.audit.rows) == 4 * len(SYSTEMS)


def test_sheet_hides_set_names_and_shuffles(tmp_path: Path) -> None:
    run = make_run(tmp_path / "run", n=30)
    sheet = write_worksheet(run, size=30)
    text = sheet.sheet.read_text(encoding="utf-8-sig")
    for system in SYSTEMS:
        assert system not in text
    assert "rag" not in text
    positions = {
        tuple(r.system for r in sheet.audit.rows if r.question_no == q)
        for q in range(1, 31)
    }
    assert len(positions) > 2  # not one fixed order of the sets
    # the key maps each row back: the answer in the row is that set's answer
    answers = pl.read_parquet(run / "answers" / "part-00000.parquet")
    said = {(q, s): a for q, _, s, a in answers.iter_rows()}
    for row, key in zip(rows_of(sheet.sheet)[1:], sheet.audit.rows, strict=True):
        assert row[0] == key.row
        assert row[4] == said[(key.question_id, key.system)]


def test_sheet_is_utf8_with_bom_and_defuses_formulas(tmp_path: Path) -> None:
    run = make_run(tmp_path / "run", n=3)
    answers = pl.read_parquet(run / "answers" / "part-00000.parquet")
    answers.with_columns(
        pl.when(pl.col("system") == "rag@bm25")
        .then(pl.lit('=HYPERLINK("http://evil","点击")'))
        .otherwise(pl.col("answer"))
        .alias("answer")
    ).write_parquet(run / "answers" / "part-00000.parquet")
    sheet = write_worksheet(run, size=3)
    raw = sheet.sheet.read_bytes()
    assert raw.startswith(b"\xef\xbb\xbf")
    rows = rows_of(sheet.sheet)
    assert rows[0][:5] == ["row", "question no.", "question", "gold document", "answer"]
    # the packaged Chinese rubrics (no config recorded; Chinese documents)
    assert rows[0][5].startswith("relevance (0-10): 相关性：")
    assert rows[0][6].startswith("quality (0-10): ")
    assert "事项名称: 居民身份证换领" in rows[1][3]
    assert "\n" in rows[1][3]  # a multi-line cell survives
    assert any(r[4] == '\'=HYPERLINK("http://evil","点击")' for r in rows[1:])
    assert not any(r[4].startswith("=") for r in rows[1:])
    assert "相关性" in sheet.rubrics.read_text(encoding="utf-8")


def test_rubrics_come_from_the_runs_config(tmp_path: Path) -> None:
    run = make_run(tmp_path / "run", n=3)
    conf = tmp_path / "conf.yaml"
    conf.write_text(
        "corpus: {path: r.jsonl, id_field: id, fields: [name]}\n"
        "generator: {backend: fake}\njudges: {a: {backend: fake, seed: 1}}\n"
        "allow_fake_engines: true\nprompts: {language: en}\n"
        "dimensions:\n  - {name: relevance}\n"
        "  - {name: tone, rubric: 'Rubric: tone. Is it polite? One point each.'}\n",
        encoding="utf-8",
    )
    config = RunConfig.from_yaml(conf).manifest_config()
    (run / "manifest.json").write_text(json.dumps({"config": config}))
    sheet = write_worksheet(run, size=2)
    assert [d.column for d in sheet.audit.dimensions] == [
        "relevance (0-10): Is the answer faithful to and grounded in the source "
        "document?",
        "tone (0-10): Is it polite?",
    ]
    text = sheet.rubrics.read_text(encoding="utf-8")
    assert "Rubric: tone. Is it polite? One point each." in text
    assert "the run's config" in text


def test_an_existing_sheet_is_never_overwritten(tmp_path: Path) -> None:
    run = make_run(tmp_path / "run", n=5)
    sheet = write_worksheet(run, size=3)
    sheet.sheet.write_text("a rater's work", encoding="utf-8")
    with pytest.raises(InputError, match=r"audit-3\.csv.*refusing to overwrite"):
        write_worksheet(run, size=3)
    assert sheet.sheet.read_text(encoding="utf-8") == "a rater's work"


def test_a_run_dir_without_documents_is_named(tmp_path: Path) -> None:
    run = make_run(tmp_path / "run", n=3)
    for f in (run / "documents").iterdir():
        f.unlink()
    with pytest.raises(InputError, match=r"no documents/ table.*gold document"):
        write_worksheet(run, size=2)


# --- the import ---------------------------------------------------------------


@pytest.fixture
def drawn(tmp_path: Path) -> tuple[Path, AuditKey, list[list[str]]]:
    """A run dir, its 4-question sheet's key, and the sheet filled in full."""
    run = make_run(tmp_path / "run", n=8)
    sheet = write_worksheet(run, size=4)
    rows = rows_of(sheet.sheet)
    filled = [rows[0]]
    for i, row in enumerate(rows[1:]):
        filled.append([*row[:5], str(i % 11), str((i + 3) % 11)])
    return run, sheet.audit, filled


def test_import_writes_the_human_file(
    drawn: tuple[Path, AuditKey, list[list[str]]], tmp_path: Path
) -> None:
    run, key, filled = drawn
    for row in filled[1 + 3 * 3 :]:  # the fourth question left empty
        row[5:] = ["", ""]
    filled[1][5] = "7.5"
    done = import_sheet(save(tmp_path / "f.csv", filled), run_dir=run)
    assert (done.scored, done.empty, done.scores) == (3, 1, 3 * 3 * 2)
    human = read_human_ratings(done.path)  # what `cube-ray report --human` reads
    assert human.columns == ["question_id", "system", "dimension", "score", "rater"]
    first = key.rows[0]
    got = human.filter(
        pl.col("question_id") == first.question_id, pl.col("system") == first.system
    )
    assert got["dimension"].to_list() == ["relevance", "quality"]
    assert got["score"].to_list() == [7.5, 3.0]
    assert done.path.read_text(encoding="utf-8").splitlines()[0] == (
        "question_id,system,dimension,score"
    )
    assert key.rows[-1].question_id not in set(human["question_id"])


def test_import_reads_a_semicolon_sheet(
    drawn: tuple[Path, AuditKey, list[list[str]]], tmp_path: Path
) -> None:
    run, _, filled = drawn
    done = import_sheet(save(tmp_path / "f.csv", filled, delimiter=";"), run_dir=run)
    assert done.scores == 4 * 3 * 2


def _set(row: int, col: int, value: str):  # type: ignore[no-untyped-def]
    def edit(rows: list[list[str]]) -> None:
        rows[row][col] = value

    return edit


@pytest.mark.parametrize(
    ("edit", "where", "what"),
    [
        (_set(2, 5, "seven"), "row 3, column F ('relevance", "'seven' is not a number"),
        (_set(4, 6, "11"), "row 5, column G ('quality", "11 is outside 0-10"),
        (_set(4, 6, "-1"), "row 5, column G ('quality", "-1 is outside 0-10"),
        (_set(3, 5, "nan"), "row 4, column F ('relevance", "'nan' is not a number"),
        (_set(3, 5, "inf"), "row 4, column F ('relevance", "'inf' is not a number"),
        (_set(6, 0, "Q002-A9"), "row 7, column A ('row')", "'Q002-A9' is not a row id"),
        (_set(6, 0, "Q002-A1"), "row 7, column A ('row')", "also on row 5"),
        (_set(7, 6, ""), "row 8, column G ('quality", "question Q003 has 5 of 6"),
        (lambda r: r.pop(5), "'Q002-A2' (question Q002)", "missing from the sheet"),
        (lambda r: [x.pop(6) for x in r], "missing column 'quality", "(dimension"),
        (lambda r: [x.pop(0) for x in r], "missing column 'row'", "header (row 1)"),
        (lambda r: [x.append(x[5]) for x in r], "row 1, column H ('relevance",
         "a second column for dimension 'relevance' (the first is column F)"),
        (lambda r: r[3].append("7"), "row 4, column H (no heading)",
         "'7' is in a column without a heading"),
        (lambda r: [x.__setitem__(slice(5, 7), ["", ""]) for x in r[1:]],
         "no question is scored", "every score cell is empty"),
    ],
)  # fmt: skip
def test_every_bad_cell_is_one_clear_error(
    drawn: tuple[Path, AuditKey, list[list[str]]],
    tmp_path: Path,
    edit: object,
    where: str,
    what: str,
) -> None:
    run, _, filled = drawn
    edit(filled)  # type: ignore[operator]
    path = save(tmp_path / "filled.csv", filled)
    with pytest.raises(InputError) as err:
        import_sheet(path, run_dir=run)
    message = str(err.value)
    assert message.startswith(f"file {path}"), message
    assert where in message, message
    assert what in message, message
    assert not (run / "audit" / "human.csv").exists()  # nothing written


def test_a_sheet_saved_in_a_legacy_encoding_is_named(
    drawn: tuple[Path, AuditKey, list[list[str]]], tmp_path: Path
) -> None:
    run, _, filled = drawn
    buffer = io.StringIO()
    csv.writer(buffer).writerows(filled)
    path = tmp_path / "gbk.csv"
    path.write_bytes(buffer.getvalue().encode("gbk"))
    with pytest.raises(InputError, match=r"not UTF-8 text.*CSV UTF-8"):
        import_sheet(path, run_dir=run)


def test_import_keeps_ratings_it_would_drop(
    drawn: tuple[Path, AuditKey, list[list[str]]], tmp_path: Path
) -> None:
    run, _, filled = drawn
    first = import_sheet(save(tmp_path / "all.csv", filled), run_dir=run)
    before = first.path.read_bytes()
    for row in filled[1:4]:  # the first question cleared
        row[5:] = ["", ""]
    with pytest.raises(InputError, match=r"human\.csv.*would drop them"):
        import_sheet(save(tmp_path / "less.csv", filled), run_dir=run)
    assert first.path.read_bytes() == before
    filled[5][5] = "0"  # a corrected score on a full sheet replaces the file
    for row in filled[1:4]:
        row[5:] = ["1", "1"]
    again = import_sheet(save(tmp_path / "fixed.csv", filled), run_dir=run)
    assert again.path.read_bytes() != before


def test_drawing_loads_no_ray_vllm_or_torch(tmp_path: Path) -> None:
    run = make_run(tmp_path / "run", n=3)
    code = (
        "import sys\nfrom cube_ray.cli import main\n"
        f"assert main(['audit', {str(run)!r}, '--size', '2']) == 0\n"
        "heavy = [m for m in ('ray', 'vllm', 'torch') if m in sys.modules]\n"
        "print('HEAVY', heavy)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    )
    assert "HEAVY []" in result.stdout.splitlines(), result.stdout


@pytest.mark.parametrize("language", ["en", "zh"])
def test_every_packaged_rubric_heads_its_column_with_its_question(
    language: Language,
) -> None:
    for name in DEFAULT_DIMENSIONS:
        header = score_header(name, default_rubric(name, language))
        assert header.startswith(f"{name} (0-10): "), header
        assert header.endswith(("?", "？")), header


def test_a_config_that_no_longer_validates_falls_back_and_says_why(
    tmp_path: Path,
) -> None:
    run = make_run(tmp_path / "run", n=3)
    (run / "manifest.json").write_text(json.dumps({"config": {"corpuz": {}}}))
    sheet = write_worksheet(run, size=2)
    assert [d.name for d in sheet.audit.dimensions] == list(DIMS)
    assert sheet.rubric_source.startswith("the packaged zh rubrics (the config in ")
    assert "not usable here" in sheet.rubric_source


# --- the workbook (.xlsx) -----------------------------------------------------


def _workbook_rows(path: Path) -> list[list[str]]:
    sheet = openpyxl.load_workbook(path)["audit"]
    return [
        ["" if v is None else v for v in r] for r in sheet.iter_rows(values_only=True)
    ]


def test_workbook_holds_the_csv_rows_and_a_raters_aids(tmp_path: Path) -> None:
    run = make_run(tmp_path / "run", n=6)
    answers = pl.read_parquet(run / "answers" / "part-00000.parquet")
    answers.with_columns(
        pl.when(pl.col("system") == "rag@bm25")
        .then(pl.lit('=HYPERLINK("http://evil","点击")\x07 回答'))
        .otherwise(pl.col("answer"))
        .alias("answer")
    ).write_parquet(run / "answers" / "part-00000.parquet")
    sheet = write_worksheet(run, size=4)
    assert sheet.xlsx == run / "audit" / "audit-4.xlsx"
    assert sheet.xlsx_note is None
    csv_rows = rows_of(sheet.sheet)
    # cell for cell the CSV's, but for the control character XML cannot hold
    expected = [[c.replace("\x07", "") for c in r] for r in csv_rows]
    assert _workbook_rows(sheet.xlsx) == expected
    assert any('点击")\x07 回答' in r[4] for r in csv_rows)

    book = openpyxl.load_workbook(sheet.xlsx)
    assert book.sheetnames == ["audit", "rubrics"]
    ws = book["audit"]
    assert ws.freeze_panes == "A2"
    n = len(csv_rows)
    assert ws.max_row == n
    # the answer that looks like a formula stays text
    cells = [ws.cell(row=r, column=5) for r in range(2, n + 1)]
    assert all(c.data_type == "s" for c in cells)
    assert any(str(c.value).startswith("'=HYPERLINK") for c in cells)
    # question, gold document and answer wrap; the ids do not
    for letter in "CDE":
        assert ws[f"{letter}2"].alignment.wrap_text, letter
    assert not ws["A2"].alignment.wrap_text
    # widths fit the content: the ids narrow, the documents wider, capped
    widths = {k: ws.column_dimensions[k].width for k in "ABCDEFG"}
    assert widths["A"] == len("Q001-A1") + 2
    longest = max(
        len(line) + sum(1 for ch in line if ord(ch) > 0x2E80)
        for r in csv_rows[1:]
        for line in r[3].splitlines()
    )
    assert widths["D"] == longest + 2
    assert widths["E"] <= 60
    assert 6 <= widths["F"] <= 28
    # every score cell: 0-10, whole or decimal, empty allowed
    (check,) = ws.data_validations.dataValidation
    assert (check.type, check.operator, check.formula1, check.formula2) == (
        "decimal", "between", "0", "10",
    )  # fmt: skip
    assert check.allow_blank
    assert check.showErrorMessage
    assert check.errorStyle == "stop"
    assert str(check.sqref) == f"F2:F{n} G2:G{n}"
    # the rubric: the heading's short form, in full in its comment and sheet 2
    rubric = default_rubric("relevance", "zh")
    assert ws["F1"].value == sheet.audit.dimensions[0].column
    assert rubric in ws["F1"].comment.text
    rubrics = list(book["rubrics"].iter_rows(values_only=True))
    assert ("relevance", sheet.audit.dimensions[0].column, rubric) in rubrics
    assert (
        "quality",
        sheet.audit.dimensions[1].column,
        default_rubric("quality", "zh"),
    ) in rubrics
    assert "Keep the workbook as .xlsx" in sheet.rubrics.read_text(encoding="utf-8")


def _fill_workbook(path: Path, out: Path, values: dict[str, object]) -> Path:
    """Write cells (``"F3": 7``) into a copy of a workbook, as a rater's Excel does."""
    book = openpyxl.load_workbook(path)
    for ref, value in values.items():
        book["audit"][ref] = value
    book.save(out)
    return out


def test_a_filled_workbook_imports_as_its_csv_does(tmp_path: Path) -> None:
    run = make_run(tmp_path / "run", n=8)
    write_worksheet(run, size=2)  # a second, smaller sheet: two keys to choose from
    sheet = write_worksheet(run, size=4)
    assert sheet.xlsx is not None
    rows = rows_of(sheet.sheet)
    # three questions scored (numbers, a decimal, a number typed as text), one left
    typed: dict[str, object] = {}
    filled = [rows[0]]
    for i, row in enumerate(rows[1:], start=2):
        scores: list[object] = ["", ""]
        if i <= 1 + 3 * 3:
            scores = [i % 11, 7.5 if i == 4 else "8"]
            typed |= {f"F{i}": scores[0], f"G{i}": scores[1]}
        filled.append([*row[:5], *map(str, scores)])
    from_csv = import_sheet(
        save(tmp_path / "f.csv", filled), run_dir=run, out_dir=tmp_path / "c"
    )
    workbook = _fill_workbook(sheet.xlsx, tmp_path / "filled.xlsx", typed)
    from_xlsx = import_sheet(workbook, run_dir=run, out_dir=tmp_path / "x")
    assert from_xlsx.key == sheet.key  # the key whose row count fits
    assert (from_xlsx.scored, from_xlsx.empty, from_xlsx.scores) == (3, 1, 18)
    assert from_xlsx.path.read_bytes() == from_csv.path.read_bytes()
    human = read_human_ratings(from_xlsx.path)
    assert 7.5 in human["score"].to_list()


def _merge(*cells: str):  # type: ignore[no-untyped-def]
    def edit(book: object) -> None:
        book["audit"]["F3"] = 5  # type: ignore[index]
        book["audit"].merge_cells(":".join(cells))  # type: ignore[index]

    return edit


def _copy_column(source: str, target: str):  # type: ignore[no-untyped-def]
    def edit(book: object) -> None:
        sheet = book["audit"]  # type: ignore[index]
        for r in range(1, sheet.max_row + 1):
            sheet[f"{target}{r}"] = sheet[f"{source}{r}"].value

    return edit


def _put(**cells: object):  # type: ignore[no-untyped-def]
    def edit(book: object) -> None:
        for ref, value in cells.items():
            book["audit"][ref] = value  # type: ignore[index]

    return edit


@pytest.mark.parametrize(
    ("edit", "where", "what"),
    [
        (_put(F3="seven"), "row 3, column F ('relevance", "'seven' is not a number"),
        (_put(G5=11), "row 5, column G ('quality", "11 is outside 0-10"),
        (_put(G5=-1), "row 5, column G ('quality", "-1 is outside 0-10"),
        (_put(G5=10.5), "row 5, column G ('quality", "10.5 is outside 0-10"),
        (_put(F4=True), "row 4, column F ('relevance", "'TRUE' is not a number"),
        (_merge("F3", "G3"), "row 3, column F ('relevance",
         "merged with other cells (F3:G3)"),
        (_merge("A3", "A4"), "row 3, column A ('row')",
         "merged with other cells (A3:A4)"),
        (_copy_column("F", "H"), "row 1, column H ('relevance",
         "a second column for dimension 'relevance' (the first is column F)"),
        (_put(I6=7), "row 6, column I (no heading)", "'7' is in a column without"),
        (_put(A7="Q009-A1"), "row 7, column A ('row')", "'Q009-A1' is not a row id"),
    ],
)  # fmt: skip
def test_every_bad_cell_of_a_workbook_is_one_clear_error(
    drawn: tuple[Path, AuditKey, list[list[str]]],
    tmp_path: Path,
    edit: object,
    where: str,
    what: str,
) -> None:
    run, _, _ = drawn
    book = openpyxl.load_workbook(run / "audit" / "audit-4.xlsx")
    for r in range(2, book["audit"].max_row + 1):  # every question scored 5
        book["audit"][f"F{r}"] = book["audit"][f"G{r}"] = 5
    edit(book)  # type: ignore[operator]
    path = tmp_path / "filled.xlsx"
    book.save(path)
    with pytest.raises(InputError) as err:
        import_sheet(path, run_dir=run)
    message = str(err.value)
    assert message.startswith(f"file {path}, sheet 'audit': "), message
    assert where in message, message
    assert what in message, message
    assert not (run / "audit" / "human.csv").exists()  # nothing written


def test_a_file_that_is_no_workbook_is_named(
    drawn: tuple[Path, AuditKey, list[list[str]]], tmp_path: Path
) -> None:
    run, _, filled = drawn
    path = save(tmp_path / "filled.xlsx", filled)  # a CSV given an .xlsx name
    with pytest.raises(InputError, match=r"filled\.xlsx: not a readable Excel work"):
        import_sheet(path, run_dir=run)
    legacy = tmp_path / "filled.xls"
    legacy.write_bytes(b"\xd0\xcf\x11\xe0")
    with pytest.raises(InputError, match=r"filled\.xls: .*\(\.xls\) cannot be read"):
        import_sheet(legacy, run_dir=run)


def test_without_openpyxl_the_csv_is_written_and_a_workbook_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "openpyxl", None)  # import openpyxl fails
    run = make_run(tmp_path / "run", n=5)
    sheet = write_worksheet(run, size=3)
    assert sheet.xlsx is None
    assert sheet.xlsx_note is not None
    assert "pip install 'cube-ray[report]'" in sheet.xlsx_note
    assert {p.name for p in (run / "audit").iterdir()} == {
        "audit-3.csv", "audit-3.key.json", "audit-3.rubrics.txt",
    }  # fmt: skip
    text = sheet.rubrics.read_text(encoding="utf-8")
    assert "Save the sheet as CSV UTF-8." in text
    assert ".xlsx" not in text
    workbook = tmp_path / "filled.xlsx"
    workbook.write_bytes(b"PK\x03\x04 a workbook")
    with pytest.raises(InputError) as err:
        import_sheet(workbook, run_dir=run, key_path=sheet.key)
    assert str(err.value).startswith(f"file {workbook}: an .xlsx sheet needs"), err
    assert "pip install 'cube-ray[report]'" in str(err.value)
    assert "save the sheet as CSV UTF-8" in str(err.value)
    assert not (run / "audit" / "human.csv").exists()


def test_an_existing_workbook_is_never_overwritten(tmp_path: Path) -> None:
    run = make_run(tmp_path / "run", n=5)
    (run / "audit").mkdir()
    (run / "audit" / "audit-3.xlsx").write_bytes(b"a rater's work")
    with pytest.raises(InputError, match=r"audit-3\.xlsx.*refusing to overwrite"):
        write_worksheet(run, size=3)
    assert (run / "audit" / "audit-3.xlsx").read_bytes() == b"a rater's work"
    assert not (run / "audit" / "audit-3.csv").exists()
