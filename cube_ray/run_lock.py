"""One cube-ray process writes into a run dir at a time: ``RUN_DIR/.lock``.

``cube-ray run`` takes the lock before its first write into the run dir and
holds it to the end; ``aggregate``, ``report`` and ``audit``, which write into
a run dir too (the summary, the report, the audit sheet), take it for their
own writes. The lock file holds the owner's pid, host, start time and
command. A second process is refused (exit 2) naming the owner. A lock whose
owner is gone (its pid no longer runs on this host: the run was killed) is
taken over, with a message; a lock of another host (a shared run dir) is
never guessed at: the message says which file to delete when that run is
known to be over.

The lock is a file created with ``O_EXCL``, so two processes that start at
once cannot both take it, also on NFS v3+; a stale lock is renamed aside
before it is taken over, so two processes taking over the same stale lock
cannot both win.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import os
import socket
import sys
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from cube_ray.errors import RunDirError
from cube_ray.files import check_run_dir_links

__all__ = ["LOCK_NAME", "held", "run_dir_lock", "writing_into"]

LOCK_NAME = ".lock"
"""The lock file's name in the run dir."""

_HELD: dict[Path, int] = {}
"""Run dirs this process holds (resolved path -> depth of nesting)."""


def _owner_text(owner: dict[str, Any]) -> str:
    """'pid 123 on host h, started 2026-…' (what a lock file says)."""
    command = owner.get("command")
    return (
        f"pid {owner.get('pid')} on host {owner.get('host')!s}, started "
        f"{owner.get('started')!s}" + (f" ({command})" if command else "")
    )


def _read(path: Path) -> dict[str, Any] | None:
    """The lock's owner; None when there is no lock (any more)."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    except OSError:
        return {}
    try:
        data = json.loads(text)
    except ValueError:
        return {}  # being written, or damaged: an owner we cannot name
    return data if isinstance(data, dict) else {}


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # another user's process
    except OSError:
        return True
    return True


def _stale(owner: dict[str, Any], host: str) -> bool:
    """Whether the owner is known to be gone: a dead pid of this host."""
    pid = owner.get("pid")
    return owner.get("host") == host and isinstance(pid, int) and not _alive(pid)


def _create(path: Path, owner: dict[str, Any]) -> bool:
    """Create the lock file holding ``owner``; False when it exists."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0)
    try:
        fd = os.open(path, flags, 0o644)
    except FileExistsError:
        return False
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        fh.write(json.dumps(owner, indent=1) + "\n")
    return True


def _busy(run_dir: Path, path: Path, owner: dict[str, Any], host: str) -> RunDirError:
    who = _owner_text(owner) if owner else "an owner whose lock file does not read"
    elsewhere = owner.get("host") not in (None, host)
    gone = (
        "that host's run is over (it crashed)"
        if elsewhere
        else "you are sure no cube-ray process uses it"
    )
    return RunDirError(
        f"run dir {str(run_dir)!r} is in use by another cube-ray process: {who}. "
        "Two processes writing one run dir would leave duplicate rows. Fix: wait "
        "for it to finish (or stop it), or choose another --out; if "
        f"{gone}, delete {str(path)!r} and rerun"
    )


def _take(run_dir: Path, owner: dict[str, Any], say: Callable[[str], None]) -> Path:
    path = run_dir / LOCK_NAME
    for _ in range(5):  # each turn either takes the lock or removes a stale one
        if _create(path, owner):
            return path
        current = _read(path)
        if current is None:
            continue  # released in between
        if not _stale(current, owner["host"]):
            raise _busy(run_dir, path, current, owner["host"])
        aside = run_dir / f"{LOCK_NAME}.stale-{owner['token']}"
        try:
            path.replace(aside)  # only one of several takers renames it
        except FileNotFoundError:
            continue
        if _read(aside) != current:  # another taker's fresh lock: put it back
            aside.replace(path)
            continue
        aside.unlink(missing_ok=True)
        say(
            f"run dir {str(run_dir)!r}: the lock of {_owner_text(current)} is "
            "stale (that process is gone); taken over"
        )
    raise _busy(run_dir, path, _read(path) or {}, owner["host"])


def _release(path: Path, token: str) -> None:
    current = _read(path)
    if current is not None and current.get("token") == token:
        path.unlink(missing_ok=True)


def held(run_dir: str | Path) -> bool:
    """Whether this process holds ``run_dir``'s lock."""
    return Path(run_dir).resolve() in _HELD


def _say(text: str) -> None:
    print(f"cube-ray: {text}", file=sys.stderr, flush=True)


@contextlib.contextmanager
def run_dir_lock(
    run_dir: str | Path, *, say: Callable[[str], None] = _say
) -> Iterator[Path]:
    """Hold ``run_dir``'s lock within the block (creating the folder if needed).

    Nested use in one process (``run`` writing its report) holds it once. A
    run dir this call created is removed again if nothing but the lock was
    written into it (a run refused by a later check leaves no folder behind).

    Raises:
        RunDirError: Another live process holds the lock (exit 2).
    """
    root = Path(run_dir)
    key = root.resolve()
    if key in _HELD:
        _HELD[key] += 1
        try:
            yield root / LOCK_NAME
        finally:
            _HELD[key] -= 1
        return
    created = not root.exists()
    root.mkdir(parents=True, exist_ok=True)
    token = uuid.uuid4().hex
    owner = {
        "pid": os.getpid(),
        "host": socket.gethostname(),
        "started": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "command": " ".join(["cube-ray", *sys.argv[1:3]])
        if Path(sys.argv[0]).name in ("cube-ray", "cli.py")
        else None,
        "token": token,
    }
    try:
        path = _take(root, owner, say)
    except BaseException:
        if created:
            with contextlib.suppress(OSError):
                root.rmdir()
        raise
    _HELD[key] = 1
    try:
        yield path
    finally:
        del _HELD[key]
        _release(path, token)
        if created:
            with contextlib.suppress(OSError):
                root.rmdir()  # only when empty


@contextlib.contextmanager
def writing_into(run_dir: str | Path | None) -> Iterator[None]:
    """The lock and link check of a command writing into an existing run dir.

    For ``aggregate``, ``report`` and ``audit``: the run dir's lock within the
    block, and no folder of it a symlink leading outside. Nothing is checked
    for a folder that does not exist (the command itself says so) or for
    ``None`` (no run dir).

    Raises:
        RunDirError: Another process holds the lock, or a folder leads outside.
    """
    if run_dir is None or not Path(run_dir).is_dir():
        yield
        return
    with run_dir_lock(run_dir):
        check_run_dir_links(run_dir)
        yield
