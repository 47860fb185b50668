"""Typed configuration of systems under test (the ``systems:`` list of a run).

Each kind's model is a :class:`SystemConfigBase` with a one-value ``kind``;
:data:`SystemConfig` validates an entry with the model of its kind as
registered in :mod:`cube_ray.systems.kinds` (an unknown kind is an error).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import (
    Field,
    SerializeAsAny,
    ValidationError,
    ValidatorFunctionWrapHandler,
    WrapValidator,
    model_validator,
)
from pydantic_core import InitErrorDetails, PydanticCustomError

from cube_ray.credentials import literal_credential, literal_in_url
from cube_ray.http_reply import check_http_url
from cube_ray.systems.kinds import SystemConfigBase, kind_named, kind_names

__all__ = [
    "BuiltinRagSystemConfig",
    "HttpSystemConfig",
    "QaFileSystemConfig",
    "SystemConfig",
    "SystemConfigBase",
]


class QaFileSystemConfig(SystemConfigBase):
    """Answers collected elsewhere.

    A file with question_id (or question), answer and retrieved doc ids.
    """

    kind: Literal["qa_file"] = "qa_file"
    path: str
    """Parquet, CSV or JSONL file."""
    question_id_field: str = "question_id"
    """Column with the question id (or use ``question_field`` to match by text)."""
    question_field: str | None = None
    """Match rows to questions by question text instead of id."""
    answer_field: str = "answer"
    """Column with the answer text."""
    retrieved_field: str = "retrieved_doc_ids"
    """Column with the ranked retrieved doc ids (list, or a JSON/comma string)."""


class BuiltinRagSystemConfig(SystemConfigBase):
    """cube_ray's reference RAG.

    BM25 (+ optional dense, RRF) over the corpus, answered by the generator
    engine with the bounds' answer prompt.
    """

    kind: Literal["builtin_rag"] = "builtin_rag"
    retriever: Literal["bm25", "dense", "hybrid"] = "bm25"
    """Retrieval method: BM25, dense (embeddings, cosine) or hybrid (reciprocal
    rank fusion of both). Dense and hybrid need ``embedding_url`` and
    ``embedding_model``."""
    language: Literal["auto", "zh", "en"] = "auto"
    """Tokenisation: jieba search mode (rjieba) for Chinese, a word split with
    English stopwords for English; ``auto`` decides from a sample of the corpus."""
    k1: float = Field(1.5, gt=0)
    """BM25 term-frequency saturation."""
    b: float = Field(0.75, ge=0, le=1)
    """BM25 document-length normalisation."""
    embedding_model: str | None = None
    """Embedding model name (or path) as the embedding endpoint knows it."""
    embedding_url: str | None = None
    """OpenAI-compatible endpoint root serving that model, e.g. a local
    ``vllm serve MODEL --task embed`` at ``http://127.0.0.1:8000/v1``. No
    credentials in it: use ``embedding_api_key_env``."""
    embedding_api_key_env: str | None = None
    """Name of the environment variable holding the endpoint's API key."""
    rrf_k: int = Field(60, ge=1)
    """Reciprocal-rank-fusion constant for hybrid retrieval."""
    hybrid_candidates: int = Field(50, ge=1)
    """Hybrid: how many hits of each retriever are fused (at least ``k``)."""
    index_dir: str | None = None
    """Where indexes are kept (one sub-directory per corpus and settings);
    default: ``index/`` beside the run's ``documents/``."""
    index_workers: int = Field(1, ge=1)
    """Processes that tokenise documents while the index is built (tokenising
    is most of a build; use the actor's CPUs on large corpora)."""
    max_reference_chars: int | None = Field(None, ge=1)
    """Cut each retrieved document to this many characters in the answer prompt
    (for small context windows); default: whole documents, as the full bound."""

    @model_validator(mode="after")
    def _dense_needs_endpoint(self) -> BuiltinRagSystemConfig:
        if self.embedding_url is not None:
            check_http_url(self.embedding_url, field="embedding_url")
        where = literal_in_url(self.embedding_url or "")
        if where is not None:
            msg = (
                f"system {self.name!r}: embedding_url holds a literal credential "
                f"(its {where}); remove it and set embedding_api_key_env to the "
                "name of the variable holding the key (the value is not shown)"
            )
            raise ValueError(msg)
        if self.retriever != "bm25" and not (
            self.embedding_url and self.embedding_model
        ):
            msg = (
                f"retriever is {self.retriever!r} but embedding_url "
                f"({self.embedding_url!r}) and embedding_model "
                f"({self.embedding_model!r}) are not both set; set them to an "
                "OpenAI-compatible embedding endpoint, or use retriever: bm25"
            )
            raise ValueError(msg)
        return self


class HttpSystemConfig(SystemConfigBase):
    """A deployed RAG service reached over HTTP.

    A ``preset`` fills in body and response paths; fields set here override it.
    """

    kind: Literal["http"] = "http"
    preset: Literal["custom", "ragflow", "openai_chat"] = "custom"
    """Request/response layout: ``ragflow`` (RAGFlow chat completions API),
    ``openai_chat`` (OpenAI-compatible chat endpoint returning references) or
    ``custom`` (body and paths below)."""
    url: str
    """Endpoint URL; ``${ENV_NAME}`` is replaced from the environment (the
    variable must be listed in the run config's ``env_vars``)."""
    method: Literal["POST", "GET"] = "POST"
    """HTTP method (GET sends the body's top-level values as query parameters)."""
    headers: dict[str, str] = Field(default_factory=dict)
    """Headers; ``${ENV_NAME}`` is replaced from the environment (secrets; the
    variable must be listed in ``env_vars``). A credential header
    (``Authorization``, ``api-key``, ``x-api-key``, ``cookie``, ``*token*``, ...)
    with a literal value is refused: write ``Bearer ${RAGFLOW_API_KEY}``."""
    body: dict[str, Any] | None = None
    """JSON body template; ``{question}`` and ``{question_id}`` inside strings are
    replaced. Default: the preset's body (custom: ``{"question": "{question}",
    "question_id": "{question_id}"}``); with a named preset, a body given here is
    merged over the preset's at the top level; with ``custom`` it replaces it."""
    answer_path: str | None = None
    """Dotted path to the answer in the JSON response (``choices[0].message``);
    default: the preset's (custom: ``answer``)."""
    retrieved_path: str | None = None
    """Dotted path to the ranked doc ids; ``a.b[].id`` maps over a list; default:
    the preset's (custom: ``retrieved_doc_ids``)."""
    id_pattern: str | None = None
    """Regular expression applied to each returned id; its first group (or the
    whole match) is the doc id, e.g. ``^(.*)\\.txt$`` for files named by doc id.
    Ids that do not match are kept as they are."""
    max_concurrency: int = Field(8, ge=1)
    """Requests in flight per actor."""
    timeout_s: float = Field(120.0, gt=0)
    """Per-request timeout."""
    max_retries: int = Field(3, ge=0)
    """Retries on 429/5xx, timeouts and connection errors."""
    backoff_base_s: float = Field(0.5, ge=0)
    """First backoff; doubles each retry, with jitter; ``Retry-After`` wins."""
    backoff_max_s: float = Field(30.0, ge=0)
    """Cap on one backoff wait (also on ``Retry-After``)."""

    @model_validator(mode="after")
    def _no_literal_credentials(self) -> HttpSystemConfig:
        check_http_url(self.url, field=f"system {self.name!r}: url")
        for header, value in self.headers.items():
            if literal_credential(header, value):
                example = (
                    "Bearer ${RAG_API_KEY}"
                    if header.lower() in ("authorization", "proxy-authorization")
                    else "${RAG_API_KEY}"
                )
                msg = (
                    f"system {self.name!r}: header {header!r} holds a literal "
                    "credential; secrets come only from the environment: write "
                    f"{header}: {example!r} and list RAG_API_KEY in the config's "
                    "top-level env_vars (the value is not shown here)"
                )
                raise ValueError(msg)
        where = literal_in_url(self.url)
        if where is not None:
            msg = (
                f"system {self.name!r}: url holds a literal credential (its "
                f"{where}); write it as ${{RAG_API_KEY}} and list RAG_API_KEY in "
                "env_vars, or send it in a header (the value is not shown here)"
            )
            raise ValueError(msg)
        for key in _credential_keys(self.body or {}):
            msg = (
                f"system {self.name!r}: body field {key!r} looks like a credential "
                "with a literal value; send it in a header instead, e.g. headers: "
                "{x-api-key: '${RAG_API_KEY}'} with RAG_API_KEY in env_vars (the "
                "value is not shown here)"
            )
            raise ValueError(msg)
        return self


def _credential_keys(body: Any, prefix: str = "") -> list[str]:
    """Dotted keys of ``body`` that hold a literal credential."""
    found: list[str] = []
    if isinstance(body, dict):
        for k, v in body.items():
            path = f"{prefix}{k}"
            if isinstance(v, dict | list):
                found += _credential_keys(v, path + ".")
            elif literal_credential(str(k), v):
                found.append(path)
    elif isinstance(body, list):
        for i, v in enumerate(body):
            found += _credential_keys(v, f"{prefix}[{i}].")
    return found


def _by_kind(value: Any, handler: ValidatorFunctionWrapHandler) -> Any:
    """Validate a ``systems:`` entry with the model of its registered kind."""
    if isinstance(value, SystemConfigBase):
        return value
    if not isinstance(value, dict):
        raise PydanticCustomError(
            "model_attributes_type",
            "Input should be a valid dictionary or object to extract fields from",
        )
    if "kind" not in value:
        raise PydanticCustomError(
            "union_tag_not_found",
            "Unable to extract tag using discriminator {discriminator}",
            {"discriminator": "'kind'"},
        )
    kind = kind_named(value["kind"])
    if kind is None:
        tags = ", ".join(repr(k) for k in kind_names())
        raise PydanticCustomError(
            "union_tag_invalid",
            "Input tag {tag} found using {discriminator} does not match any of "
            "the expected tags: {expected_tags}",
            {
                "discriminator": "'kind'",
                "tag": repr(value["kind"]),
                "expected_tags": tags,
            },
        )
    try:
        return kind.config.model_validate(value)
    except ValidationError as exc:  # located as a discriminated union's: by kind
        errors = [
            InitErrorDetails(
                type=PydanticCustomError(e["type"], e["msg"], e.get("ctx")),
                loc=(kind.name, *e["loc"]),
                input=e["input"],
            )
            for e in exc.errors()
        ]
        raise ValidationError.from_exception_data(exc.title, errors) from None


SystemConfig = Annotated[SerializeAsAny[SystemConfigBase], WrapValidator(_by_kind)]
"""One system under test; ``kind`` picks the model (a registered kind's)."""
