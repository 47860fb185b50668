"""Controlled faults for qualifying judges (CUBE_METHOD.md section 12).

Pure, deterministic functions, one per fault kind (``number``, ``entity``,
``negation``, ``omission``, ``unsupported``), for Chinese and English answers:
each copies a full-bound answer with exactly one controlled change built from
its gold document (and, for ``entity`` and ``unsupported``, from donor
documents), deterministic from ``(seed, question_id, kind)``; a kind that does
not apply returns None (*skipped*). :func:`fault_rows` builds the rows of the
run's ``qualification`` table. Each fault has a control (:func:`make_control`):
a harmless edit of the same answer, of the same family, position and size,
that keeps every fact; a judge's drop counts only beyond its control's. No
Ray, no engines here.
"""

from cube_ray.qualification._claims import omission_fault, unsupported_fault
from cube_ray.qualification._compose import compose_answer
from cube_ray.qualification._controls import (
    CONTROL_SUFFIX,
    control_kind,
    fault_kind_of,
    is_control,
    keeps_facts,
    length_matched,
    make_control,
    negators,
)
from cube_ray.qualification._document import GoldDocument, parse_fields, split_items
from cube_ray.qualification._family import OWN_MODEL, model_key, own_model_flags
from cube_ray.qualification._fault import Fault, FaultFn, Span, fault_rng
from cube_ray.qualification._kinds import FAULT_KINDS, KINDS, FaultKind, make_fault
from cube_ray.qualification._negation import negation_fault
from cube_ray.qualification._numbers import (
    NumberToken,
    chinese_to_int,
    int_to_chinese,
    number_tokens,
    number_values,
    plausible_other,
)
from cube_ray.qualification._order import seeded_sample
from cube_ray.qualification._swap import entity_fault, number_fault

__all__ = [
    "CONTROL_SUFFIX",
    "FAULT_KINDS",
    "KINDS",
    "OWN_MODEL",
    "Fault",
    "FaultFn",
    "FaultKind",
    "GoldDocument",
    "NumberToken",
    "Span",
    "chinese_to_int",
    "compose_answer",
    "control_kind",
    "entity_fault",
    "fault_kind_of",
    "fault_rng",
    "int_to_chinese",
    "is_control",
    "keeps_facts",
    "length_matched",
    "make_control",
    "make_fault",
    "model_key",
    "negation_fault",
    "negators",
    "number_fault",
    "number_tokens",
    "number_values",
    "omission_fault",
    "own_model_flags",
    "parse_fields",
    "plausible_other",
    "seeded_sample",
    "split_items",
    "unsupported_fault",
]
