"""The resource arithmetic of the preflight: pure, no Ray.

What each actor pool asks (:class:`PoolDemand`), what a node or an autoscaler
node type offers (:class:`NodeShape`), how many actors fit, and the message
when a pool can never start.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from cube_ray.config import RunConfig
from cube_ray.engines.config import PoolConfig, VllmEngineConfig
from cube_ray.systems.kinds import system_kind

__all__ = [
    "AUTOSCALER_CONFIG_ENV",
    "SCALAR",
    "NodeShape",
    "PoolDemand",
    "Say",
    "actors_fit",
    "capacity",
    "fmt_resources",
    "node_fit",
    "pool_demands",
    "resource_problem",
]

Say = Callable[[str], None]
"""Prints one progress line."""

AUTOSCALER_CONFIG_ENV = "CUBE_RAY_AUTOSCALER_CONFIG"
"""Environment variable naming the autoscaler's cluster YAML (its node types)."""
SCALAR = ("CPU", "GPU")
"""The resources a provider detects on its own (a node type need not list them)."""

_EPS = 1e-9


@dataclass(frozen=True)
class PoolDemand:
    """What one actor pool asks of the cluster."""

    engine: str
    """Dotted config path of the engine or system owning the pool."""
    per_actor: dict[str, float]
    """Ray resources of one actor (``CPU``, ``GPU``, custom)."""
    min_size: int
    """Actors the pool starts at once (Ray Data waits for them)."""
    model_paths: tuple[str, ...] = ()
    """Local model files or folders the actors load (vLLM engines)."""

    @property
    def pool(self) -> str:
        """The config path of the pool."""
        return f"{self.engine}.pool"


@dataclass(frozen=True)
class NodeShape:
    """A node (or an autoscaler node type) and what one such node offers."""

    name: str
    """Node IP and id, or the node type's name."""
    resources: dict[str, float]
    """Total Ray resources of one node."""
    count: int = 1
    """Nodes of this shape (a node type's ``max_workers``)."""
    node_id: str | None = None
    """Ray node id (alive nodes only)."""
    unknown: frozenset[str] = field(default_factory=frozenset)
    """Resources a node type does not list but its provider detects (CPU, GPU):
    assumed sufficient."""


def _pool_demand(engine: str, pool: PoolConfig, paths: tuple[str, ...]) -> PoolDemand:
    per_actor = {"CPU": pool.num_cpus, "GPU": pool.num_gpus, **pool.resources}
    per_actor = {k: float(v) for k, v in per_actor.items() if v}
    return PoolDemand(engine, per_actor, pool.min_size, paths)


def _local_paths(engine: object) -> tuple[str, ...]:
    if not isinstance(engine, VllmEngineConfig):
        return ()
    names = [engine.model, engine.tokenizer]
    return tuple(
        n for n in names if n and n.startswith(("/", "./", "../", "~")) and n != "/"
    )


def pool_demands(config: RunConfig) -> list[PoolDemand]:
    """The actor pools a run starts, in stage order.

    The generator's pool writes questions and the bounds; each system's pool
    answers for it (the built-in RAG loads the generator there); each judge's
    pool scores.
    """
    gen_paths = _local_paths(config.generator)
    out = [_pool_demand("generator", config.generator.pool, gen_paths)]
    for s in config.systems:
        paths = gen_paths if system_kind(s).uses_generator else ()
        out.append(_pool_demand(f"systems[{s.name}]", s.pool, paths))
    for name, judge in config.judges.items():
        out.append(_pool_demand(f"judges.{name}", judge.pool, _local_paths(judge)))
    return out


def actors_fit(resources: Mapping[str, float], demand: PoolDemand) -> int:
    """How many actors of ``demand`` one node offering ``resources`` can host.

    >>> d = PoolDemand("judges.a", {"CPU": 0.5, "judge": 1}, 1)
    >>> actors_fit({"CPU": 4, "judge": 2}, d), actors_fit({"CPU": 4}, d)
    (2, 0)
    >>> actors_fit({"CPU": 8}, PoolDemand("generator", {}, 1))  # asks for nothing
    1000000
    """
    fits = 1_000_000
    for name, need in demand.per_actor.items():
        have = resources.get(name, 0.0)
        fits = min(fits, math.floor(have / need + _EPS))
    return max(fits, 0)


def node_fit(node: NodeShape, demand: PoolDemand) -> int:
    known = {k: v for k, v in demand.per_actor.items() if k not in node.unknown}
    return actors_fit(node.resources, PoolDemand(demand.engine, known, 1))


def capacity(nodes: Iterable[NodeShape], demand: PoolDemand) -> int:
    """Actors of ``demand`` the nodes can host at once.

    >>> d = PoolDemand("judges.a", {"CPU": 1, "judge": 1}, 3)
    >>> capacity([NodeShape("a", {"CPU": 2, "judge": 4}),
    ...           NodeShape("t", {"judge": 1}, count=2, unknown=frozenset({"CPU"}))], d)
    4
    """
    return sum(node.count * node_fit(node, demand) for node in nodes)


def fmt_resources(resources: Mapping[str, float]) -> str:
    """``{CPU: 4, GPU: 1}``, sorted by name."""
    return "{" + ", ".join(f"{k}: {v:g}" for k, v in sorted(resources.items())) + "}"


def _missing(nodes: list[NodeShape], demand: PoolDemand) -> str:
    """The resource(s) that keep ``demand`` off every node, in words."""
    parts = []
    for name, need in sorted(demand.per_actor.items()):
        best = max(
            (
                math.inf if name in n.unknown else n.resources.get(name, 0.0)
                for n in nodes
            ),
            default=0.0,
        )
        if best + _EPS < need:
            if best == 0:
                parts.append(f"no node offers {name!r}")
            else:
                parts.append(
                    f"{name} {need:g} per actor, the most a node has is {best:g}"
                )
    return "; ".join(parts)


def resource_problem(
    demand: PoolDemand,
    nodes: list[NodeShape],
    node_types: list[NodeShape] | None,
) -> str | None:
    """Why no node and no node type can host ``demand``'s pool, or None.

    >>> d = PoolDemand("judges.a", {"CPU": 0.5, "judge": 1}, 1)
    >>> msg = resource_problem(d, [NodeShape("127.0.0.1", {"CPU": 4})], None)
    >>> print(msg.split(" (nodes")[0])
    judges.a.pool asks {CPU: 0.5, judge: 1} per actor for min_size 1 actor(s), \
but no node offers 'judge'
    >>> resource_problem(d, [NodeShape("127.0.0.1", {"CPU": 4, "judge": 1})], None)
    """
    everything = [*nodes, *(node_types or [])]
    if capacity(everything, demand) >= demand.min_size:
        return None
    have = "; ".join(f"{n.name} {fmt_resources(n.resources)}" for n in nodes) or "none"
    scaler = (
        "; node types: "
        + "; ".join(
            f"{t.name} x{t.count} {fmt_resources(t.resources)}" for t in node_types
        )
        if node_types
        else (
            "; no autoscaler found (one whose node types cube-ray cannot see, "
            f"e.g. KubeRay's: set ${AUTOSCALER_CONFIG_ENV} to a cluster YAML "
            "listing them)"
        )
    )
    head = (
        f"{demand.pool} asks {fmt_resources(demand.per_actor)} per actor for min_size "
        f"{demand.min_size} actor(s), but "
    )
    missing = _missing(everything, demand)
    custom = [k for k in demand.per_actor if k not in SCALAR and k in missing]
    if missing:
        why = f"{missing} (nodes: {have}{scaler})."
        if custom:
            name = custom[0]
            fix = (
                f" Fix: start nodes that advertise it (ray start --resources="
                f"'{{\"{name}\": 4}}', or a node type in cluster.yaml with "
                f"resources: {{{name}: 4}}), or remove it from "
                f"{demand.pool}.resources"
            )
        else:
            fix = (
                f" Fix: lower {demand.pool}.num_cpus / num_gpus, or add nodes "
                "that large"
            )
        return head + why + fix
    most = capacity(everything, demand)
    return (
        f"{head}the cluster hosts at most {most} at once (nodes: {have}{scaler})."
        f" Fix: set {demand.pool}.min_size to {most} or less, or add nodes"
    )
