"""The human audit of CUBE_METHOD.md section 13: draw, worksheet, import.

``cube-ray audit RUN_DIR --size m`` draws m questions (nested, within the run's
strata) and writes a worksheet a person fills in a spreadsheet (CSV, and the
same as ``.xlsx`` when ``openpyxl`` is installed), its key (which question and
set each row is) and the rubrics; ``--import FILLED`` (either format) checks
every cell and writes the human file ``cube-ray report --human`` reads.
"""

from cube_ray.audit._draw import (
    audit_order,
    column_letter,
    parse_score,
    row_id,
    rubric_short,
    score_header,
    score_text,
    shuffled_sets,
)
from cube_ray.audit._import import HUMAN_FILE, Imported, find_key, import_sheet
from cube_ray.audit._key import AuditKey, KeyDimension, KeyRow
from cube_ray.audit._worksheet import (
    AUDIT_DIR,
    ROW,
    TEXT_COLUMNS,
    Worksheet,
    sheet_paths,
    write_worksheet,
)

__all__ = [
    "AUDIT_DIR",
    "HUMAN_FILE",
    "ROW",
    "TEXT_COLUMNS",
    "AuditKey",
    "Imported",
    "KeyDimension",
    "KeyRow",
    "Worksheet",
    "audit_order",
    "column_letter",
    "find_key",
    "import_sheet",
    "parse_score",
    "row_id",
    "rubric_short",
    "score_header",
    "score_text",
    "sheet_paths",
    "shuffled_sets",
    "write_worksheet",
]
