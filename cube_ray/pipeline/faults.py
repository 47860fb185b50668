"""Ray losing a worker, actor, object or node: telling it apart, waiting it out.

A worker or node that dies (spot preemption, OOM kill, a lost heartbeat)
surfaces as a Ray system error, wrapped by Ray Data; the runner retries a
stage after one, never after an error in our own or the engines' code.
Errors the user can fix (an engine that refuses the key, a full disk) are
told apart too (:func:`user_fault`): the run stops with a sentence instead of
Ray's traceback.
"""

from __future__ import annotations

import errno
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal, cast

from cube_ray.errors import CubeRayError

__all__ = [
    "StageInterrupted",
    "UserFault",
    "alive_nodes",
    "await_node_loss",
    "infra_reason",
    "is_infra_failure",
    "user_fault",
]


class StageInterrupted(Exception):
    """An attempt of a stage failed; ``__cause__`` is why, rows so far are written."""

    def __init__(self, next_seq: int) -> None:
        super().__init__("stage attempt interrupted")
        self.next_seq = next_seq


_INFRA_ERRORS = (
    "RayActorError",
    "ActorDiedError",
    "ActorUnavailableError",
    "NodeDiedError",
    "ObjectLostError",
    "OwnerDiedError",
    "ObjectReconstructionFailedError",
    "WorkerCrashedError",
    "RaySystemError",
    "LocalRayletDiedError",
)
# The last ``ray.exceptions.X: message`` line of a traceback text.
_RAY_ERROR_LINE = re.compile(r"^\s*ray\.exceptions\.(\w+): ?(.*)$", re.MULTILINE)
_DIRECT_CAUSE = "The above exception was the direct cause of the following exception:"


def _infra_from_text(text: str) -> tuple[str, str] | None:
    r"""Name and message of the lost-node error a traceback text ends in.

    Ray hands back only text when it cannot unpickle an error raised in a
    task (``UnserializableException``), as with an ``ActorDiedError`` raised
    inside a Ray Data listing task.

    >>> _infra_from_text(
    ...     "ray.exceptions.RayTaskError: ray::ListFiles()\n  File ...\n"
    ...     "ray.exceptions.ActorDiedError: The actor died unexpectedly.\n"
    ...     "The actor died because its node has died."
    ... )
    ('ActorDiedError', 'The actor died unexpectedly.')
    >>> _infra_from_text("ray.exceptions.RayTaskError: UserCodeException: bad row")
    >>> _infra_from_text(
    ...     "ray.exceptions.ActorDiedError: The actor died because of an error"
    ...     " raised in its creation task"
    ... )

    A stage's function that lost the engine host it called (its node died
    mid-call) fails as a ``UserCodeException`` *caused by* the lost actor:
    that is Ray's failure, not the stage's code.

    >>> _infra_from_text(
    ...     "ray.exceptions.ActorUnavailableError: The actor 1d is unavailable\n\n"
    ...     + _DIRECT_CAUSE
    ...     + "\n\nray.exceptions.UserCodeException: UDF failed to process a block."
    ... )
    ('ActorUnavailableError', 'The actor 1d is unavailable')
    >>> _infra_from_text(
    ...     "ValueError: bad row\n\n" + _DIRECT_CAUSE
    ...     + "\n\nray.exceptions.UserCodeException: UDF failed to process a block."
    ... )
    """
    if "raised in its creation task" in text:
        return None
    if "UserCodeException" in text:
        if _DIRECT_CAUSE not in text:
            return None
        return _infra_from_text(text.rsplit(_DIRECT_CAUSE, 1)[0])
    found = _RAY_ERROR_LINE.findall(text)
    if not found or found[-1][0] not in _INFRA_ERRORS:
        return None
    name, message = found[-1]
    return name, message.strip()


def _infra_failure(exc: BaseException) -> tuple[str, str] | None:
    """Name and message of the lost worker, actor, object or node behind ``exc``.

    Ray Data wraps such errors (``SystemException``, ``RayTaskError``), so
    the whole cause chain is searched, and the text of an error Ray could not
    unpickle is read. A user-code error or a failed actor constructor never
    counts: the same rows would fail again. A stage function's error counts
    only when a lost actor caused it (an engine call whose host's node died).
    """
    # heavy: ray, imported only where this code uses it
    import ray.exceptions as rex

    kinds = tuple(getattr(rex, n) for n in _INFRA_ERRORS if hasattr(rex, n))
    seen: set[int] = set()
    cur: BaseException | None = exc
    while cur is not None and id(cur) not in seen:
        seen.add(id(cur))
        if getattr(cur, "actor_init_failed", False):
            return None  # the stage's constructor raised: it would again
        if isinstance(cur, kinds):
            text = str(cur).strip()
            return type(cur).__name__, text.splitlines()[0] if text else ""
        if isinstance(cur, rex.UserCodeException):
            # Ray keeps the UDF's own error only in the remote traceback text.
            return _infra_from_text(str(cur))
        if isinstance(cur, rex.UnserializableException):
            return _infra_from_text(str(cur))
        # A RayTaskError that could not take its cause's class keeps it here.
        inner = getattr(cur, "cause", None)
        if isinstance(inner, BaseException) and id(inner) not in seen:
            cur = inner
        else:
            cur = cur.__cause__ or cur.__context__
    return None


@dataclass(frozen=True)
class UserFault:
    """An error behind a stage's failure that the user, not a retry, fixes."""

    kind: Literal["error", "disk_full"]
    """``error``: one of cube_ray's own errors (:class:`~cube_ray.errors.
    CubeRayError`, e.g. an engine refusing the key); ``disk_full``: ENOSPC."""
    message: str
    """The error's own message (its first line)."""
    path: str | None = None
    """The file being written, for ``disk_full`` when known."""


# ``cube_ray.errors.EngineError: message`` in a traceback text.
_OWN_ERROR_LINE = re.compile(r"^cube_ray\.errors\.\w+: (.+)$", re.MULTILINE)
# ``OSError: [Errno 28] No space left on device: 'path'`` in a traceback text.
_DISK_FULL_LINE = re.compile(r"\[Errno 28\] ([^\n:']+)(?:: '([^'\n]+)')?", re.MULTILINE)


def user_fault(exc: BaseException) -> UserFault | None:
    r"""The user-fixable error behind ``exc``, if that is what it is.

    Ray Data passes a stage's error on only as the text of its traceback
    (``UserCodeException``), so the text is read too: its last line naming
    one of cube_ray's errors, or an ``[Errno 28]``.

    >>> text = (
    ...     "Traceback ...\ncube_ray.errors.EngineError: the API rejected the key"
    ...     " (HTTP 401)\n\nThe above exception was the direct cause ...\n"
    ...     "ray.exceptions.UserCodeException: UDF failed to process a data block."
    ... )
    >>> user_fault(RuntimeError(text))
    UserFault(kind='error', message='the API rejected the key (HTTP 401)', path=None)
    >>> user_fault(RuntimeError(
    ...     "OSError: [Errno 28] No space left on device: '/r/scores/.tmp-1.parquet'"
    ... ))  # doctest: +NORMALIZE_WHITESPACE
    UserFault(kind='disk_full', message='No space left on device',
              path='/r/scores/.tmp-1.parquet')
    >>> user_fault(OSError(errno.ENOSPC, "No space left on device", "/r/x"))
    UserFault(kind='disk_full', message='No space left on device', path='/r/x')
    >>> user_fault(ValueError("a bug")) is None
    True
    """
    seen: set[int] = set()
    cur: BaseException | None = exc
    while cur is not None and id(cur) not in seen:
        seen.add(id(cur))
        inner = getattr(cur, "cause", None)
        own = not type(cur).__module__.startswith("ray.")
        if own and isinstance(cur, OSError) and cur.errno == errno.ENOSPC:
            path = cur.filename if isinstance(cur.filename, str) else None
            return UserFault("disk_full", cur.strerror or str(cur), path)
        if own and isinstance(cur, CubeRayError):
            return UserFault("error", str(cur))
        text = str(cur)
        full = _DISK_FULL_LINE.search(text)
        if full is not None:
            return UserFault("disk_full", full.group(1).strip(), full.group(2))
        raised = _OWN_ERROR_LINE.findall(text)
        if raised:
            return UserFault("error", raised[-1].strip())
        if isinstance(inner, BaseException) and id(inner) not in seen:
            cur = inner
        else:
            cur = cur.__cause__ or cur.__context__
    return None


def alive_nodes() -> set[str]:
    """Ids of the nodes Ray holds alive (empty when Ray is not running)."""
    # heavy: ray, imported only where this code uses it
    import ray

    if not ray.is_initialized():
        return set()
    try:
        nodes = cast("list[dict[str, Any]]", ray.nodes())  # type: ignore[no-untyped-call]
        return {n["NodeID"] for n in nodes if n.get("Alive")}
    except Exception:  # the GCS itself unreachable: nothing to compare
        return set()


def is_infra_failure(exc: BaseException) -> bool:
    """True when Ray lost a worker, actor, object or node (see ``_infra_failure``)."""
    return _infra_failure(exc) is not None


def infra_reason(exc: BaseException) -> str:
    """One line naming the Ray failure behind ``exc``."""
    found = _infra_failure(exc)
    if found is None:
        return f"Ray failure ({type(exc).__name__})"
    name, message = found
    return f"lost a Ray worker or node ({name}: {message[:160]})"


def await_node_loss(
    label: str,
    nodes_before: set[str],
    failures: int,
    *,
    wait_s: float,
    say: Callable[[str], None],
) -> None:
    """Wait before a retry until Ray has noticed the node it lost.

    A killed node stays "alive" to Ray until its heartbeats are missed
    (about 15-30 s with Ray's defaults); work scheduled there meanwhile
    fails again. So the retry waits until a node alive when the attempt
    began is gone, or ``wait_s`` (``ray.node_loss_wait_s``) when none goes (a
    crashed worker on a live node).
    """
    backoff = min(2.0**failures, 30.0)
    deadline = time.monotonic() + max(wait_s, backoff)
    if nodes_before - alive_nodes():
        time.sleep(backoff)  # already noticed
        return
    say(f"{label}: waiting up to {wait_s:.0f} s for Ray to confirm which node was lost")
    while time.monotonic() < deadline:
        time.sleep(1.0)
        if nodes_before - alive_nodes():
            time.sleep(backoff)
            return
