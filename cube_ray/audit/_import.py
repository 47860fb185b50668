"""``cube-ray audit RUN_DIR --import FILLED``: a filled sheet -> the human file.

The sheet is the CSV or the ``.xlsx`` the draw wrote (a workbook is read with
``openpyxl``). Every cell is checked before anything is written; the first
problem is one error naming the file (and the workbook's sheet), the
spreadsheet row (the header is row 1) and the column (letter and heading).
The human file has the columns ``question_id, system, dimension, score``
that ``cube-ray report --human`` reads
(:func:`cube_ray.report.read_human_ratings`).
"""

from __future__ import annotations

import csv
import io
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from cube_ray import schema
from cube_ray.audit._draw import column_letter, parse_score, score_text
from cube_ray.audit._key import ROW, AuditKey, KeyRow, write_atomic
from cube_ray.audit._worksheet import AUDIT_DIR, answer_units
from cube_ray.audit._xlsx import is_workbook, read_xlsx
from cube_ray.errors import InputError

__all__ = ["HUMAN_FILE", "Imported", "find_key", "import_sheet"]

HUMAN_FILE = "human.csv"
_DELIMITERS = (",", ";", "\t")
"""Excel writes ``;`` in locales with a decimal comma, and tabs as "Text"."""
_HUMAN_HEADER = (schema.QUESTION_ID, schema.SYSTEM, schema.DIMENSION, schema.SCORE)


@dataclass(frozen=True)
class Imported:
    """What :func:`import_sheet` wrote."""

    path: Path
    key: Path
    scored: int
    """Questions scored in full."""
    empty: int
    """Questions left empty (not in the human file)."""
    scores: int
    """Rows of the human file."""


def find_key(sheet: Path, *, run_dir: Path, out_dir: Path) -> Path:
    """The key of a filled sheet: the one key beside it or in the audit folder.

    With several keys, the one whose row count equals the sheet's (nested
    sheets of different sizes have different row counts).

    Raises:
        InputError: No key, or several that fit; the message lists them and
            asks for ``--key``.
    """
    folders = dict.fromkeys([sheet.parent, out_dir, run_dir / AUDIT_DIR])
    keys = sorted(
        {k.resolve() for f in folders if f.is_dir() for k in f.glob("*.key.json")}
    )
    if not keys:
        msg = (
            "no audit key (*.key.json) found beside the sheet or in "
            f"{run_dir / AUDIT_DIR}; pass the key `cube-ray audit --size` wrote "
            "with --key FILE"
        )
        raise InputError(msg, path=str(sheet))
    if len(keys) == 1:
        return keys[0]
    n_rows = sum(1 for _, r in _load(sheet).records if any(c.strip() for c in r))
    fitting = [k for k in keys if len(AuditKey.read(k).rows) == n_rows]
    if len(fitting) == 1:
        return fitting[0]
    listing = ", ".join(f"{k.name} ({len(AuditKey.read(k).rows)} rows)" for k in keys)
    msg = (
        f"the sheet has {n_rows} rows and {len(fitting) or 'none'} of the keys "
        f"found fit it ({listing}); pass the key of this sheet with --key FILE"
    )
    raise InputError(msg, path=str(sheet))


def import_sheet(
    sheet: str | Path,
    *,
    run_dir: str | Path,
    out_dir: str | Path | None = None,
    key_path: str | Path | None = None,
) -> Imported:
    """Validate a filled worksheet and write the human file.

    Args:
        sheet: The filled CSV or ``.xlsx``.
        run_dir: The run directory the sheet was drawn from.
        out_dir: Where ``human.csv`` goes (default ``RUN_DIR/audit``).
        key_path: The sheet's key (default: found by :func:`find_key`).

    Raises:
        InputError: A bad cell, a changed or missing row, a missing column, a
            question scored in part, or nothing scored; nothing is written.
    """
    path = Path(sheet)
    root = Path(run_dir)
    out = Path(out_dir) if out_dir is not None else root / AUDIT_DIR
    if not path.is_file():
        raise InputError("the filled sheet does not exist", path=str(path))
    key_file = (
        Path(key_path)
        if key_path is not None
        else find_key(path, run_dir=root, out_dir=out)
    )
    key = AuditKey.read(key_file)
    loaded = _load(path)
    cells = _read_cells(loaded, key, key_file)
    rows = _human_rows(loaded.label, key, cells)
    _check_same_run(root, key, key_file, rows)
    target = out / HUMAN_FILE
    _check_nothing_dropped(target, rows)
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(_HUMAN_HEADER)
    writer.writerows(rows)
    write_atomic(target, buffer.getvalue())
    scored = len({(r[0]) for r in rows})
    return Imported(
        path=target,
        key=key_file,
        scored=scored,
        empty=key.questions - scored,
        scores=len(rows),
    )


@dataclass(frozen=True)
class _Cell:
    row: KeyRow
    sheet_row: int
    """1-based spreadsheet row (the header is row 1)."""
    column: int
    """0-based column."""
    heading: str
    dimension: str
    value: float | None


def _where(sheet_row: int, column: int, heading: str) -> str:
    return f"row {sheet_row}, column {column_letter(column)} ({heading!r})"


def _text(path: Path) -> str:
    try:
        return path.read_bytes().decode("utf-8-sig")
    except OSError as exc:
        raise InputError(f"cannot read the sheet: {exc}", path=str(path)) from None
    except UnicodeDecodeError as exc:
        msg = (
            f"not UTF-8 text ({exc.reason} at byte {exc.start}); save the sheet "
            "as 'CSV UTF-8 (comma delimited)' (Excel) or 'Text CSV' with "
            "character set Unicode (UTF-8) (LibreOffice), then import it again"
        )
        raise InputError(msg, path=str(path)) from None


def _records(path: Path, text: str) -> Iterator[list[str]]:
    """The sheet's records, in the delimiter its header row uses."""
    for delimiter in _DELIMITERS:
        reader = csv.reader(io.StringIO(text, newline=""), delimiter=delimiter)
        header = next(reader, None)
        if header is not None and ROW in (h.strip() for h in header):
            yield header
            try:
                yield from reader
            except csv.Error as exc:
                msg = f"row {reader.line_num}: not a well-formed CSV row ({exc})"
                raise InputError(msg, path=str(path)) from None
            return
    raise InputError(_NO_ROW_COLUMN, path=str(path))


_NO_ROW_COLUMN = (
    f"missing column {ROW!r} in the header (row 1); expected the sheet "
    "`cube-ray audit --size` wrote, with its header row and row ids as they were"
)


@dataclass(frozen=True)
class _Sheet:
    """A filled sheet, CSV or workbook, as text records."""

    label: str
    """The file (and the workbook's sheet), as errors name it."""
    header: list[str]
    records: Iterator[tuple[int, list[str]]]
    """``(spreadsheet row, cells)`` after the header, read as they are used."""
    merged: list[tuple[str, int, int, int, int]]
    """A workbook's merged ranges (:class:`cube_ray.audit._xlsx.SheetCells`)."""


def _load(path: Path) -> _Sheet:
    """Open a filled sheet: a workbook by its suffix or content, else a CSV."""
    if is_workbook(path):
        book = read_xlsx(path)
        if not book.rows or ROW not in (h.strip() for h in book.rows[0]):
            raise InputError(_NO_ROW_COLUMN, path=book.label)
        return _Sheet(
            label=book.label,
            header=book.rows[0],
            records=enumerate(book.rows[1:], start=2),
            merged=book.merged,
        )
    if path.suffix.lower() == ".xls":
        msg = (
            "an Excel 97-2003 workbook (.xls) cannot be read; save it as 'Excel "
            "Workbook (.xlsx)' or as CSV UTF-8, then import that"
        )
        raise InputError(msg, path=str(path))
    records = _records(path, _text(path))
    header = next(records)
    return _Sheet(
        label=str(path),
        header=header,
        records=enumerate(records, start=2),
        merged=[],
    )


def _read_cells(sheet: _Sheet, key: AuditKey, key_file: Path) -> list[_Cell]:
    """Every score cell of the sheet, each checked; raises on the first problem."""
    label = sheet.label
    header = [h.strip() for h in sheet.header]
    row_col = header.index(ROW)
    columns: list[tuple[int, str, str]] = []
    for dim in key.dimensions:
        index = _find_column(label, header, dim.column, dim.name)
        if index is None:
            msg = (
                f"missing column {dim.column!r} (dimension {dim.name!r}) in the "
                f"header (row 1); found {header}. Keep the score columns the "
                f"sheet was written with (key {key_file.name})"
            )
            raise InputError(msg, path=label)
        columns.append((index, header[index], dim.name))
    _check_merged(sheet, [(row_col, ROW), *((i, h) for i, h, _ in columns)])
    by_id = {r.row: r for r in key.rows}
    seen: dict[str, int] = {}
    cells: list[_Cell] = []
    for number, record in sheet.records:
        if not any(c.strip() for c in record):
            continue  # a blank line a spreadsheet left at the end
        rid = record[row_col].strip() if row_col < len(record) else ""
        where = _where(number, row_col, ROW)
        if rid not in by_id:
            msg = (
                f"{where}: {rid!r} is not a row id of this sheet (key "
                f"{key_file.name}: {key.rows[0].row} ... {key.rows[-1].row}); "
                "row ids must stay as written: undo the change"
            )
            raise InputError(msg, path=label)
        if rid in seen:
            msg = (
                f"{where}: row id {rid!r} is also on row {seen[rid]}; each answer "
                "is one row: delete the copy"
            )
            raise InputError(msg, path=label)
        seen[rid] = number
        _check_headed(label, header, number, record)
        for index, heading, name in columns:
            raw = record[index] if index < len(record) else ""
            try:
                value = parse_score(raw)
            except ValueError as exc:
                msg = f"{_where(number, index, heading)}: {exc}"
                raise InputError(msg, path=label) from None
            cells.append(_Cell(by_id[rid], number, index, heading, name, value))
    missing = [r.row for r in key.rows if r.row not in seen]
    if missing:
        msg = (
            f"row id {missing[0]!r} (question Q{by_id[missing[0]].question_no:03d}"
            f"){f' and {len(missing) - 1} more' if len(missing) > 1 else ''} "
            "missing from the sheet; every row the sheet was written with must "
            "stay: restore it from the sheet `cube-ray audit --size` wrote"
        )
        raise InputError(msg, path=label)
    return cells


def _check_merged(sheet: _Sheet, read: list[tuple[int, str]]) -> None:
    """No merged range covers a cell the import reads (a row id or a score).

    Merging keeps the first cell's value only: the scores of the other cells
    would be lost, or one score would stand for several.
    """
    for coord, top, left, _, right in sorted(sheet.merged, key=lambda m: m[1:]):
        hit = [(i, h) for i, h in read if left <= i <= right]
        if not hit:
            continue
        index, heading = hit[0]
        msg = (
            f"{_where(top, index, heading)}: merged with other cells ({coord}); "
            "each answer needs its own row id and scores, one value per cell: "
            "unmerge them (Excel: Home > Merge & Center > Unmerge Cells) and "
            "fill each cell"
        )
        raise InputError(msg, path=sheet.label)


def _check_headed(
    label: str, header: list[str], number: int, record: list[str]
) -> None:
    """No value in a column without a heading: a score typed beside its column."""
    for index, raw in enumerate(record):
        if raw.strip() and (index >= len(header) or not header[index]):
            msg = (
                f"row {number}, column {column_letter(index)} (no heading): "
                f"{raw.strip()[:40]!r} is in a column without a heading; move a "
                "score into its dimension's column, or give a column of notes "
                "a heading in row 1"
            )
            raise InputError(msg, path=label)


def _find_column(label: str, header: list[str], heading: str, name: str) -> int | None:
    """The column of a dimension: its exact heading, else one starting with its name.

    Raises:
        InputError: Two columns fit (a copied score column): which is meant
            is unknown.
    """
    found = [i for i, h in enumerate(header) if h == heading]
    if not found:
        found = [
            i
            for i, h in enumerate(header)
            if h.split(" ", 1)[0].split("(", 1)[0] == name
        ]
    if len(found) > 1:
        first, second = (column_letter(i) for i in found[:2])
        msg = (
            f"row 1, column {second} ({header[found[1]]!r}): a second column for "
            f"dimension {name!r} (the first is column {first}); each dimension "
            "has one score column: delete the extra column, or rename it if it "
            "holds notes"
        )
        raise InputError(msg, path=label)
    return found[0] if found else None


def _human_rows(
    label: str, key: AuditKey, cells: list[_Cell]
) -> list[tuple[str, str, str, str]]:
    """The scored questions' rows; a question scored in part is an error."""
    by_question: dict[int, list[_Cell]] = {}
    for cell in cells:
        by_question.setdefault(cell.row.question_no, []).append(cell)
    rows: list[tuple[str, str, str, str]] = []
    for number in sorted(by_question):
        group = by_question[number]
        filled = [c for c in group if c.value is not None]
        if not filled:
            continue
        if len(filled) < len(group):
            gap = min(
                (c for c in group if c.value is None),
                key=lambda c: (c.sheet_row, c.column),
            )
            msg = (
                f"{_where(gap.sheet_row, gap.column, gap.heading)}: empty, but "
                f"question Q{number:03d} has {len(filled)} of {len(group)} scores; "
                "score a question in full (every answer, every dimension) or "
                "clear all of its cells"
            )
            raise InputError(msg, path=label)
        order = {r.row: i for i, r in enumerate(key.rows)}
        dims = {d.name: i for i, d in enumerate(key.dimensions)}
        for c in sorted(group, key=lambda c: (order[c.row.row], dims[c.dimension])):
            assert c.value is not None
            rows.append(
                (c.row.question_id, c.row.system, c.dimension, score_text(c.value))
            )
    if not rows:
        msg = (
            "no question is scored: every score cell is empty; fill the sheet "
            "(a question in full: every answer, every dimension) and import again"
        )
        raise InputError(msg, path=label)
    return rows


def _check_nothing_dropped(target: Path, rows: list[tuple[str, str, str, str]]) -> None:
    """Refuse to replace a human file holding ratings the new one lacks."""
    if not target.is_file():
        return
    new = {r[:3] for r in rows}
    try:
        with target.open(encoding="utf-8-sig", newline="") as fh:
            old = [
                (
                    r.get(schema.QUESTION_ID),
                    r.get(schema.SYSTEM),
                    r.get(schema.DIMENSION),
                )
                for r in csv.DictReader(fh)
            ]
    except (OSError, UnicodeDecodeError, csv.Error) as exc:
        msg = (
            f"exists and cannot be read ({exc}); move it away before importing, "
            "or write elsewhere with --out DIR"
        )
        raise InputError(msg, path=str(target)) from None
    lost = [k for k in dict.fromkeys(old) if k not in new]
    if lost:
        qid, system, dim = lost[0]
        msg = (
            f"holds {len(lost)} rating(s) the imported sheet lacks (first: "
            f"question {qid!r}, set {system!r}, dimension {dim!r}); importing "
            "would drop them. Move it away (or merge the sheets) first, or "
            "write elsewhere with --out DIR"
        )
        raise InputError(msg, path=str(target))


def _check_same_run(
    root: Path, key: AuditKey, key_file: Path, rows: list[tuple[str, str, str, str]]
) -> None:
    """Every scored answer is an answer of the run (the sheet is this run's)."""
    answers = answer_units(root)
    known = set(answers.select(schema.QUESTION_ID, schema.SYSTEM).iter_rows())
    foreign = [r for r in rows if (r[0], r[1]) not in known]
    if foreign:
        qid, system = foreign[0][:2]
        msg = (
            f"the key {key_file.name} names question {qid!r}, set {system!r}, which "
            f"is not an answer of this run ({len(foreign)} such scores): the sheet "
            f"was drawn from another run dir; import it into that one (key "
            f"written for {key.sheet})"
        )
        raise InputError(msg, path=str(root))
