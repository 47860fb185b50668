"""The strict pydantic base model every config model derives from."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

__all__ = ["StrictModel"]


class StrictModel(BaseModel):
    """Unknown keys are errors; values are validated on assignment; frozen."""

    model_config = ConfigDict(
        extra="forbid",
        frozen=True,
        validate_default=True,
        use_attribute_docstrings=True,
    )
