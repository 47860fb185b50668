"""What a run will do and how long it will take here, said before any engine starts.

``cube-ray run`` prints, before Ray starts: the work (documents, questions,
engine calls, prompt and completion tokens: the ``--dry-run`` plan), an
estimate of its time on this CPU when its engines are local CPU engines
(:mod:`cube_ray.cpu_time`, with the profile of the CPU's bfloat16 support), and
how to make it shorter. ``--sample-size N`` sets the planned sample's size
(CUBE_METHOD.md section 11); ``--fit-minutes M`` picks the largest sample whose
estimate fits M minutes and says which.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

from cube_ray.config import RunConfig, SampleConfig
from cube_ray.cpu_time import (
    REFERENCE_PARAMS,
    SPEEDS,
    CpuSpeed,
    RunEstimate,
    core_factor,
    fit_size,
    format_minutes,
    model_params,
    stage_seconds,
    sum_stages,
)
from cube_ray.engines.embedded import cpu_dtype, is_converted
from cube_ray.engines.identity import engine_id
from cube_ray.errors import ConfigError
from cube_ray.pipeline.method import QUALIFICATION
from cube_ray.plan import PlanRow, engine_label, plan_run

__all__ = [
    "CpuInfo",
    "Drop",
    "Fit",
    "Statement",
    "choose_fit",
    "cpu_info",
    "estimate_run",
    "fit_ladder",
    "fit_sample",
    "run_statement",
    "with_sample_size",
]

_SIZE_CAP = 20.0
"""A model k times smaller is estimated at most 20 times faster (small models
are bound by per-step overhead, not by arithmetic)."""


@dataclass(frozen=True)
class CpuInfo:
    """This machine's CPU as the estimate sees it."""

    model: str
    cores: int
    native_bfloat16: bool


def cpu_info(cpuinfo: Path = Path("/proc/cpuinfo")) -> CpuInfo:
    """The CPU's model name, the cores this process may use, bfloat16 support."""
    model = "this CPU"
    try:
        for line in cpuinfo.read_text(encoding="utf-8", errors="replace").splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip() or model
                break
    except OSError:
        pass
    cores = (
        len(os.sched_getaffinity(0))
        if hasattr(os, "sched_getaffinity")
        else (os.cpu_count() or 1)
    )
    return CpuInfo(model, cores, cpu_dtype(cpuinfo) == "bfloat16")


def with_sample_size(config: RunConfig, size: int) -> RunConfig:
    """``config`` with its planned sample's size set (strata and seed kept).

    A config without ``sample:`` gets one of one stratum, seed 0.
    """
    old = config.sample
    sample = (
        SampleConfig(size=size)
        if old is None
        else SampleConfig(size=size, strata=list(old.strata), seed=old.seed)
    )
    return config.model_copy(update={"sample": sample})


def _engine_speed(engine: Any, cpu: CpuInfo) -> tuple[CpuSpeed, float] | None:
    """The profile and speed factor of a local CPU engine; None for any other."""
    if not getattr(engine, "cpu_engine", False):
        return None
    dtype = str(getattr(engine, "dtype", "auto"))
    if dtype not in SPEEDS:  # auto (or float16): what the CPU computes natively
        dtype = "bfloat16" if cpu.native_bfloat16 else "float32"
    if dtype == "bfloat16" and not cpu.native_bfloat16:
        dtype = "float32"  # emulated bfloat16 is slower still: at least this slow
    size = 1.0
    if engine.backend == "vllm":
        params = _params_of(Path(str(engine.model)))
        if params:
            size = min(_SIZE_CAP, max(1 / _SIZE_CAP, REFERENCE_PARAMS / params))
    return SPEEDS[dtype], core_factor(cpu.cores) * size


def _params_of(model: Path) -> int | None:
    """The size of a local Hugging Face model folder from its ``config.json``."""
    try:
        data = json.loads((model / "config.json").read_text(encoding="utf-8"))
        return model_params(
            hidden=int(data["hidden_size"]),
            layers=int(data["num_hidden_layers"]),
            intermediate=int(data.get("intermediate_size", 4 * data["hidden_size"])),
            vocab=int(data["vocab_size"]),
            tied=bool(data.get("tie_word_embeddings", True)),
        )
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _needs_conversion(engine: Any) -> bool:
    if engine.backend != "embedded":
        return False
    return not is_converted(engine)


def estimate_run(
    config: RunConfig, rows: list[PlanRow], cpu: CpuInfo
) -> tuple[RunEstimate, list[str]] | None:
    """The run's time on ``cpu``, and the stages it could not estimate.

    None when no stage runs on a local CPU engine (API, GPU or HTTP engines
    only): their speed is not this machine's.
    """
    stages: list[tuple[str, float]] = []
    missing: list[str] = []
    started: dict[str, CpuSpeed] = {}
    convert = 0.0
    for row in rows:
        engine = _row_engine(config, row)
        backend = getattr(engine, "backend", "")
        if engine is None or row.calls == 0 or backend in {"reference", "fake"}:
            continue  # no model (file questions, the reference judge, faults)
        speed = _engine_speed(engine, cpu)
        if speed is None:
            missing.append(row.stage)
            continue
        profile, scale = speed
        eid = engine_id(engine)  # stages of one engine share its start-up
        if eid not in started:
            started[eid] = profile
            if _needs_conversion(engine):
                convert = profile.convert_s
        stages.append(
            (
                row.stage,
                stage_seconds(
                    row.prompt_tokens,
                    row.completion_tokens,
                    speed=profile,
                    scale=scale,
                ),
            )
        )
    if not stages:
        return None
    startup = sum(p.startup_s for p in started.values())
    dtypes = tuple(sorted({p.dtype for p in started.values()}))
    return RunEstimate(convert, startup, tuple(stages), dtypes), missing


def _row_engine(config: RunConfig, row: PlanRow) -> Any:
    """The engine config of a plan row.

    A judge's for its scores; else the generator's (questions, the bounds, a
    built-in RAG's answers); None for a row of no engine of the config.
    """
    prefix, _, judge = row.stage.partition(":")
    if prefix in {"scores", QUALIFICATION} and judge in config.judges:
        return config.judges[judge]
    if row.engine != engine_label(config.generator):
        return None  # a system's own engine, a file, no LLM
    return config.generator


def _sample_high(config: RunConfig, rows: list[PlanRow]) -> int:
    """The largest sample ``--fit-minutes`` considers: the config's, or all."""
    if config.sample is not None:
        return config.sample.size
    return max((r.calls for r in rows if r.stage.startswith("answers:")), default=1)


@dataclass(frozen=True)
class Drop:
    """One step of the fit's ladder: less work per question, and what it drops."""

    what: str
    """What this step drops, in words for the console."""
    config: RunConfig
    """The run config with this step and every step before it applied."""


def _outside_headline(config: RunConfig) -> list[str]:
    """LLM judges that cannot enter the headline, in the run's order.

    With ``aggregate.require_qualification`` and a ``qualification`` that
    leaves them out (``qualification.judges``), they hold no certificate
    (CUBE_METHOD.md section 12): their scores are shown per judge but never
    averaged into a CuBE, so their work is the first that a time budget drops.
    """
    qual = config.qualification
    if qual is None or not config.aggregate.require_qualification:
        return []
    qualified = set(qual.qualified(list(config.judges)))
    return [
        name
        for name, engine in config.judges.items()
        if name not in qualified and engine.backend not in {"reference", "fake"}
    ]


def fit_ladder(config: RunConfig) -> list[Drop]:
    """The work ``--fit-minutes`` drops, in this fixed order, to keep questions.

    1. The LLM judges outside the headline (:func:`_outside_headline`: not
       qualified under ``aggregate.require_qualification``) are left out of
       the run. Their scores would be shown per judge but never averaged into
       a CuBE, so the headline, its certified jury and its verdict stay the
       same.

    A step that changes nothing (no such judge, or it is the only judge) is
    not listed; each step keeps the ones before it. Judges that may enter the
    headline are never dropped. Not a step: switching a judge's protocol
    (CUBE_METHOD.md section 14) or the run's dimensions, which would change
    the headline's figures and make the run dir another run's, so a later
    `--sample-size` rerun into it would be refused.
    """
    outside = _outside_headline(config)
    if not outside or len(outside) == len(config.judges):
        return []
    judges = {n: e for n, e in config.judges.items() if n not in outside}
    return [
        Drop(
            f"{', '.join(outside)} left out of the run (not qualified here, so "
            "never in the headline)",
            config.model_copy(update={"judges": judges}),
        )
    ]


@dataclass(frozen=True)
class Fit:
    """What ``--fit-minutes`` chose: a step of the ladder and a sample size."""

    step: int
    """0: all the work; k: the ladder's first k steps applied."""
    size: int
    fits: bool
    """Whether its estimate is within the budget."""


def choose_fit(
    seconds: Callable[[int, int], float],
    *,
    steps: int,
    budget_s: float,
    high: int,
    minimum: int,
) -> Fit:
    """The fit: the largest sample with all the work, never below ``minimum``.

    ``seconds(step, size)`` is the estimate with the ladder's first ``step``
    steps applied (``steps`` of them). When all the work fits only below
    ``minimum`` questions (the fewest that can give a verdict), the first
    step whose estimate fits ``minimum`` questions is taken, with the largest
    sample it fits; when none does, every step is taken with ``minimum``
    questions, over the budget. ``minimum`` is capped at ``high``.

    Per question 100 s with all the work, 80 s after step 1, 10 s after 2:

    >>> cost = lambda step, n: 60 + (100, 80, 10)[step] * n
    >>> choose_fit(cost, steps=2, budget_s=1300, high=12, minimum=6)
    Fit(step=0, size=12, fits=True)
    >>> choose_fit(cost, steps=2, budget_s=600, high=12, minimum=6)
    Fit(step=1, size=6, fits=True)
    >>> choose_fit(cost, steps=2, budget_s=300, high=12, minimum=6)
    Fit(step=2, size=12, fits=True)
    >>> choose_fit(cost, steps=2, budget_s=100, high=12, minimum=6)
    Fit(step=2, size=6, fits=False)
    >>> choose_fit(cost, steps=0, budget_s=600, high=12, minimum=6)
    Fit(step=0, size=6, fits=False)
    >>> choose_fit(cost, steps=0, budget_s=600, high=4, minimum=6)
    Fit(step=0, size=4, fits=True)
    """
    floor = min(minimum, high)
    size = fit_size(lambda n: seconds(0, n), budget_s=budget_s, high=high)
    if size >= floor and seconds(0, size) <= budget_s:
        return Fit(0, size, True)
    for step in range(1, steps + 1):
        if seconds(step, floor) <= budget_s:
            size = fit_size(partial(seconds, step), budget_s=budget_s, high=high)
            return Fit(step, max(size, floor), True)
    return Fit(steps, floor, False)


def fit_sample(
    config: RunConfig, *, minutes: float, limit: int | None, cpu: CpuInfo
) -> tuple[RunConfig, str]:
    """The config with the largest sample whose estimate fits, and what was chosen.

    Never fewer questions than a verdict needs (:func:`verdict_minimum` of
    ``aggregate.alpha``): below that, work per question is dropped instead
    (:func:`fit_ladder`), and the note says what.

    Raises:
        ConfigError: No stage runs on a local CPU engine, so nothing estimates
            the run's time here.
    """
    # lazy: loads cube_ray.aggregate (scipy, polars), not needed by --help
    from cube_ray.aggregate import verdict_minimum

    rows = plan_run(config, limit=limit)
    high = _sample_high(config, rows)
    ladder = fit_ladder(config)
    configs = [config, *(d.config for d in ladder)]

    def seconds(step: int, size: int) -> float:
        sized = with_sample_size(configs[step], size)
        found = estimate_run(sized, plan_run(sized, limit=limit), cpu)
        if found is None and step:
            return 0.0  # the step left no work on a local CPU engine
        if found is None:
            msg = (
                f"--fit-minutes {minutes:g}: the run's engines are not local CPU "
                "engines, so their time is not estimated on this machine; set the "
                "sample's size with --sample-size N instead"
            )
            raise ConfigError(msg)
        return found[0].total_s

    budget = minutes * 60
    minimum = verdict_minimum(config.aggregate.alpha)
    fit = choose_fit(
        seconds, steps=len(ladder), budget_s=budget, high=high, minimum=minimum
    )
    size = fit.size
    took = seconds(fit.step, size)
    note = f"--fit-minutes {minutes:g}: sample size {size} of {high} ("
    if took == 0:  # the ladder left no stage on a local CPU engine
        note += "no work left on a local CPU engine to estimate"
    else:
        note += f"≈ {format_minutes(took)} on this CPU"
    if not fit.fits:
        note += f"; even that is over {minutes:g} min"
    elif size < high and took:
        later = format_minutes(seconds(fit.step, size + 1))
        note += f"; {size + 1} would take ≈ {later}"
    note += ")"
    if fit.step:
        dropped = "; then ".join(d.what for d in ladder[: fit.step])
        note += (
            f"; {min(minimum, high)} questions are the fewest that can give a "
            f"verdict (CUBE_METHOD.md section 10: a Wilcoxon test of fewer "
            f"cannot reach p < {config.aggregate.alpha:g}), so to fit it dropped: "
            f"{dropped}"
        )
    elif not fit.fits and size == min(minimum, high) and size < high:
        note += (
            f"; {size} questions are the fewest that can give a verdict "
            "(CUBE_METHOD.md section 10) and nothing else could be dropped"
        )
    if size < high:
        note += f"; all {high}: --sample-size {high}"
    return with_sample_size(configs[fit.step], size), note


def _sample_words(sample: Any, *, documents: int | None, limit: int | None) -> str:
    """The run's sample as the work line says it: asked for, or the whole corpus.

    A ``sample.size`` larger than the corpus (or than ``--limit``) samples
    nothing: every document gets its question. ``documents``: the documents
    that get questions (None: not known here).

    >>> from types import SimpleNamespace as S
    >>> _sample_words(S(size=12, strata=[]), documents=3, limit=None)
    'every one of the 3 documents: sample.size 12 is more than the corpus'
    >>> _sample_words(S(size=60, strata=["AREA"]), documents=60, limit=None)
    'a sample of 60 documents; strata: AREA'
    """
    if documents is not None and documents < sample.size:
        corpus = "the corpus" if limit is None else f"the corpus under --limit {limit}"
        return (
            f"every one of the {documents:,} documents: sample.size "
            f"{sample.size:,} is more than {corpus}"
        )
    strata = ", ".join(sample.strata) or "one stratum"
    return f"a sample of {sample.size:,} documents; strata: {strata}"


@dataclass(frozen=True)
class Statement:
    """The lines said before a run, and the estimate they quote."""

    lines: list[str]
    estimate_s: float | None


def run_statement(
    config: RunConfig,
    *,
    limit: int | None,
    cpu: CpuInfo,
    remote: bool = False,
    config_path: str = "CONFIG",
    plan: Callable[[RunConfig], list[PlanRow]] | None = None,
) -> Statement:
    """The work, its estimated time on ``cpu`` and how to make it shorter.

    ``remote``: the run goes to a cluster (``--address``), whose CPUs are not
    this one's: no time estimate.
    """
    rows = (plan or (lambda c: plan_run(c, limit=limit)))(config)
    questions = max(
        (r.calls for r in rows if r.stage.startswith("answers:")), default=0
    )
    calls = sum(r.calls for r in rows)
    prompt = sum(r.prompt_tokens for r in rows)
    completion = sum(r.completion_tokens for r in rows)
    what = f"{questions:,} questions"
    if config.sample is not None:
        # Generated questions: one per sampled document.
        docs = questions if config.questions.source != "file" else None
        what += f" ({_sample_words(config.sample, documents=docs, limit=limit)})"
    lines = [
        f"work: {what}; {calls:,} engine calls, ≈ {prompt:,} prompt and "
        f"{completion:,} completion tokens (`--dry-run` shows the plan)"
    ]
    if remote:
        lines.append("time: not estimated (the engines run on the cluster)")
        return Statement(lines, None)
    found = estimate_run(config, rows, cpu)
    if found is None:
        lines.append("time: not estimated (no stage runs on a local CPU engine)")
        return Statement(lines, None)
    est, missing = found
    kind = "native bfloat16" if cpu.native_bfloat16 else "no native bfloat16"
    kind += f"; the engine computes in {' and '.join(est.dtypes)}"
    parts = []
    if est.convert_s:
        parts.append(f"one-time model conversion {format_minutes(est.convert_s)}")
    parts.append(f"engine start-up {format_minutes(est.startup_s)}")
    for label, prefixes in (
        ("questions", ["questions"]),
        ("answers", ["answers:"]),
        ("judges", ["scores:", "qualification"]),
    ):
        seconds = sum_stages(est.stages, prefixes=prefixes)
        if seconds:
            parts.append(f"{label} {format_minutes(seconds)}")
    line = (
        f"time on this CPU ({cpu.model}, {cpu.cores} cores, {kind}): "
        f"≈ {format_minutes(est.total_s)} ({', '.join(parts)})"
    )
    if missing:
        line += f"; not counted: {', '.join(missing)} (not on a local CPU engine)"
    lines.append(line)
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else 0.0
    if load > cpu.cores / 2:
        lines.append(
            f"load average {load:.1f} on {cpu.cores} cores: other work shares this "
            "CPU, so expect longer"
        )
    # lazy: loads cube_ray.aggregate (scipy, polars), not needed by --help
    from cube_ray.aggregate import verdict_minimum

    fewest = verdict_minimum(config.aggregate.alpha)
    if questions > fewest:  # never below the questions a verdict needs
        half = fit_size(
            lambda n: _total(with_sample_size(config, n), limit, cpu),
            budget_s=est.total_s / 2,
            high=questions - 1,
        )
        half = max(half, fewest)
        shorter = _total(with_sample_size(config, half), limit, cpu)
        lines.append(
            f"shorter: `cube-ray run {config_path} --sample-size {half}` "
            f"(≈ {format_minutes(shorter)}) or `--fit-minutes M` (the largest "
            "sample that fits M minutes)"
        )
    elif questions > 1:
        lines.append(
            f"shorter: not with a verdict: fewer than {fewest} questions cannot "
            "separate the bounds (CUBE_METHOD.md section 10); `--sample-size N` "
            "still runs N"
        )
    return Statement(lines, est.total_s)


def _total(config: RunConfig, limit: int | None, cpu: CpuInfo) -> float:
    found = estimate_run(config, plan_run(config, limit=limit), cpu)
    return found[0].total_s if found else 0.0
