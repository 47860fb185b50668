"""How cube_ray writes a file: whole or not at all, never through a symlink.

Every file cube_ray writes (the report, the summary, the manifest, the part
files of the tables, the audit sheet and its key, the sample's files) is
written to a temporary file in the same folder and renamed over its name
(:func:`write_atomic`). So

- a reader never sees half a file, and a failed write (a full disk) leaves the
  previous file as it was, not a file of 0 bytes;
- a name that is a symlink is replaced by the new file: whatever the link
  pointed at (``report.html -> ~/.bashrc``) is never written.

The folders themselves are checked once per command before its first write
(:func:`check_run_dir_links`): a folder of the run dir that is a symlink
leading outside it (``scores -> /etc``) is refused, exit 2.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

from cube_ray.errors import RunDirError

__all__ = ["TMP_PREFIX", "check_run_dir_links", "write_atomic"]

TMP_PREFIX = ".tmp-"
"""Temporary files start with this (readers of the run dir skip them)."""


def write_atomic(
    path: str | Path,
    data: str | bytes | Callable[[IO[Any]], Any],
    *,
    encoding: str = "utf-8",
    newline: str | None = None,
    mode: int | None = None,
) -> Path:
    """Write ``path`` through a temporary file in its folder, renamed into place.

    Args:
        path: The file to write; a symlink of that name is replaced, never
            followed.
        data: Text, bytes, or a function that writes to the open (binary)
            temporary file (``pq.write_table``, ``workbook.save``).
        encoding: For text.
        newline: For text (``""`` writes line ends as given, for CSV).
        mode: Permission bits; default those of a new file (``0o666`` less
            the umask).

    Returns:
        ``path``.

    >>> import pathlib, tempfile
    >>> d = pathlib.Path(tempfile.mkdtemp())
    >>> (d / "target").write_text("keep")
    4
    >>> (d / "out.txt").symlink_to(d / "target")
    >>> write_atomic(d / "out.txt", "new").name
    'out.txt'
    >>> (d / "target").read_text(), (d / "out.txt").is_symlink()
    ('keep', False)
    """
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f"{TMP_PREFIX}{target.name}.", dir=target.parent)
    try:
        if isinstance(data, str):
            with os.fdopen(fd, "w", encoding=encoding, newline=newline) as fh:
                fh.write(data)
        else:
            with os.fdopen(fd, "wb") as fh:
                if isinstance(data, bytes):
                    fh.write(data)
                else:
                    data(fh)
        Path(tmp).chmod(mode if mode is not None else 0o666 & ~_umask())
        Path(tmp).replace(target)  # replaces a link itself, never its target
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return target


def _umask() -> int:
    """The process's umask, read without changing it where Linux allows."""
    try:
        with Path("/proc/self/status").open(encoding="ascii") as fh:
            for line in fh:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    mask = os.umask(0o022)  # elsewhere: set and restore (not thread-safe)
    os.umask(mask)
    return mask


def check_run_dir_links(run_dir: str | Path) -> None:
    """Refuse a run dir one of whose folders is a symlink leading outside it.

    Every entry of the run dir that is a symlink to a folder (or to nothing)
    is resolved; one whose target is not inside the run dir
    (``scores -> /etc``) would make cube_ray write files elsewhere. A run dir
    that is itself a symlink (to a larger disk) is fine: its folders are
    compared with where it leads.

    Raises:
        RunDirError: Naming the link, where it leads and the fix (exit 2).
    """
    root = Path(run_dir)
    if not root.is_dir():
        return
    real = root.resolve()
    for entry in sorted(root.iterdir()):
        if not entry.is_symlink():
            continue
        target = entry.resolve()
        if target.is_file() or target == real or real in target.parents:
            continue  # a file is replaced when written, never written through
        msg = (
            f"run dir {str(root)!r}: {entry.name!r} is a symlink to "
            f"{str(target)!r}, outside the run dir; cube_ray would write files "
            f"there. Fix: replace the link by a folder (rm {str(entry)!r}), or "
            "choose another --out"
        )
        raise RunDirError(msg)
