"""Checks that run on every node: local model paths, the shared run dir.

Each is a Ray task pinned to a node (``NodeAffinitySchedulingStrategy``,
``soft=False``), importing ``ray`` inside the function that sends it.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from cube_ray.config import RunConfig
from cube_ray.errors import ClusterError
from cube_ray.preflight._resources import NodeShape, node_fit, pool_demands

__all__ = ["PROBE_TIMEOUT_S", "check_model_paths", "check_run_dir"]

PROBE_TIMEOUT_S = 180
"""How long a probe task pinned to a node may take (a worker process start)."""


def _on_each_node(
    nodes: list[NodeShape], fn: Callable[..., Any], *args: Any
) -> dict[str, Any]:
    """``fn(*args)`` in a task pinned to each node; node name -> result."""
    # heavy: ray, imported only where this code uses it
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    task = ray.remote(fn)
    refs = {
        n.name: task.options(
            num_cpus=0,
            max_retries=0,
            scheduling_strategy=NodeAffinitySchedulingStrategy(n.node_id, soft=False),
        ).remote(*args)
        for n in nodes
        if n.node_id is not None
    }
    out: dict[str, Any] = {}
    for name, ref in refs.items():
        try:
            out[name] = ray.get(ref, timeout=PROBE_TIMEOUT_S)
        except Exception as exc:  # a node that cannot run a task fails the check
            msg = (
                f"node {name} did not run a probe task within {PROBE_TIMEOUT_S} s "
                f"({type(exc).__name__}); check the node (ray status, its raylet "
                "log) or remove it"
            )
            raise ClusterError(msg) from exc
    return out


def _paths_exist(paths: tuple[str, ...]) -> list[str]:
    return [p for p in paths if not Path(p).expanduser().exists()]


def check_model_paths(config: RunConfig, nodes: list[NodeShape]) -> None:
    """Local model paths of vLLM engines exist on every node that can host them.

    Raises:
        ClusterError: Naming the engine, the path and the nodes lacking it.
    """
    problems = []
    for demand in pool_demands(config):
        if not demand.model_paths:
            continue
        hosts = [n for n in nodes if n.node_id and node_fit(n, demand) > 0]
        found = _on_each_node(hosts, _paths_exist, demand.model_paths)
        for node, missing in found.items():
            for path in missing:
                problems.append(
                    f"{demand.engine}: {path!r} does not exist on node {node}, "
                    f"which can host {demand.pool}"
                )
    if problems:
        raise ClusterError(
            "model paths are missing:\n  - " + "\n  - ".join(problems) + "\n"
            "Fix: put the model at that path on every node of the pool (image, "
            "shared mount), or route the pool with pool.resources to nodes that "
            "have it"
        )


def _probe(anchor: str, name: str, token: str) -> str | None:
    """Read the driver's probe file and write one beside it; None when both work."""
    here = Path(anchor)
    try:
        seen = (here / name).read_text(encoding="utf-8")
    except OSError as exc:
        return f"cannot read the driver's probe file ({exc})"
    if seen != token:
        return "reads a different file at that path (not the driver's volume)"
    mine = here / f"{name}-{uuid.uuid4().hex[:8]}"
    try:
        mine.write_text(token, encoding="utf-8")
        mine.unlink()
    except OSError as exc:
        return f"cannot write there ({exc})"
    return None


def check_run_dir(run_dir: Path, nodes: list[NodeShape]) -> None:
    """The run dir (or its nearest existing parent) is one volume for all nodes.

    Raises:
        ClusterError: Naming the nodes that cannot see or write it.
    """
    anchor = run_dir.resolve()
    while not anchor.exists() and anchor != anchor.parent:
        anchor = anchor.parent
    name = f".cube-ray-preflight-{uuid.uuid4().hex[:12]}"
    token = uuid.uuid4().hex
    probe = anchor / name
    try:
        probe.write_text(token, encoding="utf-8")
    except OSError as exc:
        msg = (
            f"run dir {str(run_dir)!r}: the driver cannot write in {str(anchor)!r} "
            f"({exc}); choose a writable --out"
        )
        raise ClusterError(msg) from exc
    try:
        found = _on_each_node(
            [n for n in nodes if n.node_id], _probe, str(anchor), name, token
        )
    finally:
        probe.unlink(missing_ok=True)
    bad = {node: why for node, why in found.items() if why}
    if bad:
        items = "\n  - ".join(f"node {n}: {why}" for n, why in bad.items())
        raise ClusterError(
            f"run dir {str(run_dir)!r} is not shared by every node (checked in "
            f"{str(anchor)!r}):\n  - {items}\n"
            "Fix: put the run dir on a volume every node mounts at the same path "
            "(NFS, EFS) and pass it with --out"
        )
