"""The bootstrap flags' defaults, read from the aggregation (never a copy).

The headline's interval of a run is :func:`cube_ray.aggregate.with_intervals`
with its own defaults (``cube_ray.pipeline.summary``); ``cube-ray aggregate``
takes the same ones, so rewriting a run's summary gives the one the run wrote.
The interval methods are :data:`cube_ray.aggregate.INTERVAL_METHODS`.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass

__all__ = ["BootstrapDefaults", "bootstrap_defaults", "interval_methods"]


@dataclass(frozen=True)
class BootstrapDefaults:
    """What ``--resamples``, ``--seed`` and ``--interval`` default to."""

    resamples: int
    seed: int
    interval: str


def bootstrap_defaults() -> BootstrapDefaults:
    """The keyword defaults of :func:`cube_ray.aggregate.with_intervals`.

    >>> from cube_ray.aggregate import DEFAULT_INTERVAL
    >>> bootstrap_defaults().interval == DEFAULT_INTERVAL
    True
    """
    from cube_ray.aggregate import with_intervals

    params = inspect.signature(with_intervals).parameters
    return BootstrapDefaults(
        resamples=params["n_resamples"].default,
        seed=params["seed"].default,
        interval=params["method"].default,
    )


def interval_methods() -> tuple[str, ...]:
    """The ``--interval`` choices (:data:`cube_ray.aggregate.INTERVAL_METHODS`)."""
    from cube_ray.aggregate import INTERVAL_METHODS

    return tuple(INTERVAL_METHODS)
