"""A quiet console: cube-ray's own lines on the terminal, engine logs in a file.

vLLM, Ray and their subprocesses write INFO/WARNING lines (and, at actor exit,
``resource_tracker`` tracebacks) straight to the process's file descriptors 1
and 2, from Python and from C++. :func:`quiet_console` points both descriptors
at a log file for the duration of a run (processes started meanwhile, such as
Ray's, inherit it) and hands cube-ray a stream to the real terminal for its
progress bars and messages (:func:`console`). ``cube-ray run --verbose`` skips
the redirection.
"""

from __future__ import annotations

import contextlib
import os
import sys
import traceback
from collections.abc import Iterator
from pathlib import Path
from typing import TextIO

__all__ = ["console", "quiet_console"]

_console: TextIO | None = None


def console() -> TextIO:
    """The stream cube-ray's own progress and messages go to (the terminal)."""
    return _console if _console is not None else sys.stderr


@contextlib.contextmanager
def quiet_console(log_path: Path | None) -> Iterator[Path | None]:
    """Send everything written to stdout/stderr to ``log_path`` meanwhile.

    ``None`` leaves the console as it is (``--verbose``). The previous
    descriptors are restored on exit, also when the body raises, so errors
    reach the terminal.
    """
    global _console
    if log_path is None or _console is not None:
        yield None
        return
    log_path.parent.mkdir(parents=True, exist_ok=True)
    sys.stdout.flush()
    sys.stderr.flush()
    saved_out, saved_err = os.dup(1), os.dup(2)
    terminal = os.fdopen(os.dup(saved_err), "w", buffering=1, encoding="utf-8")
    fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        os.dup2(fd, 1)
        os.dup2(fd, 2)
    finally:
        os.close(fd)
    _console = terminal
    try:
        yield log_path
    except BaseException:
        # The full story goes to the log (descriptor 2, whatever sys.stderr is
        # meanwhile); the caller prints one line.
        with contextlib.suppress(OSError):
            os.write(2, traceback.format_exc().encode("utf-8", "replace"))
        raise
    finally:
        _console = None
        with contextlib.suppress(Exception):
            sys.stdout.flush()
            sys.stderr.flush()
        os.dup2(saved_out, 1)
        os.dup2(saved_err, 2)
        os.close(saved_out)
        os.close(saved_err)
        terminal.close()
