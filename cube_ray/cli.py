"""The ``cube-ray`` command line: parse arguments and dispatch; no logic here.

Each subcommand lives in ``cube_ray/commands/<name>.py`` and exposes
``register(subparsers)``, which adds its parser and sets ``func(args) -> int``.
Heavy imports (ray, vllm) happen inside ``func``, so ``cube-ray --help`` is fast.
"""

from __future__ import annotations

import argparse
import errno
import importlib
import os
import sys
from collections.abc import Sequence
from pathlib import Path

from cube_ray import __version__
from cube_ray.errors import CubeRayError

__all__ = ["main"]

COMMANDS: tuple[str, ...] = (
    "run",
    "plan",
    "check",
    "aggregate",
    "report",
    "audit",
    "compare",
    "engines",
    "judges",
    "serve_rag",
)
"""Modules under ``cube_ray.commands``, in the order ``--help`` lists them."""


def build_parser() -> argparse.ArgumentParser:
    """The full argument parser with every available subcommand."""
    parser = argparse.ArgumentParser(
        prog="cube-ray",
        description="CuBE: evaluate RAG systems between zero- and full-score bounds.",
    )
    parser.add_argument("--version", action="version", version=__version__)
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name in COMMANDS:
        try:
            module = importlib.import_module(f"cube_ray.commands.{name}")
        except ModuleNotFoundError as exc:
            if exc.name == f"cube_ray.commands.{name}":
                continue  # command not built yet
            raise
        module.register(sub)
    return parser


def disk_full(exc: OSError) -> str:
    """The sentence for a full disk met outside a stage (a stage says its own).

    >>> disk_full(OSError(28, "No space left on device", "/runs/a/summary.json"))
    ... # doctest: +ELLIPSIS
    'the disk is full (No space left on device) writing to /runs/a. The rows ...'

    """
    where = f" writing to {Path(exc.filename).parent}" if exc.filename else ""
    return (
        f"the disk is full ({exc.strerror}){where}. The rows a run wrote before "
        "are kept (each part file is written whole or not at all). Free space on "
        "that disk and rerun the same command: a run resumes from those rows"
    )


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI; returns the exit code (2 for any user error)."""
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except CubeRayError as exc:
        print(f"cube-ray: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("cube-ray: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # The reader went away (``cube-ray run --dry-run | head``): nothing
        # left to say. Point stdout at /dev/null so the interpreter's final
        # flush does not raise again at exit.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 141  # 128 + SIGPIPE, as a shell reports a writer cut off
    except OSError as exc:  # after BrokenPipeError, one of its kind
        if exc.errno != errno.ENOSPC:
            raise
        print(f"cube-ray: error: {disk_full(exc)}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
