"""The Ray boundary: the CuBE job as a graph of streaming Ray Data stages.

``run_pipeline(config, options)`` runs the whole method of CUBE_METHOD.md:
documents, questions, the zero and full bounds, every system under test,
every judge on every dimension, then ``summary.json``, the report and
``manifest.json``. One concern per module:

| module | owns |
|---|---|
| ``parts`` | the part-file protocol of the tables (no Ray) |
| ``faults`` | which failures are a lost worker or node; waiting for Ray to notice |
| ``method`` | the CuBE stage graph as data (:class:`StageSpec`), defined once |
| ``runner`` | the generic runner of one spec, with retries |
| ``compaction`` | the rows left to do on resume; dropping stale rows |
| ``data`` | Ray Data reads, joins, light maps, part-file writer tasks |
| ``engine_pool`` | one long-lived engine pool per distinct engine, shared by stages |
| ``schedule`` | walking the graph: stages overlap where the method allows |
| ``heap`` | what workers' allocators give back after a task (their environment) |
| ``intake`` | corpus, question file, QA files, checked before anything runs |
| ``sampling`` | the run's sample (``sample:``): which documents get questions |
| ``sources`` | each stage's source table (Arrow on the driver or Ray Data) |
| ``state`` | ``RunOptions``, ``RunState``: what the driver's collaborators share |
| ``driver`` | one run on the driver: its collaborators, walking the graph |
| ``summary`` | ``summary.json`` from the written tables (also ``cube-ray aggregate``) |
| ``run`` | ``run_pipeline`` and ``manifest.json`` |

Only this package (with ``cube_ray.preflight``, the checks it runs before the
first stage, and ``jobs/``) imports Ray. docs/pipeline.md describes resume,
engine sharing and overlap.
"""

from cube_ray.pipeline.data import FOOTER_ACTORS_ENV, READ_UNIT_ENV
from cube_ray.pipeline.faults import StageInterrupted as _StageInterrupted
from cube_ray.pipeline.faults import infra_reason as _infra_reason
from cube_ray.pipeline.faults import is_infra_failure as _is_infra_failure
from cube_ray.pipeline.method import (
    ANSWERS,
    DOCUMENTS,
    QUESTIONS,
    SCORES,
    TABLES,
    Inputs,
    StageSpec,
    stage_graph,
)
from cube_ray.pipeline.parts import (
    _WRITTEN,
    PartWriter,
    StageStats,
    _count,
    _write_part,
    part_files,
    read_table,
)
from cube_ray.pipeline.run import (
    RunOptions,
    RunResult,
    _Driver,
    connect_ray,
    run_pipeline,
    summarize_run,
)

__all__ = [
    "ANSWERS",
    "DOCUMENTS",
    "FOOTER_ACTORS_ENV",
    "QUESTIONS",
    "READ_UNIT_ENV",
    "SCORES",
    "TABLES",
    "_WRITTEN",
    "Inputs",
    "PartWriter",
    "RunOptions",
    "RunResult",
    "StageSpec",
    "StageStats",
    "_Driver",
    "_StageInterrupted",
    "_count",
    "_infra_reason",
    "_is_infra_failure",
    "_write_part",
    "connect_ray",
    "part_files",
    "read_table",
    "run_pipeline",
    "stage_graph",
    "summarize_run",
]
