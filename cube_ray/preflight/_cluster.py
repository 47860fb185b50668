"""The cluster: alive nodes, the autoscaler's node types, waiting for them.

Talks to Ray (``ray.nodes()``, the GCS's key-value store, the autoscaler's
``request_resources``), importing ``ray`` inside the functions that do so.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any, cast

import yaml

from cube_ray.config import RunConfig
from cube_ray.errors import ClusterError, ResourceWaitError
from cube_ray.preflight._resources import (
    AUTOSCALER_CONFIG_ENV,
    SCALAR,
    NodeShape,
    PoolDemand,
    Say,
    capacity,
    engine_pool_cpus,
    fmt_resources,
    headroom_problem,
    pool_demands,
    resource_problem,
    stage_cpus,
)

__all__ = [
    "BOOTSTRAP_CONFIG",
    "autoscaler_node_types",
    "check_resources",
    "live_nodes",
    "reported_node_types",
]

BOOTSTRAP_CONFIG = "~/ray_bootstrap_config.yaml"
"""Where ``ray up`` leaves the autoscaler's config on the head node."""
# Where an autoscaler reports its node groups in the GCS's key-value store
# (ray._raylet's GCS_AUTOSCALER_STATE_NAMESPACE / _CLUSTER_CONFIG_KEY).
_GCS_AUTOSCALER_NAMESPACE = "__autoscaler"
_GCS_CLUSTER_CONFIG_KEY = "__autoscaler_cluster_config"


def live_nodes() -> list[NodeShape]:
    """The alive nodes of the connected cluster."""
    # heavy: ray, imported only where this code uses it
    import ray

    out = []
    for n in cast("list[dict[str, Any]]", ray.nodes()):  # type: ignore[no-untyped-call]
        if not n.get("Alive"):
            continue
        res = {
            k: float(v)
            for k, v in (n.get("Resources") or {}).items()
            if not k.startswith("node:")
        }
        ip = n.get("NodeManagerAddress", "?")
        out.append(
            NodeShape(f"{ip} ({n['NodeID'][:8]})", res, node_id=str(n["NodeID"]))
        )
    return out


def autoscaler_node_types(path: str | None = None) -> list[NodeShape] | None:
    """Node types an autoscaler can add, or None when no autoscaler is found.

    In order: the cluster YAML at ``path`` or ``$CUBE_RAY_AUTOSCALER_CONFIG``;
    the node groups an autoscaler reported to the GCS (Ray's autoscaler v2
    does where it reports its cluster config); ``~/ray_bootstrap_config.yaml``
    (the driver of ``ray job submit`` runs on the head, where ``ray up`` puts
    it). Every head runs Ray's monitor, so its mere presence says nothing: on
    KubeRay without a reported config, point ``$CUBE_RAY_AUTOSCALER_CONFIG`` at
    a cluster YAML listing the worker groups. CPU and GPU a node type does not
    list are detected by its provider: assumed sufficient.
    """
    where = path or os.environ.get(AUTOSCALER_CONFIG_ENV)
    if not where:
        reported = reported_node_types()
        if reported is not None:
            return reported
        default = Path(BOOTSTRAP_CONFIG).expanduser()
        if not default.is_file():
            return None
        where = str(default)
    try:
        data = yaml.safe_load(Path(where).read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as exc:
        msg = f"cannot read the autoscaler config {where!r} ({exc}); fix or unset it"
        raise ClusterError(msg) from exc
    types = (data or {}).get("available_node_types") or {}
    head = (data or {}).get("head_node_type")
    out = []
    for name, spec in types.items():
        if name == head or not isinstance(spec, dict):
            continue
        res = {k: float(v) for k, v in (spec.get("resources") or {}).items()}
        count = int(spec.get("max_workers", data.get("max_workers", 0)) or 0)
        if count > 0:
            unknown = frozenset(k for k in SCALAR if k not in res)
            out.append(NodeShape(name, res, count=count, unknown=unknown))
    return out


def _gcs_get(key: str, namespace: str | None) -> bytes | None:
    """A value of the GCS's internal key-value store (None if unreadable)."""
    try:
        # heavy: ray, imported only where this code uses it
        from ray.experimental.internal_kv import (
            _internal_kv_get,
            _internal_kv_initialized,
        )

        if not _internal_kv_initialized():  # type: ignore[no-untyped-call]
            return None
        value = _internal_kv_get(key, namespace=namespace)
    except Exception:  # no connected Ray, or an older GCS: nothing reported
        return None
    return value if isinstance(value, bytes) and value else None


def reported_node_types() -> list[NodeShape] | None:
    """Node groups an autoscaler reported to the GCS, or None if none did.

    A group with ``max_count`` 1 and the head node's shape is the head's own
    (it cannot be added); ``max_count`` -1 means no limit.
    """
    raw = _gcs_get(_GCS_CLUSTER_CONFIG_KEY, _GCS_AUTOSCALER_NAMESPACE)
    if raw is None:
        return None
    # heavy: ray, imported only where this code uses it
    from ray.core.generated import autoscaler_pb2

    config = autoscaler_pb2.ClusterConfig.FromString(raw)  # type: ignore[attr-defined]
    head = _head_resources()
    out = []
    for group in config.node_group_configs:
        res = {k: float(v) for k, v in group.resources.items()}
        if not res or group.max_count == 0:
            continue
        if group.max_count == 1 and res == head:
            continue
        count = 1_000_000 if group.max_count < 0 else int(group.max_count)
        out.append(NodeShape(group.name or fmt_resources(res), res, count=count))
    return out or None


def _head_resources() -> dict[str, float] | None:
    # heavy: ray, imported only where this code uses it
    import ray

    for n in cast("list[dict[str, Any]]", ray.nodes()):  # type: ignore[no-untyped-call]
        res = n.get("Resources") or {}
        if n.get("Alive") and "node:__internal_head__" in res:
            return {k: float(v) for k, v in res.items() if not k.startswith("node:")}
    return None


def _request(demands: list[PoolDemand]) -> None:
    """Ask the autoscaler for the bundles (an empty list withdraws the ask)."""
    try:
        # heavy: ray, imported only where this code uses it
        from ray.autoscaler.sdk import request_resources

        bundles = [d.per_actor for d in demands for _ in range(d.min_size)]
        request_resources(bundles=bundles)
    except Exception:  # no autoscaler to ask: the wait below still bounds it
        return


def _check_headroom(config: RunConfig, nodes: list[NodeShape]) -> None:
    """The stages fit beside the engine pools (:func:`headroom_problem`).

    Raises:
        ClusterError: They do not: the run would hang after it started.
    """
    task = config.ray.task_num_cpus
    light = stage_cpus(config.generator.pool, own_actors=False, task_cpus=task)
    stages = [("the generator's stages (questions, bounds: light tasks)", light)]
    stages += [
        (f"systems[{s.name}] ({s.pool.min_size} x {s.pool.num_cpus:g} CPUs and a "
         "writer task)", stage_cpus(s.pool, own_actors=True, task_cpus=task))
        for s in config.systems
    ]  # fmt: skip
    stages += [(f"judges.{name} (light tasks)", light) for name in config.judges]
    problem = headroom_problem(
        cpus=sum(n.count * n.resources.get("CPU", 0.0) for n in nodes),
        engines=engine_pool_cpus(config),
        stages=stages,
        local=config.ray.address in (None, "local"),
    )
    if problem is not None:
        raise ClusterError(f"the stages cannot run beside the engine pools: {problem}")


def check_resources(
    config: RunConfig,
    *,
    say: Say,
    wait: bool = True,
    node_types: list[NodeShape] | None = None,
    poll_s: float = 2.0,
) -> list[NodeShape]:
    """Every pool fits the cluster now, or after the autoscaler adds nodes.

    Returns:
        The alive nodes once every pool fits them (or, with ``wait=False``,
        when the rest only needs the autoscaler).

    Raises:
        ClusterError: A pool no node and no node type can host.
        ResourceWaitError: The autoscaler did not add the nodes within
            ``ray.resource_wait_s``.
    """
    nodes = live_nodes()
    demands = pool_demands(config)
    problems = [p for d in demands if (p := resource_problem(d, nodes, node_types))]
    if problems:
        raise ClusterError(
            "a pool can never start on this cluster:\n  - " + "\n  - ".join(problems)
        )
    if not node_types:  # an autoscaler adds nodes for waiting tasks
        _check_headroom(config, nodes)
    pending = [d for d in demands if capacity(nodes, d) < d.min_size]
    if not pending:
        return nodes
    names = ", ".join(d.pool for d in pending)
    limit = config.ray.resource_wait_s
    if not wait:
        say(f"{names}: no node fits yet; the autoscaler's node types can add one")
        return nodes
    say(
        f"{names}: no node fits yet; asking the autoscaler and waiting up to "
        f"{limit:g} s (ray.resource_wait_s)"
    )
    _request(pending)
    start = time.monotonic()
    last = start
    try:
        while pending:
            now = time.monotonic()
            if now - start >= limit:
                wants = "; ".join(
                    f"{d.pool} {fmt_resources(d.per_actor)} x{d.min_size}"
                    for d in pending
                )
                raise ResourceWaitError(
                    f"the autoscaler added no node for {wants} within "
                    f"{limit:g} s (ray.resource_wait_s); check its log "
                    "(ray monitor cluster.yaml, or /tmp/ray/session_latest/logs/"
                    "monitor.*) for quota or launch errors, raise "
                    "ray.resource_wait_s, or resubmit later (the run resumes)"
                )
            if now - last >= 30:
                last = now
                say(f"still waiting for {names} ({now - start:.0f} s)")
            time.sleep(poll_s)
            nodes = live_nodes()
            pending = [d for d in pending if capacity(nodes, d) < d.min_size]
    finally:
        _request([])
    say(f"nodes for every pool are up after {time.monotonic() - start:.0f} s")
    return nodes
