"""The worksheet as an Excel workbook (``openpyxl``, the ``report`` extra).

The ``.xlsx`` holds the CSV's rows and columns, cell for cell, with what a CSV
cannot carry: a frozen header row, wrapped question, document and answer
cells, column widths fit to their content, a 0-10 data validation on every
score cell, each dimension's full rubric as its heading's comment and a second
sheet ``rubrics``. ``openpyxl`` is imported here only, and only when a
workbook is written or read: without it the CSV alone is written.

It prints: every sheet landscape, fit to one page wide (as many pages down as
it takes), the header row repeated on each page; each row as high as its
wrapped texts need (:func:`wrapped_lines`), so nothing is cut. A text longer
than the tallest row a spreadsheet allows (409 points) is cut where the row
ends, with a marker ``… [continued on the sheet 'continued', …]``, and that
sheet holds it whole, in parts that each fit a row; only then does a cell
differ from the CSV's.
"""

from __future__ import annotations

import datetime as dt
import re
import unicodedata
import warnings
import zipfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cube_ray.audit._key import ROW
from cube_ray.errors import InputError
from cube_ray.files import write_atomic

__all__ = [
    "CONTINUED",
    "EXTRA",
    "LINE_POINTS",
    "MAX_ROW_POINTS",
    "SHEET",
    "SheetCells",
    "cell_text",
    "display_width",
    "fit_width",
    "have_openpyxl",
    "is_workbook",
    "read_xlsx",
    "split_to_fit",
    "wrapped_lines",
    "write_xlsx",
]

EXTRA = "report"
"""The cube-ray extra that installs ``openpyxl``."""
SHEET = "audit"
"""The worksheet's sheet name (the rubrics are on the sheet ``rubrics``)."""
_ZIP_MAGIC = b"PK\x03\x04"
_TEXT_WIDTH = 60
"""Widest a wrapped text column gets (characters; CJK characters count 2)."""
_SCORE_WIDTH = 16
"""Widest a score column gets: its long heading wraps instead (the score
columns stay narrow so that a page holds them beside the answer)."""
LINE_POINTS = 16.0
"""Height of one wrapped line of 11-point text, CJK included (points)."""
MAX_ROW_POINTS = 409.0
"""The tallest row Excel and LibreOffice allow (points)."""
CONTINUED = "continued"
"""The sheet holding, whole, the texts too long for one row."""
MAX_PART_BYTES = 128 * 2**20
"""Most bytes one part of a workbook (a sheet's XML, the shared strings) may
unpack to. An audit sheet of a few thousand answers is tens of MB; a zip
bomb (a few MB that unpack to GBs) is refused before openpyxl reads it."""
MAX_ROWS = 100_000
"""Most rows a workbook's sheet may have (an audit sheet has one per answer)."""
MAX_COLUMNS = 1_000
"""Most columns a sheet may use (an audit sheet has a dozen or two)."""
MAX_CELLS = 2_000_000
"""Most cells of the sheet's grid (last row x last column): the rows are read
into memory as that grid, empty cells included."""
_READ_CHUNK = 1 << 20
_TAG = re.compile(rb"<(?:[A-Za-z_][\w.-]*:)?(row|c|mergeCell)\b([^<>]{0,1024})>")
"""A row, cell or merged range's start tag in a sheet's XML (any prefix)."""
_OVERLAP = 1100
"""Bytes kept between chunks: more than the longest tag :data:`_TAG` matches."""
_REF = re.compile(rb"""\br=["']([A-Z]{1,3})?(\d{1,7})["']""")
_RANGE = re.compile(rb"""\bref=["']([A-Z]{1,3}\d{1,7}(?::[A-Z]{1,3}\d{1,7})?)["']""")
_ILLEGAL = {c: None for c in [*range(0x00, 0x09), 0x0B, 0x0C, *range(0x0E, 0x20)]}
"""Control characters XML 1.0 (so an .xlsx) cannot hold; dropped from cells."""


def have_openpyxl() -> bool:
    """Whether ``openpyxl`` imports (the ``report`` extra is installed)."""
    try:
        import openpyxl  # noqa: F401
    except ImportError:
        return False
    return True


def is_workbook(path: Path) -> bool:
    """Whether a file is an Excel workbook: its suffix, or a zip file's magic.

    A workbook saved under a ``.csv`` name is still read as a workbook.
    """
    if path.suffix.lower() in (".xlsx", ".xlsm"):
        return True
    try:
        with path.open("rb") as fh:
            return fh.read(4) == _ZIP_MAGIC
    except OSError:
        return False


def display_width(text: str) -> int:
    """Columns a line takes on screen: wide (CJK) characters count 2.

    >>> display_width("answer"), display_width("回答 7"), display_width("")
    (6, 6, 0)
    """
    return sum(2 if unicodedata.east_asian_width(c) in "WF" else 1 for c in text)


def fit_width(texts: Sequence[str], *, cap: int, least: int = 6) -> int:
    r"""A column's width: its widest line plus a margin, within ``least..cap``.

    >>> fit_width(["Q001-A1", "row"], cap=60)
    9
    >>> fit_width(["事项名称: 居民身份证换领\n办理时限: 20 个工作日"], cap=60)
    26
    >>> fit_width(["x" * 500], cap=60), fit_width([], cap=60)
    (60, 6)
    """
    widest = max(
        (display_width(line) for t in texts for line in t.splitlines()), default=0
    )
    return max(least, min(cap, widest + 2))


def wrapped_lines(text: str, width: float) -> int:
    r"""Lines a text takes wrapped in a column ``width`` characters wide.

    Each line of the text wraps at ``width - 1`` display columns (the cell's
    padding); wide (CJK) characters count 2.

    >>> wrapped_lines("abc", 10), wrapped_lines("x" * 20, 11), wrapped_lines("", 9)
    (1, 2, 1)
    >>> wrapped_lines("事项名称\n" + "办" * 12, 10)
    4
    """
    room = max(1, int(width) - 1)
    return sum(_line_count(line, room)[0] for line in text.split("\n"))


def _char_width(ch: str) -> int:
    return 2 if unicodedata.east_asian_width(ch) in "WF" else 1


def _line_count(line: str, room: int, most: int | None = None) -> tuple[int, int]:
    """Screen lines of a line wrapped at ``room`` columns, and what fits.

    The second figure: characters that fit in ``most`` lines (None: all). A
    wide character is never split across lines.
    """
    lines, used = 1, 0
    for i, ch in enumerate(line):
        w = _char_width(ch)
        if used + w > room and used:
            if most is not None and lines == most:
                return lines, i
            lines, used = lines + 1, 0
        used += w
    return lines, len(line)


def row_points(lines: int) -> float:
    """A row's height for ``lines`` wrapped lines, capped at the tallest row.

    >>> row_points(1), row_points(3), row_points(100)
    (20.0, 52.0, 409.0)
    """
    return min(MAX_ROW_POINTS, lines * LINE_POINTS + 4.0)


def split_to_fit(text: str, width: float) -> list[str]:
    r"""A text in parts, each fitting one row of a column ``width`` wide.

    Cut at line ends where it can, else within a line; joined, the parts are
    the text.

    >>> text = "\n".join(["line %d" % i for i in range(60)])
    >>> parts = split_to_fit(text, 20)
    >>> len(parts), "".join(parts) == text, parts[0].endswith("line 21\n")
    (3, True, True)
    >>> long = "办" * 1000
    >>> cut = split_to_fit(long, 20)
    >>> [len(p) for p in cut], "".join(cut) == long
    ([198, 198, 198, 198, 198, 10], True)
    >>> split_to_fit("short", 20)
    ['short']
    """
    # Room below for the "continued" marker (up to two lines).
    budget = int((MAX_ROW_POINTS - 4.0) // LINE_POINTS) - 3
    room = max(1, int(width) - 1)
    parts: list[str] = []
    current: list[str] = []
    used = 0
    for line in text.split("\n"):
        while True:
            need = _line_count(line, room)[0]
            if used + need <= budget:
                current.append(line)
                used += need
                break
            if current:  # close this part, try the line in the next
                parts.append("\n".join(current))
                current, used = [], 0
                continue
            # One line longer than a whole part: cut it where the part is full.
            cut = _line_count(line, room, budget)[1]
            parts.append(line[:cut])
            line = line[cut:]
            if not line:
                break
    if current or not parts:
        parts.append("\n".join(current))
    # The pieces of a line cut within it rejoin without a newline: keep a part
    # boundary as the newline it replaced where there was one.
    return _rejoinable(text, parts)


def _rejoinable(text: str, parts: list[str]) -> list[str]:
    """``parts`` with each one's trailing newline kept, so they join to ``text``."""
    out: list[str] = []
    pos = 0
    for part in parts:
        pos += len(part)
        if pos < len(text) and text[pos] == "\n":
            part += "\n"
            pos += 1
        out.append(part)
    return out


def cell_text(value: object) -> str:
    """A cell's value as the text a CSV cell would hold.

    Numbers print as typed (``7``, ``7.5``), so that the score checks and their
    messages are the CSV's; a date is shown as one, and is not a score.

    >>> cell_text(None), cell_text(7), cell_text(7.0), cell_text(7.5)
    ('', '7', '7', '7.5')
    >>> cell_text(True), cell_text(" 8 "), cell_text(dt.date(2025, 7, 10))
    ('TRUE', ' 8 ', '2025-07-10')
    """
    if value is None:
        return ""
    if isinstance(value, bool):
        return "TRUE" if value else "FALSE"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return str(int(value)) if value.is_integer() else repr(value)
    if isinstance(value, dt.datetime) and value.time() == dt.time(0):
        return value.date().isoformat()
    if isinstance(value, dt.date | dt.time):
        return value.isoformat()
    return str(value)


@dataclass(frozen=True)
class SheetCells:
    """A workbook's sheet as text rows, and what a CSV cannot have."""

    label: str
    """The file and the sheet, as error messages name them."""
    rows: list[list[str]]
    """Every row from row 1, each cell as :func:`cell_text` writes it."""
    merged: list[tuple[str, int, int, int, int]]
    """Merged ranges: ``(A1 range, first row, first col, last row, last col)``,
    rows 1-based, columns 0-based."""


def write_xlsx(
    path: Path,
    table: Sequence[Sequence[str]],
    *,
    wrap: Sequence[int],
    scores: Sequence[int],
    rubrics: Sequence[tuple[str, str, str]],
    instructions: Sequence[str],
) -> None:
    """Write the worksheet as an ``.xlsx``, atomically.

    Args:
        path: The workbook to write.
        table: The header and the rows, as the CSV holds them.
        wrap: 0-based columns of long text, wrapped.
        scores: 0-based score columns (validated 0-10 or empty).
        rubrics: ``(dimension, score column heading, full rubric)`` per score
            column, in the order of ``scores``.
        instructions: The lines of the rubrics file before the rubrics.

    Raises:
        ImportError: ``openpyxl`` is not installed.
    """
    # optional: openpyxl (the report extra), only for a .xlsx file
    from openpyxl import Workbook
    from openpyxl.comments import Comment
    from openpyxl.styles import Alignment, Font
    from openpyxl.utils import get_column_letter
    from openpyxl.worksheet.datavalidation import DataValidation

    book = Workbook()
    sheet = book.active
    assert sheet is not None
    sheet.title = SHEET
    top = Alignment(vertical="top")
    wrapped = Alignment(wrap_text=True, vertical="top")
    bold = Font(bold=True)
    widths: list[int] = []
    for c in range(len(table[0])):
        texts = [row[c] for row in table[1:]]
        if c in scores:
            width = fit_width([*texts, *table[0][c].split()], cap=_SCORE_WIDTH)
        else:
            width = fit_width([*texts, table[0][c]], cap=_TEXT_WIDTH)
        widths.append(width)
        sheet.column_dimensions[get_column_letter(c + 1)].width = width
    # (column, text) -> (the row it is first on, its parts): said once.
    continued: dict[tuple[int, str], tuple[str, list[str]]] = {}
    for r, values in enumerate(table, start=1):
        lines = 1
        for c, value in enumerate(values):
            text = value
            if (
                r > 1
                and c in wrap
                and row_points(wrapped_lines(value, widths[c])) >= MAX_ROW_POINTS
            ):
                first_row, parts = continued.setdefault(
                    (c, value), (values[0], split_to_fit(value, widths[c]))
                )
                text = (
                    f"{parts[0].rstrip()}\n… [continued on the sheet "
                    f"'{CONTINUED}': {table[0][c]} of row {first_row}, "
                    f"{len(parts)} parts]"
                )
            cell = _put(sheet, r, c + 1, text)
            cell.alignment = wrapped if r == 1 or c in wrap else top
            if r == 1:
                cell.font = bold
            if r == 1 or c in wrap:
                lines = max(lines, wrapped_lines(text, widths[c]))
        sheet.row_dimensions[r].height = row_points(lines)
    n_rows = len(table)
    for c, (name, heading, rubric) in zip(scores, rubrics, strict=True):
        comment = Comment(f"{heading}\n\n{rubric or name}", "cube-ray")
        comment.width, comment.height = 420, 300
        sheet.cell(row=1, column=c + 1).comment = comment
    if scores and n_rows > 1:
        check = DataValidation(
            type="decimal",
            operator="between",
            formula1="0",
            formula2="10",
            allow_blank=True,
            showErrorMessage=True,
            errorStyle="stop",
            errorTitle="A score is 0 to 10",
            error="Enter a score from 0 to 10 (decimals allowed), or leave the "
            "cell empty.",
            showInputMessage=True,
            promptTitle="Score 0-10",
            prompt="0 to 10 as the rubric says (the heading's comment and the "
            "sheet 'rubrics'); empty: not scored.",
        )
        sheet.add_data_validation(check)
        for c in scores:
            letter = get_column_letter(c + 1)
            check.add(f"{letter}2:{letter}{n_rows}")
    sheet.freeze_panes = "A2"
    sheet.auto_filter.ref = sheet.dimensions
    _print_setup(sheet, title_rows="1:1")

    notes = book.create_sheet("rubrics")
    note_widths = (16, 40, 90)
    for letter, width in zip("ABC", note_widths, strict=True):
        notes.column_dimensions[letter].width = width
    for r, line in enumerate(instructions, start=1):
        # Each line across the three columns, wrapped: nothing runs off the page.
        _put(notes, r, 1, line).alignment = wrapped
        notes.merge_cells(start_row=r, start_column=1, end_row=r, end_column=3)
        notes.row_dimensions[r].height = row_points(
            wrapped_lines(line, sum(note_widths))
        )
    first = len(instructions) + 2
    for c, heading in enumerate(("dimension", "score column", "rubric"), start=1):
        _put(notes, first, c, heading).font = bold
    for r, row in enumerate(rubrics, start=first + 1):
        for c, value in enumerate(row, start=1):
            _put(notes, r, c, value).alignment = wrapped
        notes.row_dimensions[r].height = row_points(
            max(wrapped_lines(v, w) for v, w in zip(row, note_widths, strict=True))
        )
    _print_setup(notes, title_rows=None)

    if continued:
        more = book.create_sheet(CONTINUED)
        heads = ("row", "column", "part", "text")
        text_width = max(widths[c] for c, _ in continued)
        for letter, width in zip("ABCD", (10, 16, 8, text_width), strict=True):
            more.column_dimensions[letter].width = width
        for c, heading in enumerate(heads, start=1):
            _put(more, 1, c, heading).font = bold
        r = 2
        for (c, _), (row_id, parts) in continued.items():
            for i, part in enumerate(parts, start=1):
                values = (row_id, table[0][c], f"{i} of {len(parts)}", part)
                for k, value in enumerate(values, start=1):
                    _put(more, r, k, value).alignment = wrapped if k == 4 else top
                more.row_dimensions[r].height = row_points(
                    wrapped_lines(part, text_width)
                )
                r += 1
        _print_setup(more, title_rows="1:1")

    write_atomic(path, book.save)


def _print_setup(sheet: Any, *, title_rows: str | None) -> None:
    """Landscape A4, one page wide and as many down as it takes."""
    sheet.page_setup.orientation = "landscape"
    sheet.page_setup.paperSize = sheet.PAPERSIZE_A4
    sheet.page_setup.fitToWidth = 1
    sheet.page_setup.fitToHeight = 0
    sheet.sheet_properties.pageSetUpPr.fitToPage = True
    sheet.page_margins.left = sheet.page_margins.right = 0.4
    sheet.page_margins.top = sheet.page_margins.bottom = 0.5
    if title_rows is not None:
        sheet.print_title_rows = title_rows


def _put(sheet: Any, row: int, column: int, value: str) -> Any:
    """Set a text cell; text is never a formula (a leading ``=`` included)."""
    cell = sheet.cell(row=row, column=column)
    cell.value = value.translate(_ILLEGAL)
    cell.data_type = "s"
    return cell


def read_xlsx(path: Path) -> SheetCells:
    """The audit sheet of a workbook, as text rows.

    The sheet ``audit``, else the first with a ``row`` heading in row 1, else
    the first sheet. Formulas count by the value the spreadsheet last computed.

    Raises:
        InputError: ``openpyxl`` is not installed, or the file is not a
            readable workbook.
    """
    try:
        # optional: openpyxl (the report extra), only for a .xlsx file
        import openpyxl
    except ImportError:
        msg = (
            "an .xlsx sheet needs the Python package 'openpyxl' to be read, which "
            f"is not installed; install it with pip install 'cube-ray[{EXTRA}]' "
            "(or pip install openpyxl), or save the sheet as CSV UTF-8 and "
            "import that"
        )
        raise InputError(msg, path=str(path)) from None
    parts = _scan_parts(path)
    try:
        with warnings.catch_warnings():
            # Workbooks saved by Excel carry extensions openpyxl warns about
            # and drops (slicers, conditional formats): nothing the import reads.
            warnings.simplefilter("ignore")
            book = openpyxl.load_workbook(path, read_only=True, data_only=True)
    except Exception as exc:  # zip, XML and openpyxl's own errors alike
        msg = (
            f"not a readable Excel workbook ({type(exc).__name__}: {exc}); save "
            "it again as 'Excel Workbook (.xlsx)' or as CSV UTF-8, then import it"
        )
        raise InputError(msg, path=str(path)) from None
    try:
        sheets = book.worksheets
        chosen = next((s for s in sheets if s.title == SHEET), None)
        if chosen is None:
            chosen = next((s for s in sheets if ROW in _first_row(s, parts)), sheets[0])
        label = f"{path}, sheet {chosen.title!r}"
        part = _part_of(chosen, parts)
        _check_size(label, part)
        rows = [
            [cell_text(v) for v in values]
            for values in chosen.iter_rows(
                min_row=1,
                max_row=max(part.rows, 1),
                max_col=max(part.columns, 1),
                values_only=True,
            )
        ]
    except InputError:
        raise
    except Exception as exc:  # a damaged sheet's XML
        msg = (
            f"not a readable Excel workbook ({type(exc).__name__}: {exc}); save "
            "it again as 'Excel Workbook (.xlsx)' or as CSV UTF-8, then import it"
        )
        raise InputError(msg, path=str(path)) from None
    finally:
        book.close()
    return SheetCells(label=label, rows=rows, merged=part.merged)


@dataclass(frozen=True)
class _Part:
    """What a sheet's XML holds, read before openpyxl reads the sheet."""

    rows: int
    """The last row (the row count openpyxl would yield)."""
    columns: int
    """The last column used by a cell."""
    merged: list[tuple[str, int, int, int, int]]
    """As :attr:`SheetCells.merged`."""


def _scan_parts(path: Path) -> dict[str, _Part]:
    """Every part's unpacked size checked, and each sheet's XML scanned.

    The sizes are counted while unpacking (a zip's headers may lie), up to
    :data:`MAX_PART_BYTES`; nothing is held but the sheets' row and column
    counts and merged ranges.

    Raises:
        InputError: A part unpacks to more than :data:`MAX_PART_BYTES`, or the
            file is not a zip.
    """
    try:
        with zipfile.ZipFile(path) as archive:
            out: dict[str, _Part] = {}
            for info in archive.infolist():
                if info.is_dir():
                    continue
                with archive.open(info) as stream:
                    sheet = info.filename.startswith("xl/worksheets/")
                    out[info.filename] = _scan(path, info.filename, stream, sheet)
            return out
    except InputError:
        raise
    except (OSError, zipfile.BadZipFile, RuntimeError, ValueError) as exc:
        msg = (
            f"not a readable Excel workbook ({type(exc).__name__}: {exc}); save "
            "it again as 'Excel Workbook (.xlsx)' or as CSV UTF-8, then import it"
        )
        raise InputError(msg, path=str(path)) from None


def _scan(path: Path, name: str, stream: Any, sheet: bool) -> _Part:
    """One part unpacked in chunks: its size bounded; a sheet's tags read."""
    # optional: openpyxl (the report extra), only for a .xlsx file
    from openpyxl.utils.cell import column_index_from_string, range_boundaries

    size = rows = last_row = columns = 0
    merged: list[tuple[str, int, int, int, int]] = []
    tail = b""
    while True:
        chunk = stream.read(_READ_CHUNK)
        size += len(chunk)
        if size > MAX_PART_BYTES:
            msg = (
                f"its part {name} unpacks to more than {MAX_PART_BYTES // 2**20} "
                "MB, more than an audit sheet holds (a zip bomb, or not the sheet "
                "`cube-ray audit` wrote); import the sheet the audit wrote, saved "
                "as 'Excel Workbook (.xlsx)' or as CSV UTF-8"
            )
            raise InputError(msg, path=str(path))
        if not sheet:
            if not chunk:
                break
            continue
        buf = tail + chunk
        cut = len(buf) if not chunk else max(0, len(buf) - _OVERLAP)
        end = 0
        for m in _TAG.finditer(buf):
            if m.start() >= cut:
                break
            end = m.end()
            kind, attrs = m.group(1), m.group(2)
            if kind == b"row":
                ref = _REF.search(attrs)
                last_row = int(ref.group(2)) if ref else last_row + 1
                rows = max(rows, last_row)
            elif kind == b"c":
                ref = _REF.search(attrs)
                if ref and ref.group(1):
                    columns = max(
                        columns, column_index_from_string(ref.group(1).decode())
                    )
                else:
                    columns = max(columns, 1)
            else:
                rng = _RANGE.search(attrs)
                if rng:
                    coord = rng.group(1).decode()
                    left, top, right, bottom = range_boundaries(coord)
                    merged.append((coord, top, left - 1, bottom, right - 1))
        tail = buf[max(cut, end) :]
        if not chunk:
            break
    return _Part(rows=rows, columns=columns, merged=merged)


def _part_of(sheet: Any, parts: dict[str, _Part]) -> _Part:
    """The scan of a read-only sheet's XML part."""
    name = str(getattr(sheet, "_worksheet_path", "")).lstrip("/")
    return parts.get(name, _Part(rows=0, columns=0, merged=[]))


def _check_size(label: str, part: _Part) -> None:
    """At most :data:`MAX_ROWS` rows, :data:`MAX_COLUMNS` columns, :data:`MAX_CELLS`."""
    if part.rows > MAX_ROWS:
        msg = (
            f"the sheet has {part.rows:,} rows (its last row), more than the "
            f"{MAX_ROWS:,} an audit sheet may have (one per answer); delete the "
            "rows below the answers, or import the sheet `cube-ray audit` wrote"
        )
        raise InputError(msg, path=label)
    if part.columns > MAX_COLUMNS:
        msg = (
            f"the sheet uses column {part.columns:,}, more than the "
            f"{MAX_COLUMNS:,} an audit sheet may have; delete the columns right "
            "of the scores, or import the sheet `cube-ray audit` wrote"
        )
        raise InputError(msg, path=label)
    if part.rows * part.columns > MAX_CELLS:
        msg = (
            f"the sheet spans {part.rows:,} rows by {part.columns:,} columns, "
            f"more than the {MAX_CELLS:,} cells an audit sheet may have; delete "
            "the rows below the answers and the columns right of the scores, or "
            "import the sheet `cube-ray audit` wrote"
        )
        raise InputError(msg, path=label)


def _first_row(sheet: Any, parts: dict[str, _Part]) -> set[str]:
    """A sheet's headings (row 1), bounded like the sheet itself."""
    part = _part_of(sheet, parts)
    if part.columns > MAX_COLUMNS or part.rows == 0:
        return set()
    first = next(
        sheet.iter_rows(min_row=1, max_row=1, max_col=part.columns, values_only=True),
        (),
    )
    return {cell_text(v).strip() for v in first}
