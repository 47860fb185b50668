"""The run configuration: pydantic models of ``conf/*.yaml``, ``RunConfig.from_yaml``.

A run config names the corpus and how to turn its records into documents, where
the questions come from, the generator engine, the jury of judges, the scoring
dimensions, the systems under test, the aggregation options, the Ray options and
the output directory. Every model is strict (unknown keys are errors) and every
field has a docstring, which ``docs/pipeline.md`` mirrors.

One module per concept: ``_corpus`` (corpus, questions, sample), ``_scoring``
(dimensions, qualification, the aggregation's options), ``_ray``, ``_prompts``, ``_run``
(:class:`RunConfig` and the rules that span sections) and ``_loader`` (YAML,
path resolution, the folders a config may read, error formatting). The engine
and system configs live in their own packages; the environment audit's
:class:`EnvUse` in :mod:`cube_ray.env`; the engine fingerprint in
:mod:`cube_ray.engines.identity`. Every name is importable from here.
"""

from cube_ray.config._corpus import (
    CorpusConfig,
    FieldConfig,
    QuestionsConfig,
    SampleConfig,
)
from cube_ray.config._loader import read_paths
from cube_ray.config._prompts import PromptsConfig
from cube_ray.config._ray import RayConfig
from cube_ray.config._run import RunConfig
from cube_ray.config._scoring import (
    DEFAULT_DETECTS,
    AggregateConfig,
    AggregateOptions,
    BoundsOptions,
    DimensionConfig,
    QualificationConfig,
    WeightsError,
    default_dimensions,
)
from cube_ray.engines.identity import engine_fingerprint
from cube_ray.env import EnvUse

__all__ = [
    "DEFAULT_DETECTS",
    "AggregateConfig",
    "AggregateOptions",
    "BoundsOptions",
    "CorpusConfig",
    "DimensionConfig",
    "EnvUse",
    "FieldConfig",
    "PromptsConfig",
    "QualificationConfig",
    "QuestionsConfig",
    "RayConfig",
    "RunConfig",
    "SampleConfig",
    "WeightsError",
    "default_dimensions",
    "engine_fingerprint",
    "read_paths",
]
