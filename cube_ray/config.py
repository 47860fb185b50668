"""The run configuration: pydantic models of ``conf/*.yaml``, ``RunConfig.from_yaml``.

A run config names the corpus and how to turn its records into documents, where
the questions come from, the generator engine, the jury of judges, the scoring
dimensions, the systems under test, the aggregation options, the Ray options and
the output directory. Every model is strict (unknown keys are errors) and every
field has a docstring, which ``docs/pipeline.md`` mirrors.

Relative paths in a config file are resolved against the directory of that file,
so a config works the same from any working directory (and under
``ray job submit --working-dir .``).

Size: about 1,000 lines, one module on purpose: it is the one place the run
config is declared (the style rule "typed, strict configs declared once"),
and most of it is field docstrings that ``docs/pipeline.md`` mirrors. The
engine and system configs live in their own packages; the cross-field
problems (``_*_problems``) sit beside the models they check.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlsplit

import yaml
from pydantic import Field, ValidationError, field_validator, model_validator

from cube_ray._pydantic import StrictModel
from cube_ray.aggregate._options import AggregateOptions, BoundsOptions
from cube_ray.credentials import is_credential_key, mask
from cube_ray.engines.config import (
    ACCOUNTING_FIELDS,
    CODE_LOADING_ENV,
    TRANSPORT_FIELDS,
    EngineConfig,
    FakeEngineConfig,
    JudgeConfig,
    OpenAIHttpEngineConfig,
    ReferenceJudgeConfig,
    VllmEngineConfig,
    code_loading_kwargs,
)
from cube_ray.env import placeholders
from cube_ray.errors import ConfigError
from cube_ray.language import Language
from cube_ray.prompts import (
    DEFAULT_DIMENSIONS,
    check_template,
    default_rubric,
    packaged_name,
)
from cube_ray.qualification import KINDS, FaultKind
from cube_ray.systems.config import SystemConfig

__all__ = [
    "AggregateConfig",
    "CorpusConfig",
    "DimensionConfig",
    "EnvUse",
    "FieldConfig",
    "PromptsConfig",
    "QualificationConfig",
    "QuestionsConfig",
    "RayConfig",
    "RunConfig",
    "SampleConfig",
    "default_dimensions",
    "engine_fingerprint",
    "read_paths",
]


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


class DimensionConfig(StrictModel):
    """One scoring dimension."""

    name: str = Field(min_length=1, pattern=r"^[A-Za-z0-9_\-]+$")
    """Name in the scores table (letters, digits, ``_``, ``-``)."""
    rubric: str | None = None
    """Rubric text appended to the judge prompt."""
    rubric_file: str | None = None
    """File holding the rubric (instead of ``rubric``)."""
    weight: float | None = Field(default=None, ge=0)
    """Fixed weight; used when ``aggregate.weights`` is ``fixed``."""
    detects: list[FaultKind] | None = None
    """Fault kinds a judge must notice on this dimension (CUBE_METHOD.md section
    12); None: the default of the method for the four default dimensions
    (:data:`DEFAULT_DETECTS`), none for another dimension."""

    def expected_faults(self) -> list[str]:
        """The fault kinds this dimension must detect (``detects`` or the default).

        >>> DimensionConfig(name="relevance").expected_faults()
        ['number', 'entity', 'negation', 'unsupported']
        >>> DimensionConfig(name="quality", detects=["omission"]).expected_faults()
        ['omission']
        """
        if self.detects is not None:
            return list(self.detects)
        return list(DEFAULT_DETECTS.get(self.name, ()))

    @model_validator(mode="after")
    def _one_rubric(self) -> DimensionConfig:
        if self.rubric is not None and self.rubric_file is not None:
            msg = (
                f"dimension {self.name!r} sets both rubric and rubric_file "
                f"({self.rubric_file!r}); keep one"
            )
            raise ValueError(msg)
        return self

    def rubric_text(self, language: Language = "en") -> str:
        """The rubric: inline text, the file's text, or the packaged default.

        Args:
            language: Prompt set of the packaged default rubric.
        """
        if self.rubric is not None:
            return self.rubric.strip()
        if self.rubric_file is not None:
            try:
                return Path(self.rubric_file).read_text(encoding="utf-8").strip()
            except OSError as exc:
                msg = (
                    f"dimension {self.name!r}: cannot read rubric_file "
                    f"{self.rubric_file!r} ({exc}); fix the path"
                )
                raise ConfigError(msg) from exc
        if self.name in DEFAULT_DIMENSIONS:
            return default_rubric(self.name, language)
        msg = (
            f"dimension {self.name!r} has no rubric and is not one of the defaults "
            f"{list(DEFAULT_DIMENSIONS)}; set rubric or rubric_file"
        )
        raise ConfigError(msg)


DEFAULT_DETECTS: dict[str, tuple[str, ...]] = {
    "relevance": ("number", "entity", "negation", "unsupported"),
    "completeness": ("omission",),
    "specificity": ("omission",),
    "quality": (),
}
"""The fault kinds each default dimension must detect (CUBE_METHOD.md section 12)."""


class QualificationConfig(StrictModel):
    """Qualify each judge with controlled faults (CUBE_METHOD.md section 12).

    After the bounds, ``questions`` full-bound answers (the first questions in
    the seeded order of section 11) get one faulted copy per kind; every judge
    scores them with the run's prompts, and the summary says per judge, kind
    and dimension whether it noticed (``judges.<j>.qualification``).
    """

    questions: int = Field(default=50, ge=1)
    """How many full-bound answers are faulted (the first ``questions``
    questions in the order ``sha256(f"{seed}:{doc_id}")``)."""
    kinds: list[FaultKind] = Field(default_factory=lambda: list(KINDS), min_length=1)
    """The fault kinds to build: ``number``, ``entity``, ``negation``,
    ``omission``, ``unsupported``."""
    seed: int = 0
    """Seed of the question order and of every fault (deterministic from
    (seed, question_id, kind))."""
    min_drop: float = Field(default=0.5, ge=0.0, le=10.0)
    """Smallest mean drop ``score(original) - score(faulted)`` (points on the
    0-10 scale) for a fault to count as detected; with ``p < aggregate.alpha``
    (one-sided Wilcoxon signed-rank)."""

    @field_validator("kinds")
    @classmethod
    def _unique_kinds(cls, kinds: list[FaultKind]) -> list[FaultKind]:
        dupes = sorted({k for k in kinds if kinds.count(k) > 1})
        if dupes:
            msg = f"qualification.kinds lists {dupes} more than once; list each once"
            raise ValueError(msg)
        return kinds


def default_dimensions() -> list[DimensionConfig]:
    """The four default dimensions of CUBE_METHOD.md section 4."""
    return [DimensionConfig(name=name) for name in DEFAULT_DIMENSIONS]


class AggregateConfig(BoundsOptions):
    """Options of the aggregation (CUBE_METHOD.md sections 5-8 and 10).

    ``trim``, ``bounds_on`` and the validity guards (``min_gap``, ``alpha``,
    ``require_separation``) are declared once, in
    :class:`cube_ray.aggregate.BoundsOptions`; :meth:`options` turns this
    section into the aggregation's :class:`cube_ray.aggregate.AggregateOptions`.
    """

    k: int | dict[str, int] | None = None
    """Retrieval depth for rank scores; one number, per system, or None to use
    each system's own ``k``."""
    weights: Literal["pearson", "equal", "fixed"] | dict[str, Any] = "pearson"
    """``pearson`` (the method), ``equal``, ``fixed`` (the dimensions' ``weight``)
    or an explicit mapping dimension -> weight (optionally judge -> mapping)."""

    def options(
        self,
        *,
        system_k: dict[str, int],
        dimension_weights: dict[str, float | None],
    ) -> AggregateOptions:
        """The aggregation options of a run.

        Args:
            system_k: Each system's own retrieval depth (used when ``k`` is
                None; with no system, 8).
            dimension_weights: The dimensions' ``weight`` (used by ``fixed``).

        Returns:
            The options :func:`cube_ray.aggregate.summarize` takes.
        """
        k: int | dict[str, int] = (
            self.k if self.k is not None else (dict(system_k) if system_k else 8)
        )
        weights: Any = self.weights
        if weights == "fixed":
            weights = dict(dimension_weights)
        shared = BoundsOptions.model_fields
        return AggregateOptions(
            k=k,
            weights=weights,
            **{name: getattr(self, name) for name in shared},
        )


class RayConfig(StrictModel):
    """How the job reaches Ray and sizes its data blocks."""

    address: str | None = None
    """Cluster address (``auto``, ``ray://host:10001``); None starts a local Ray."""
    num_cpus: int | None = Field(default=4, ge=1)
    """Logical CPUs of a local Ray (ignored when connecting to a cluster)."""
    read_batch_size: int = Field(default=2048, ge=1)
    """Rows per block when the driver builds documents and questions."""
    join_partitions: int | None = Field(default=None, ge=1)
    """Partitions of the hash joins; None sizes them from the row count."""
    shuffle_batch_mb: int = Field(default=64, ge=1)
    """MiB of input a hash-join map task partitions at once (Ray Data's
    default is 1 GiB, which makes a join's memory grow with the table up to
    that size)."""
    task_num_cpus: float = Field(default=0.5, gt=0)
    """CPUs per light task (hashing, expanding rows, join aggregators)."""
    write_rows: int = Field(default=65536, ge=1)
    """Rows per Parquet part file of the tables the driver writes itself
    (documents, a question file). LLM stages write one part file per finished
    block of ``4 * pool.batch_size`` rows, from Ray tasks."""
    footer_readers: int = Field(default=2, ge=1)
    """Actors listing Parquet files per table read (Ray Data's default is 32,
    each a Python process of about 100 MB); raise it for remote storage with
    many files."""
    read_unit_mb: int = Field(default=32, ge=1)
    """Most MiB of Parquet row groups one read task loads (Ray Data's default
    is 128, which lets a read task's memory grow with the table)."""
    writer_tasks: int = Field(default=2, ge=1)
    """Most part-file writer tasks of an LLM stage running at once; each holds
    a Ray worker process (~200 MB), and one writes thousands of rows/s."""
    driver_resume_rows: int = Field(default=250_000, ge=0)
    """Up to this many already-written rows of a stage, resume bookkeeping
    (which rows are done, which are stale) runs on the driver with a broadcast
    set; above it, with Ray Data hash joins (no driver memory)."""
    driver_source_mb: int = Field(default=8, ge=0)
    """Up to this many MiB of Parquet files behind a stage's inputs (its
    source table, or the tables joined for it), the driver reads and joins
    them with Arrow and hands Ray Data the result; above it, Ray Data reads
    and hash-joins them in tasks (no driver memory). Small inputs (trials,
    the demo, waves of a few thousand rows) then skip the Parquet footer
    readers and join aggregators, actors that every Ray Data execution
    (every stage, every wave) starts anew. 0: always Ray Data."""
    stage_retries: int = Field(default=5, ge=0)
    """Times in a row a stage is retried after Ray loses a worker, actor or
    node without a row written in between (a retry that makes progress
    resets the count); a retry sends only the rows not yet written."""
    node_loss_wait_s: float = Field(default=45.0, ge=0)
    """Before a retry, wait up to this long for Ray to mark the lost node dead
    (its heartbeat timeout), so the retry is not scheduled on it again."""
    overlap: bool = False
    """Run each stage as soon as the stages it reads have finished, beside the
    others (systems beside the bounds, judges side by side); false runs the
    stages one after another. Off by default until it is measured on a
    cluster: on the idle 2-core development machine it cut a two-judge job
    by 42 % (372 -> 216 s; 194 s with ``waves: 4``; BENCHMARKS.md "Stage
    overlap")."""
    waves: int = Field(default=1, ge=1, le=99)
    """With ``overlap``: split the records into this many waves (by a hash of
    the question id, which is the document id for generated questions) and
    run every stage once per wave. A wave's bounds, systems and judges start
    as soon as that wave's own upstream stages are done, so judges score
    wave 1 while the generator writes wave 2 (block-level overlap); each
    stage runs its waves in order. Every wave is a Ray Data execution of its
    own (an anti-join, the stage, its writers: seconds), so keep a wave at
    thousands of rows or more on a cluster. 1: each stage runs once over all
    records."""
    progress: bool = True
    """Show a progress bar per stage."""
    resource_wait_s: float = Field(default=600.0, ge=0)
    """Before the first stage, wait up to this long for an autoscaler to add
    the nodes a pool needs when no current node can host it (but one of the
    autoscaler's node types can); then stop with exit code 3 and manifest
    status ``resource_timeout``. A demand that no node and no node type can
    meet fails at once (exit code 2)."""

    @model_validator(mode="after")
    def _waves_overlap(self) -> RayConfig:
        if self.waves > 1 and not self.overlap:
            msg = (
                f"ray.waves is {self.waves} but ray.overlap is false: waves only "
                "let stages start early when stages overlap; set ray.overlap: "
                "true, or ray.waves: 1"
            )
            raise ValueError(msg)
        return self


_PACKAGED = ("question", "answer", "judge")
"""Template kinds with a packaged default in every prompt set."""
_LANGUAGE_SAMPLE = 200
"""Documents read to decide ``prompts.language: auto``."""


class PromptsConfig(StrictModel):
    """Prompt templates: packaged names or paths to template files."""

    language: Literal["auto", "zh", "en"] = "auto"
    """Packaged prompt set (templates and default rubrics): ``zh`` (Chinese),
    ``en`` (English) or ``auto`` (Chinese when CJK characters make up at least
    a fifth of the Latin letters of the first 200 documents)."""
    question: str = "question"
    """Template asking the generator for a citizen question."""
    answer: str = "answer"
    """Answer template, shared by zero, full and the built-in RAG."""
    judge: str = "judge"
    """Judge template."""

    def for_language(self, language: Language) -> PromptsConfig:
        """This config with ``language`` set and packaged names in its set.

        >>> p = PromptsConfig(judge="my_judge.txt").for_language("zh")
        >>> p.language, p.question, p.judge
        ('zh', 'zh/question', 'my_judge.txt')
        """
        names = {
            kind: packaged_name(kind, language)
            for kind in _PACKAGED
            if getattr(self, kind) == kind
        }
        return self.model_copy(update={"language": language, **names})

    def check(self) -> None:
        """Load every template and check its placeholders (``$nonce`` included).

        Raises:
            ConfigError: Naming the template, what it lacks and the fix.
        """
        check_template(self.question, "question")
        check_template(self.answer, "answer")
        check_template(self.judge, "judge")


@dataclass(frozen=True)
class EnvUse:
    """One environment variable a run reads, and where its value goes."""

    name: str
    """The variable."""
    field: str
    """The config field that reads it, e.g. ``systems[rag].headers.Authorization``."""
    destination: str
    """Where the value is sent: ``host:port`` of a URL, or a local process."""


def _host(url: str | None) -> str:
    if not url:
        return "(no url)"
    try:
        netloc = urlsplit(url).netloc
    except ValueError:
        netloc = ""
    netloc = netloc.rpartition("@")[2]
    if not netloc:
        return f"(host from {url})" if "${" in url else "(no host)"
    return netloc


class RunConfig(StrictModel):
    """One CuBE run."""

    corpus: CorpusConfig
    """The corpus of documents."""
    questions: QuestionsConfig = Field(default_factory=QuestionsConfig)
    """The question set."""
    sample: SampleConfig | None = None
    """Evaluate a planned sample of the documents instead of all of them."""
    generator: EngineConfig
    """The engine that writes questions and the zero/full answers (and the
    built-in RAG's answers)."""
    judges: dict[str, JudgeConfig] = Field(min_length=1)
    """The jury: judge name -> engine (an LLM engine, or ``backend: reference``,
    the deterministic reference judge)."""
    dimensions: list[DimensionConfig] = Field(default_factory=default_dimensions)
    """Scoring dimensions; default the four of the method."""
    systems: list[SystemConfig] = Field(default_factory=list)
    """Systems under test (``rag`` or ``rag@<variant>``)."""
    aggregate: AggregateConfig = Field(default_factory=AggregateConfig)
    """Aggregation options."""
    qualification: QualificationConfig | None = None
    """Judge qualification with controlled faults (CUBE_METHOD.md section 12);
    off when absent."""
    ray: RayConfig = Field(default_factory=RayConfig)
    """Ray options."""
    prompts: PromptsConfig = Field(default_factory=PromptsConfig)
    """Prompt template overrides."""
    output_dir: str = "runs/default"
    """Run directory (``--out`` overrides it)."""
    allow_fake_engines: bool = False
    """Allow ``backend: fake`` engines (tests and benchmarks only)."""
    env_vars: list[str] = Field(default_factory=list)
    """Environment variables this config may read through ``${NAME}`` (HTTP
    systems' ``url`` and ``headers``, vLLM engines' ``env`` values), e.g.
    ``[RAGFLOW_API_KEY]``. A ``${NAME}`` of a variable not listed here (nor
    named by an ``api_key_env`` / ``embedding_api_key_env``) is refused, so a
    config written by someone else cannot send your other variables to its own
    host. ``cube-ray run --dry-run`` lists which variable goes where."""
    data_dirs: list[str] = Field(default_factory=list)
    """Folders, besides the config file's own folder, that the config may read
    files from (corpus, question file, QA files, rubric and prompt template
    files), e.g. ``[../examples/data]``; relative to the config file. A path
    outside these folders is refused at load (exit 2): the content of every file
    a config reads is sent to engines and systems, so a config written by
    someone else must not read, say, ``~/.aws/credentials``. ``cube-ray run
    --dry-run`` lists every file read and where its content goes."""
    allow_outside_paths: bool = False
    """Let the config read files anywhere (no ``data_dirs`` check); only for a
    config you wrote or trust."""
    allow_remote_code: bool = False
    """Allow code-loading switches of vLLM engines (``trust_remote_code``, the
    other ``engine_kwargs`` in ``CODE_LOADING_KWARGS``, any ``engine_kwargs``
    value that is a dotted import path, and ``env`` names in
    ``CODE_LOADING_ENV`` such as ``PYTHONPATH``, ``LD_PRELOAD``,
    ``VLLM_PLUGINS``), which run code that ships with a model or is named by
    the config."""

    @field_validator("env_vars")
    @classmethod
    def _env_var_names(cls, names: list[str]) -> list[str]:
        bad = [n for n in names if placeholders("${" + n + "}") != [n]]
        if bad:
            msg = (
                f"env_vars lists {bad}, which are not variable names; list bare "
                "names (letters, digits, _), e.g. [RAGFLOW_API_KEY], not ${...}"
            )
            raise ValueError(msg)
        return names

    @model_validator(mode="after")
    def _cross_checks(self) -> RunConfig:
        names = [s.name for s in self.systems]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            msg = f"systems: names {dupes} occur more than once; names must be unique"
            raise ValueError(msg)
        dims = [d.name for d in self.dimensions]
        dupes = sorted({n for n in dims if dims.count(n) > 1})
        if dupes:
            msg = f"dimensions: {dupes} occur more than once; names must be unique"
            raise ValueError(msg)
        if not self.dimensions:
            msg = "dimensions is empty; list at least one or omit it for the defaults"
            raise ValueError(msg)
        for judge in self.judges:
            if not judge or "/" in judge:
                msg = f"judge name {judge!r} must be non-empty and contain no '/'"
                raise ValueError(msg)
        for judge, engine in self.judges.items():
            if isinstance(engine, ReferenceJudgeConfig):
                unmeasured = [d for d in dims if d not in engine.measures]
                if unmeasured:
                    msg = (
                        f"judges.{judge} is a reference judge and has no measure "
                        f"for dimensions {unmeasured} (measures: "
                        f"{dict(engine.measures)}); map each to support or coverage "
                        f"under judges.{judge}.measures, or score those dimensions "
                        "with LLM judges only in another run"
                    )
                    raise ValueError(msg)
        if self.aggregate.weights == "fixed":
            missing = [d.name for d in self.dimensions if d.weight is None]
            if missing:
                msg = (
                    f"aggregate.weights is 'fixed' but dimensions {missing} have no "
                    "weight; give each dimension a weight"
                )
                raise ValueError(msg)
        if not self.allow_fake_engines:
            fakes = [
                n
                for n, e in [("generator", self.generator), *self.judges.items()]
                if isinstance(e, FakeEngineConfig)
            ]
            if fakes:
                msg = (
                    f"engines {fakes} use backend 'fake', a scripted test engine; "
                    "choose vllm, embedded or openai_http (or set "
                    "allow_fake_engines: true for tests and benchmarks)"
                )
                raise ValueError(msg)
        return self

    @model_validator(mode="after")
    def _checks_before_any_work(self) -> RunConfig:
        """Rules that span sections, found at load time instead of at the end.

        Each message names the fields (as dotted paths) and their values.
        """
        problems = [
            *_aggregate_k_problems(self),
            *_weights_problems(self),
            *_dimension_weight_problems(self),
            *_judge_problems(self),
            *_file_problems(self),
        ]
        if problems:
            raise ValueError(_CROSS_PREFIX + f"\n{_ITEM}".join(problems))
        return self

    @model_validator(mode="after")
    def _env_and_code(self) -> RunConfig:
        declared = set(self.env_vars)
        named = {u.name for u in self.env_uses() if u.field.endswith("_env")}
        undeclared = [
            u for u in self.env_uses() if u.name not in declared and u.name not in named
        ]
        if undeclared:
            u = undeclared[0]
            names = sorted({x.name for x in undeclared})
            msg = (
                f"{u.field} reads ${{{u.name}}} (sent to {u.destination}), but "
                f"{names} {'is' if len(names) == 1 else 'are'} not declared; a "
                "config may only read the environment variables it lists: add "
                f"env_vars: {names} at the top level if you mean to send "
                f"{'it' if len(names) == 1 else 'them'} there"
            )
            raise ValueError(msg)
        if not self.allow_remote_code:
            for role, engine in self.engines():
                if not isinstance(engine, VllmEngineConfig):
                    continue
                kwargs = code_loading_kwargs(engine.engine_kwargs)
                env = sorted(k for k in engine.env if k in CODE_LOADING_ENV)
                if kwargs or env:
                    what = [f"engine_kwargs.{k}" for k in kwargs]
                    what += [f"env.{k}" for k in env]
                    msg = (
                        f"{role} sets {what}, which load and run code from outside "
                        "cube_ray and vLLM (a model's own Python files, a class "
                        "named by path, a search path or preloaded library); if "
                        "you trust that code, set "
                        "allow_remote_code: true at the top level of the config"
                    )
                    raise ValueError(msg)
        return self

    def engines(self) -> list[tuple[str, EngineConfig | ReferenceJudgeConfig]]:
        """(``generator`` / ``judges.<name>``, engine config) of every engine."""
        return [("generator", self.generator)] + [
            (f"judges.{name}", engine) for name, engine in self.judges.items()
        ]

    def env_uses(self) -> list[EnvUse]:
        """Every environment variable the run reads, and where its value goes.

        ``${NAME}`` placeholders (HTTP systems' url and headers, vLLM engines'
        env values) and the variables named by ``api_key_env`` fields (their
        ``field`` ends in ``_env``).
        """
        uses: list[EnvUse] = []
        for system in self.systems:
            where = f"systems[{system.name}]"
            if system.kind == "http":
                host = _host(system.url)
                uses += [
                    EnvUse(n, f"{where}.url", host) for n in placeholders(system.url)
                ]
                for header, value in system.headers.items():
                    uses += [
                        EnvUse(n, f"{where}.headers.{header}", host)
                        for n in placeholders(value)
                    ]
            elif system.kind == "builtin_rag" and system.embedding_api_key_env:
                uses.append(
                    EnvUse(
                        system.embedding_api_key_env,
                        f"{where}.embedding_api_key_env",
                        _host(system.embedding_url),
                    )
                )
        for role, engine in self.engines():
            if isinstance(engine, OpenAIHttpEngineConfig) and engine.api_key_env:
                uses.append(
                    EnvUse(
                        engine.api_key_env,
                        f"{role}.api_key_env",
                        _host(engine.base_url),
                    )
                )
            if isinstance(engine, VllmEngineConfig):
                for key, value in engine.env.items():
                    uses += [
                        EnvUse(n, f"{role}.env.{key}", "the local vLLM engine process")
                        for n in placeholders(value)
                    ]
        return uses

    def manifest_config(self) -> dict[str, Any]:
        """The config as ``manifest.json`` stores it.

        As written (``${NAME}`` placeholders, never their values), with
        credential-looking values masked.
        """
        dumped: dict[str, Any] = mask(self.model_dump(mode="json"))
        return dumped

    def fingerprint(self) -> str:
        """A stable hash of the whole config (recorded in the manifest)."""
        text = json.dumps(self.model_dump(mode="json"), sort_keys=True)
        return hashlib.sha256(text.encode()).hexdigest()[:16]

    def rubrics(self) -> dict[str, str]:
        """Dimension name -> rubric text, in configured order.

        Packaged default rubrics come from the prompt set of
        ``prompts.language`` (English while it is still ``auto``; see
        :meth:`with_prompt_language`).
        """
        language = self.prompts.language
        lang: Language = "en" if language == "auto" else language
        return {d.name: d.rubric_text(lang) for d in self.dimensions}

    def with_prompt_language(self, *, limit: int | None = None) -> RunConfig:
        """This config with ``prompts.language: auto`` decided from the corpus.

        Reads at most the first 200 documents (of the first ``limit``). A config
        whose language is already set comes back with its packaged template
        names in that language's set.
        """
        language = self.prompts.language
        if language == "auto":
            from cube_ray import schema
            from cube_ray.corpus import iter_document_batches
            from cube_ray.language import detect_language

            n = min(limit or _LANGUAGE_SAMPLE, _LANGUAGE_SAMPLE)
            batch = next(
                iter_document_batches(self.corpus, batch_rows=n, limit=n), None
            )
            texts = [] if batch is None else batch.column(schema.TEXT).to_pylist()
            language = detect_language(t or "" for t in texts)
        return self.model_copy(update={"prompts": self.prompts.for_language(language)})

    @classmethod
    def from_yaml(cls, path: str | Path) -> RunConfig:
        """Load and validate a YAML config file.

        Relative paths (corpus, question file, QA files, rubric and template files,
        output dir) are resolved against the file's directory.

        Raises:
            ConfigError: The file is missing, is not valid YAML, or does not
                validate; the message names the file, the key and the fix.
        """
        p = Path(path)
        try:
            raw = p.read_bytes()
        except OSError as exc:
            msg = f"cannot read config file {str(p)!r}: {exc.strerror or exc}"
            raise ConfigError(msg) from exc
        try:
            text = raw.decode("utf-8-sig")
        except UnicodeDecodeError as exc:
            line = raw[: exc.start].count(b"\n") + 1
            msg = (
                f"config file {str(p)!r} is not UTF-8: byte 0x{raw[exc.start]:02x} "
                f"at line {line} is not valid UTF-8 (the file looks like Latin-1 "
                "or another legacy encoding); save it as UTF-8, e.g. iconv -f "
                f"latin1 -t utf-8 {p.name} > {p.stem}.utf8{p.suffix}"
            )
            raise ConfigError(msg) from None
        try:
            data = yaml.safe_load(text)
        except yaml.YAMLError as exc:
            where = ""
            mark = getattr(exc, "problem_mark", None)
            if mark is not None:
                where = f" at line {mark.line + 1}, column {mark.column + 1}"
            problem = getattr(exc, "problem", None) or str(exc)
            msg = (
                f"config file {str(p)!r} is not valid YAML{where}: {problem}; fix "
                "the syntax (indentation, quotes, colons)"
            )
            raise ConfigError(msg) from exc
        if not isinstance(data, dict):
            msg = (
                f"config file {str(p)!r} must hold a mapping of keys (corpus, "
                f"generator, judges, ...), got {type(data).__name__}"
            )
            raise ConfigError(msg)
        data = _resolve_paths(data, p.parent)
        outside = _outside_paths(data, p.parent)
        if outside:
            head = f"config file {str(p)!r} is invalid ({len(outside)} problem(s)):"
            raise ConfigError("\n".join([head, *(f"{_ITEM}{o}" for o in outside)]))
        return cls.from_dict(data, source=str(p))

    @classmethod
    def from_dict(cls, data: dict[str, Any], *, source: str = "<dict>") -> RunConfig:
        """Validate a config mapping; errors become :class:`ConfigError`."""
        try:
            return cls.model_validate(data)
        except ValidationError as exc:
            raise ConfigError(_format_validation(exc, source)) from None


_CROSS_PREFIX = "cross-field: "
"""Marks the message of ``RunConfig._checks_before_any_work`` (its items name
their own fields)."""
_ITEM = "  - "


def _aggregate_k_problems(config: RunConfig) -> list[str]:
    """``aggregate.k`` against the systems' retrieval depth.

    A system's gold ranks run 1..``k`` of that system, and rank scores are
    ``k + 2 - rank`` (CUBE_METHOD.md section 3), so the aggregation's ``k`` of
    a system must be that system's ``k``: a smaller one puts ranks outside
    0..k (the aggregation refuses them after every LLM stage), a larger one
    promises ranks retrieval never returns.
    """
    k = config.aggregate.k
    if k is None:
        return []
    systems = {s.name: s.k for s in config.systems}
    problems: list[str] = []
    if isinstance(k, dict):
        unknown = sorted(set(k) - set(systems))
        missing = [name for name in systems if name not in k]
        if unknown:
            problems.append(
                f"aggregate.k names systems {unknown}, which are not in systems "
                f"({sorted(systems)}); use the systems' names as keys"
            )
        if missing:
            problems.append(
                f"aggregate.k has no entry for systems {missing}; give every "
                "system a k, or omit aggregate.k to use each system's own k"
            )
        per_system = {name: v for name, v in k.items() if name in systems}
        where = {name: f"aggregate.k.{name}" for name in k}
    else:
        per_system = dict.fromkeys(systems, k)
        where = dict.fromkeys(systems, "aggregate.k")
        if k < 1:
            problems.append(f"aggregate.k is {k}; it must be >= 1")
            return problems
    for name, value in per_system.items():
        if value < 1:
            problems.append(f"{where[name]} is {value}; it must be >= 1")
        elif value != systems[name]:
            problems.append(
                f"{where[name]} is {value} but systems[{name}].k is "
                f"{systems[name]}: that system's gold ranks run 1..{systems[name]}, "
                f"and rank scores k + 2 - rank need k = {systems[name]}; set "
                f"{where[name]} to {systems[name]} or omit aggregate.k"
            )
    return problems


def _weights_problems(config: RunConfig) -> list[str]:
    """An explicit ``aggregate.weights`` mapping against judges and dimensions."""
    weights = config.aggregate.weights
    if isinstance(weights, str):
        return []
    dims = [d.name for d in config.dimensions]
    judges = list(config.judges)
    problems: list[str] = []

    def check_map(table: dict[str, Any], where: str) -> None:
        before = len(problems)
        total = 0.0
        for dim, w in table.items():
            if dim not in dims:
                problems.append(
                    f"{where}.{dim}: {dim!r} is not a dimension (dimensions: "
                    f"{dims}); use the dimensions' names as keys"
                )
            elif isinstance(w, bool) or not isinstance(w, int | float) or not w >= 0:
                problems.append(f"{where}.{dim} is {w!r}; a weight is a number >= 0")
            else:
                total += w
        if table and total <= 0 and len(problems) == before:
            problems.append(f"{where}: the weights sum to 0; give one a positive")

    nested = {k: v for k, v in weights.items() if isinstance(v, dict)}
    if nested:
        flat = sorted(set(weights) - set(nested))
        if flat:
            problems.append(
                f"aggregate.weights mixes per-judge maps ({sorted(nested)}) with "
                f"dimension weights ({flat}); give one {{dimension: weight}} map, "
                "or one such map per judge"
            )
        for judge, table in nested.items():
            if judge not in judges:
                problems.append(
                    f"aggregate.weights.{judge}: {judge!r} is not a judge (judges: "
                    f"{judges}); use the judges' names as keys"
                )
            else:
                check_map(table, f"aggregate.weights.{judge}")
        missing = [j for j in judges if j not in nested]
        if missing and not flat:
            problems.append(
                f"aggregate.weights is given per judge but not for judges "
                f"{missing}; give every judge a map, or one map for all judges"
            )
    else:
        check_map(weights, "aggregate.weights")
    return problems


def _dimension_weight_problems(config: RunConfig) -> list[str]:
    """A dimension ``weight`` is read only by ``aggregate.weights: fixed``."""
    weights = config.aggregate.weights
    if weights == "fixed":
        return []
    shown = repr(weights) if isinstance(weights, str) else "a mapping"
    return [
        f"dimensions[{i}].weight is {d.weight} but aggregate.weights is {shown}, "
        "which ignores it (a dimension's weight is used only with "
        "aggregate.weights: fixed); set aggregate.weights: fixed (and give every "
        "dimension a weight), or remove the weight"
        for i, d in enumerate(config.dimensions)
        if d.weight is not None
    ]


def _judge_problems(config: RunConfig) -> list[str]:
    """Judge settings that only fail inside an actor, after the other stages."""
    problems: list[str] = []
    for name, engine in config.judges.items():
        if (
            isinstance(engine, OpenAIHttpEngineConfig)
            and engine.score_mode == "expected"
            and not engine.logprobs
        ):
            problems.append(
                f"judges.{name}.score_mode is 'expected' but judges.{name}.logprobs "
                "is false: expected scores are read from the top logprobs; set "
                f"judges.{name}.logprobs: true (if the endpoint returns them) or "
                "score_mode: argmax"
            )
    return problems


def _file_problems(config: RunConfig) -> list[str]:
    """Prompt templates and rubrics exist, and templates use their placeholders."""
    problems: list[str] = []
    prompts = config.prompts
    for kind, name in (
        ("question", prompts.question),
        ("answer", prompts.answer),
        ("judge", prompts.judge),
    ):
        try:
            check_template(name, kind)
        except ConfigError as exc:
            problems.append(f"prompts.{kind}: {exc}")
    for i, dim in enumerate(config.dimensions):
        try:
            dim.rubric_text()
        except ConfigError as exc:
            field = "rubric_file" if dim.rubric_file is not None else "rubric"
            problems.append(f"dimensions[{i}].{field}: {exc}")
    return problems


def _format_validation(exc: ValidationError, source: str) -> str:
    lines: list[str] = []
    for err in exc.errors():
        loc = ".".join(str(p) for p in err["loc"]) or "(top level)"
        kind = err["type"]
        message = err["msg"]
        if kind == "value_error" and _CROSS_PREFIX in message:
            # Cross-field items name their own fields; the input is the whole file.
            items = message.split(_CROSS_PREFIX, 1)[1].split(f"\n{_ITEM}")
            lines.extend(f"{_ITEM}{item}" for item in items)
            continue
        if kind == "value_error" and not err["loc"]:
            lines.append(f"{_ITEM}{message.removeprefix('Value error, ')}")
            continue
        if kind == "extra_forbidden":
            fix = "remove it or check its spelling"
        elif kind == "missing":
            fix = "add this key"
        elif kind == "union_tag_invalid":
            ctx = err.get("ctx") or {}
            fix = f"use one of {ctx.get('expected_tags', 'the documented values')}"
        elif kind == "union_tag_not_found":
            fix = "add the discriminating key (backend for engines, kind for systems)"
        elif kind in ("value_error", "assertion_error"):
            fix = ""  # cube_ray's own messages name the value and the fix
        elif any(is_credential_key(str(p)) for p in err["loc"]):
            fix = "got a value that is not shown: it may be a credential"
        else:
            fix = f"got {mask(err.get('input'))!r}"
        lines.append(f"{_ITEM}{loc}: {message}" + (f" ({fix})" if fix else ""))
    head = f"config file {source!r} is invalid ({len(lines)} problem(s)):"
    return "\n".join([head, *lines])


_PATH_KEYS = {
    ("corpus", "path"),
    ("questions", "path"),
    ("output_dir",),
}


def _resolve(base: Path, value: Any) -> Any:
    if isinstance(value, str) and value and "://" not in value:
        candidate = Path(value).expanduser()
        if not candidate.is_absolute():
            return str((base / candidate).resolve())
        return str(candidate)
    return value


def _resolve_paths(data: dict[str, Any], base: Path) -> dict[str, Any]:
    """Copy of ``data`` with known path keys resolved against ``base``."""
    out = dict(data)
    for keys in _PATH_KEYS:
        node: Any = out
        for key in keys[:-1]:
            node = node.get(key) if isinstance(node, dict) else None
        if isinstance(node, dict) and keys[-1] in node:
            if len(keys) > 1:
                parent = dict(node)
                parent[keys[-1]] = _resolve(base, parent[keys[-1]])
                out[keys[0]] = parent
            else:
                out[keys[0]] = _resolve(base, out[keys[0]])
    dims = out.get("dimensions")
    if isinstance(dims, list):
        out["dimensions"] = [
            {**d, "rubric_file": _resolve(base, d["rubric_file"])}
            if isinstance(d, dict) and d.get("rubric_file")
            else d
            for d in dims
        ]
    systems = out.get("systems")
    if isinstance(systems, list):
        out["systems"] = [
            {**s, "path": _resolve(base, s["path"])}
            if isinstance(s, dict) and isinstance(s.get("path"), str)
            else s
            for s in systems
        ]
    prompts = out.get("prompts")
    if isinstance(prompts, dict):
        out["prompts"] = {
            k: _resolve(base, v) if k != "language" and _is_template_path(v) else v
            for k, v in prompts.items()
        }
    data_dirs = out.get("data_dirs")
    if isinstance(data_dirs, list):
        out["data_dirs"] = [_resolve(base, d) for d in data_dirs]
    return out


def _is_template_path(value: Any) -> bool:
    """Whether a ``prompts`` value names a file rather than a packaged template.

    >>> _is_template_path("judge"), _is_template_path("zh/judge")
    (False, False)
    >>> _is_template_path("my.txt"), _is_template_path("~/x"), _is_template_path("a/b")
    (True, True, True)
    """
    if not isinstance(value, str) or not value:
        return False
    if value.endswith(".txt") or value.startswith(("~", ".", "/")):
        return True
    from importlib import resources

    packaged = resources.files("cube_ray.prompts").joinpath(f"templates/{value}.txt")
    return ("/" in value or "\\" in value) and not packaged.is_file()


def read_paths(data: dict[str, Any]) -> list[tuple[str, str]]:
    """(field, path) of every file a resolved config mapping reads.

    The corpus, the question file, QA files of systems, rubric files and prompt
    template files: the files whose content goes to engines and systems.
    """
    found: list[tuple[str, str]] = []
    for section in ("corpus", "questions"):
        node = data.get(section)
        if isinstance(node, dict) and isinstance(node.get("path"), str):
            found.append((f"{section}.path", node["path"]))
    for i, dim in enumerate(data.get("dimensions") or []):
        if isinstance(dim, dict) and isinstance(dim.get("rubric_file"), str):
            found.append((f"dimensions[{i}].rubric_file", dim["rubric_file"]))
    for i, system in enumerate(data.get("systems") or []):
        if isinstance(system, dict) and isinstance(system.get("path"), str):
            found.append((f"systems[{i}].path", system["path"]))
    prompts = data.get("prompts")
    if isinstance(prompts, dict):
        for kind, value in prompts.items():
            if kind != "language" and _is_template_path(value):
                found.append((f"prompts.{kind}", value))
    return found


def _outside_paths(data: dict[str, Any], base: Path) -> list[str]:
    """Files a config reads outside its folder and its ``data_dirs``.

    Symbolic links are followed, so a link beside the config that points at
    ``~/.ssh`` is outside too.
    """
    if data.get("allow_outside_paths") is True:
        return []
    dirs = data.get("data_dirs")
    roots = [base.resolve()]
    roots += [Path(d).resolve() for d in dirs or [] if isinstance(d, str)]
    problems = []
    for where, value in read_paths(data):
        target = Path(value).expanduser().resolve()
        if any(target == r or target.is_relative_to(r) for r in roots):
            continue
        allowed = ", ".join(str(r) for r in roots)
        problems.append(
            f"{where} is {value!r}, outside the folders this config may read "
            f"({allowed}): a file's content goes to the engines and systems, so "
            "a config reads only files beside it; move the file there, add its "
            "folder to data_dirs, or set allow_outside_paths: true if you wrote "
            "or trust this config"
        )
    return problems


def engine_fingerprint(config: Any) -> str:
    """Hash of an engine config without its pool and transport settings.

    Pool sizes, batch sizes and an HTTP engine's timeout, retries and
    concurrency change throughput, not outputs, so they do not invalidate
    rows on resume: raising ``timeout_s`` and rerunning with
    ``--retry-failed`` redoes only the failed rows.
    """
    present = TRANSPORT_FIELDS & set(type(config).model_fields)
    data = config.model_dump(
        mode="json", exclude={"pool", *present, *ACCOUNTING_FIELDS}
    )
    text = json.dumps(data, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:16]
