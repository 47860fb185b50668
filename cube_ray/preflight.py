"""Preflight: find what would stall or fail a run before its first stage.

Part of the Ray boundary, with ``cube_ray.pipeline``: this module talks to the
cluster (``ray.nodes()``, probe tasks pinned to each node), importing ``ray``
inside the functions that do so. The resource arithmetic above them is pure
and needs no Ray.

Checks, in order (each failure is a :class:`ClusterError`, exit code 2):

1. **Resources.** Every actor pool's demand (``num_cpus``, ``num_gpus``,
   ``resources`` per actor, ``min_size`` actors at once) against the alive
   nodes and, when an autoscaler's config is found (``$CUBE_RAY_AUTOSCALER_CONFIG``
   or ``~/ray_bootstrap_config.yaml``, where ``ray up`` puts it on the head),
   its node types (or the node groups an autoscaler reported to the GCS).
   A demand no node and no node type can meet fails at once,
   naming the engine, its pool and the missing resource. A demand only the
   autoscaler can meet is requested from it and waited for, up to
   ``ray.resource_wait_s``, with a line every 30 s; then
   :class:`ResourceWaitError` (exit code 3).
2. **Environment variables** the config names (``api_key_env``,
   ``embedding_api_key_env``, ``${NAME}`` in HTTP systems) are set.
3. **HTTP endpoints** of ``openai_http`` engines and embedding endpoints answer
   ``GET /models`` listing the configured model. Then one probe request per
   ``openai_http`` engine, of the size of its own requests, is timed: taking
   more than ``PROBE_WARN_SHARE`` of the engine's ``timeout_s`` (or timing
   out) is a warning line, not an error.
4. **Local model paths** of ``vllm`` engines exist on every node that can host
   their pool.
5. **The run dir** (or its nearest existing parent) is shared: a file the
   driver writes there is read, and a file beside it written, by a task on
   every node.

Nothing is written to the run dir (the probe files of check 5 are removed).

Size: about 860 lines, one module on purpose: the five checks run as one
sequence with one message style, and each is short; a reader finds the
whole preflight (and its pure resource arithmetic) here.
"""

from __future__ import annotations

import json
import math
import os
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import yaml

from cube_ray.config import RunConfig
from cube_ray.engines.config import OpenAIHttpEngineConfig, PoolConfig, VllmEngineConfig
from cube_ray.errors import ClusterError, ResourceWaitError
from cube_ray.systems.kinds import system_kind

__all__ = [
    "NodeShape",
    "PoolDemand",
    "actors_fit",
    "autoscaler_node_types",
    "capacity",
    "check_endpoints",
    "check_env",
    "live_nodes",
    "pool_demands",
    "preflight",
    "probe_endpoints",
    "probe_warning",
    "reported_node_types",
    "resource_problem",
]

Say = Callable[[str], None]

AUTOSCALER_CONFIG_ENV = "CUBE_RAY_AUTOSCALER_CONFIG"
"""Environment variable naming the autoscaler's cluster YAML (its node types)."""
BOOTSTRAP_CONFIG = "~/ray_bootstrap_config.yaml"
"""Where ``ray up`` leaves the autoscaler's config on the head node."""
PROBE_TIMEOUT_S = 180
"""How long a probe task pinned to a node may take (a worker process start)."""
_SCALAR = ("CPU", "GPU")
# Where an autoscaler reports its node groups in the GCS's key-value store
# (ray._raylet's GCS_AUTOSCALER_STATE_NAMESPACE / _CLUSTER_CONFIG_KEY).
_GCS_AUTOSCALER_NAMESPACE = "__autoscaler"
_GCS_CLUSTER_CONFIG_KEY = "__autoscaler_cluster_config"

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


def _fit(node: NodeShape, demand: PoolDemand) -> int:
    known = {k: v for k, v in demand.per_actor.items() if k not in node.unknown}
    return actors_fit(node.resources, PoolDemand(demand.engine, known, 1))


def capacity(nodes: Iterable[NodeShape], demand: PoolDemand) -> int:
    """Actors of ``demand`` the nodes can host at once.

    >>> d = PoolDemand("judges.a", {"CPU": 1, "judge": 1}, 3)
    >>> capacity([NodeShape("a", {"CPU": 2, "judge": 4}),
    ...           NodeShape("t", {"judge": 1}, count=2, unknown=frozenset({"CPU"}))], d)
    4
    """
    return sum(node.count * _fit(node, demand) for node in nodes)


def _fmt(resources: Mapping[str, float]) -> str:
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
    have = "; ".join(f"{n.name} {_fmt(n.resources)}" for n in nodes) or "none"
    scaler = (
        "; node types: "
        + "; ".join(f"{t.name} x{t.count} {_fmt(t.resources)}" for t in node_types)
        if node_types
        else (
            "; no autoscaler found (one whose node types cube-ray cannot see, "
            f"e.g. KubeRay's: set ${AUTOSCALER_CONFIG_ENV} to a cluster YAML "
            "listing them)"
        )
    )
    head = (
        f"{demand.pool} asks {_fmt(demand.per_actor)} per actor for min_size "
        f"{demand.min_size} actor(s), but "
    )
    missing = _missing(everything, demand)
    custom = [k for k in demand.per_actor if k not in _SCALAR and k in missing]
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


# --- the cluster ------------------------------------------------------------------


def live_nodes() -> list[NodeShape]:
    """The alive nodes of the connected cluster."""
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
            unknown = frozenset(k for k in _SCALAR if k not in res)
            out.append(NodeShape(name, res, count=count, unknown=unknown))
    return out


def _gcs_get(key: str, namespace: str | None) -> bytes | None:
    """A value of the GCS's internal key-value store (None if unreadable)."""
    try:
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
        out.append(NodeShape(group.name or _fmt(res), res, count=count))
    return out or None


def _head_resources() -> dict[str, float] | None:
    import ray

    for n in cast("list[dict[str, Any]]", ray.nodes()):  # type: ignore[no-untyped-call]
        res = n.get("Resources") or {}
        if n.get("Alive") and "node:__internal_head__" in res:
            return {k: float(v) for k, v in res.items() if not k.startswith("node:")}
    return None


def _request(demands: list[PoolDemand]) -> None:
    """Ask the autoscaler for the bundles (an empty list withdraws the ask)."""
    try:
        from ray.autoscaler.sdk import request_resources

        bundles = [d.per_actor for d in demands for _ in range(d.min_size)]
        request_resources(bundles=bundles)
    except Exception:  # no autoscaler to ask: the wait below still bounds it
        return


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
                    f"{d.pool} {_fmt(d.per_actor)} x{d.min_size}" for d in pending
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


def _env_names(config: RunConfig) -> list[tuple[str, str]]:
    """(config path, variable) of every environment variable the config names."""
    out = []
    engines = [
        ("generator", config.generator),
        *((f"judges.{n}", e) for n, e in config.judges.items()),
    ]
    for where, engine in engines:
        if isinstance(engine, OpenAIHttpEngineConfig) and engine.api_key_env:
            out.append((f"{where}.api_key_env", engine.api_key_env))
    for s in config.systems:
        out += [(u.field, u.name) for u in system_kind(s).env_uses(s)]
    return out


def check_env(config: RunConfig) -> None:
    """Every environment variable the config names is set (values never shown).

    Raises:
        ClusterError: Listing each unset variable and the field naming it.
    """
    unset = [(w, n) for w, n in _env_names(config) if not os.environ.get(n)]
    if unset:
        items = "\n  - ".join(f"{w} names {n}, which is not set" for w, n in unset)
        raise ClusterError(
            "environment variables are missing:\n  - " + items + "\n"
            "Fix: export them where the driver runs; under ray job submit pass "
            "--runtime-env-json '{\"env_vars\": {...}}' so every worker gets them"
        )


def _endpoints(config: RunConfig) -> list[tuple[str, str, str, str | None]]:
    """(config path, base URL, model, API key variable) of each HTTP model."""
    out = []
    engines = [
        ("generator", config.generator),
        *((f"judges.{n}", e) for n, e in config.judges.items()),
    ]
    for where, engine in engines:
        if isinstance(engine, OpenAIHttpEngineConfig):
            out.append((where, engine.base_url, engine.model, engine.api_key_env))
    for s in config.systems:
        out += [
            (e.field, e.base_url, e.model, e.api_key_env)
            for e in system_kind(s).endpoints(s)
        ]
    return out


def check_endpoints(config: RunConfig, *, timeout_s: float = 10.0) -> None:
    """Every HTTP model endpoint lists its configured model at ``GET /models``.

    Raises:
        ClusterError: Naming the engine, the URL and what came back.
    """
    problems = []
    for where, base, model, key_env in _endpoints(config):
        url = base.rstrip("/") + "/models"
        request = urllib.request.Request(url)
        key = os.environ.get(key_env) if key_env else None
        if key:
            request.add_header("Authorization", f"Bearer {key}")
        try:
            with urllib.request.urlopen(request, timeout=timeout_s) as response:
                body = json.loads(response.read().decode("utf-8"))
        except urllib.error.HTTPError as exc:
            problems.append(f"{where}: GET {url} answered HTTP {exc.code}")
            continue
        except (OSError, ValueError) as exc:
            problems.append(f"{where}: GET {url} failed ({exc})")
            continue
        data = body.get("data") if isinstance(body, dict) else None
        served = [str(m.get("id")) for m in data or [] if isinstance(m, dict)]
        if model not in served:
            problems.append(
                f"{where}: {url} serves {served}, not {model!r}; set the model "
                "to one of them"
            )
    if problems:
        raise ClusterError(
            "HTTP model endpoints are not ready:\n  - "
            + "\n  - ".join(problems)
            + "\nFix: start the server (or correct base_url / model) and retry"
        )


PROBE_WARN_SHARE = 0.5
"""A probe request that takes more than this share of its engine's
``timeout_s`` gets a warning: under the run's load (``max_concurrency``
requests per actor, longer prompts) real requests are slower than one probe."""
PROBE_PROMPT = (
    "Describe, step by step and in detail, how a citizen applies for a passport: "
    "eligibility, documents, where to apply, fees and processing time."
)
"""A request like the run's answers: one that asks for a long reply."""
PROBE_TIMED_OUT = "timed out"


def _probe_max_tokens(engine: OpenAIHttpEngineConfig, *, judge: bool) -> int:
    """``max_tokens`` of the engine's own requests (answers, or scores)."""
    return engine.score_max_tokens if judge else engine.sampling.max_tokens


def probe_warning(
    where: str,
    engine: OpenAIHttpEngineConfig,
    *,
    max_tokens: int,
    elapsed_s: float,
    completion_tokens: int | None,
    error: str | None = None,
) -> str | None:
    """The warning for one probe request, or None when it was quick enough.

    A reply shorter than ``max_tokens`` is scaled up to it (decode time grows
    with the tokens written), so a model that stopped early still shows how
    long a full-length answer would take.

    >>> from cube_ray.engines.config import OpenAIHttpEngineConfig as Http
    >>> gen = Http(base_url="http://h/v1", model="m", timeout_s=60)
    >>> print(probe_warning("generator", gen, max_tokens=512, elapsed_s=20.0,
    ...       completion_tokens=256))  # doctest: +NORMALIZE_WHITESPACE
    generator: a probe request to http://h/v1 took 20.0 s for 256 tokens; a
    reply of max_tokens 512 would take about 40 s, 67% of timeout_s (60 s, which
    bounds one request; up to max_concurrency 8 requests per actor share the
    server during the run). Raise generator.timeout_s before a long run.
    >>> probe_warning("generator", gen, max_tokens=512, elapsed_s=5.0,
    ...               completion_tokens=512) is None
    True
    """
    limit = engine.timeout_s
    shared = (
        f"which bounds one request; up to max_concurrency {engine.max_concurrency} "
        "requests per actor share the server during the run"
    )
    fix = f"Raise {where}.timeout_s before a long run."
    if error == PROBE_TIMED_OUT:
        return (
            f"{where}: a probe request to {engine.base_url} did not finish within "
            f"timeout_s ({limit:g} s, {shared}). {fix}"
        )
    if error is not None:
        return (
            f"{where}: a probe request to {engine.base_url} failed ({error}); the "
            "run's requests may fail the same way (their rows get a failure "
            "status). Check the server's log before a long run."
        )
    estimate = elapsed_s
    if completion_tokens and completion_tokens < max_tokens:
        estimate = elapsed_s * max_tokens / completion_tokens
    if estimate <= PROBE_WARN_SHARE * limit:
        return None
    took = f"took {elapsed_s:.1f} s"
    if completion_tokens:
        took += f" for {completion_tokens} tokens"
    scaled = (
        f"; a reply of max_tokens {max_tokens} would take about {estimate:.0f} s"
        if estimate != elapsed_s
        else ""
    )
    return (
        f"{where}: a probe request to {engine.base_url} {took}{scaled}, "
        f"{estimate / limit:.0%} of timeout_s ({limit:g} s, {shared}). {fix}"
    )


def _probe_request(
    engine: OpenAIHttpEngineConfig, max_tokens: int
) -> tuple[float, int | None, str | None]:
    """One request as the engine sends them: seconds, tokens written, error."""
    body: dict[str, Any] = {
        **engine.extra_body,
        "model": engine.model,
        "max_tokens": max_tokens,
        "temperature": 0,
    }
    if engine.api == "chat":
        path = "chat/completions"
        body["messages"] = [{"role": "user", "content": PROBE_PROMPT}]
    else:
        path, body["prompt"] = "completions", PROBE_PROMPT
    request = urllib.request.Request(
        engine.base_url.rstrip("/") + "/" + path,
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
    )
    key = os.environ.get(engine.api_key_env) if engine.api_key_env else None
    if key:
        request.add_header("Authorization", f"Bearer {key}")
    start = time.monotonic()
    try:
        with urllib.request.urlopen(request, timeout=engine.timeout_s) as response:
            reply = json.loads(response.read().decode("utf-8"))
    except (OSError, ValueError) as exc:
        reason = getattr(exc, "reason", exc)  # URLError wraps the socket's error
        if isinstance(exc, TimeoutError) or isinstance(reason, TimeoutError):
            return time.monotonic() - start, None, PROBE_TIMED_OUT
        # The key is only in a header; an error text never holds it.
        return time.monotonic() - start, None, f"{type(exc).__name__}: {exc}"
    elapsed = time.monotonic() - start
    usage = reply.get("usage") if isinstance(reply, dict) else None
    tokens = usage.get("completion_tokens") if isinstance(usage, dict) else None
    return elapsed, tokens if isinstance(tokens, int) else None, None


def probe_endpoints(config: RunConfig, *, say: Say) -> None:
    """Time one request to each ``openai_http`` engine; warn when it is slow.

    One request per engine, of the size of its own requests (a long answer
    for the generator, a score for a judge), sent after ``check_endpoints``
    found the server. Slowness is a warning, not an error: the run may still
    fit, and the fix (``timeout_s``) is the user's choice.
    """
    engines = [
        ("generator", config.generator, False),
        *((f"judges.{n}", e, True) for n, e in config.judges.items()),
    ]
    for where, engine, judge in engines:
        if not isinstance(engine, OpenAIHttpEngineConfig):
            continue
        max_tokens = _probe_max_tokens(engine, judge=judge)
        elapsed, tokens, error = _probe_request(engine, max_tokens)
        warning = probe_warning(
            where,
            engine,
            max_tokens=max_tokens,
            elapsed_s=elapsed,
            completion_tokens=tokens,
            error=error,
        )
        if warning is not None:
            say(f"warning: {warning}")


def _on_each_node(
    nodes: list[NodeShape], fn: Callable[..., Any], *args: Any
) -> dict[str, Any]:
    """``fn(*args)`` in a task pinned to each node; node name -> result."""
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
        hosts = [n for n in nodes if n.node_id and _fit(n, demand) > 0]
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


def preflight(
    config: RunConfig,
    *,
    run_dir: Path,
    say: Say,
    wait: bool = True,
) -> None:
    """Run every check of the module docstring against the connected cluster.

    Args:
        config: The run config.
        run_dir: The run directory (need not exist; nothing is left in it).
        say: Prints one progress line.
        wait: Wait for the autoscaler (``ray.resource_wait_s``); False only
            reports what it would wait for (``cube-ray check``).

    Raises:
        ClusterError: A check failed (exit code 2).
        ResourceWaitError: Nodes the run needs did not come up in time
            (exit code 3).
    """
    start = time.monotonic()
    nodes = check_resources(
        config, say=say, wait=wait, node_types=autoscaler_node_types()
    )
    check_env(config)
    check_endpoints(config)
    probe_endpoints(config, say=say)
    check_model_paths(config, nodes)
    check_run_dir(run_dir, nodes)
    say(
        f"{len(pool_demands(config))} pools fit {len(nodes)} node(s); environment, "
        f"endpoints, model paths and the run dir are ready "
        f"({time.monotonic() - start:.1f} s)"
    )
