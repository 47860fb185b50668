"""The CuBE method as data: its stages, what each reads, calls and writes.

``stage_graph(config, corpus_fp=...)`` is the one definition of the method's
stages (CUBE_METHOD.md): the generator's questions, the zero/full bounds,
every system under test, every judge. Each :class:`StageSpec` names its input
rows (:class:`Inputs`: a source table and the function that expands it into
stage rows, with the fingerprint that goes into each row's hash), the stage
class and its constructor arguments, the engines it calls, the stages that
must finish before it starts, and its output table (whose key is
``KEYS[table]``). The run (``cube_ray.pipeline.run``) walks it, and so does
``--dry-run`` (``cube_ray.plan``). No Ray here.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Final, Literal

import pyarrow as pa

from cube_ray.config import RunConfig, engine_fingerprint
from cube_ray.corpus import stable_hash
from cube_ray.engines.config import PoolConfig
from cube_ray.errors import ConfigError
from cube_ray.prompts import load_template
from cube_ray.stages import (
    KEYS,
    AnswerStage,
    JudgeStage,
    QuestionStage,
    SystemStage,
    answer_inputs,
    judge_inputs,
    question_inputs,
    system_inputs,
)
from cube_ray.stages.qualify import (
    FaultStage,
    fault_inputs,
    qualification_judge_inputs,
)
from cube_ray.systems.kinds import system_kind

__all__ = [
    "ANSWERS",
    "DOCUMENTS",
    "FAULTS",
    "QUALIFICATION",
    "QUALIFICATION_SCORES",
    "QUALIFICATION_TABLES",
    "QUESTIONS",
    "SCORES",
    "TABLES",
    "Inputs",
    "StageSpec",
    "stage_graph",
    "template_text",
]

DOCUMENTS: Final = "documents"
QUESTIONS: Final = "questions"
ANSWERS: Final = "answers"
SCORES: Final = "scores"
TABLES = (DOCUMENTS, QUESTIONS, ANSWERS, SCORES)
QUALIFICATION: Final = "qualification"
"""The faulted answers (CUBE_METHOD.md section 12; config ``qualification``)."""
QUALIFICATION_SCORES: Final = "qualification_scores"
"""The judges' scores of the faulted answers and their controls (``system`` =
the fault kind, or ``<kind>:control``)."""
CONTROLS: Final = "controls-1"
"""Version of the fault rows' layout in the fault stage's fingerprint: each
fault with its control (CUBE_METHOD.md section 12, "Controls")."""
QUALIFICATION_TABLES = (QUALIFICATION, QUALIFICATION_SCORES)
FAULTS: Final = "faults"
"""Source of the fault stage: the sampled full-bound answers."""

Source = Literal[
    "documents", "questions", "qdocs", "answers", "faults", "qualification"
]
"""Where a stage's rows come from: ``documents``; ``questions``; ``qdocs``
(questions joined with their gold document); ``answers`` (every answer joined
with its question and gold document); ``faults`` (the full-bound answers of the
qualification sample, with their gold documents); ``qualification`` (the built
faults with their questions and gold documents)."""


@dataclass(frozen=True)
class Inputs:
    """How a stage's input rows are built from a source table."""

    source: Source
    expand: Callable[..., pa.Table]
    """Source rows -> stage rows with their ``_input_hash`` (``cube_ray.stages``)."""
    kwargs: dict[str, Any]
    """Arguments of ``expand``: the fingerprint(s) that go into each row's hash."""
    per_row: int = 1
    """Stage rows per source row (the bounds: 2; a judge: one per dimension)."""
    by_wave: bool = True
    """Each wave of the run gets its own share of the rows; False: every wave
    gets all of them (the fault stage: each fault needs every sampled
    document as a donor; rows already written are skipped, so a later wave
    only adds what its answers made possible)."""


@dataclass(frozen=True)
class StageSpec:
    """One stage of the method; the runner (``cube_ray.pipeline.runner``) runs it."""

    label: str
    """Name in the manifest and in part file names (``answers:bounds``)."""
    table: str
    """Output table; rows are keyed by ``KEYS[table]``."""
    stage_cls: type[Any]
    """The stage class (``cube_ray.stages``), built once per stage actor (or,
    for a light stage, once per Ray worker process that runs its tasks)."""
    stage_kwargs: dict[str, Any]
    """Its constructor arguments (the run adds ``call_log``, ``engine_factory``)."""
    inputs: Inputs
    pool: PoolConfig
    """The stage's pool (its actors, or its tasks when light); ``batch_size`` =
    rows per engine call."""
    engines: tuple[Any, ...] = ()
    """Engine configs it calls, each served by the job's shared pool."""
    after: tuple[str, ...] = ()
    """Labels of the stages whose output it reads."""
    own_actors: bool = False
    """Its actors do work of their own (a system's retrieval or HTTP calls), so
    they take ``pool``'s CPUs, GPUs and resources; otherwise the stage is light:
    Ray tasks of ``ray.task_num_cpus``, and the engine pool holds the resources."""
    extra: dict[str, Any] = field(default_factory=dict)
    """What ``--dry-run`` needs to know (the system config of a system stage)."""
    owners: tuple[tuple[str, Any], ...] = ()
    """The config sections that do its work, by config path (``generator``,
    ``judges.j1``, ``systems[rag]``) with their models: a warning about its
    failed rows names them and the setting to change."""

    @property
    def key(self) -> tuple[str, ...]:
        """The output table's key columns."""
        return KEYS[self.table]

    @property
    def out_schema(self) -> pa.Schema:
        """Columns written to the output table."""
        schema: pa.Schema = self.stage_cls.output_schema
        return schema


def template_text(name: str) -> str:
    """A prompt template's text (its part of the fingerprints)."""
    try:
        return load_template(name).template
    except (OSError, FileNotFoundError) as exc:
        msg = f"prompt template {name!r} not found ({exc}); fix prompts.* in the config"
        raise ConfigError(msg) from exc


def _light(engine: Any) -> PoolConfig:
    """The pool of a stage whose only work is its engine's (held elsewhere).

    Its Ray tasks (``ray.task_num_cpus`` each) keep two batches queued per
    engine host: at most ``max_size`` of them run at once.
    """
    pool: PoolConfig = engine.pool
    return PoolConfig(
        min_size=1,
        max_size=pool.max_size * pool.max_tasks_in_flight_per_actor,
        num_cpus=0,  # replaced by ray.task_num_cpus when run
        batch_size=pool.batch_size,
    )


def _judge_pool(engine: Any, dimensions: int) -> PoolConfig:
    """A judge stage's pool; under ``all_dimensions`` a batch holds whole answers.

    One call serves every dimension row of an answer that its batch holds, so
    the batch size is rounded up to a multiple of the dimensions (the rows of
    an answer come one after the other): one call per answer, not two for an
    answer cut in half.
    """
    pool = _light(engine)
    if getattr(engine, "protocol", "score") != "all_dimensions" or dimensions < 2:
        return pool
    size = -(-pool.batch_size // dimensions) * dimensions
    return pool.model_copy(update={"batch_size": size})


def stage_graph(
    config: RunConfig, *, corpus_fp: str = "", documents_path: str = ""
) -> list[StageSpec]:
    """The method's stages in an order that respects ``after``.

    ``corpus_fp`` and ``documents_path`` (the run's ``documents/``) are the
    run's; a dry run leaves them empty.
    """
    gen = config.generator
    gen_fp = engine_fingerprint(gen)
    answer_tpl = template_text(config.prompts.answer)
    specs: list[StageSpec] = []
    first: tuple[str, ...] = ()
    if config.questions.source != "file":
        fp = stable_hash(gen_fp, template_text(config.prompts.question))
        specs.append(
            StageSpec(
                QUESTIONS,
                QUESTIONS,
                QuestionStage,
                {"engine": gen, "template": config.prompts.question},
                Inputs(DOCUMENTS, question_inputs, {"fingerprint": fp}),
                _light(gen),
                engines=(gen,),
                owners=(("generator", gen),),
            )
        )
        first = (QUESTIONS,)
    specs.append(
        StageSpec(
            "answers:bounds",
            ANSWERS,
            AnswerStage,
            {"engine": gen, "template": config.prompts.answer},
            Inputs(
                "qdocs",
                answer_inputs,
                {"fingerprint": stable_hash(gen_fp, answer_tpl)},
                per_row=2,
            ),
            _light(gen),
            engines=(gen,),
            after=first,
            owners=(("generator", gen),),
        )
    )
    for system in config.systems:
        kind = system_kind(system)
        parts = [
            json.dumps(
                # ``model`` only declares who wrote the answers (for flags).
                system.model_dump(mode="json", exclude={"pool", "model"}),
                sort_keys=True,
            ),
            answer_tpl,
            *kind.fingerprint_parts(system, generator_fp=gen_fp, corpus_fp=corpus_fp),
        ]
        specs.append(
            StageSpec(
                f"answers:{system.name}",
                ANSWERS,
                SystemStage,
                {
                    "system": system,
                    "documents_path": documents_path,
                    "generator": gen,
                    "answer_template": config.prompts.answer,
                },
                Inputs(
                    "questions",
                    system_inputs,
                    {"system": system.name, "fingerprint": stable_hash(*parts)},
                ),
                system.pool,
                engines=(gen,) if kind.uses_generator else (),
                after=first,
                own_actors=True,
                extra={"system": system},
                owners=(
                    (f"systems[{system.name}]", system),
                    *((("generator", gen),) if kind.uses_generator else ()),
                ),
            )
        )
    answer_stages = tuple(s.label for s in specs if s.table == ANSWERS)
    rubrics = config.rubrics()
    dims = list(rubrics)
    for judge, engine in config.judges.items():
        fps = _judge_fingerprints(config, engine)
        specs.append(
            StageSpec(
                f"scores:{judge}",
                SCORES,
                JudgeStage,
                {
                    "judge": judge,
                    "engine": engine,
                    "rubrics": rubrics,
                    "template": _judge_template(config, engine),
                },
                Inputs(
                    ANSWERS,
                    judge_inputs,
                    {"judge": judge, "fingerprints": fps, "dimensions": dims},
                    per_row=len(dims),
                ),
                _judge_pool(engine, len(dims)),
                engines=(engine,),
                after=answer_stages,
                owners=((f"judges.{judge}", engine),),
            )
        )
    if config.qualification is not None:
        specs += _qualification_specs(config)
    return specs


def _judge_template(config: RunConfig, engine: Any) -> str:
    """The judge template of the engine's protocol (CUBE_METHOD.md section 14)."""
    return config.prompts.judge_template(getattr(engine, "protocol", "score"))


def _judge_fingerprints(config: RunConfig, engine: Any) -> dict[str, str]:
    """Dimension -> hash of (judge engine, its protocol's template, rubric).

    The same for a judge's scores of the answers and of the faulted answers.
    Under ``all_dimensions`` a dimension's score depends on every rubric (one
    prompt holds them all), so each dimension's hash covers all of them.
    """
    rubrics = config.rubrics()
    efp = engine_fingerprint(engine)
    tpl = template_text(_judge_template(config, engine))
    if getattr(engine, "protocol", "score") == "all_dimensions":
        every = "\x00".join(f"{d}\x00{r}" for d, r in rubrics.items())
        return {d: stable_hash(efp, tpl, every) for d in rubrics}
    return {d: stable_hash(efp, tpl, r) for d, r in rubrics.items()}


def _qualification_specs(config: RunConfig) -> list[StageSpec]:
    """The fault stage after the bounds, and one judge stage per qualified judge.

    The judges score the faulted answers with the run's own prompt, rubrics and
    engine pools (CUBE_METHOD.md section 12); their rows resume like any other.
    """
    qual = config.qualification
    assert qual is not None
    # CONTROLS: the rows of a run written before controls are rebuilt.
    fault_fp = stable_hash(
        json.dumps(
            qual.model_dump(mode="json", exclude={"min_drop", "judges", "certify_on"}),
            sort_keys=True,
        ),
        CONTROLS,
    )
    pool = PoolConfig(min_size=1, max_size=1, num_cpus=0, batch_size=256)
    specs = [
        StageSpec(
            QUALIFICATION,
            QUALIFICATION,
            FaultStage,
            {},
            Inputs(
                FAULTS,
                fault_inputs,
                {"kinds": list(qual.kinds), "seed": qual.seed, "fingerprint": fault_fp},
                per_row=2 * len(qual.kinds),  # each fault and its control
                by_wave=False,
            ),
            pool,
            after=("answers:bounds",),
        )
    ]
    dims = [d.name for d in config.dimensions]
    rubrics = config.rubrics()
    for judge in qual.qualified(list(config.judges)):
        engine = config.judges[judge]
        specs.append(
            StageSpec(
                f"{QUALIFICATION}:{judge}",
                QUALIFICATION_SCORES,
                JudgeStage,
                {
                    "judge": judge,
                    "engine": engine,
                    "rubrics": rubrics,
                    "template": _judge_template(config, engine),
                },
                Inputs(
                    QUALIFICATION,
                    qualification_judge_inputs,
                    {
                        "judge": judge,
                        "fingerprints": _judge_fingerprints(config, engine),
                        "dimensions": dims,
                    },
                    per_row=len(dims),
                ),
                _judge_pool(engine, len(dims)),
                engines=(engine,),
                after=(QUALIFICATION,),
            )
        )
    return specs
