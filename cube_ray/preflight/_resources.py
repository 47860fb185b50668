"""The resource arithmetic of the preflight: pure, no Ray.

What each actor pool asks (:class:`PoolDemand`), what a node or an autoscaler
node type offers (:class:`NodeShape`), how many actors fit, and the message
when a pool can never start. And the CPUs left to the stages' own work once
the engine pools hold theirs (:func:`headroom_problem`): with none left for
Ray Data's tasks a run would start and then wait forever.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from cube_ray.config import RunConfig
from cube_ray.engines.config import PoolConfig, VllmEngineConfig
from cube_ray.engines.identity import engine_id
from cube_ray.systems.kinds import system_kind

__all__ = [
    "AUTOSCALER_CONFIG_ENV",
    "SCALAR",
    "NodeShape",
    "PoolDemand",
    "Say",
    "actors_fit",
    "capacity",
    "engine_pool_cpus",
    "fmt_resources",
    "headroom_problem",
    "node_fit",
    "pool_demands",
    "resource_problem",
    "stage_cpus",
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


def stage_cpus(pool: PoolConfig, *, own_actors: bool, task_cpus: float) -> float:
    """Logical CPUs a running stage holds: its actors or one light task, a writer.

    A stage with work of its own (a system) runs ``pool.min_size`` actors of
    ``pool.num_cpus``; a light stage (bounds, questions, a judge) runs tasks of
    ``ray.task_num_cpus``; either needs a part-file writer task beside it.

    >>> pool = PoolConfig(num_cpus=1.0, min_size=2, max_size=2)
    >>> stage_cpus(pool, own_actors=True, task_cpus=0.5)
    2.5
    >>> stage_cpus(PoolConfig(), own_actors=False, task_cpus=0.5)
    1.0
    """
    actors = pool.num_cpus * pool.min_size if own_actors else task_cpus
    return actors + task_cpus


def engine_pool_cpus(config: RunConfig) -> dict[str, tuple[list[str], float]]:
    """Per engine pool: the config paths it serves, and the CPUs its hosts hold.

    Configs that name one pool (:func:`cube_ray.engines.identity.engine_id`)
    count once; a pool holds ``num_cpus * max_size`` for the whole job.
    """
    engines: list[tuple[str, object]] = [("generator", config.generator)]
    engines += [(f"judges.{name}", judge) for name, judge in config.judges.items()]
    out: dict[str, tuple[list[str], float]] = {}
    for path, engine in engines:
        pool: PoolConfig = engine.pool  # type: ignore[attr-defined]
        eid = engine_id(engine)
        paths, _ = out.get(eid, ([], 0.0))
        out[eid] = ([*paths, path], float(pool.num_cpus * pool.max_size))
    return out


def headroom_problem(
    *,
    cpus: float,
    engines: Mapping[str, tuple[list[str], float]],
    stages: list[tuple[str, float]],
    local: bool,
) -> str | None:
    """Why the stages could never run beside the engine pools, or None.

    The rule: the cluster's CPUs less what the engine pools hold
    (:func:`engine_pool_cpus`) must leave room for the largest stage
    (:func:`stage_cpus`). Otherwise Ray Data's tasks wait for a CPU that never
    frees: the run starts its engines and hangs.

    Args:
        cpus: Logical CPUs of the cluster.
        engines: :func:`engine_pool_cpus`.
        stages: ``(what, CPUs)`` of every stage.
        local: A local Ray (``ray.num_cpus`` sets its CPUs).

    >>> engines = {"a": (["generator"], 0.5), "b": (["judges.j1"], 0.5),
    ...            "c": (["judges.j2"], 0.5)}
    >>> stages = [("judges.j1 (a light stage)", 1.0), ("systems[rag].pool", 1.0)]
    >>> print(headroom_problem(cpus=2, engines=engines, stages=stages, local=True))
    the engine pools hold 1.5 of the 2 CPUs (generator 0.5, judges.j1 0.5, \
judges.j2 0.5: num_cpus x max_size each), leaving 0.5 for the stages' own work, \
but judges.j1 (a light stage) needs 1 (Ray Data's tasks would wait for a CPU \
that never frees: the run would start and hang). Fix: set ray.num_cpus to 3 or \
more, or lower the engine pools' num_cpus (an HTTP or fake engine's host mostly \
waits: 0.1 is enough) or ray.task_num_cpus
    >>> headroom_problem(cpus=3, engines=engines, stages=stages, local=True)
    """
    held = sum(c for _, c in engines.values())
    free = cpus - held
    what, need = max(stages, key=lambda s: s[1], default=("", 0.0))
    if need <= free + _EPS:
        return None
    pools = ", ".join(
        f"{' = '.join(paths)} {c:g}" for paths, c in sorted(engines.values())
    )
    more = math.ceil(held + need - _EPS)
    grow = (
        f"set ray.num_cpus to {more} or more"
        if local
        else f"add nodes with {math.ceil(held + need - cpus - _EPS)} CPUs or more"
    )
    return (
        f"the engine pools hold {held:g} of the {cpus:g} CPUs ({pools}: num_cpus "
        f"x max_size each), leaving {max(free, 0.0):g} for the stages' own work, "
        f"but {what} needs {need:g} (Ray Data's tasks would wait for a CPU that "
        f"never frees: the run would start and hang). Fix: {grow}, or lower the "
        "engine pools' num_cpus (an HTTP or fake engine's host mostly waits: "
        "0.1 is enough) or ray.task_num_cpus"
    )
