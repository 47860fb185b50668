"""``SystemConfigBase``: what every system's config has, beside the kinds registry.

A kind (:class:`cube_ray.systems.kinds.SystemKind`) names its config model, a
subclass of this base with a one-value ``kind``; ``cube_ray.systems.config``
holds the built-in kinds' models and validates a ``systems:`` entry by its kind.
"""

from __future__ import annotations

from pydantic import Field, field_validator

from cube_ray.engines.config import PoolConfig
from cube_ray.pydantic_base import StrictModel

__all__ = ["DEFAULT_K", "SystemConfigBase"]

DEFAULT_K = 8
"""Retrieval depth when none is given: a system's ``k`` (rank scores, recall@k)
and the aggregation's ``k`` without a run config."""


class SystemConfigBase(StrictModel):
    """What every system has; a kind's model adds ``kind`` and its settings."""

    name: str = "rag"
    """``rag`` or ``rag@<variant>``; unique within a run."""
    k: int = Field(DEFAULT_K, ge=1)
    """Retrieval depth: rank scores are ``k + 2 - rank``; recall@k."""
    pool: PoolConfig = Field(default_factory=lambda: PoolConfig.model_validate({}))
    """Actor pool of this system's stage."""
    model: str | None = None
    """The model that writes this system's answers (a path or served name, as
    a judge's ``model``), when known: a judge of the same model gets the flag
    "judges its own model's answers" (CUBE_METHOD.md section 12). Not part of
    the answers' fingerprint."""
    kind: str
    """The system's kind (a registered name: ``qa_file``, ``builtin_rag``,
    ``http``, ...)."""

    @field_validator("name")
    @classmethod
    def _rag_name(cls, v: str) -> str:
        if v != "rag" and not (v.startswith("rag@") and len(v) > 4):
            msg = f"system name {v!r} must be 'rag' or 'rag@<variant>', e.g. 'rag@k8'"
            raise ValueError(msg)
        return v
