"""``_Driver``: one run on the driver, composed of collaborators over one state.

The driver owns the run's :class:`~cube_ray.pipeline.state.RunState` and
builds its collaborators, each given the state and the collaborators it uses:

| collaborator | owns |
|---|---|
| ``data`` (``DataOps``) | Ray Data reads, joins, light maps, part-file writers |
| ``sample`` (``SampleSelection``) | the run's sample: strata, draw, ``sample/`` |
| ``intake`` (``Intake``) | the corpus, question and QA files; systems' set-up |
| ``sources`` (``StageSources``) | each stage's source table, one wave at a time |
| ``compaction`` (``Compaction``) | the rows left to do; dropping stale rows |
| ``runner`` (``StageRunner``) | one stage spec, with retries |
| ``engines`` (``EnginePools``) | the engine pools the stages share |

The driver itself walks the stage graph (``schedule``): it builds each
stage's inputs from its recipe (``method.Inputs``) and hands them to the
runner. ``run_pipeline`` (``run``) owns the run around it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from cube_ray.config import RunConfig
from cube_ray.console import console
from cube_ray.engines.identity import engine_id
from cube_ray.pipeline.compaction import Compaction
from cube_ray.pipeline.data import DataOps
from cube_ray.pipeline.engine_pool import EnginePools
from cube_ray.pipeline.intake import Intake
from cube_ray.pipeline.method import (
    ANSWERS,
    DOCUMENTS,
    QUESTIONS,
    StageSpec,
    stage_graph,
)
from cube_ray.pipeline.parts import StageStats, part_files
from cube_ray.pipeline.retrieval_check import (
    EARLY_MIN_ROWS,
    check_system_ids,
    first_answer_line,
)
from cube_ray.pipeline.runner import StageRunner
from cube_ray.pipeline.sampling import SampleSelection
from cube_ray.pipeline.schedule import run_graph
from cube_ray.pipeline.sources import StageSources
from cube_ray.pipeline.state import RunOptions, RunState
from cube_ray.preflight import stage_cpus
from cube_ray.systems.kinds import system_kind

__all__ = ["_Driver"]


@dataclass(frozen=True)
class _Step:
    """One stage over one wave of the records (all of them when ``waves`` is 1).

    >>> from types import SimpleNamespace as S
    >>> judge = S(label="scores:j1", after=("answers:bounds", "answers:rag"))
    >>> _Step(judge, 0, 1).label, _Step(judge, 0, 1).after
    ('scores:j1', ('answers:bounds', 'answers:rag'))
    >>> _Step(judge, 1, 3).label, _Step(judge, 1, 3).after
    ('scores:j1@2', ('answers:bounds@2', 'answers:rag@2', 'scores:j1@1'))
    """

    spec: Any  # StageSpec
    wave: int
    waves: int

    def _name(self, label: str, wave: int) -> str:
        return label if self.waves == 1 else f"{label}@{wave + 1}"

    @property
    def label(self) -> str:
        """``answers:bounds``, or ``answers:bounds@2`` for its second wave."""
        return self._name(self.spec.label, self.wave)

    @property
    def after(self) -> tuple[str, ...]:
        """The same wave of the stages it reads, and its own previous wave."""
        after = tuple(self._name(a, self.wave) for a in self.spec.after)
        if self.wave:
            after += (self._name(self.spec.label, self.wave - 1),)
        return after


class _Driver:
    """One run on the driver: its state, collaborators and engine pools."""

    def __init__(self, config: RunConfig, options: RunOptions) -> None:
        self.state = RunState.start(config, options)
        self.engines = EnginePools(before_first=options.before_engines)
        self.data = DataOps(self.state)
        self.sample = SampleSelection(self.state)
        self.intake = Intake(self.state, self.sample)
        self.sources = StageSources(self.state, data=self.data, sample=self.sample)
        self.compaction = Compaction(self.state, self.data)
        self.runner = StageRunner(
            self.state,
            data=self.data,
            compaction=self.compaction,
            engines=self.engines,
        )

    def run_spec(self, spec: StageSpec, wave: int = 0, waves: int = 1) -> None:
        """Build a stage's inputs (of one wave) from its recipe and run it."""
        recipe = spec.inputs
        split = (wave, waves) if recipe.by_wave else (0, 1)
        source, count = self.sources.wave_source(recipe.source, *split)
        if waves > 1 and count == 0:  # a small corpus may leave a wave empty
            self.state.stats.setdefault(spec.label, StageStats())
            return
        inputs = self.data.light_map(source, recipe.expand, **recipe.kwargs)
        self.runner.run_stage(
            spec, inputs=inputs, expected=recipe.per_row * count, wave=wave
        )

    def run_graph(self, corpus_fp: str) -> None:
        """Prepare the systems, then walk the method's stage graph."""
        state, config = self.state, self.state.config
        specs = stage_graph(
            config,
            corpus_fp=corpus_fp,
            documents_path=str(state.table_dir(DOCUMENTS)),
        )
        if config.questions.source != "file":
            n = self.sample.sample_questions()
            state.n_questions = state.n_docs if n is None else n
        prepared: set[str] = set()
        shown: set[str] = set()

        def run_one(step: _Step) -> None:
            spec = step.spec
            system = spec.extra.get("system")
            if system is not None and system.name not in prepared:
                self.intake.prepare_system(system)  # its waves come one after another
                prepared.add(system.name)
            self.run_spec(spec, step.wave, step.waves)
            if system is not None:  # unknown ids: stop, rather than score 0
                answers = part_files(state.table_dir(ANSWERS))
                questions = part_files(state.table_dir(QUESTIONS))
                check_system_ids(
                    state.run_dir,
                    system,
                    answers=answers,
                    documents=part_files(state.table_dir(DOCUMENTS)),
                    questions=questions,
                    min_rows=0 if step.wave == step.waves - 1 else EARLY_MIN_ROWS,
                )
                if system.name not in shown:  # what its paths read, once
                    line = first_answer_line(
                        system, answers=answers, questions=questions
                    )
                    if line is not None:
                        shown.add(system.name)  # said with or without progress
                        print(f"cube-ray: {line}", file=console(), flush=True)

        for spec in specs:  # early ones (QA files) fail before any stage
            system = spec.extra.get("system")
            if system is not None and system_kind(system).prepares_early:
                self.intake.prepare_system(system)
                prepared.add(system.name)
        waves = config.ray.waves
        steps = [_Step(spec, w, waves) for w in range(waves) for spec in specs]
        overlap = config.ray.overlap
        run_graph(
            steps,
            run_one,
            overlap=overlap,
            cost=self._step_cpus,
            budget=self._stage_cpus(specs) if overlap else math.inf,
        )

    def _step_cpus(self, step: _Step) -> float:
        """Logical CPUs a running stage holds: a light task or its actors, a writer."""
        return stage_cpus(
            step.spec.pool,
            own_actors=step.spec.own_actors,
            task_cpus=self.state.config.ray.task_num_cpus,
        )

    def _stage_cpus(self, specs: list[StageSpec]) -> float:
        """The cluster's logical CPUs less what the engine pools can hold."""
        # heavy: ray, imported only where this code uses it
        import ray

        pools = {engine_id(e): e.pool for s in specs for e in s.engines}
        hosts = float(sum(p.num_cpus * p.max_size for p in pools.values()))
        cluster: dict[str, Any] = ray.cluster_resources()  # type: ignore[no-untyped-call]
        return float(cluster.get("CPU", 0.0)) - hosts
