"""The audit workbook prints (issue 36): its page setup and rows, read back.

Landscape, one page wide, the header repeated; every row as high as its
wrapped texts; the score columns right after the answer; the instructions
wrapped across the rubrics sheet's width; a gold document too long for one
row cut with a "continued" marker and held whole on the sheet ``continued``.
"""

from __future__ import annotations

from pathlib import Path

import openpyxl  # the report extra, which `make test` installs: no skip
import polars as pl

from cube_ray.audit import write_worksheet
from cube_ray.audit._worksheet import TEXT_COLUMNS
from cube_ray.audit._xlsx import (
    CONTINUED,
    LINE_POINTS,
    MAX_ROW_POINTS,
    wrapped_lines,
)
from tests.unit.test_audit import make_run, rows_of

LONG = "\n".join(
    f"第{i}条: 申请人应当提交居民身份证、户口簿原件及复印件各一份。" for i in range(80)
)
"""A gold document of 80 lines: more than the tallest row shows."""


def _pages(ws: object) -> tuple[object, ...]:
    setup = ws.page_setup  # type: ignore[attr-defined]
    fit = ws.sheet_properties.pageSetUpPr.fitToPage  # type: ignore[attr-defined]
    return setup.orientation, setup.fitToWidth, setup.fitToHeight, fit


def test_the_workbook_prints_landscape_one_page_wide_with_whole_texts(
    tmp_path: Path,
) -> None:
    run = make_run(tmp_path / "run", n=6)
    docs = pl.read_parquet(run / "documents" / "part-00000.parquet")
    docs.with_columns(
        pl.when(pl.col("doc_id") == "d002")
        .then(pl.lit(LONG))
        .otherwise(pl.col("text"))
        .alias("text")
    ).write_parquet(run / "documents" / "part-00000.parquet")
    sheet = write_worksheet(run, size=6)
    assert sheet.xlsx is not None
    csv_rows = rows_of(sheet.sheet)
    book = openpyxl.load_workbook(sheet.xlsx)
    assert book.sheetnames == ["audit", "rubrics", CONTINUED]
    for name in book.sheetnames:
        assert _pages(book[name]) == ("landscape", 1, 0, True), name
    ws = book["audit"]
    assert ws.print_title_rows == "$1:$1"  # the headings on every page
    # The score columns come right after the answer they score.
    header = [c.value for c in ws[1]]
    answer = header.index("answer")
    assert answer == len(TEXT_COLUMNS) - 1
    assert header[answer + 1 :] == [d.column for d in sheet.audit.dimensions]
    # Every row as high as its wrapped texts (headings included), none cut.
    widths = [ws.column_dimensions[chr(65 + c)].width for c in range(len(header))]
    wrapped = [TEXT_COLUMNS.index(c) for c in ("question", "gold document", "answer")]
    for r in range(1, ws.max_row + 1):
        cols = range(len(header)) if r == 1 else wrapped
        lines = max(
            wrapped_lines(str(ws.cell(row=r, column=c + 1).value or ""), widths[c])
            for c in cols
        )
        height = ws.row_dimensions[r].height
        assert height is not None, r
        assert lines * LINE_POINTS <= height <= MAX_ROW_POINTS, (r, lines, height)
    # A gold document is shown whole, or cut with a marker and held whole on
    # the sheet 'continued'.
    doc = TEXT_COLUMNS.index("gold document")
    marked = 0
    for r, row in enumerate(csv_rows[1:], start=2):
        shown = str(ws.cell(row=r, column=doc + 1).value)
        if row[doc] != LONG:
            assert shown == row[doc]
            continue
        marked += 1
        assert "\n… [continued on the sheet 'continued': gold document of row " in (
            shown
        )
        assert shown.endswith(" parts]")
        assert LONG.startswith(shown.split("\n… [continued")[0])
    assert marked == 3  # the question's three answers
    more = list(book[CONTINUED].iter_rows(min_row=2, values_only=True))
    assert {r[1] for r in more} == {"gold document"}
    assert len({r[0] for r in more}) == 1  # said once, not per answer
    assert len(more) > 1
    assert "".join(str(r[3]) for r in more) == LONG
    assert [r[2] for r in more] == [
        f"{i} of {len(more)}" for i in range(1, 1 + len(more))
    ]
    # The instructions wrap across the rubrics sheet's three columns.
    notes = book["rubrics"]
    merged = {str(m) for m in notes.merged_cells.ranges}
    assert "A1:C1" in merged
    assert notes["A1"].alignment.wrap_text
