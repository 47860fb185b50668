"""The corpus and question sections of a run config (and a planned sample)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from cube_ray.errors import ConfigError
from cube_ray.pydantic_base import StrictModel

__all__ = ["CorpusConfig", "FieldConfig", "QuestionsConfig", "SampleConfig"]


class FieldConfig(StrictModel):
    """One record field that goes into a document, with its display label."""

    name: str = Field(min_length=1)
    """Key of the field in the record (column name)."""
    label: str | None = None
    """Label written before the value (``label: value``); defaults to ``name``."""

    @property
    def display(self) -> str:
        """The label used in document text."""
        return self.label if self.label is not None else self.name


class CorpusConfig(StrictModel):
    """The corpus: a table of records, one document (= one chunk) per record."""

    path: str
    """File (``.jsonl``, ``.csv``, ``.parquet``) or folder of ``.txt`` files."""
    format: Literal["jsonl", "csv", "parquet", "txt-folder"] | None = None
    """File format; inferred from the path's suffix (or folder) when omitted."""
    id_field: str | None = None
    """Field holding the unique document id; when omitted, the id is a stable hash
    of the record."""
    title_field: str | None = None
    """Field used as the document title; defaults to the first configured field."""
    fields: list[FieldConfig] = Field(default_factory=list)
    """Fields that make up the document text, in order, one ``label: value`` line
    each. A YAML entry may be a bare field name, ``{name: X, label: Y}`` or a
    one-key mapping ``{X: Y}``. Empty means every field except the id field."""
    empty_markers: list[str] = Field(default_factory=lambda: ["无", "-", "null"])
    """Values that mean "empty" (after stripping); such fields are left out."""
    list_separator: str = "、"
    """Separator used to join list values (e.g. several service objects)."""
    limit: int | None = Field(default=None, ge=1)
    """Use only the first N records (demos, trials); ``--limit`` overrides it."""

    @field_validator("fields", mode="before")
    @classmethod
    def _normalise_fields(cls, value: Any) -> Any:
        if isinstance(value, dict):
            return [{"name": k, "label": v} for k, v in value.items()]
        if not isinstance(value, list):
            return value
        out: list[Any] = []
        for item in value:
            if isinstance(item, str):
                out.append({"name": item})
            elif isinstance(item, dict) and len(item) == 1 and "name" not in item:
                ((k, v),) = item.items()
                out.append({"name": k, "label": v})
            else:
                out.append(item)
        return out

    @model_validator(mode="after")
    def _unique_fields(self) -> CorpusConfig:
        names = [f.name for f in self.fields]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            msg = f"corpus.fields lists {dupes} more than once; list each field once"
            raise ValueError(msg)
        return self

    @property
    def resolved_format(self) -> str:
        """The configured format, else the one the path suggests."""
        if self.format is not None:
            return self.format
        p = Path(self.path)
        suffix = p.suffix.lower()
        if suffix in (".jsonl", ".ndjson", ".json"):
            return "jsonl"
        if suffix in (".csv", ".tsv"):
            return "csv"
        if suffix in (".parquet", ".pq"):
            return "parquet"
        if p.is_dir():
            return "txt-folder"
        msg = (
            f"corpus.path {self.path!r}: cannot infer the format from its suffix; "
            "set corpus.format to one of jsonl, csv, parquet, txt-folder"
        )
        raise ConfigError(msg)


class QuestionsConfig(StrictModel):
    """Where the question set comes from."""

    source: Literal["generate", "file"] = "generate"
    """``generate``: the generator writes one question per document; ``file``: a
    question file you bring (JSONL, CSV or Parquet)."""
    path: str | None = None
    """The question file (``source: file``)."""
    question_id_field: str | None = "question_id"
    """Column with the question id; None derives ids from a hash of the question."""
    question_field: str = "question"
    """Column with the question text."""
    doc_id_field: str = "doc_id"
    """Column with the gold document id."""
    reference_answer_field: str | None = None
    """Optional column with a reference answer (kept, not scored)."""

    @model_validator(mode="after")
    def _path_for_file(self) -> QuestionsConfig:
        if self.source == "file" and not self.path:
            msg = "questions.source is 'file' but questions.path is not set; set it"
            raise ValueError(msg)
        if self.source == "generate" and self.path:
            msg = (
                f"questions.path is {self.path!r} but questions.source is "
                "'generate'; set source: file to use the file, or remove path"
            )
            raise ValueError(msg)
        return self


class SampleConfig(StrictModel):
    """A planned sample of the corpus (CUBE_METHOD.md section 11).

    Every record still becomes a document and the built-in RAG indexes all of
    them; only the sampled documents get a question (with ``questions.source:
    file``, the sample is drawn from the questions' gold documents). Samples
    are nested: raising ``size`` on a run dir adds only the new documents'
    work; lowering it needs ``cube-ray run --shrink``.
    """

    size: int = Field(ge=1)
    """Documents in the sample (all of them when the population is smaller)."""
    strata: list[str] = Field(default_factory=list)
    """Corpus fields whose distinct value tuples are the strata (a missing or
    empty value is a stratum of its own, ``(missing)``); each stratum gets its
    proportional share. Empty: one stratum."""
    seed: int = 0
    """Seed of the sample order; a run dir keeps its seed (changing it draws
    another sample, which needs ``--shrink``)."""

    @field_validator("strata")
    @classmethod
    def _unique_strata(cls, value: list[str]) -> list[str]:
        dupes = sorted({f for f in value if value.count(f) > 1})
        if dupes or any(not f for f in value):
            msg = f"sample.strata is {value}; list each corpus field once, non-empty"
            raise ValueError(msg)
        return value
