"""Filled ``.xlsx`` sheets are bounded before openpyxl reads them (issue 34, item 5).

Real workbooks: the one ``cube-ray audit`` wrote, with its sheet's XML
replaced by a zip bomb (a few hundred kB that unpack past the bound), a sheet
whose last row or column is far out, and a grid too large for memory. Each
is one error naming the file, read within a few MB of memory.
"""

from __future__ import annotations

import tracemalloc
import zipfile
from pathlib import Path

import pytest

from cube_ray.audit import import_sheet
from cube_ray.audit._xlsx import MAX_CELLS, MAX_COLUMNS, MAX_PART_BYTES, MAX_ROWS
from cube_ray.errors import InputError
from tests.unit.test_audit import drawn

__all__ = ["drawn"]  # the fixture, imported for pytest

SHEET_PART = "xl/worksheets/sheet1.xml"
HEAD = (
    b'<?xml version="1.0" encoding="UTF-8"?>\n<worksheet xmlns='
    b'"http://schemas.openxmlformats.org/spreadsheetml/2006/main"><sheetData>'
)
TAIL = b"</sheetData></worksheet>"


def _with_sheet(source: Path, target: Path, chunks: list[bytes] | bytes) -> Path:
    """``source`` with its audit sheet's XML replaced by ``chunks``, deflated."""
    with (
        zipfile.ZipFile(source) as src,
        zipfile.ZipFile(target, "w", zipfile.ZIP_DEFLATED) as dst,
    ):
        names = src.namelist()
        assert SHEET_PART in names
        for name in names:
            if name != SHEET_PART:
                dst.writestr(name, src.read(name))
        with dst.open(SHEET_PART, "w", force_zip64=True) as out:
            for chunk in [chunks] if isinstance(chunks, bytes) else chunks:
                out.write(chunk)
    return target


def _import_bounded(path: Path, run: Path) -> tuple[str, int]:
    """The import's error and its peak Python memory (bytes)."""
    tracemalloc.start()
    try:
        with pytest.raises(InputError) as err:
            import_sheet(path, run_dir=run)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return str(err.value), peak


def test_a_sheet_that_unpacks_past_the_bound_is_refused_unread(
    drawn: tuple[Path, object, object], tmp_path: Path
) -> None:
    run = drawn[0]
    row = b'<row r="2"><c r="A2" t="inlineStr"><is><t>x</t></is></c></row>'
    filler = b"<!--" + b" " * (2**20 - 7) + b"-->"
    chunks = [HEAD, row, *[filler] * (MAX_PART_BYTES // 2**20 + 8), TAIL]
    bomb = _with_sheet(run / "audit" / "audit-4.xlsx", tmp_path / "bomb.xlsx", chunks)
    assert bomb.stat().st_size < 2 * 2**20  # a few hundred kB on disk
    message, peak = _import_bounded(bomb, run)
    assert message.startswith(f"file {bomb}: "), message
    assert f"its part {SHEET_PART} unpacks to more than 128 MB" in message
    assert peak < 16 * 2**20, peak  # read in chunks, never whole
    assert not (run / "audit" / "human.csv").exists()


def test_a_zip_whose_headers_lie_about_the_size_is_still_bounded(
    drawn: tuple[Path, object, object], tmp_path: Path
) -> None:
    """The bound counts the bytes unpacked, not the size a header declares."""
    run = drawn[0]
    filler = b" " * 2**20
    chunks = [HEAD, *[filler] * (MAX_PART_BYTES // 2**20 + 2), TAIL]
    bomb = _with_sheet(run / "audit" / "audit-4.xlsx", tmp_path / "lie.xlsx", chunks)
    data = bytearray(bomb.read_bytes())
    with zipfile.ZipFile(bomb) as z:
        info = z.getinfo(SHEET_PART)
    # Patch the central directory's uncompressed size (zip64 extra or field).
    real = info.file_size.to_bytes(8, "little")
    at = data.rfind(real)
    assert at > 0
    data[at : at + 8] = (1000).to_bytes(8, "little")
    bomb.write_bytes(bytes(data))
    with pytest.raises(InputError, match=r"unpacks to more than 128 MB|not a readable"):
        import_sheet(bomb, run_dir=run)


@pytest.mark.parametrize(
    ("body", "what"),
    [
        (
            b'<row r="1048576"><c r="A1048576" t="inlineStr"><is><t>row</t>'
            b"</is></c></row>",
            f"the sheet has 1,048,576 rows (its last row), more than the {MAX_ROWS:,}",
        ),
        (
            b'<row r="1"><c r="XFD1" t="inlineStr"><is><t>row</t></is></c></row>',
            f"the sheet uses column 16,384, more than the {MAX_COLUMNS:,}",
        ),
        (
            b'<row r="1"><c r="A1" t="inlineStr"><is><t>row</t></is></c></row>'
            b'<row r="5000"><c r="ALK5000" t="inlineStr"><is><t>x</t></is></c></row>',
            f"5,000 rows by 999 columns, more than the {MAX_CELLS:,} cells",
        ),
    ],
)
def test_a_sheet_far_larger_than_an_audit_is_refused_before_its_rows_are_read(
    drawn: tuple[Path, object, object], tmp_path: Path, body: bytes, what: str
) -> None:
    run = drawn[0]
    path = _with_sheet(
        run / "audit" / "audit-4.xlsx", tmp_path / "far.xlsx", HEAD + body + TAIL
    )
    message, peak = _import_bounded(path, run)
    assert message.startswith(f"file {path}, sheet 'audit': "), message
    assert what in message, message
    assert peak < 16 * 2**20, peak


def test_the_sheet_the_audit_wrote_still_imports_read_only(
    drawn: tuple[Path, object, list[list[str]]], tmp_path: Path
) -> None:
    import openpyxl

    run, _, filled = drawn
    book = openpyxl.load_workbook(run / "audit" / "audit-4.xlsx")
    sheet = book["audit"]
    for r, row in enumerate(filled[1:], start=2):
        sheet[f"F{r}"], sheet[f"G{r}"] = float(row[5]), float(row[6])
    path = tmp_path / "filled.xlsx"
    book.save(path)
    done = import_sheet(path, run_dir=run)
    assert done.scored == 4
    assert done.scores == 2 * (len(filled) - 1)
