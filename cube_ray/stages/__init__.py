"""Pipeline stages: plain callable classes (no Ray), one per step of the method.

Each stage builds its engine (or system) once in ``__init__`` and maps Arrow
batches to Arrow batches in ``__call__``; it checks its input columns first
and records per-row failures in a ``status`` column. ``cube_ray.pipeline``
runs them in Ray Data actor pools.
"""

from cube_ray.stages._base import INPUT_HASH, NODE_ID, Stage
from cube_ray.stages.generate import (
    ANSWERS_OUT_SCHEMA,
    QUESTIONS_OUT_SCHEMA,
    AnswerStage,
    QuestionStage,
    questions_table,
)
from cube_ray.stages.inputs import (
    ANSWER_HASH,
    DOC_HASH,
    JUDGE_SOURCE,
    KEYS,
    answer_inputs,
    judge_inputs,
    question_inputs,
    system_inputs,
)
from cube_ray.stages.judge import SCORES_OUT_SCHEMA, JudgeStage
from cube_ray.stages.system import SystemStage, gold_rank

__all__ = [
    "ANSWERS_OUT_SCHEMA",
    "ANSWER_HASH",
    "DOC_HASH",
    "INPUT_HASH",
    "JUDGE_SOURCE",
    "KEYS",
    "NODE_ID",
    "QUESTIONS_OUT_SCHEMA",
    "SCORES_OUT_SCHEMA",
    "AnswerStage",
    "JudgeStage",
    "QuestionStage",
    "Stage",
    "SystemStage",
    "answer_inputs",
    "gold_rank",
    "judge_inputs",
    "question_inputs",
    "questions_table",
    "system_inputs",
]
