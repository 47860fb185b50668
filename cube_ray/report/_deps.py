"""Check the ``report`` extra before drawing anything."""

from __future__ import annotations

import importlib.util

from cube_ray.errors import MissingDependencyError

__all__ = ["require_report_deps"]


def require_report_deps() -> None:
    """Raise :class:`MissingDependencyError` when matplotlib is not installed."""
    if importlib.util.find_spec("matplotlib") is None:
        raise MissingDependencyError(
            "matplotlib", extra="report", purpose="Drawing the report's plots"
        )
