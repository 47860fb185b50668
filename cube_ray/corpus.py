"""Records -> one-chunk documents (CUBE_METHOD.md section 1).

Each record becomes exactly one document: one ``label: value`` line per
non-empty configured field, in configured order. The corpus is read as a stream
of batches, so a two-million-record corpus never sits in memory; the only state
kept across batches is one 64-bit hash per document id (16 MB for 2M ids) to
find duplicate ids.

Every problem is an :class:`~cube_ray.errors.InputError` naming the file, the
record's :class:`~cube_ray.errors.Place` (the 1-based line of a JSON Lines or
CSV record, the header being line 1; the 1-based row of a Parquet file or JSON
array) and the field.
"""

from __future__ import annotations

import csv
import difflib
import hashlib
import itertools
import json
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from cube_ray import schema
from cube_ray.config import CorpusConfig, FieldConfig
from cube_ray.errors import InputError, Place
from cube_ray.language import detect_language

if TYPE_CHECKING:
    from cube_ray.config import RunConfig

__all__ = [
    "Document",
    "content_hash",
    "csv_place",
    "csv_record_lines",
    "csv_records",
    "iter_document_batches",
    "iter_records",
    "record_to_document",
    "stable_hash",
    "with_prompt_language",
]


@dataclass(frozen=True, slots=True)
class Document:
    """One document (= one chunk)."""

    doc_id: str
    title: str | None
    text: str
    content_hash: str


def stable_hash(*parts: str, size: int = 16) -> str:
    """Hex digest of the parts (NUL-separated), stable across processes.

    >>> stable_hash("a", "b") == stable_hash("a", "b") != stable_hash("ab")
    True
    """
    h = hashlib.blake2b(digest_size=size)
    for part in parts:
        h.update(part.encode("utf-8", "surrogatepass"))
        h.update(b"\x00")
    return h.hexdigest()


def content_hash(doc_id: str, title: str | None, text: str) -> str:
    """The content hash of a document: changes iff its id, title or text change."""
    return stable_hash(doc_id, title or "", text)


def _value_text(value: Any, cfg: CorpusConfig) -> str | None:
    """A field value as text, or None when it is empty."""
    if value is None:
        return None
    if isinstance(value, list | tuple):
        items = [t for t in (_value_text(v, cfg) for v in value) if t]
        return cfg.list_separator.join(items) if items else None
    if isinstance(value, dict):
        text = json.dumps(value, ensure_ascii=False, sort_keys=True)
    elif isinstance(value, float) and value != value:  # NaN from CSV/Parquet
        return None
    else:
        text = str(value)
    text = text.strip()
    if not text or text in cfg.empty_markers:
        return None
    return text


def record_to_document(
    record: dict[str, Any], cfg: CorpusConfig, *, path: str, row: int | Place
) -> Document:
    """Turn one record into a document.

    >>> from cube_ray.config import CorpusConfig
    >>> cfg = CorpusConfig(path="x.jsonl", id_field="id",
    ...                    fields=[{"name": "name", "label": "事项"}, "fee"])
    >>> doc = record_to_document({"id": 7, "name": "开办", "fee": "无"}, cfg,
    ...                          path="x.jsonl", row=0)
    >>> (doc.doc_id, doc.title, doc.text)
    ('7', '开办', '事项: 开办')

    Raises:
        InputError: Missing or empty id, or no non-empty configured field.
    """
    fields = cfg.fields
    if not fields:
        fields = [FieldConfig(name=k) for k in record if k != cfg.id_field]
    lines = []
    first_value: str | None = None
    for f in fields:
        value = _value_text(record.get(f.name), cfg)
        if value is None:
            continue
        if first_value is None:
            first_value = value
        lines.append(f"{f.display}: {value}")
    if cfg.id_field is not None:
        if cfg.id_field not in record:
            msg = (
                f"the id field is missing (record keys: {sorted(record)[:12]}); "
                "set corpus.id_field to a field every record has, or omit it to "
                "hash records"
            )
            raise InputError(msg, path=path, row=row, field=cfg.id_field)
        raw_id = record[cfg.id_field]
        doc_id = "" if raw_id is None else str(raw_id).strip()
        if not doc_id:
            msg = "the id field is empty; every record needs a unique id"
            raise InputError(msg, path=path, row=row, field=cfg.id_field)
    else:
        canon = json.dumps(record, ensure_ascii=False, sort_keys=True, default=str)
        doc_id = stable_hash(canon)
    if not lines:
        names = [f.name for f in fields]
        msg = (
            f"empty document: none of the configured fields {names} has a value "
            f"(empty markers: {cfg.empty_markers}); fix the record or the field list"
        )
        raise InputError(msg, path=path, row=row, field=None)
    title: str | None = first_value
    if cfg.title_field is not None:
        title = _value_text(record.get(cfg.title_field), cfg)
    text = "\n".join(lines)
    return Document(doc_id, title, text, content_hash(doc_id, title, text))


def _decoded_lines(path: Path) -> Iterator[tuple[int, str]]:
    with path.open("rb") as fh:
        for i, raw in enumerate(fh):
            try:
                line = raw.decode("utf-8-sig" if i == 0 else "utf-8")
            except UnicodeDecodeError as exc:
                msg = (
                    f"not valid UTF-8 ({exc.reason} at byte {exc.start} of the "
                    "line); convert the file to UTF-8, e.g. iconv -f GB18030 -t UTF-8"
                )
                raise InputError(msg, path=str(path), line=i + 1) from None
            yield i, line


def csv_records(
    lines: Iterable[str], *, delimiter: str
) -> Iterator[tuple[Place, dict[str, Any]]]:
    r"""CSV records as ``csv.DictReader`` makes them, each with its start line.

    The header is line 1; blank lines are skipped, and a quoted cell spanning
    lines moves the next record down, so the line is the one an editor shows.

    >>> lines = ["id,t\n", "\n", '1,"a\n', 'b"\n', "2\n"]
    >>> [(str(p), r) for p, r in csv_records(lines, delimiter=",")]
    [('line 3', {'id': '1', 't': 'a\nb'}), ('line 5', {'id': '2', 't': None})]
    """
    reader = csv.reader(lines, delimiter=delimiter)
    header: list[str] | None = None
    end = 0  # the line the previous record (or blank line) ended on
    i = 0
    for values in reader:
        start, end = end + 1, reader.line_num
        if not values:
            continue
        if header is None:
            header = values
            continue
        # As DictReader: missing cells are None, extra ones a list under None.
        rec: dict[Any, Any] = dict(zip(header, values, strict=False))
        if len(values) > len(header):
            rec[None] = values[len(header) :]
        for name in header[len(values) :]:
            rec[name] = None
        yield Place(i, line=start), rec
        i += 1


def csv_place(path: str | Path, row: int, *, delimiter: str = ",") -> Place:
    """The place (start line) of a CSV file's 0-based data row ``row``."""
    lines = csv_record_lines(Path(path), delimiter=delimiter)
    return Place(row, line=next(itertools.islice(lines, row, None), None))


def csv_record_lines(path: Path, *, delimiter: str) -> Iterator[int | None]:
    """The 1-based line on which each data record of a CSV file starts."""
    with path.open(encoding="utf-8-sig", newline="") as fh:
        for place, _ in csv_records(fh, delimiter=delimiter):
            yield place.line


def _is_json_array(path: Path) -> bool:
    """Whether a ``.json``/``.jsonl`` file holds one JSON array, not JSON Lines."""
    with path.open("rb") as fh:
        head = fh.read(4096).lstrip(b"\xef\xbb\xbf \t\r\n")
    return head.startswith(b"[")


def _json_array_records(path: Path) -> Iterator[tuple[Place, dict[str, Any]]]:
    """The records of a file holding one JSON array of objects.

    The whole file is parsed at once (such files are not streamed); a corpus
    too large for that belongs in JSON Lines or Parquet.
    """
    try:
        data = json.loads(path.read_bytes().decode("utf-8-sig"))
    except UnicodeDecodeError as exc:
        msg = (
            f"not valid UTF-8 ({exc.reason} at byte {exc.start}); convert the "
            "file to UTF-8, e.g. iconv -f GB18030 -t UTF-8"
        )
        raise InputError(msg, path=str(path)) from None
    except json.JSONDecodeError as exc:
        msg = (
            f"the file starts a JSON array but is not valid JSON ({exc.msg} at "
            f"column {exc.colno}); fix this line, or write one object per line "
            "(JSON Lines)"
        )
        raise InputError(msg, path=str(path), line=exc.lineno) from None
    if not isinstance(data, list):
        msg = "expected a JSON array of objects or JSON Lines"
        raise InputError(msg, path=str(path))
    for i, record in enumerate(data):
        if not isinstance(record, dict):
            msg = (
                f"item {i + 1} of the JSON array is a {type(record).__name__}; "
                "expected an object per record"
            )
            raise InputError(msg, path=str(path), row=i)
        yield Place(i), record


def iter_records(cfg: CorpusConfig) -> Iterator[tuple[Place, dict[str, Any]]]:
    """Stream ``(place, record)`` pairs from the corpus file.

    Raises:
        InputError: Unreadable file, invalid JSON or UTF-8, wrong shape.
    """
    path = Path(cfg.path)
    fmt = cfg.resolved_format
    if not path.exists():
        msg = "the corpus path does not exist; fix corpus.path"
        raise InputError(msg, path=str(path))
    if fmt == "jsonl" and _is_json_array(path):
        yield from _json_array_records(path)
    elif fmt == "jsonl":
        for i, line in _decoded_lines(path):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as exc:
                msg = (
                    f"not valid JSON ({exc.msg} at column {exc.colno}); a JSON "
                    "Lines file holds one JSON object per line: fix this line"
                )
                raise InputError(msg, path=str(path), line=i + 1) from None
            if not isinstance(record, dict):
                msg = (
                    f"expected a JSON object per line, got {type(record).__name__}; "
                    "write one object ({...}) per line"
                )
                raise InputError(msg, path=str(path), line=i + 1)
            yield Place(i, line=i + 1), record
    elif fmt == "csv":
        delimiter = "\t" if path.suffix.lower() == ".tsv" else ","
        lines = (line for _, line in _decoded_lines(path))
        yield from csv_records(lines, delimiter=delimiter)
    elif fmt == "parquet":
        try:
            pf = pq.ParquetFile(path)
        except (OSError, pa.ArrowException) as exc:
            msg = f"not a readable Parquet file ({exc})"
            raise InputError(msg, path=str(path)) from None
        row = 0
        for batch in pf.iter_batches(batch_size=4096):
            for rec in batch.to_pylist():
                yield Place(row), rec
                row += 1
    elif fmt == "txt-folder":
        if not path.is_dir():
            msg = "corpus.format is txt-folder but the path is not a folder"
            raise InputError(msg, path=str(path))
        for i, file in enumerate(sorted(path.rglob("*.txt"))):
            try:
                text = file.read_bytes().decode("utf-8-sig")
            except UnicodeDecodeError as exc:
                msg = f"not valid UTF-8 ({exc.reason} at byte {exc.start})"
                raise InputError(msg, path=str(file)) from None
            yield (
                Place(i),
                {
                    "doc_id": file.relative_to(path).with_suffix("").as_posix(),
                    "title": file.stem,
                    "text": text,
                },
            )
    else:  # pragma: no cover - guarded by the config Literal
        msg = f"unknown corpus format {fmt!r}"
        raise InputError(msg, path=str(path))


def _id_hash(doc_id: str) -> int:
    return int.from_bytes(
        hashlib.blake2b(
            doc_id.encode("utf-8", "surrogatepass"), digest_size=8
        ).digest(),
        "little",
    )


def _documents_of(
    records: Iterable[tuple[Place, dict[str, Any]]], cfg: CorpusConfig
) -> Iterator[tuple[Place, Document, dict[str, Any]]]:
    path = cfg.path
    if cfg.resolved_format == "txt-folder":
        for row, rec in records:
            text = rec["text"].strip()
            if not text:
                msg = "empty document: the file holds no text"
                raise InputError(msg, path=f"{path}/{rec['doc_id']}.txt")
            yield (
                row,
                Document(
                    rec["doc_id"],
                    rec["title"],
                    text,
                    content_hash(rec["doc_id"], rec["title"], text),
                ),
                rec,
            )
        return
    for row, rec in records:
        yield row, record_to_document(rec, cfg, path=path, row=row), rec


def iter_document_batches(
    cfg: CorpusConfig,
    *,
    batch_rows: int = 2048,
    limit: int | None = None,
    keep_fields: Sequence[str] = (),
) -> Iterator[pa.Table]:
    """Stream the corpus as Arrow tables with the documents schema.

    ``keep_fields``: record fields added as string columns ``field:<name>``
    after the documents' columns (the value as document text would show it;
    null when missing or empty), e.g. the strata of a sample.

    Duplicate ids are detected after the last batch (hash sort), so a caller
    that writes batches must write them to a staging place and publish them
    only when the iterator finishes without error.

    Raises:
        InputError: Any bad record, including a duplicate document id.
    """
    hashes: list[np.ndarray[Any, np.dtype[np.uint64]]] = []
    buf: list[Document] = []
    kept: list[list[str | None]] = []
    n = 0
    columns = _ColumnCheck(cfg)
    for _, doc, rec in _documents_of(columns.watch(iter_records(cfg)), cfg):
        if limit is not None and n >= limit:
            break
        buf.append(doc)
        if keep_fields:
            kept.append([_value_text(rec.get(f), cfg) for f in keep_fields])
        n += 1
        if len(buf) >= batch_rows:
            hashes.append(np.fromiter((_id_hash(d.doc_id) for d in buf), np.uint64))
            yield _with_kept(_to_table(buf), keep_fields, kept)
            buf, kept = [], []
    if buf:
        hashes.append(np.fromiter((_id_hash(d.doc_id) for d in buf), np.uint64))
        yield _with_kept(_to_table(buf), keep_fields, kept)
    if n == 0:
        msg = "the corpus holds no records; check corpus.path and corpus.format"
        raise InputError(msg, path=cfg.path)
    columns.check()
    all_hashes = np.sort(np.concatenate(hashes)) if hashes else np.array([])
    if all_hashes.size > 1 and bool((all_hashes[1:] == all_hashes[:-1]).any()):
        _raise_duplicate(cfg, limit)


class _ColumnCheck:
    """The configured fields and title field exist in the corpus.

    A mistyped name would otherwise be read as an empty field in every record,
    and documents would silently lose it. A name counts as present once any
    record read has it (JSON Lines records need not share their keys).
    """

    def __init__(self, cfg: CorpusConfig) -> None:
        self.cfg = cfg
        names = [("corpus.fields", f.name) for f in cfg.fields]
        if cfg.title_field is not None:
            names.append(("corpus.title_field", cfg.title_field))
        self.missing = [] if cfg.resolved_format == "txt-folder" else names
        self.seen: dict[str, None] = {}

    def watch(
        self, records: Iterable[tuple[Place, dict[str, Any]]]
    ) -> Iterator[tuple[Place, dict[str, Any]]]:
        """Pass records through, noting their keys while a name is unseen."""
        for row, record in records:
            if self.missing:
                self.seen.update(dict.fromkeys(record))
                self.missing = [(w, n) for w, n in self.missing if n not in record]
            yield row, record

    def check(self) -> None:
        """Raise for the first configured name no record read has.

        Raises:
            InputError: Naming the config key, the columns found and the fix.
        """
        if not self.missing:
            return
        where, name = self.missing[0]
        columns = list(self.seen)
        close = difflib.get_close_matches(name, columns, n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        msg = (
            f"{where} names {name!r}, but no record has that column{hint}; the "
            f"corpus' columns are {columns[:30]}; fix the name in {where}"
        )
        raise InputError(msg, path=self.cfg.path, field=name)


def _raise_duplicate(cfg: CorpusConfig, limit: int | None) -> None:
    """Second pass, only when a hash collided: name the rows of a duplicate id."""
    seen: dict[str, Place] = {}
    for i, (row, doc, _) in enumerate(_documents_of(iter_records(cfg), cfg)):
        if limit is not None and i >= limit:
            break
        if doc.doc_id in seen:
            how = (
                f"field {cfg.id_field!r}"
                if cfg.id_field
                else "the record hash (the record is an exact duplicate)"
            )
            msg = (
                f"duplicate document id {doc.doc_id!r} (first at "
                f"{seen[doc.doc_id]}, by {how}); ids must be unique: dedupe the "
                "corpus or choose another corpus.id_field"
            )
            raise InputError(msg, path=cfg.path, row=row, field=cfg.id_field)
        seen[doc.doc_id] = row


def _with_kept(
    table: pa.Table, fields: Sequence[str], kept: list[list[str | None]]
) -> pa.Table:
    for i, name in enumerate(fields):
        values = pa.array([row[i] for row in kept], pa.string())
        table = table.append_column(f"field:{name}", values)
    return table


def _to_table(docs: list[Document]) -> pa.Table:
    return pa.table(
        {
            schema.DOC_ID: [d.doc_id for d in docs],
            schema.TITLE: [d.title for d in docs],
            schema.TEXT: [d.text for d in docs],
            schema.CONTENT_HASH: [d.content_hash for d in docs],
        },
        schema=schema.DOCUMENTS_SCHEMA,
    )


LANGUAGE_SAMPLE = 200
"""Documents read to decide ``prompts.language: auto``."""


def with_prompt_language(config: RunConfig, *, limit: int | None = None) -> RunConfig:
    """``config`` with ``prompts.language: auto`` decided from its corpus.

    Reads at most the first 200 documents (of the first ``limit``). A config
    whose language is already set comes back with its packaged template
    names in that language's set.
    """
    language = config.prompts.language
    if language == "auto":
        n = min(limit or LANGUAGE_SAMPLE, LANGUAGE_SAMPLE)
        batch = next(iter_document_batches(config.corpus, batch_rows=n, limit=n), None)
        texts = [] if batch is None else batch.column(schema.TEXT).to_pylist()
        language = detect_language(t or "" for t in texts)
    prompts = config.prompts.for_language(language)
    return config.model_copy(update={"prompts": prompts})
