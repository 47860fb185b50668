"""Preflight: find what would stall or fail a run before its first stage.

Part of the Ray boundary, with ``cube_ray.pipeline``: this package talks to the
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

Modules: ``_resources`` (the pure arithmetic), ``_cluster`` (nodes, the
autoscaler, check 1), ``_env`` (check 2), ``_endpoints`` (check 3),
``_nodes`` (checks 4 and 5, a task pinned to each node); :func:`preflight`
runs them in order.
"""

from __future__ import annotations

import time
from pathlib import Path

from cube_ray.config import RunConfig
from cube_ray.preflight._cluster import (
    BOOTSTRAP_CONFIG,
    autoscaler_node_types,
    check_resources,
    live_nodes,
    reported_node_types,
)
from cube_ray.preflight._endpoints import (
    PROBE_PROMPT,
    PROBE_TIMED_OUT,
    PROBE_WARN_SHARE,
    check_endpoints,
    probe_endpoints,
    probe_warning,
)
from cube_ray.preflight._env import check_env
from cube_ray.preflight._nodes import PROBE_TIMEOUT_S, check_model_paths, check_run_dir
from cube_ray.preflight._resources import (
    AUTOSCALER_CONFIG_ENV,
    NodeShape,
    PoolDemand,
    Say,
    actors_fit,
    capacity,
    engine_pool_cpus,
    pool_demands,
    resource_problem,
    stage_cpus,
)

__all__ = [
    "AUTOSCALER_CONFIG_ENV",
    "BOOTSTRAP_CONFIG",
    "PROBE_PROMPT",
    "PROBE_TIMED_OUT",
    "PROBE_TIMEOUT_S",
    "PROBE_WARN_SHARE",
    "NodeShape",
    "PoolDemand",
    "Say",
    "actors_fit",
    "autoscaler_node_types",
    "capacity",
    "check_endpoints",
    "check_env",
    "check_model_paths",
    "check_resources",
    "check_run_dir",
    "engine_pool_cpus",
    "live_nodes",
    "pool_demands",
    "preflight",
    "probe_endpoints",
    "probe_warning",
    "reported_node_types",
    "resource_problem",
    "stage_cpus",
]


def preflight(
    config: RunConfig,
    *,
    run_dir: Path,
    say: Say,
    wait: bool = True,
) -> None:
    """Run every check of the package docstring against the connected cluster.

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
