"""A stage that writes no row for a while is reported, not left hanging silently.

:class:`StallWatch` runs beside a stage (a daemon thread on the driver): each
part file written resets it; after ``ray.stall_report_s`` without one it
prints what the stage waits for (:func:`stall_message`): the CPUs Ray has
free, what the stage's tasks or actors ask, and what the engine pools hold.
The run goes on; the line repeats after each further interval.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Mapping
from types import TracebackType

__all__ = ["StallWatch", "stall_message"]


def stall_message(
    label: str,
    *,
    idle_s: float,
    written: int,
    free: Mapping[str, float],
    total: Mapping[str, float],
    needs: str,
    need_cpus: float,
    pools: str,
) -> str:
    """The line said when a stage has written nothing for ``idle_s``.

    Args:
        label: The stage.
        idle_s: Seconds since its last part file (or its start).
        written: Rows it wrote so far.
        free: Ray's available resources now.
        total: Ray's cluster resources.
        needs: What the stage's CPUs are, in words.
        need_cpus: The CPUs the stage needs to run
            (:func:`cube_ray.preflight.stage_cpus`: its tasks or actors and a
            part-file writer task).
        pools: The engine pools and what they hold, in words.

    >>> print(stall_message("scores:j2", idle_s=300, written=48,
    ...     free={"CPU": 0.5}, total={"CPU": 2.0},
    ...     needs="a task of ray.task_num_cpus 0.5 and a writer task",
    ...     need_cpus=1.0, pools="generator 0.5, judges.j1 0.5"))
    scores:j2: no row written for 300 s (48 so far; ray.stall_report_s). Ray has \
0.5 of 2 CPUs free, and the stage needs 1 (a task of ray.task_num_cpus 0.5 and a \
writer task): Ray Data's tasks wait for CPUs that the engine pools (generator \
0.5, judges.j1 0.5) and the other stages hold. Fix: raise ray.num_cpus (or add \
nodes), or lower those pools' num_cpus
    >>> print(stall_message("scores:j2", idle_s=300, written=0,
    ...     free={"CPU": 1.5}, total={"CPU": 4.0}, needs="...",
    ...     need_cpus=1.0, pools="judges.j2 0.5").split(": ", 1)[1])
    no row written for 300 s (0 so far; ray.stall_report_s). Ray has 1.5 of 4 \
CPUs free, as many as the stage needs (1): it waits on its engines (slow calls, \
or an engine still starting; see the engines' lines above)
    """
    cpu_free = float(free.get("CPU", 0.0))
    head = (
        f"{label}: no row written for {idle_s:.0f} s ({written} so far; "
        f"ray.stall_report_s). Ray has {cpu_free:g} of "
        f"{float(total.get('CPU', 0.0)):g} CPUs free"
    )
    if cpu_free + 1e-9 < need_cpus:
        return (
            f"{head}, and the stage needs {need_cpus:g} ({needs}): Ray Data's "
            f"tasks wait for CPUs that the engine pools ({pools}) and the other "
            "stages hold. Fix: raise ray.num_cpus (or add nodes), or lower those "
            "pools' num_cpus"
        )
    return (
        f"{head}, as many as the stage needs ({need_cpus:g}): it waits on its "
        "engines (slow calls, or an engine still starting; see the engines' "
        "lines above)"
    )


class StallWatch:
    """Says so when a stage makes no progress for ``after_s`` (0: never)."""

    def __init__(
        self,
        *,
        after_s: float,
        report: Callable[[float], None],
        poll_s: float | None = None,
    ) -> None:
        """Watch; ``report(idle_s)`` is called from the watch's own thread."""
        self._after = after_s
        self._report = report
        self._poll = poll_s if poll_s is not None else min(max(after_s / 4, 0.2), 5.0)
        self._last = time.monotonic()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def progress(self) -> None:
        """A row was written: the wait starts again."""
        with self._lock:
            self._last = time.monotonic()

    def __enter__(self) -> StallWatch:
        if self._after > 0:
            self._thread = threading.Thread(
                target=self._watch, name="cube-ray-stall-watch", daemon=True
            )
            self._thread.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def _watch(self) -> None:
        reported = 0.0  # the idle time last reported
        while not self._stop.wait(self._poll):
            with self._lock:
                idle = time.monotonic() - self._last
            if idle < reported:
                reported = 0.0  # progress since: a fresh wait
            if idle >= self._after and idle - reported >= self._after:
                reported = idle
                # A report that fails (Ray's state unreadable) must not stop a run.
                with contextlib.suppress(Exception):
                    self._report(idle)
