"""``RunState``: what the driver's collaborators share about one run.

The driver (``driver._Driver``) owns one ``RunState`` and hands it to each of
its collaborators (``data``, ``sampling``, ``intake``, ``compaction``,
``runner``, ``sources``) in their constructors. Each field says who writes it;
everyone else only reads it.
"""

from __future__ import annotations

import datetime as dt
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from cube_ray.console import console
from cube_ray.pipeline import faults
from cube_ray.pipeline.parts import StageStats

if TYPE_CHECKING:
    from pathlib import Path

    from cube_ray.config import RunConfig
    from cube_ray.pipeline.run import RunOptions

__all__ = ["RunState"]


@dataclass
class RunState:
    """One run on the driver: its config, options, counts and stage statistics.

    Build it with :meth:`start`.
    """

    config: RunConfig
    options: RunOptions
    stamp: str
    """UTC time the run began, in part-file names and the log file's name."""
    progress: bool
    """Whether progress lines and bars are shown."""
    started_at: float
    """``time.monotonic()`` when the run began (``wall_s`` of the manifest)."""
    stats: dict[str, StageStats] = field(default_factory=dict)
    """Statistics per stage label: written by the intake (documents, a
    question file) and the stage runner."""
    n_docs: int = 0
    """Documents staged (written by the intake)."""
    n_questions: int = 0
    """Questions the stages ask (the intake; the driver for generated ones)."""
    stage_context: dict[str, Any] = field(default_factory=dict)
    """Constructor arguments every stage gets (the run's prompt nonce), set by
    ``run_pipeline`` once the documents are in the run dir."""

    @classmethod
    def start(cls, config: RunConfig, options: RunOptions) -> RunState:
        """The state of a run that begins now."""
        progress = (
            options.progress if options.progress is not None else config.ray.progress
        )
        return cls(
            config=config,
            options=options,
            stamp=dt.datetime.now(dt.timezone.utc).strftime("%Y%m%dT%H%M%S%fZ"),
            progress=progress,
            started_at=time.monotonic(),
        )

    @property
    def run_dir(self) -> Path:
        """The run dir (``--out``)."""
        return self.options.run_dir

    def table_dir(self, name: str) -> Path:
        """A table's folder in the run dir."""
        return self.run_dir / name

    def say(self, text: str) -> None:
        """A progress line on the console (none without progress)."""
        if self.progress:
            print(f"cube-ray: {text}", file=console())

    def await_node_loss(
        self, label: str, nodes_before: set[str], failures: int
    ) -> None:
        """Wait before a retry until Ray has noticed a lost node (``faults``)."""
        faults.await_node_loss(
            label,
            nodes_before,
            failures,
            wait_s=self.config.ray.node_loss_wait_s,
            say=self.say,
        )
