"""cluster.yaml validates against Ray's launcher schema; the job entrypoint."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]


def test_cluster_yaml_is_a_valid_launcher_config() -> None:
    jsonschema = pytest.importorskip("jsonschema")
    autoscaler = pytest.importorskip("ray.autoscaler")
    schema_path = Path(autoscaler.__file__).parent / "ray-schema.json"
    config = yaml.safe_load((ROOT / "cluster.yaml").read_text())
    jsonschema.validate(config, json.loads(schema_path.read_text()))
    types = config["available_node_types"]
    assert types["gpu_generator"]["resources"]["generator"] >= 1
    assert types["gpu_judge"]["resources"]["judge"] >= 1
    assert config["head_node_type"] == "head"


def test_shipped_config_pools_route_to_cluster_resources() -> None:
    from cube_ray.config import RunConfig

    cfg = RunConfig.from_yaml(ROOT / "conf" / "guangdong.yaml")
    assert cfg.generator.pool.resources == {"generator": 1}
    vllm_judges = [e for e in cfg.judges.values() if e.backend == "vllm"]
    assert vllm_judges
    assert all(e.pool.resources == {"judge": 1} for e in vllm_judges)


def test_job_entrypoint_adds_auto_address() -> None:
    sys.path.insert(0, str(ROOT / "jobs"))
    try:
        from cube_eval import job_argv  # type: ignore[import-not-found]
    finally:
        sys.path.pop(0)
    assert job_argv(["conf/x.yaml"]) == ["run", "conf/x.yaml", "--address", "auto"]
    assert job_argv(["c.yaml", "--address", "ray://h:10001"]) == [
        "run",
        "c.yaml",
        "--address",
        "ray://h:10001",
    ]


def test_shipped_config_fits_cluster_yaml_node_types() -> None:
    """The preflight's arithmetic: conf/guangdong.yaml on cluster.yaml's node
    types (before any node is up) needs only the autoscaler; without the judge
    node type, its judge pools can never start."""
    from cube_ray.config import RunConfig
    from cube_ray.preflight import (
        autoscaler_node_types,
        pool_demands,
        resource_problem,
    )

    cfg = RunConfig.from_yaml(ROOT / "conf" / "guangdong.yaml")
    types = autoscaler_node_types(str(ROOT / "cluster.yaml"))
    assert types is not None
    assert {t.name for t in types} == {"gpu_generator", "gpu_judge"}  # not the head
    head = [t for t in types if t.name == "head"]
    assert head == []
    demands = pool_demands(cfg)
    assert [resource_problem(d, [], types) for d in demands] == [None] * len(demands)
    no_judges = [t for t in types if t.name != "gpu_judge"]
    problems = [resource_problem(d, [], no_judges) for d in demands]
    judge_problems = [p for d, p in zip(demands, problems, strict=True) if p]
    assert judge_problems
    assert all("no node offers 'judge'" in p for p in judge_problems)


def test_cluster_yaml_installs_the_job_server() -> None:
    text = (ROOT / "cluster.yaml").read_text()
    assert "cluster]" in text  # the `cluster` extra: ray[default], the job server
    pyproject = (ROOT / "pyproject.toml").read_text()
    assert 'cluster = ["ray[default]' in pyproject
    assert ",cluster," in (ROOT / "Makefile").read_text()


def test_cluster_yaml_starts_every_node_with_token_auth() -> None:
    """The head's job API listens on 0.0.0.0: head and workers start with
    RAY_AUTH_MODE=token and the token file that file_mounts copies."""
    config = yaml.safe_load((ROOT / "cluster.yaml").read_text())
    token_path = "/home/ray/ray_auth_token"
    assert token_path in config["file_mounts"]
    for key in ("head_start_ray_commands", "worker_start_ray_commands"):
        starts = [c for c in config[key] if "ray start" in c]
        assert starts, key
        for command in starts:
            before_start = command.split("ray start")[0]
            assert "RAY_AUTH_MODE=token" in before_start, command
            assert f"RAY_AUTH_TOKEN_PATH={token_path}" in before_start, command
