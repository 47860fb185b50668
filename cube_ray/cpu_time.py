"""How long a run's CPU engine work takes: the pure math of the estimate.

A run on a local CPU engine (the embedded model, vLLM on the CPU) spends its
time in four ways: the one-time conversion of the embedded model, each
engine's start-up, prefilling prompt tokens and decoding completion tokens.
The estimate of a stage is ``prompt / prefill + completion / decode`` seconds,
with the speeds of a :class:`CpuSpeed` measured for the embedded model
(Qwen2.5-Coder-1.5B) on a 2-core machine, scaled by this machine's cores
(:func:`core_factor`) and the model's size (:func:`model_params`).

The speeds come from whole demo runs (BENCHMARKS.md, "Demo time"): the plan's
estimated tokens of each stage against its measured seconds, so the estimate
is of the same kind as the plan it is applied to. Which profile a machine
gets follows its bfloat16 support (``cube_ray.engines.embedded.cpu_dtype``):
emulated bfloat16 is slow, so a CPU without it computes in float32.

Everything here is pure: ``cube_ray.run_statement`` reads the CPU, the plan
and the config and calls it.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

__all__ = [
    "REFERENCE_CORES",
    "REFERENCE_PARAMS",
    "SPEEDS",
    "CpuSpeed",
    "RunEstimate",
    "core_factor",
    "fit_size",
    "format_minutes",
    "model_params",
    "stage_seconds",
    "sum_stages",
]


def model_params(
    *, hidden: int, layers: int, intermediate: int, vocab: int, tied: bool = True
) -> int:
    """Approximate weights of a decoder-only transformer (attention + gated MLP).

    Per layer ``4 h^2`` (query, key, value, output) and ``3 h i`` (gate, up,
    down); the embedding ``v h``, twice when the output head is not tied.
    Grouped-query attention makes the true count smaller: only the ratio of
    two models matters here.

    >>> model_params(hidden=1536, layers=28, intermediate=8960, vocab=151936)
    1653669888
    >>> model_params(hidden=64, layers=2, intermediate=128, vocab=100, tied=False)
    94720
    """
    per_layer = 4 * hidden * hidden + 3 * hidden * intermediate
    return layers * per_layer + (1 if tied else 2) * vocab * hidden


REFERENCE_PARAMS = model_params(hidden=1536, layers=28, intermediate=8960, vocab=151936)
"""The embedded model's size by :func:`model_params` (Qwen2.5-Coder-1.5B)."""
REFERENCE_CORES = 2
"""Cores of the machines the speeds were measured on."""


@dataclass(frozen=True)
class CpuSpeed:
    """The embedded model's speed on a ``REFERENCE_CORES``-core CPU."""

    dtype: str
    """The compute dtype this profile is for (``bfloat16`` or ``float32``)."""
    prefill_tok_s: float
    """Estimated prompt tokens per second (the plan's estimate / stage seconds)."""
    decode_tok_s: float
    """Estimated completion tokens per second, batched as the demo batches."""
    startup_s: float
    """Seconds from asking for the engine to its first call (model converted)."""
    convert_s: float
    """Seconds of the one-time conversion of the embedded model."""
    measured: str
    """Where the figures come from."""


SPEEDS: dict[str, CpuSpeed] = {
    "bfloat16": CpuSpeed(
        dtype="bfloat16",
        prefill_tok_s=382.0,
        decode_tok_s=33.0,
        startup_s=45.0,
        convert_s=70.0,
        measured=(
            "the demo on an idle 2-core Xeon with AMX-BF16 (README, 2026-12-03): "
            "start-up 43 s, conversion 70 s, stages fitted to the plan's tokens"
        ),
    ),
    "float32": CpuSpeed(
        dtype="float32",
        prefill_tok_s=73.0,
        decode_tok_s=10.8,
        startup_s=90.0,
        convert_s=160.0,
        measured=(
            "the demo on an idle 2-core AVX2-only AMD EPYC (issue 28: 43 min 54 s, "
            "engine on one thread: 45.1 prompt and 10.8 completion tok/s fitted), "
            "prefill times 1.62 for two threads (BENCHMARKS.md, 'CPU engine "
            "threads'), decode left as measured"
        ),
    ),
}
"""The profiles by compute dtype."""


def core_factor(cores: int) -> float:
    """How much faster ``cores`` cores compute than ``REFERENCE_CORES``.

    Sub-linear (exponent 0.75; memory bandwidth does not grow with cores) and
    capped at 16 cores; never below one core's share.

    >>> core_factor(2), round(core_factor(4), 3), round(core_factor(64), 3)
    (1.0, 1.682, 4.757)
    >>> round(core_factor(1), 3), round(core_factor(0), 3)
    (0.595, 0.595)
    """
    return float((min(max(cores, 1), 16) / REFERENCE_CORES) ** 0.75)


def stage_seconds(
    prompt_tokens: int, completion_tokens: int, *, speed: CpuSpeed, scale: float
) -> float:
    """Seconds of one stage on one engine: prefill plus decode.

    ``scale`` multiplies the profile's speeds (cores, model size).

    >>> s = CpuSpeed("float32", 100.0, 10.0, 60.0, 120.0, "test")
    >>> stage_seconds(1000, 50, speed=s, scale=1.0)
    15.0
    >>> stage_seconds(1000, 50, speed=s, scale=2.0)
    7.5
    """
    return prompt_tokens / (speed.prefill_tok_s * scale) + completion_tokens / (
        speed.decode_tok_s * scale
    )


@dataclass(frozen=True)
class RunEstimate:
    """A run's estimated seconds: once, per engine start-up and per stage."""

    convert_s: float
    """The embedded model's one-time conversion (0 when it is converted)."""
    startup_s: float
    """Every engine's start-up, added up."""
    stages: tuple[tuple[str, float], ...]
    """(stage, seconds) of each stage on a CPU engine."""
    dtypes: tuple[str, ...] = ()
    """The compute dtypes of the engines estimated (their profiles)."""

    @property
    def total_s(self) -> float:
        """Everything, in seconds (the stages run one after another).

        >>> RunEstimate(120.0, 60.0, (("questions", 30.0), ("scores:j", 90.0))).total_s
        300.0
        """
        return self.convert_s + self.startup_s + sum(s for _, s in self.stages)


def fit_size(seconds: Callable[[int], float], *, budget_s: float, high: int) -> int:
    """The largest size in 1..``high`` whose estimate fits ``budget_s``; else 1.

    ``seconds(n)`` must not decrease with n (a larger sample is more work), so
    a bisection finds it with about log2(high) estimates.

    >>> fit_size(lambda n: 60 + 100 * n, budget_s=600, high=12)
    5
    >>> fit_size(lambda n: 60 + 100 * n, budget_s=10_000, high=12)
    12
    >>> fit_size(lambda n: 60 + 100 * n, budget_s=30, high=12)
    1
    """
    low, top = 1, max(1, high)
    if seconds(top) <= budget_s:
        return top
    while low < top:  # seconds(top) > budget_s; find the last n that fits
        mid = (low + top + 1) // 2
        if seconds(mid) <= budget_s:
            low = mid
        else:
            top = mid - 1
    return low


def format_minutes(seconds: float) -> str:
    """A duration as people say it: seconds under two minutes, else minutes.

    >>> format_minutes(42.4), format_minutes(150), format_minutes(2634.0)
    ('42 s', '2.5 min', '44 min')
    """
    if seconds < 120:
        return f"{math.ceil(seconds - 0.5):.0f} s"
    minutes = seconds / 60
    return f"{minutes:.1f} min" if minutes < 10 else f"{minutes:.0f} min"


def sum_stages(
    stages: Sequence[tuple[str, float]], *, prefixes: Sequence[str]
) -> float:
    """Seconds of the stages whose name starts with one of ``prefixes``.

    >>> sum_stages([("answers:zero", 1.0), ("answers:rag", 2.0), ("scores:q", 4.0)],
    ...            prefixes=["answers:"])
    3.0
    """
    return sum(s for name, s in stages if name.startswith(tuple(prefixes)))
