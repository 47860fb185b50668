"""The ``cube-ray`` command line: parse arguments and dispatch; no logic here.

Each subcommand lives in ``cube_ray/commands/<name>.py`` and exposes
``register(subparsers)``, which adds its parser and sets ``func(args) -> int``.
Heavy imports (ray, vllm) happen inside ``func``, so ``cube-ray --help`` is fast.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Sequence

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


if __name__ == "__main__":
    sys.exit(main())
