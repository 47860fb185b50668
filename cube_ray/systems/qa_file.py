"""A system whose answers were collected elsewhere (a QA file)."""

from __future__ import annotations

from collections.abc import Sequence

from cube_ray.errors import InputError
from cube_ray.systems._tables import as_text, parse_doc_ids, read_rows, require_columns
from cube_ray.systems.base import QuestionIn, SystemAnswer
from cube_ray.systems.config import QaFileSystemConfig

__all__ = ["STATUS_MISSING", "STATUS_NO_ANSWER", "QaFileSystem"]

STATUS_MISSING = "missing_in_qa_file"
"""Status of a question that has no row in the QA file."""
STATUS_NO_ANSWER = "empty_answer_in_qa_file"
"""Status of a question whose row has an empty answer."""


class QaFileSystem:
    """Answers and ranked retrieved doc ids read from a Parquet/CSV/JSONL file.

    Rows are matched to questions by question id (``question_id_field``) or, when
    ``question_field`` is set, by the question text (surrounding whitespace
    ignored). The whole file is validated in ``__init__`` (once per actor), so a
    bad file fails before any engine is called.

    Args:
        config: The system's configuration.
    """

    def __init__(self, config: QaFileSystemConfig) -> None:
        self.name = config.name
        self.k = config.k
        self._by_text = config.question_field is not None
        key_field = config.question_field or config.question_id_field
        path = config.path
        what = "QA file"
        columns, rows = read_rows(path, what=what)
        require_columns(
            columns,
            [key_field, config.answer_field, config.retrieved_field],
            path=path,
            what=what,
        )
        self._rows: dict[str, tuple[str | None, list[str]]] = {}
        first_row: dict[str, int] = {}
        for i, row in enumerate(rows):
            key = as_text(row.get(key_field), path=path, row=i, field=key_field)
            if not key:
                msg = (
                    f"{key_field} is empty; every row needs the question "
                    f"{'text' if self._by_text else 'id'} it answers"
                )
                raise InputError(msg, path=path, row=i, field=key_field)
            if key in first_row:
                msg = (
                    f"{key_field} {key[:80]!r} repeats row {first_row[key]}; keep "
                    "one row per question"
                )
                raise InputError(msg, path=path, row=i, field=key_field)
            first_row[key] = i
            answer_value = row.get(config.answer_field)
            if answer_value is not None and not isinstance(answer_value, str):
                msg = (
                    f"answer has type {type(answer_value).__name__}; expected text "
                    "or null"
                )
                raise InputError(msg, path=path, row=i, field=config.answer_field)
            retrieved = parse_doc_ids(
                row.get(config.retrieved_field),
                path=path,
                row=i,
                field=config.retrieved_field,
            )
            self._rows[key] = (answer_value, retrieved)

    def answer(self, questions: Sequence[QuestionIn]) -> list[SystemAnswer]:
        """Look each question up.

        A question without a row gets status :data:`STATUS_MISSING`, no answer.
        """
        out = []
        for q in questions:
            key = q.question.strip() if self._by_text else q.question_id
            found = self._rows.get(key)
            if found is None:
                out.append(SystemAnswer(None, status=STATUS_MISSING))
                continue
            answer, retrieved = found
            if answer is None or not answer.strip():
                out.append(SystemAnswer(None, list(retrieved), status=STATUS_NO_ANSWER))
            else:
                out.append(SystemAnswer(answer, list(retrieved)))
        return out

    def close(self) -> None:
        """Nothing to release."""
