"""The preflight's resource arithmetic on literal nodes (no Ray)."""

from __future__ import annotations

from cube_ray.preflight import NodeShape, PoolDemand, capacity, resource_problem

CPU4 = NodeShape("10.0.0.1 (aaaa)", {"CPU": 4.0})
GPU1 = NodeShape("10.0.0.2 (bbbb)", {"CPU": 8.0, "GPU": 1.0, "judge": 1.0})


def test_fits_and_min_size() -> None:
    d = PoolDemand("judges.a", {"CPU": 1.0, "GPU": 1.0, "judge": 1.0}, 1)
    assert capacity([CPU4, GPU1], d) == 1
    assert resource_problem(d, [CPU4, GPU1], None) is None
    two = PoolDemand("judges.a", d.per_actor, 2)
    problem = resource_problem(two, [CPU4, GPU1], None)
    assert problem is not None
    assert "the cluster hosts at most 1 at once" in problem
    assert "set judges.a.pool.min_size to 1 or less" in problem


def test_too_large_an_actor_names_the_resource_and_largest_node() -> None:
    d = PoolDemand("generator", {"CPU": 16.0, "GPU": 2.0}, 1)
    problem = resource_problem(d, [CPU4, GPU1], None)
    assert problem is not None
    assert "CPU 16 per actor, the most a node has is 8" in problem
    assert "GPU 2 per actor, the most a node has is 1" in problem
    assert "lower generator.pool.num_cpus / num_gpus" in problem


def test_autoscaler_node_types_count_and_unknown_cpu() -> None:
    d = PoolDemand("judges.a", {"CPU": 2.0, "GPU": 1.0, "judge": 1.0}, 6)
    # CPU and GPU the node type does not list: its provider detects them.
    gpu_judge = NodeShape(
        "gpu_judge", {"judge": 4.0}, count=2, unknown=frozenset({"CPU", "GPU"})
    )
    assert capacity([gpu_judge], d) == 8
    assert resource_problem(d, [CPU4], [gpu_judge]) is None
    small = NodeShape("gpu_judge", {"judge": 4.0}, count=1, unknown=gpu_judge.unknown)
    problem = resource_problem(d, [CPU4], [small])
    assert problem is not None
    assert "hosts at most 4" in problem
    assert "node types: gpu_judge x1 {judge: 4}" in problem


def test_the_gcs_keys_are_ray_s_own() -> None:
    import ray._raylet as raylet

    from cube_ray.preflight import _cluster

    assert _cluster._GCS_AUTOSCALER_NAMESPACE == raylet.GCS_AUTOSCALER_STATE_NAMESPACE
    assert _cluster._GCS_CLUSTER_CONFIG_KEY == raylet.GCS_AUTOSCALER_CLUSTER_CONFIG_KEY


def test_without_node_types_the_message_says_how_to_give_them() -> None:
    d = PoolDemand("judges.a", {"CPU": 1.0, "judge": 1.0}, 1)
    problem = resource_problem(d, [CPU4], None)
    assert problem is not None
    assert "set $CUBE_RAY_AUTOSCALER_CONFIG to a cluster YAML" in problem
