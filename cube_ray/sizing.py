"""``cube-ray plan``: the sample size a target interval needs, and its cost.

From a pilot run (CUBE_METHOD.md section 11): per system, the questions needed
for a 95 % half-width H of the headline CuBE, ``n = ceil(n0 * (h0 / H)^2)``
(:func:`required_n`), where h0 is the pilot's bootstrap half-width at n0
questions (:func:`pilot_half_width`); and what a run of that size, and of the
whole corpus, costs at what the pilot measured per question: prompt and
completion tokens per stage and engine (the run's tables), engine busy seconds
per token (``manifest.json``'s ``engines``), GPUs per engine
(``pool.num_gpus``) and ``price_per_mtok`` of an engine. All of it
extrapolates from the pilot; the run of the planned size re-measures its
interval.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import polars as pl

from cube_ray import schema
from cube_ray.config import RunConfig
from cube_ray.engines.config import engine_price
from cube_ray.engines.identity import engine_id
from cube_ray.errors import InputError
from cube_ray.manifest import MANIFEST, Manifest
from cube_ray.sample import load_strata, read_sample
from cube_ray.systems.kinds import system_kind
from cube_ray.tables import read_answers, read_scores

__all__ = [
    "COST_KEYS",
    "NO_SPREAD",
    "EngineUse",
    "PilotWidth",
    "cost_at",
    "format_sample_plan",
    "measured_uses",
    "no_spread_error",
    "pilot_half_width",
    "pilot_pair_width",
    "plan_sample",
    "required_n",
]

COST_KEYS = (
    "questions",
    "prompt_tokens",
    "completion_tokens",
    "engine_hours",
    "gpu_hours",
    "api_cost",
)
"""The columns of a cost estimate (``cube-ray plan`` and ``--dry-run``)."""

HALF_WIDTH_RANGE = (0.01, 100.0)
"""Target half-widths ``cube-ray plan`` accepts, in CuBE points. CuBE is a
percentage (0-100 within bounds, CUBE_METHOD.md section 7): below 0.01 points
the sample runs to billions of questions per pilot question, and no interval
is wider than 100."""


def required_n(n_pilot: int, half_width_pilot: float, target: float) -> int:
    """Questions for a 95 % half-width ``target``: ``ceil(n0 * (h0 / H)^2)``.

    The half-width of a mean shrinks as ``1 / sqrt(n)``.

    >>> required_n(60, 10.0, 5.0), required_n(60, 10.0, 20.0), required_n(100, 3.3, 2.0)
    (240, 15, 273)
    """
    low, high = HALF_WIDTH_RANGE
    if not low <= target <= high:  # NaN included
        msg = f"the target half-width must be {low} to {high}, got {target}"
        raise ValueError(msg)
    # Round first: 60 * (10 / 5)^2 is 240.00000000000003 in floating point.
    return max(1, math.ceil(round(n_pilot * (half_width_pilot / target) ** 2, 9)))


@dataclass(frozen=True)
class PilotWidth:
    """The pilot's interval of one system's CuBE."""

    system: str
    n_pilot: int
    """Questions of the pilot (of its sample)."""
    half_width: float | None
    """Half the 95 % bootstrap interval's width; None when undefined."""
    judge: str | None = None
    """None: the headline (the mean over the judges used). A judge: that
    judge's own CuBE, because no judge separates the bounds."""


def pilot_half_width(run_dir: str | Path) -> list[PilotWidth]:
    """The pilot's bootstrap half-width per system, at its number of questions.

    The interval is the headline's, as the summary records it
    (``intervals.systems.<system>.cube.half_width``: within strata for a
    sampled run, CUBE_METHOD.md section 11); a summary written without
    intervals (``--no-report``) gets them computed here the same way (1000
    resamples, seed 0). When no judge separates a system's bounds there is no
    headline; each judge's own CuBE interval is given instead.

    Raises:
        InputError: The run has no summary or no tables.
    """
    run, n_pilot, intervals = _pilot(run_dir)
    out: list[PilotWidth] = []
    for system in run.systems:
        cell = intervals.systems.get(system)
        if run.no_verdict(system) is None:
            half = cell.cube.half_width if cell is not None else None
            out.append(PilotWidth(system, n_pilot, half))
            continue
        per_judge = cell.per_judge if cell is not None else {}
        for judge, interval in sorted(per_judge.items()):
            out.append(PilotWidth(system, n_pilot, interval.half_width, judge=judge))
    return out


def _pilot(run_dir: str | Path) -> tuple[Any, int, Any]:
    """The pilot's run data, its number of questions and its intervals.

    The intervals as the summary records them, else computed with 1000
    resamples, seed 0.

    Raises:
        InputError: The run has no summary or no tables.
    """
    # lazy: loads cube_ray.aggregate (scipy, polars), which importing sizing does not
    from cube_ray.aggregate import headline_intervals
    from cube_ray.report import load_run

    run = load_run(run_dir)  # rows of the run's current sample only
    if run.answers is None or run.scores is None or not run.systems:
        msg = "the run has no answers and scores to measure an interval from"
        raise InputError(msg, path=str(run_dir))
    n_pilot = run.answers.get_column(schema.QUESTION_ID).n_unique()
    intervals = run.summary.intervals or headline_intervals(
        run.answers,
        run.scores,
        run.summary,
        n_resamples=1000,
        seed=0,
        strata=load_strata(run_dir),
    )
    return run, n_pilot, intervals


NO_SPREAD = 1e-9
"""CuBE points below which a pilot's half-width is no spread at all."""


def no_spread_error(what: str, *, n_pilot: int, path: str) -> InputError:
    """Why a zero-width pilot interval cannot be extrapolated, and what to do."""
    msg = (
        f"{what}: the pilot's 95 % interval has zero width (every resample of its "
        f"{n_pilot} questions gave the same figure), so it measures no spread to "
        "extrapolate from, and n = n0 * (h0 / H)^2 would be 0 questions. Run a "
        "larger pilot, with questions that differ (more documents, e.g. "
        "sample.size 30 or more, or a question file of its own), then plan again"
    )
    return InputError(msg, path=path)


def pilot_pair_width(run_dir: str | Path, first: str, second: str) -> dict[str, Any]:
    """The pilot's paired interval of ``CuBE(first) - CuBE(second)``.

    The comparison the summary records (``intervals.comparisons``, the same
    resamples for both systems, CUBE_METHOD.md section 10); sized like a
    system's CuBE (:func:`required_n`) on the questions both answered.

    Raises:
        InputError: A system is not in the run, the two have no comparison (no
            judge in both headlines), or its interval is undefined or has zero
            width.
    """
    run, _, intervals = _pilot(run_dir)
    for name in (first, second):
        if name not in run.systems:
            msg = (
                f"--pair: {name!r} is not a system of this run; its systems are "
                f"{list(run.systems)}"
            )
            raise InputError(msg, path=str(run_dir))
    if first == second:
        msg = f"--pair names {first!r} twice; name two different systems"
        raise InputError(msg, path=str(run_dir))
    found = next(
        (c for c in intervals.comparisons if {c.first, c.second} == {first, second}),
        None,
    )
    what = f"the paired difference {first} - {second}"
    if found is None or found.difference is None or found.interval.half_width is None:
        why = (
            found.reason.text
            if found is not None and found.reason is not None
            else "the interval is undefined (too few resamples where both CuBEs "
            "are defined)"
        )
        msg = f"{what} has no interval to plan from: {why}"
        raise InputError(msg, path=str(run_dir))
    if found.interval.half_width < NO_SPREAD:
        raise no_spread_error(what, n_pilot=found.n_questions, path=str(run_dir))
    sign = 1.0 if found.first == first else -1.0
    return {
        "first": first,
        "second": second,
        "difference": round(sign * found.difference, 4),
        "n_pilot": found.n_questions,
        "half_width_pilot": round(found.interval.half_width, 4),
    }


@dataclass(frozen=True)
class EngineUse:
    """What one stage's engine used per question in the pilot."""

    stage: str
    engine: str
    """The engine (its id in ``manifest.json``), or ``-`` for none of the run's
    (a system answering over HTTP or from a file)."""
    prompt_per_q: float
    completion_per_q: float
    seconds_per_token: float | None
    """Engine busy seconds per (prompt + completion) token in the pilot."""
    num_gpus: float
    price: tuple[float, float] | None
    """Price per million (prompt, completion) tokens, if configured."""


def _stage_engines(config: RunConfig) -> dict[str, Any]:
    """Stage label -> the engine config it calls (the method's stage graph)."""
    stages: dict[str, Any] = {
        "questions": config.generator,
        "answers:bounds": config.generator,
    }
    for system in config.systems:
        if system_kind(system).uses_generator:
            stages[f"answers:{system.name}"] = config.generator
    for judge, engine in config.judges.items():
        stages[f"scores:{judge}"] = engine
    return stages


def _tokens(frame: pl.DataFrame, by: pl.Expr) -> dict[str, tuple[int, int]]:
    """Stage label -> (prompt, completion) tokens summed over ``frame``."""
    cols = [schema.PROMPT_TOKENS, schema.COMPLETION_TOKENS]
    for c in cols:
        if c not in frame.columns:
            frame = frame.with_columns(pl.lit(None, dtype=pl.Int64).alias(c))
    sums = frame.group_by(by.alias("stage")).agg(
        pl.col(c).cast(pl.Int64).fill_null(0).sum() for c in cols
    )
    return {r[0]: (int(r[1]), int(r[2])) for r in sums.iter_rows()}


def measured_uses(run_dir: str | Path, config: RunConfig) -> list[EngineUse]:
    """Per stage: tokens per question, engine speed, GPUs and price.

    Tokens come from the tables (rows of the current sample), speed from the
    last invocation's engine busy seconds over the tokens it wrote.
    """
    root = Path(run_dir)
    manifest = Manifest.load(root)
    answers = read_answers(root / "answers")
    scores = read_scores(root / "scores")
    q_files = sorted((root / "questions").glob("part-*.parquet"))
    questions = pl.read_parquet(q_files) if q_files else pl.DataFrame()
    strata = load_strata(root)
    if strata is not None:
        ids = strata.get_column(schema.QUESTION_ID).implode()
        answers = answers.filter(pl.col(schema.QUESTION_ID).cast(pl.String).is_in(ids))
        scores = scores.filter(pl.col(schema.QUESTION_ID).cast(pl.String).is_in(ids))
        if questions.height:
            questions = questions.filter(pl.col(schema.QUESTION_ID).is_in(ids))
    n_q = max(answers.get_column(schema.QUESTION_ID).n_unique(), 1)
    system = pl.col(schema.SYSTEM).cast(pl.String)
    tokens = {
        **_tokens(
            answers,
            pl.when(system.is_in([schema.ZERO, schema.FULL]))
            .then(pl.lit("answers:bounds"))
            .otherwise(pl.lit("answers:") + system),
        ),
        **_tokens(scores, pl.lit("scores:") + pl.col(schema.JUDGE).cast(pl.String)),
    }
    if questions.height and config.questions.source == "generate":
        tokens.update(_tokens(questions, pl.lit("questions")))
    engines, written = manifest.engines, manifest.stages
    stage_engines = _stage_engines(config)
    out: list[EngineUse] = []
    for stage, (prompt, completion) in sorted(tokens.items()):
        engine = stage_engines.get(stage)
        eid = engine_id(engine) if engine is not None else "-"
        speed = None
        stats = engines.get(eid)
        busy = stats.busy_s if stats is not None else None
        served = stats.stages if stats is not None else []
        done = sum(written[s].tokens for s in served if s in written)
        if busy is not None and done > 0:
            speed = busy / done
        out.append(
            EngineUse(
                stage=stage,
                engine=eid,
                prompt_per_q=prompt / n_q,
                completion_per_q=completion / n_q,
                seconds_per_token=speed,
                num_gpus=float(engine.pool.num_gpus) if engine is not None else 0.0,
                price=engine_price(engine),
            )
        )
    return out


def cost_at(uses: list[EngineUse], questions: int) -> dict[str, Any]:
    """The cost of a run of ``questions`` questions at the measured rates.

    ``engine_hours``/``gpu_hours`` are None when a stage's engine speed is
    unknown, ``api_cost`` when no engine has a price (unpriced engines add 0).

    >>> u = EngineUse("scores:j", "e", 1000.0, 10.0, 0.001, 1.0, (1.0, 2.0))
    >>> cost_at([u], 100)
    {'questions': 100, 'prompt_tokens': 100000, 'completion_tokens': 1000, 'engine_hours': 0.028, 'gpu_hours': 0.028, 'api_cost': 0.102}
    """  # noqa: E501
    prompt = sum(u.prompt_per_q for u in uses) * questions
    completion = sum(u.completion_per_q for u in uses) * questions
    hours: float | None = 0.0
    gpu: float | None = 0.0
    cost: float | None = None
    for u in uses:
        tok = (u.prompt_per_q + u.completion_per_q) * questions
        if u.engine != "-":
            if u.seconds_per_token is None or hours is None or gpu is None:
                hours = gpu = None
            else:
                h = tok * u.seconds_per_token / 3600.0
                hours += h
                gpu += h * u.num_gpus
        if u.price is not None:
            cost = (cost or 0.0) + (
                u.prompt_per_q * u.price[0] + u.completion_per_q * u.price[1]
            ) * questions / 1e6
    return {
        "questions": questions,
        "prompt_tokens": round(prompt),
        "completion_tokens": round(completion),
        "engine_hours": None if hours is None else round(hours, 3),
        "gpu_hours": None if gpu is None else round(gpu, 3),
        "api_cost": None if cost is None else round(cost, 3),
    }


def run_config(run_dir: str | Path, config_path: str | None = None) -> RunConfig:
    """The run's config: ``config_path`` if given, else the manifest's record."""
    if config_path is not None:
        return RunConfig.from_yaml(config_path)
    root = Path(run_dir)
    recorded = Manifest.load(root).config
    if recorded is None:
        msg = f"{MANIFEST} records no config; pass --config CONFIG"
        raise InputError(msg, path=str(root / MANIFEST))
    return RunConfig.from_dict(recorded, source=f"{root / MANIFEST} (config)")


def plan_sample(
    run_dir: str | Path,
    *,
    half_width: float,
    corpus_size: int | None = None,
    config_path: str | None = None,
    pair: tuple[str, str] | None = None,
) -> dict[str, Any]:
    """``cube-ray plan``'s JSON: ``{"systems": {...}, "cost": {...}}``.

    With ``pair`` (``--pair A B``): ``{"pair": {...}, "cost": {...}}``, the
    paired difference ``A - B`` sized instead (:func:`pilot_pair_width`).

    ``systems.<s>`` = ``{n_pilot, half_width_pilot, n_required}``; a system
    with no headline (no judge separates its bounds) gives one entry per
    judge, ``<s>/<judge>``. ``cost`` has the pilot's own size (``pilot``),
    the largest ``n_required`` (``required``) and the whole corpus
    (``corpus``: ``corpus_size``, else the sample's population, else the
    run's documents).
    """
    config = run_config(run_dir, config_path)
    widths = pilot_half_width(run_dir)
    flat = [w for w in widths if w.half_width is not None and w.half_width < NO_SPREAD]
    if flat and pair is None:
        names = ", ".join(
            w.system if w.judge is None else f"{w.system} (judge {w.judge})"
            for w in flat
        )
        raise no_spread_error(names, n_pilot=flat[0].n_pilot, path=str(run_dir))
    systems: dict[str, dict[str, Any]] = {}
    for w in widths:
        key = w.system if w.judge is None else f"{w.system}/{w.judge}"
        systems[key] = {
            "n_pilot": w.n_pilot,
            "half_width_pilot": None
            if w.half_width is None
            else round(w.half_width, 4),
            "n_required": None
            if w.half_width is None
            else required_n(w.n_pilot, w.half_width, half_width),
        }
    if corpus_size is None:
        state = read_sample(Path(run_dir))
        if state is not None:
            corpus_size = int(state.block["population"])
        else:
            docs = sorted((Path(run_dir) / "documents").glob("part-*.parquet"))
            corpus_size = pl.scan_parquet(docs).select(pl.len()).collect().item()
    uses = measured_uses(run_dir, config)
    n_pilot = widths[0].n_pilot if widths else 0
    needed = [v["n_required"] for v in systems.values() if v["n_required"]]
    planned: dict[str, Any] = {"systems": systems}
    if pair is not None:
        paired = pilot_pair_width(run_dir, *pair)
        paired["n_required"] = required_n(
            paired["n_pilot"], paired["half_width_pilot"], half_width
        )
        planned = {"pair": paired}
        needed = [paired["n_required"]]
    cost = {"pilot": cost_at(uses, n_pilot)}
    if needed:
        cost["required"] = cost_at(uses, max(needed))
    cost["corpus"] = cost_at(uses, int(corpus_size))
    return {**planned, "cost": cost}


def _cell(value: Any) -> str:
    """A table cell: thousands separated, small figures to 3 significant digits.

    >>> _cell(None), _cell(1234567), _cell(11.123), _cell(0.000123), _cell(0.0)
    ('n/a', '1,234,567', '11.1', '0.000123', '0')
    """
    if value is None:
        return "n/a"
    if isinstance(value, float) and abs(value) < 1000:
        return f"{value:.3g}"
    return f"{value:,.0f}" if isinstance(value, float) else f"{value:,}"


def format_costs(cost: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """The cost table (one row per size label), as text lines."""
    head = f"{'size':10s}" + "".join(f" {k:>17s}" for k in COST_KEYS)
    lines = [head]
    for label, row in cost.items():
        lines.append(
            f"{label:10s}" + "".join(f" {_cell(row[k]):>17s}" for k in COST_KEYS)
        )
    return lines


def format_sample_plan(plan: Mapping[str, Any], *, half_width: float) -> str:
    """``cube-ray plan``'s text: sizes per system, costs, and what they rest on."""
    lines = [f"Sample size for a 95% half-width of {half_width:g} CuBE points:"]
    pair = plan.get("pair")
    if pair is not None:
        lines.append(
            f"  the paired difference {pair['first']} - {pair['second']} "
            f"({_cell(pair['difference'])} points in the pilot): pilot "
            f"{pair['n_pilot']} shared questions, half-width "
            f"{_cell(pair['half_width_pilot'])} -> {_cell(pair['n_required'])} "
            "questions (both systems answer each)"
        )
    for key, v in plan.get("systems", {}).items():
        system, _, judge = key.partition("/")
        what = (
            f"{system} (judge {judge}'s own CuBE: no judge separates the bounds, "
            "so there is no headline to plan for)"
            if judge
            else system
        )
        if v["half_width_pilot"] is None:
            lines.append(
                f"  {what}: pilot {v['n_pilot']} questions, no interval (the "
                "CuBE is undefined in most resamples: no retrieved questions or "
                "degenerate bounds); no size can be planned from it"
            )
            continue
        lines.append(
            f"  {what}: pilot {v['n_pilot']} questions, half-width "
            f"{_cell(v['half_width_pilot'])} -> {_cell(v['n_required'])} questions"
        )
    required = plan["cost"].get("required")
    corpus = plan["cost"].get("corpus")
    if required and corpus and required["questions"] > corpus["questions"]:
        lines.append(
            f"  The largest n_required ({required['questions']:,}) exceeds the "
            f"corpus ({corpus['questions']:,} documents): even the whole corpus "
            "gives a wider interval than asked."
        )
    lines.append("")
    lines.extend(format_costs(plan["cost"]))
    lines.append("")
    lines.append(
        "This extrapolates from the pilot: the half-width shrinks as 1/sqrt(n) "
        "and every question costs what the pilot's did (tokens per stage, engine "
        "busy seconds per token); the run of the planned size re-measures its "
        "interval. API cost counts only engines with price_per_mtok; engine- and "
        "GPU-hours are busy time inside engine calls, not wall time."
    )
    return "\n".join(lines)
