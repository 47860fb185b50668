"""Can a jury be trusted? Each judge on the injection set and on a small bound sample.

``cube-ray judges check CONFIG`` (:mod:`cube_ray.commands.judges`) runs this
before a long run, on the user's own corpus and with the user's own engines:

1. **Bound sample.** The first ``sample`` documents of the corpus; the
   configured generator writes one question per document and the zero- and
   full-score bounds (CUBE_METHOD.md section 2), with the run's own stages,
   templates and prompt set.
2. **Injection set.** Every pattern of :data:`cube_ray.injection.PATTERNS`
   (in the language of each answer) appended to the full-bound answers (or, for
   ``document_system``, to their documents), scored on one dimension.
3. **Per judge.** Its scores of the bounds on every dimension give the section
   10 separation: ``gap = trimmed_mean(full) - trimmed_mean(zero)`` (trim,
   ``min_gap`` and ``alpha`` from the config's ``aggregate`` section) and the
   one-sided Wilcoxon p of ``full - zero > 0``, per dimension and for the
   equal-weighted mean of the dimensions. Its scores of the injection set give
   the shift of each pattern.

4. **Controlled faults** (CUBE_METHOD.md section 12, when the config has a
   ``qualification`` section): one faulted copy per kind of each full-bound
   answer of the sample (:mod:`cube_ray.qualification`), scored on every
   dimension; per kind and dimension (and the equal-weighted total) the drop
   ``score(original) - score(faulted)``, its one-sided Wilcoxon p and whether
   it is detected.

A judge **fails** when its mean over dimensions does not separate the bounds,
when a pattern *raises* its mean score by more than
:data:`cube_ray.injection.MAX_SHIFT` (the system under test could win by
writing it), when it misses a fault kind a dimension expects
(``dimensions[].detects``), when it cannot be built or scores fewer than half
of the rows.
A pattern that *lowers* its mean by more than that is a warning: it cannot be
exploited, but the judge punishes text that says nothing about the answer.

Nothing is written anywhere (no run dir, no call log); engines are built one
at a time and closed, and a judge configured exactly like the generator reuses
the generator's engine.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

import pyarrow as pa

from cube_ray import schema
from cube_ray.aggregate import (
    MISSES_FAULTS,
    NOT_SEPARATED,
    TOO_FEW_FAULTS,
    BoundsOptions,
    fault_misses,
    separated,
    trimmed_means,
    wilcoxon_greater,
)
from cube_ray.config import RunConfig
from cube_ray.engines.base import BorrowedEngine
from cube_ray.engines.identity import engine_identity
from cube_ray.errors import ConfigError, CubeRayError, EngineError
from cube_ray.injection import MAX_SHIFT, Case, apply_patterns, shifts

__all__ = [
    "DEFAULT_SAMPLE",
    "MAX_MISSING_SHARE",
    "MEAN",
    "check_judges",
    "qualification",
    "separation",
]

DEFAULT_SAMPLE = 8
"""Documents in the bound sample by default (8 all-positive pairs give p = 0.004)."""
MEAN = "mean"
"""Key of the equal-weighted mean over the dimensions in the bound results."""
MEAN_FIGURE = "weighted"
"""Key of the equal-weighted total in the qualification results (as a run's)."""
MAX_MISSING_SHARE = 0.5
"""A judge that leaves more than this share of its rows unscored fails."""
_FINGERPRINT = "judges-check"
"""Stands in for the run's config fingerprints in the stages' input hashes."""
_INJECTION = "injection"
"""``system`` of the injection rows in the judge input table."""
_FAULT = "fault:"
"""Prefix of the ``system`` of a faulted answer's rows (``fault:number``)."""

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


def _first_documents(config: RunConfig, n: int) -> pa.Table:
    from cube_ray.corpus import iter_document_batches

    batches = list(iter_document_batches(config.corpus, batch_rows=n, limit=n))
    return pa.concat_tables(batches)


def _bound_rows(
    config: RunConfig, docs: pa.Table, engine: Any, *, nonce: str
) -> tuple[pa.Table, pa.Table]:
    """(questions, judge-ready bound rows) of ``docs``, written by ``engine``."""
    from cube_ray.stages import (
        ANSWER_HASH,
        DOC_HASH,
        JUDGE_SOURCE,
        AnswerStage,
        QuestionStage,
        answer_inputs,
        question_inputs,
    )

    def lend(_config: Any) -> Any:
        return BorrowedEngine(engine)

    questions = QuestionStage(
        config.generator,
        template=config.prompts.question,
        nonce=nonce,
        engine_factory=lend,
    )(question_inputs(docs, fingerprint=_FINGERPRINT))
    texts = dict(
        zip(
            docs.column(schema.DOC_ID).to_pylist(),
            docs.column(schema.TEXT).to_pylist(),
            strict=True,
        )
    )
    doc_ids = questions.column(schema.DOC_ID).to_pylist()
    qdocs = questions.select([schema.QUESTION_ID, schema.DOC_ID, schema.QUESTION])
    qdocs = qdocs.append_column(schema.TEXT, pa.array([texts[d] for d in doc_ids]))
    qdocs = qdocs.append_column(DOC_HASH, pa.array(doc_ids, pa.string()))
    answers = AnswerStage(
        config.generator,
        template=config.prompts.answer,
        nonce=nonce,
        engine_factory=lend,
    )(answer_inputs(qdocs, fingerprint=_FINGERPRINT))
    question_of = dict(
        zip(
            questions.column(schema.QUESTION_ID).to_pylist(),
            questions.column(schema.QUESTION).to_pylist(),
            strict=True,
        )
    )
    ok = [r for r in answers.to_pylist() if r[schema.STATUS] == schema.STATUS_OK]
    rows = pa.table(
        {
            schema.QUESTION_ID: [r[schema.QUESTION_ID] for r in ok],
            schema.SYSTEM: [r[schema.SYSTEM] for r in ok],
            schema.ANSWER: [r[schema.ANSWER] for r in ok],
            ANSWER_HASH: [r[schema.CONTENT_HASH] for r in ok],
            schema.QUESTION: [question_of[r[schema.QUESTION_ID]] for r in ok],
            schema.TEXT: [texts[r[schema.DOC_ID]] for r in ok],
            DOC_HASH: [r[schema.DOC_ID] for r in ok],
        },
        schema=pa.schema([(c, pa.string()) for c in JUDGE_SOURCE]),
    )
    return questions, rows


def _injection_cases(rows: pa.Table) -> list[Case]:
    """The patterns applied to each full-bound answer of the sample."""
    bases = [
        (r[schema.TEXT], r[schema.QUESTION], r[schema.ANSWER])
        for r in rows.to_pylist()
        if r[schema.SYSTEM] == schema.FULL
    ]
    return apply_patterns(bases)


def _fault_rows(config: RunConfig, rows: pa.Table) -> list[dict[str, Any]]:
    """The qualification rows of the sample's full-bound answers (section 12).

    Every sampled document is a donor of the others' faults; kinds and seed
    come from the config's ``qualification`` section.
    """
    from cube_ray.qualification import GoldDocument
    from cube_ray.qualification._table import fault_rows

    qual = config.qualification
    if qual is None:
        return []
    full = [r for r in rows.to_pylist() if r[schema.SYSTEM] == schema.FULL]
    docs = {
        r[schema.QUESTION_ID]: GoldDocument.of(r[schema.QUESTION_ID], r[schema.TEXT])
        for r in full
    }
    items = [
        (
            r[schema.QUESTION_ID],
            r[schema.QUESTION_ID],
            r[schema.ANSWER],
            docs[r[schema.QUESTION_ID]],
        )
        for r in full
    ]
    out = fault_rows(
        items, donors=list(docs.values()), kinds=qual.kinds, seed=qual.seed
    )
    question = {r[schema.QUESTION_ID]: r[schema.QUESTION] for r in full}
    for r in out:
        r[schema.QUESTION] = question[r[schema.QUESTION_ID]]
        r[schema.TEXT] = docs[r[schema.QUESTION_ID]].text
    return out


def _judge_table(
    rows: pa.Table,
    cases: Sequence[Case],
    *,
    judge: str,
    dimensions: list[str],
    injection_dimension: str,
    faults: Sequence[dict[str, Any]] = (),
) -> pa.Table:
    """Judge-stage input: bounds and faulted answers, then the injection set.

    The bounds and the faulted answers are scored on every dimension, the
    injection set on one.
    """
    from cube_ray.stages import ANSWER_HASH, DOC_HASH, judge_inputs

    fingerprints = dict.fromkeys(dimensions, _FINGERPRINT)
    bounds = judge_inputs(
        rows, judge=judge, fingerprints=fingerprints, dimensions=dimensions
    )
    injected = pa.table(
        {
            schema.QUESTION_ID: [str(i) for i in range(len(cases))],
            schema.SYSTEM: [_INJECTION] * len(cases),
            schema.ANSWER: [c.answer for c in cases],
            ANSWER_HASH: [str(i) for i in range(len(cases))],
            schema.QUESTION: [c.question for c in cases],
            schema.TEXT: [c.document for c in cases],
            DOC_HASH: [str(i) for i in range(len(cases))],
        }
    )
    injection = judge_inputs(
        injected,
        judge=judge,
        fingerprints={injection_dimension: _FINGERPRINT},
        dimensions=[injection_dimension],
    )
    built = [f for f in faults if f[schema.STATUS] == schema.STATUS_OK]
    faulted = pa.table(
        {
            schema.QUESTION_ID: [f[schema.QUESTION_ID] for f in built],
            schema.SYSTEM: [_FAULT + f["kind"] for f in built],
            schema.ANSWER: [f["faulted"] for f in built],
            ANSWER_HASH: [str(i) for i in range(len(built))],
            schema.QUESTION: [f[schema.QUESTION] for f in built],
            schema.TEXT: [f[schema.TEXT] for f in built],
            DOC_HASH: [f[schema.QUESTION_ID] for f in built],
        },
        schema=rows.schema,
    )
    fault_rows = judge_inputs(
        faulted, judge=judge, fingerprints=fingerprints, dimensions=dimensions
    )
    return pa.concat_tables(
        [bounds, fault_rows.cast(bounds.schema), injection.cast(bounds.schema)]
    )


def qualification(
    scores: Sequence[dict[str, Any]],
    faults: Sequence[dict[str, Any]],
    *,
    dimensions: Sequence[str],
    min_drop: float,
    alpha: float,
) -> dict[str, dict[str, dict[str, Any]]]:
    """Per fault kind and dimension (and the equal-weighted total) the detection.

    ``scores``: the judge's score rows of the full-bound answers and of the
    faulted ones (``system`` = ``fault:<kind>``); ``faults``: the qualification
    rows. Returns ``kind -> figure -> {n, skipped, drop, p_value, detected}``
    (:func:`cube_ray.aggregate.fault_detection`).
    """
    import polars as pl

    from cube_ray.aggregate import fault_detection, qualification_block
    from cube_ray.aggregate._qualification import fixed_weights

    cols = [
        schema.QUESTION_ID,
        schema.SYSTEM,
        schema.JUDGE,
        schema.DIMENSION,
        schema.SCORE,
    ]
    frame = pl.DataFrame(
        [{c: s[c] for c in cols} for s in scores],
        schema={c: pl.Float64 if c == schema.SCORE else pl.String for c in cols},
    )
    original = frame.filter(pl.col(schema.SYSTEM) == schema.FULL)
    faulted = frame.filter(pl.col(schema.SYSTEM).str.starts_with(_FAULT)).with_columns(
        pl.col(schema.SYSTEM).str.strip_prefix(_FAULT)
    )
    table = pl.DataFrame(
        [
            {
                "question_id": f[schema.QUESTION_ID],
                "kind": f["kind"],
                "status": f[schema.STATUS],
            }
            for f in faults
        ],
        schema={"question_id": pl.String, "kind": pl.String, "status": pl.String},
    )
    judges = frame.get_column(schema.JUDGE).unique().to_list()
    detection = fault_detection(
        original,
        faulted,
        table,
        weights=fixed_weights("equal", judges, dimensions),
        min_drop=min_drop,
        alpha=alpha,
    )
    kinds = list(dict.fromkeys(f["kind"] for f in faults))
    skipped = {
        k: sum(f["kind"] == k and f[schema.STATUS] != schema.STATUS_OK for f in faults)
        for k in kinds
    }
    block = qualification_block(
        detection,
        judges=judges,
        kinds=kinds,
        figures=[*dimensions, MEAN_FIGURE],
        skipped=skipped,
    )
    return next(iter(block.values()), {})


def separation(
    zero: Sequence[float], full: Sequence[float], *, options: BoundsOptions
) -> dict[str, Any]:
    """Section 10 bound separation of paired scores (same question at each index).

    ``gap`` is the difference of the trimmed means, ``p_value`` the one-sided
    Wilcoxon signed-rank p of ``full - zero > 0``.

    >>> s = separation([1.0] * 8, [7.0] * 8, options=BoundsOptions())
    >>> s["gap"], s["p_value"] < 0.01, s["separated"]
    (6.0, True, True)
    >>> separation([10.0] * 8, [10.0] * 8, options=BoundsOptions())["separated"]
    False
    """
    import polars as pl

    n = len(zero)
    if n == 0:
        return {
            "n_pairs": 0,
            "zero": None,
            "full": None,
            "gap": None,
            "p_value": 1.0,
            "separated": False,
        }
    frame = pl.DataFrame(
        {
            schema.SYSTEM: [schema.ZERO] * n + [schema.FULL] * n,
            schema.SCORE: [float(x) for x in (*zero, *full)],
        }
    )
    means = dict(
        trimmed_means(frame, by=[schema.SYSTEM], trim=options.trim)
        .select(schema.SYSTEM, "trimmed_mean")
        .iter_rows()
    )
    gap = means[schema.FULL] - means[schema.ZERO]
    p = wilcoxon_greater([f - z for z, f in zip(zero, full, strict=True)])
    return {
        "n_pairs": n,
        "zero": round(means[schema.ZERO], 3),
        "full": round(means[schema.FULL], 3),
        "gap": round(gap, 3),
        "p_value": float(f"{p:.3g}"),
        "separated": separated(gap, p, min_gap=options.min_gap, alpha=options.alpha),
    }


def _bounds(
    scores: list[dict[str, Any]], dimensions: list[str], options: BoundsOptions
) -> dict[str, Any]:
    """Separation per dimension and for the equal-weighted mean of the dimensions."""
    by: dict[tuple[str, str, str], float] = {
        (s[schema.DIMENSION], s[schema.QUESTION_ID], s[schema.SYSTEM]): s[schema.SCORE]
        for s in scores
        if s[schema.SCORE] is not None
    }
    questions = sorted({q for _, q, _ in by})
    out: dict[str, Any] = {}
    for dim in dimensions:
        both = [
            q
            for q in questions
            if (dim, q, schema.ZERO) in by and (dim, q, schema.FULL) in by
        ]
        out[dim] = separation(
            [by[(dim, q, schema.ZERO)] for q in both],
            [by[(dim, q, schema.FULL)] for q in both],
            options=options,
        )
    # The weighted total of section 10, with equal weights: a run's Pearson
    # weights need retrieval ranks, which the check has no system for.
    complete = [
        q
        for q in questions
        if all((d, q, s) in by for d in dimensions for s in schema.BOUND_SYSTEMS)
    ]
    out[MEAN] = separation(
        [
            sum(by[(d, q, schema.ZERO)] for d in dimensions) / len(dimensions)
            for q in complete
        ],
        [
            sum(by[(d, q, schema.FULL)] for d in dimensions) / len(dimensions)
            for q in complete
        ],
        options=options,
    )
    return out


def _fmt(value: float | None) -> str:
    return "-" if value is None else f"{value:.3g}"


def _verdict(result: dict[str, Any]) -> None:
    """Fill ``failures`` and ``warnings`` of one judge's result in place."""
    failures, warnings = result["failures"], result["warnings"]
    scored, total = result["scored"], result["rows"]
    if total and (total - scored) > MAX_MISSING_SHARE * total:
        failures.append(
            f"{total - scored} of {total} rows got no score (statuses: "
            f"{result['statuses']})"
        )
    mean = result["bounds"][MEAN]
    if not mean["separated"]:
        failures.append(
            f"{NOT_SEPARATED}: gap {mean['gap']} points, p = {mean['p_value']} "
            f"over {mean['n_pairs']} questions"
        )
    for dim, s in result["bounds"].items():
        if dim != MEAN and not s["separated"]:
            warnings.append(
                f"{dim}: {NOT_SEPARATED} (gap {s['gap']}, p = {s['p_value']})"
            )
    for kind, dim in result.get("misses", []):
        test = result["qualification"][kind][dim]
        failures.append(
            f"{MISSES_FAULTS}: {kind} on {dim} (drop {_fmt(test['drop'])}, "
            f"p = {_fmt(test['p_value'])})"
        )
    for kind, dim in result.get("untested", []):
        n = result["qualification"][kind][dim]["n"]
        warnings.append(
            f"{TOO_FEW_FAULTS}: {kind} on {dim} (only {n} faulted answers in the "
            "sample could be scored; a larger --sample may hold more)"
        )
    for pattern, row in result["injection"].items():
        shift = row["shift"]
        if shift > MAX_SHIFT:
            row["flag"] = "raises"
            failures.append(
                f"injection {pattern} raises the mean score by {shift:+.2f}"
            )
        elif shift < -MAX_SHIFT:
            row["flag"] = "lowers"
            warnings.append(
                f"injection {pattern} lowers the mean score by {shift:+.2f}"
            )
        else:
            row["flag"] = None


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
    from cube_ray.stages import JudgeStage

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
        template=config.prompts.judge,
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
    from cube_ray.aggregate import MIN_NONZERO_PAIRS
    from cube_ray.engines import build_engine
    from cube_ray.prompts import fresh_nonce

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
                f[schema.STATUS] == schema.STATUS_OK for f in faults
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
    from cube_ray.engines import build_engine

    engine_config = config.judges[name]
    n_faults = sum(f[schema.STATUS] == schema.STATUS_OK for f in faults)
    say(
        f"judge {name} ({engine_config.backend}): {rows.num_rows} bound answers"
        f" + {n_faults} faulted answers x {len(config.dimensions)} dimensions"
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
