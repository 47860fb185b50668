"""``check_judges``: build the inputs, score them with each judge, judge the judge.

Engines are built one at a time and closed; a judge configured like the
generator reuses the generator's engine (one engine identity).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

import pyarrow as pa

from cube_ray import schema
from cube_ray.aggregate import MIN_NONZERO_PAIRS, false_alarms, fault_misses
from cube_ray.config import RunConfig
from cube_ray.engines import build_engine
from cube_ray.engines.base import BorrowedEngine
from cube_ray.engines.identity import engine_identity
from cube_ray.errors import ConfigError, CubeRayError, EngineError
from cube_ray.injection import MAX_SHIFT, Case, shifts
from cube_ray.judge_check._figures import _bounds, _verdict, qualification
from cube_ray.judge_check._inputs import (
    _INJECTION,
    _bound_rows,
    _fault_rows,
    _first_documents,
    _injection_cases,
    _judge_table,
)
from cube_ray.prompts import fresh_nonce
from cube_ray.qualification import is_control
from cube_ray.stages import JudgeStage

DEFAULT_SAMPLE = 8
"""Documents in the bound sample by default (8 all-positive pairs give p = 0.004)."""

Log = Callable[[str], None]


def _same_engine(a: Any, b: Any) -> bool:
    """Whether two engine configs build the same engine (one identity).

    >>> from cube_ray.engines import EmbeddedEngineConfig
    >>> _same_engine(
    ...     EmbeddedEngineConfig(score_mode="expected"), EmbeddedEngineConfig()
    ... )
    True
    >>> _same_engine(EmbeddedEngineConfig(max_model_len=2048), EmbeddedEngineConfig())
    False
    """
    return engine_identity(a) == engine_identity(b)


def _check_one(
    name: str,
    engine_config: Any,
    engine: Any,
    *,
    config: RunConfig,
    rows: pa.Table,
    cases: Sequence[Case],
    injection_dimension: str,
    nonce: str,
    faults: Sequence[dict[str, Any]] = (),
) -> dict[str, Any]:

    dimensions = [d.name for d in config.dimensions]
    table = _judge_table(
        rows,
        cases,
        judge=name,
        dimensions=dimensions,
        injection_dimension=injection_dimension,
        faults=faults,
    )
    stage = JudgeStage(
        name,
        engine_config,
        rubrics=config.rubrics(),
        template=config.prompts.judge_template(
            getattr(engine_config, "protocol", "score")
        ),
        nonce=nonce,
        engine_factory=lambda _config: BorrowedEngine(engine),
    )
    start = time.perf_counter()
    scores = stage(table).to_pylist()
    seconds = time.perf_counter() - start
    bound_scores = [s for s in scores if s[schema.SYSTEM] in schema.BOUND_SYSTEMS]
    injection_scores = [
        s[schema.SCORE] for s in scores if s[schema.SYSTEM] == _INJECTION
    ]
    statuses: dict[str, int] = {}
    for s in scores:
        statuses[s[schema.STATUS]] = statuses.get(s[schema.STATUS], 0) + 1
    result: dict[str, Any] = {
        "backend": engine_config.backend,
        "model": getattr(engine, "name", None),
        # CUBE_METHOD.md section 14: separation and faults under this protocol.
        "protocol": getattr(engine_config, "protocol", "score"),
        "seconds": round(seconds, 2),
        "rows": len(scores),
        "scored": sum(s[schema.SCORE] is not None for s in scores),
        "statuses": statuses,
        "bounds": _bounds(bound_scores, dimensions, config.aggregate),
        "injection_dimension": injection_dimension,
        "injection": {
            pattern: row["all"]
            for pattern, row in shifts(cases, injection_scores).items()
        },
        "failures": [],
        "warnings": [],
    }
    if faults and config.qualification is not None:
        block = qualification(
            [s for s in scores if s[schema.SYSTEM] != _INJECTION],
            faults,
            dimensions=dimensions,
            min_drop=config.qualification.min_drop,
            alpha=config.aggregate.alpha,
        )
        result["qualification"] = block
        expected = {d.name: d.expected_faults() for d in config.dimensions}
        result["misses"] = [
            (kind, fig) for _, kind, fig in fault_misses({name: block}, expected)
        ]
        result["false_alarms"] = [
            (kind, fig) for _, kind, fig in false_alarms({name: block})
        ]
    _verdict(result)
    result["ok"] = not result["failures"]
    return result


def check_judges(
    config: RunConfig,
    *,
    sample: int = DEFAULT_SAMPLE,
    judges: Sequence[str] | None = None,
    injection_dimension: str | None = None,
    log: Log | None = None,
) -> dict[str, Any]:
    """Run the checks of every judge of ``config`` (see the module docstring).

    Args:
        config: The run config (its ``prompts.language`` already decided).
        sample: Documents in the bound sample (at least 6, see section 10).
        judges: Only these judges (default: all).
        injection_dimension: Dimension of the injection set (default: the
            first configured one).
        log: Receives one progress line per step.

    Returns:
        A JSON-ready dict: ``sample``, ``judges`` (name -> result with
        ``ok``, ``failures``, ``warnings``, ``bounds``, ``injection``) and
        ``ok`` (every judge passed).

    Raises:
        ConfigError: Unknown judge or dimension, or a sample below 6.
        EngineError: The generator cannot be built or wrote no bound pair.
    """
    say = log or (lambda _line: None)
    if sample < MIN_NONZERO_PAIRS:
        msg = (
            f"--sample {sample} is too small: the Wilcoxon test of section 10 needs "
            f"at least {MIN_NONZERO_PAIRS} question pairs; use --sample 6 or more"
        )
        raise ConfigError(msg)
    names = list(judges) if judges else list(config.judges)
    unknown = sorted(set(names) - set(config.judges))
    if unknown:
        msg = f"no judge named {unknown} in the config; it has {sorted(config.judges)}"
        raise ConfigError(msg)
    dimensions = [d.name for d in config.dimensions]
    dimension = injection_dimension or dimensions[0]
    if dimension not in dimensions:
        msg = f"--dimension {dimension!r} is not a configured dimension ({dimensions})"
        raise ConfigError(msg)
    nonce = fresh_nonce()

    docs = _first_documents(config, sample)
    say(
        f"bound sample: {docs.num_rows} documents; the generator "
        f"({config.generator.backend}) writes questions and zero/full answers"
    )
    start = time.perf_counter()
    generator: Any = build_engine(config.generator)
    shared: dict[str, Any] = {}
    try:
        questions, rows = _bound_rows(config, docs, generator, nonce=nonce)
        generation_s = time.perf_counter() - start
        cases = _injection_cases(rows)
        faults = _fault_rows(config, rows)
        if not cases:
            statuses = sorted(set(rows.column(schema.SYSTEM).to_pylist()))
            msg = (
                f"the generator ({config.generator.backend}) wrote no usable "
                f"full-bound answer for the first {docs.num_rows} documents "
                f"(bounds answered: {statuses or 'none'}); check it with "
                "`cube-ray engines check` and its sampling settings"
            )
            raise EngineError(msg)
        # A judge that loads the same model as the generator shares its engine
        # (one model load, one copy in memory) and is checked before the
        # generator is closed.
        shared = {
            n: generator
            for n in names
            if _same_engine(config.judges[n], config.generator)
        }
        results: dict[str, Any] = {}
        for name in sorted(names, key=lambda n: n not in shared):
            if name not in shared and generator is not None:
                generator.close()
                generator = None
            results[name] = _run_judge(
                name,
                config,
                rows=rows,
                cases=cases,
                engine=shared.get(name),
                injection_dimension=dimension,
                nonce=nonce,
                say=say,
                faults=faults,
            )
    finally:
        if generator is not None:
            generator.close()
    pairs = sum(r == schema.FULL for r in rows.column(schema.SYSTEM).to_pylist())
    return {
        "sample": {
            "documents": docs.num_rows,
            "questions": sum(
                q is not None for q in questions.column(schema.QUESTION).to_pylist()
            ),
            "bound_answers": rows.num_rows,
            "injection_bases": pairs,
            "injection_cases": len(cases),
            "faulted_answers": sum(
                f[schema.STATUS] == schema.STATUS_OK and not is_control(f["kind"])
                for f in faults
            ),
            "controls": sum(
                f[schema.STATUS] == schema.STATUS_OK and is_control(f["kind"])
                for f in faults
            ),
            "fault_kinds": list(config.qualification.kinds)
            if config.qualification
            else [],
            "generation_s": round(generation_s, 1),
            "prompt_language": config.prompts.language,
        },
        "thresholds": {
            "min_gap": config.aggregate.min_gap,
            "alpha": config.aggregate.alpha,
            "trim": config.aggregate.trim,
            "max_shift": MAX_SHIFT,
            "min_drop": config.qualification.min_drop if config.qualification else None,
        },
        "judges": {n: results[n] for n in names},
        "ok": all(results[n]["ok"] for n in names),
    }


def _run_judge(
    name: str,
    config: RunConfig,
    *,
    rows: pa.Table,
    cases: Sequence[Case],
    engine: Any,
    injection_dimension: str,
    nonce: str,
    say: Log,
    faults: Sequence[dict[str, Any]] = (),
) -> dict[str, Any]:

    engine_config = config.judges[name]
    n_faults = sum(f[schema.STATUS] == schema.STATUS_OK for f in faults)
    say(
        f"judge {name} ({engine_config.backend}): {rows.num_rows} bound answers"
        f" + {n_faults} faulted answers and controls x {len(config.dimensions)}"
        " dimensions"
        f" + {len(cases)} injection cases"
    )
    owned = engine is None
    try:
        if owned:
            engine = build_engine(engine_config)
        return _check_one(
            name,
            engine_config,
            engine,
            config=config,
            rows=rows,
            cases=cases,
            injection_dimension=injection_dimension,
            nonce=nonce,
            faults=faults,
        )
    except (CubeRayError, EngineError) as exc:
        return {
            "backend": engine_config.backend,
            "ok": False,
            "failures": [f"{type(exc).__name__}: {exc}"],
            "warnings": [],
        }
    finally:
        if owned and engine is not None:
            engine.close()
