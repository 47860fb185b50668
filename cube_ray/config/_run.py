"""The run config, ``RunConfig``, and the rules that span its sections.

Size: about 500 lines, one module on purpose: the model and the cross-field
problems (``_*_problems``) it checks at load time read the same sections, and
most of it is field docstrings that ``docs/pipeline.md`` mirrors.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any, get_args

from pydantic import Field, ValidationError, field_validator, model_validator

from cube_ray.config._corpus import CorpusConfig, QuestionsConfig, SampleConfig
from cube_ray.config._loader import (
    _CROSS_PREFIX,
    _ITEM,
    _format_validation,
    read_config_file,
)
from cube_ray.config._prompts import PromptsConfig
from cube_ray.config._ray import RayConfig
from cube_ray.config._scoring import (
    AggregateConfig,
    DimensionConfig,
    QualificationConfig,
    default_dimensions,
)
from cube_ray.credentials import mask
from cube_ray.engines.config import (
    CODE_LOADING_ENV,
    EngineConfig,
    FakeEngineConfig,
    JudgeConfig,
    Measure,
    OpenAIHttpEngineConfig,
    ReferenceJudgeConfig,
    VllmEngineConfig,
    code_loading_kwargs,
    engine_env_allowed,
)
from cube_ray.env import EnvUse, placeholders, url_host
from cube_ray.errors import ConfigError
from cube_ray.language import Language
from cube_ray.prompts import check_template
from cube_ray.protocols import checklist
from cube_ray.pydantic_base import StrictModel
from cube_ray.systems.config import SystemConfig
from cube_ray.systems.kinds import system_kind

__all__ = ["RunConfig"]


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
    allow_env: list[str] = Field(default_factory=list)
    """Names a vLLM engine's ``env`` may set beyond the tuning variables
    (``VLLM_*``, ``OMP_*``, ``CUDA_VISIBLE_DEVICES``, ...:
    ``cube_ray.engines.config.engine_env_allowed``), e.g. ``[OPENSSL_CONF]``.
    Such a variable can change what the engine process loads (``OPENSSL_CONF``
    loads a shared object in ``import ssl``), so each is named, never a
    pattern; a code-loading one (``CODE_LOADING_ENV``) also needs
    ``allow_remote_code``."""

    @field_validator("env_vars", "allow_env")
    @classmethod
    def _env_var_names(cls, names: list[str], info: Any) -> list[str]:
        bad = [n for n in names if placeholders("${" + n + "}") != [n]]
        if bad:
            msg = (
                f"{info.field_name} lists {bad}, which are not variable names; "
                "list bare names (letters, digits, _), e.g. [RAGFLOW_API_KEY], "
                "not ${...}"
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
                        f"{dict(engine.measures)}); map each to one of "
                        f"{', '.join(get_args(Measure))} "
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
            *_qualification_problems(self),
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
        for role, engine in self.engines():
            if isinstance(engine, VllmEngineConfig):
                self._check_engine_env(role, engine)
        return self

    def _check_engine_env(self, role: str, engine: VllmEngineConfig) -> None:
        """Refuse an engine's code-loading switches and untrusted ``env`` names.

        Code-loading switches need ``allow_remote_code``; ``env`` names outside
        the tuning allow-list need ``allow_env``.
        """
        if not self.allow_remote_code:
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
        allowed = set(self.allow_env)
        other = sorted(
            k
            for k in engine.env
            if k not in CODE_LOADING_ENV
            and not engine_env_allowed(k)
            and k not in allowed
        )
        if other:
            msg = (
                f"{role}.env sets {other}, which {'is' if len(other) == 1 else 'are'}"
                " not among the tuning variables an engine may set (VLLM_*, "
                "OMP_*, KMP_*, MKL_*, OPENBLAS_*, NCCL_*, CUDA_VISIBLE_DEVICES, "
                "HF_HUB_OFFLINE, ...; docs/engines.md): such a variable can make "
                "the engine process load code or files (OPENSSL_CONF loads a "
                "shared object). If you need it, name it at the top level of the "
                f"config: allow_env: {other}"
            )
            raise ValueError(msg)

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
            uses += system_kind(system).env_uses(system)
        for role, engine in self.engines():
            if isinstance(engine, OpenAIHttpEngineConfig) and engine.api_key_env:
                uses.append(
                    EnvUse(
                        engine.api_key_env,
                        f"{role}.api_key_env",
                        url_host(engine.base_url),
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
        :func:`cube_ray.corpus.with_prompt_language`).
        """
        language = self.prompts.language
        lang: Language = "en" if language == "auto" else language
        return {d.name: d.rubric_text(lang) for d in self.dimensions}

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
        return cls.from_dict(read_config_file(p), source=str(p))

    @classmethod
    def from_dict(cls, data: dict[str, Any], *, source: str = "<dict>") -> RunConfig:
        """Validate a config mapping; errors become :class:`ConfigError`."""
        try:
            return cls.model_validate(data)
        except ValidationError as exc:
            raise ConfigError(_format_validation(exc, source)) from None


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
        if getattr(engine, "protocol", "score") == "checklist":
            for i, dim in enumerate(config.dimensions):
                try:
                    checklist(dim.rubric_text(), dimension=dim.name)
                except ConfigError as exc:
                    problems.append(
                        f"judges.{name}.protocol is 'checklist', but "
                        f"dimensions[{i}]: {exc}"
                    )
    return problems


def _qualification_problems(config: RunConfig) -> list[str]:
    """``qualification.judges`` names judges of the run."""
    qual = config.qualification
    if qual is None or qual.judges is None:
        return []
    unknown = [j for j in qual.judges if j not in config.judges]
    if not unknown:
        return []
    return [
        f"qualification.judges lists {unknown}, which "
        f"{'is not a judge' if len(unknown) == 1 else 'are not judges'} of this "
        f"run (judges: {sorted(config.judges)}); list judges by their name under "
        "judges:, or omit qualification.judges to qualify every judge"
    ]


def _file_problems(config: RunConfig) -> list[str]:
    """Prompt templates and rubrics exist, and templates use their placeholders."""
    problems: list[str] = []
    prompts = config.prompts
    for kind, name in (
        ("question", prompts.question),
        ("answer", prompts.answer),
        ("judge", prompts.judge),
        ("judge_checklist", prompts.judge_checklist),
        ("judge_dimensions", prompts.judge_dimensions),
    ):
        try:
            check_template(name, "judge" if kind.startswith("judge") else kind)
        except ConfigError as exc:
            problems.append(f"prompts.{kind}: {exc}")
    for i, dim in enumerate(config.dimensions):
        try:
            dim.rubric_text()
        except ConfigError as exc:
            field = "rubric_file" if dim.rubric_file is not None else "rubric"
            problems.append(f"dimensions[{i}].{field}: {exc}")
    return problems
