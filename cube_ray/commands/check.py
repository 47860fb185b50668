"""``cube-ray check CONFIG``: the run's preflight, without running anything.

Loads and validates CONFIG (every cross-field rule), connects to the cluster
the run would use (``--address``, else ``ray.address``, else a local Ray),
and runs ``cube_ray.preflight``: every pool fits a node or an autoscaler node
type, the named environment variables are set, HTTP endpoints list their
models, local model paths exist on the nodes of their pools, and the run dir
is shared by every node. Exit code 0 when all pass, 2 otherwise.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

__all__ = ["check_command", "register", "run_preflight"]


def register(subparsers: Any) -> None:
    """Add the ``check`` subcommand."""
    p: argparse.ArgumentParser = subparsers.add_parser(
        "check",
        help="validate CONFIG and check the cluster can run it (nothing runs)",
        description=__doc__.split("\n\n")[1] if __doc__ else None,
    )
    p.add_argument("config", help="run config (YAML)")
    p.add_argument(
        "--out", metavar="RUN_DIR", help="run directory (default: output_dir)"
    )
    p.add_argument(
        "--address", metavar="ADDR", help="Ray address (auto, ray://host:10001)"
    )
    p.set_defaults(func=check_command)


def run_preflight(config: Any, *, run_dir: Path, address: str | None) -> None:
    """Connect as the run would, run the preflight without waiting, disconnect."""
    import ray

    from cube_ray.pipeline import connect_ray
    from cube_ray.preflight import preflight

    owned = connect_ray(config, address)
    try:
        preflight(config, run_dir=run_dir, say=_say, wait=False)
    finally:
        if owned:
            ray.shutdown()


def _say(text: str) -> None:
    print(f"preflight: {text}", flush=True)


def check_command(args: argparse.Namespace) -> int:
    """Validate the config, then run the preflight against the cluster."""
    from cube_ray.config import RunConfig

    config = RunConfig.from_yaml(args.config)
    print(f"config: {args.config} is valid")
    run_dir = Path(args.out) if args.out else Path(config.output_dir)
    run_preflight(config, run_dir=run_dir, address=args.address)
    print("check: ok")
    sys.stdout.flush()
    return 0
