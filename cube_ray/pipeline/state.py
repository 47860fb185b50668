"""``RunOptions`` and ``RunState``: what the driver's collaborators share.

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
    from collections.abc import Callable
    from pathlib import Path

    from cube_ray.config import RunConfig

__all__ = ["RunOptions", "RunState"]


@dataclass(frozen=True)
class RunOptions:
    """Options of one run that are not part of the config."""

    run_dir: Path
    """Where the tables, summary and manifest go."""
    limit: int | None = None
    """Use only the first N corpus records (trials)."""
    address: str | None = None
    """Ray address; overrides ``ray.address`` of the config."""
    call_log: str | None = None
    """File that gets one line per engine call (tests, audits)."""
    retry_failed: bool = False
    """Re-run rows whose status is not ``ok``."""
    progress: bool | None = None
    """Progress bars; None uses ``ray.progress`` of the config."""
    report: bool = True
    """Write report.html/report.md when ``cube_ray.report`` is available."""
    update: bool = False
    """Let a changed config or corpus update the run dir in place (changed
    rows recomputed); without it such a run is refused
    (``cube_ray.pipeline.ownership``)."""
    shrink: bool = False
    """Allow a ``sample:`` that leaves out documents an earlier run of the run
    dir sampled (their rows stay, left out of the summary)."""
    quiet: bool = False
    """Send vLLM/Ray output (and anything else written to stdout/stderr) to
    ``RUN_DIR/logs/run-<stamp>.log`` once the input is validated; cube-ray's
    own progress and messages still reach the terminal."""
    config_path: str | None = None
    """The config file the run was started with (named in the rerun command
    that warnings and an incomplete run suggest)."""
    human: Path | None = None
    """Human scores of an audit: the summary gets the calibrated CuBE (§13)."""
    before_engines: Callable[[], None] | None = None
    """Called once before the first engine starts (``cube-ray run`` says the
    work and its time here: after every check, before the first model loads)."""


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
