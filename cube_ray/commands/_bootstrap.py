"""The bootstrap flags' defaults, read from the aggregation (never a copy).

The headline's interval of a run is :func:`cube_ray.aggregate.with_intervals`
with the aggregation's defaults (``DEFAULT_RESAMPLES``, ``DEFAULT_SEED``,
``DEFAULT_INTERVAL``) (``cube_ray.pipeline.summary``); ``cube-ray aggregate``
takes the same ones, so rewriting a run's summary gives the one the run wrote.
The interval methods are :data:`cube_ray.aggregate.INTERVAL_METHODS`.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["BootstrapDefaults", "bootstrap_defaults", "interval_methods"]


@dataclass(frozen=True)
class BootstrapDefaults:
    """What ``--resamples``, ``--seed`` and ``--interval`` default to."""

    resamples: int
    seed: int
    interval: str


def bootstrap_defaults() -> BootstrapDefaults:
    """The aggregation's bootstrap defaults, as ``with_intervals`` takes them.

    >>> import inspect
    >>> from cube_ray.aggregate import with_intervals
    >>> d = bootstrap_defaults()
    >>> params = inspect.signature(with_intervals).parameters
    >>> (d.resamples, d.seed, d.interval) == tuple(
    ...     params[name].default for name in ("n_resamples", "seed", "method"))
    True
    """
    from cube_ray.aggregate import DEFAULT_INTERVAL, DEFAULT_RESAMPLES, DEFAULT_SEED

    return BootstrapDefaults(
        resamples=DEFAULT_RESAMPLES, seed=DEFAULT_SEED, interval=DEFAULT_INTERVAL
    )


def interval_methods() -> tuple[str, ...]:
    """The ``--interval`` choices (:data:`cube_ray.aggregate.INTERVAL_METHODS`)."""
    from cube_ray.aggregate import INTERVAL_METHODS

    return tuple(INTERVAL_METHODS)
