"""A 4-node local cluster: judge pools land only on judge nodes, generator pools
only on the generator node; losing judge nodes mid-run loses no row."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from cube_ray.config import RunConfig
from cube_ray.pipeline import RunOptions, RunResult, part_files, run_pipeline
from cube_ray.pipeline.runner import StageRunner
from tests.pipeline_helpers import (
    assert_complete,
    fake_config,
    make_corpus,
    make_qa_file,
)

pytestmark = [pytest.mark.ray, pytest.mark.slow]

N_DOCS = 8


@pytest.fixture
def cluster() -> Iterator[Any]:
    ray = pytest.importorskip("ray")
    from ray.cluster_utils import Cluster

    if ray.is_initialized():  # pragma: no cover - a leaked instance
        ray.shutdown()
    c = Cluster(
        initialize_head=True,
        head_node_args={"num_cpus": 2, "resources": {"generator": 2}},
    )
    try:
        yield c
    finally:
        ray.shutdown()
        try:
            c.shutdown()
        except ValueError:  # still attached to the head: detached now, retry
            c.shutdown()


@pytest.mark.timeout(1200)
def test_routing_and_node_loss(
    cluster: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import ray

    judge_a = cluster.add_node(num_cpus=2, resources={"judge": 2})
    judge_b = cluster.add_node(num_cpus=2, resources={"judge": 2})
    judge_c = cluster.add_node(num_cpus=2, resources={"judge": 2})
    cluster.wait_for_nodes()
    ray.init(address=cluster.address, include_dashboard=False, log_to_driver=False)
    head_id = ray.get_runtime_context().get_node_id()

    corpus, ids = make_corpus(tmp_path, N_DOCS)
    qa = make_qa_file(tmp_path, ids)
    cfg_path = fake_config(
        tmp_path,
        corpus,
        qa,
        judge_latency=0.5,
        judge_batch=4,
        judge_resources={"judge": 1},
        generator_resources={"generator": 1},
        # The last assertion needs j2 to start after j1 (and both losses):
        # with stages side by side j2 could score rows on judge_b first.
        # Ray Data reads and joins the stage inputs (not the driver, as it
        # would for so few rows): the node losses below must meet them.
        ray_options={"overlap": False, "driver_source_mb": 0},
    )
    config = RunConfig.from_yaml(cfg_path)
    run_dir = tmp_path / "run"
    result: dict[str, RunResult | BaseException] = {}

    # judge_b dies in the middle of the j1 stage (below); judge_c just as the
    # j2 stage starts, so that stage's first Ray Data work (listing Parquet
    # footers on actors spread over every node) meets a node Ray still thinks
    # alive. That is how CI lost two runs.
    real_run_stage = StageRunner.run_stage

    def run_stage(runner: Any, spec: Any, **kwargs: Any) -> None:
        if spec.label == "scores:j2":
            cluster.remove_node(judge_c, allow_graceful=False)
        real_run_stage(runner, spec, **kwargs)

    monkeypatch.setattr(StageRunner, "run_stage", run_stage)

    def target() -> None:
        try:
            result["ok"] = run_pipeline(
                config, RunOptions(run_dir=run_dir, progress=False, report=False)
            )
        except BaseException as exc:
            result["err"] = exc

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    deadline = time.monotonic() + 900
    while time.monotonic() < deadline and thread.is_alive():
        if part_files(run_dir / "scores", "scores:j1"):
            break
        time.sleep(0.2)
    assert thread.is_alive(), result.get("err")
    cluster.remove_node(judge_b, allow_graceful=False)
    thread.join(timeout=900)
    assert not thread.is_alive(), "the run did not finish after losing a node"
    if "err" in result:
        raise result["err"]  # type: ignore[misc]
    run = result["ok"]
    assert isinstance(run, RunResult)

    assert_complete(run_dir, N_DOCS, judges=2)
    judge_nodes = {judge_a.node_id, judge_b.node_id, judge_c.node_id}
    for name, stats in run.stages.items():
        if name.startswith("scores:"):
            assert stats.nodes, name
            assert set(stats.nodes) <= judge_nodes, (name, stats.nodes)
        if name in ("questions", "answers:bounds"):
            assert set(stats.nodes) == {head_id}, (name, stats.nodes)
    assert set(run.stages["scores:j2"].nodes) == {judge_a.node_id}


@pytest.mark.timeout(600)
def test_engine_pools_survive_losing_every_other_node(cluster: Any) -> None:
    """A pool's dispatcher owns its hosts (a Ray actor shares its owner's fate),
    so it must live on the driver's node: Ray places an actor that asks for no
    resources on a random node unless its node affinity is hard. With 8 pools
    on 4 nodes, random placement keeps all 8 on the head once in 65,536 runs."""
    import ray

    from cube_ray.engines.base import SamplingParams
    from cube_ray.engines.config import FakeEngineConfig, PoolConfig
    from cube_ray.pipeline.engine_pool import EnginePools

    others = [cluster.add_node(num_cpus=1) for _ in range(3)]
    cluster.wait_for_nodes()
    ray.init(address=cluster.address, include_dashboard=False, log_to_driver=False)
    head_id = ray.get_runtime_context().get_node_id()

    configs = [
        FakeEngineConfig(name=f"m{i}", pool=PoolConfig(num_cpus=0.25)) for i in range(8)
    ]  # all 8 hosts fit on the head's 2 CPUs, but Ray spreads them past half of it
    pools = EnginePools()
    try:
        engines = [pools.factory([c], stage=f"s{i}")(c) for i, c in enumerate(configs)]
        dispatchers = [pools._pools[eid][0] for eid in pools.stats()]
        assert len(dispatchers) == 8
        nodes = ray.get([d.node.remote() for d in dispatchers], timeout=60)
        assert set(nodes) == {head_id}, nodes

        hosts = [h for d in dispatchers for h in ray.get(d.hosts.remote())]
        host_nodes = [n for _, _, n, _ in ray.get([h.ready.remote() for h in hosts])]
        assert set(host_nodes) - {head_id}, host_nodes  # some hosts will be lost

        sampling = SamplingParams(max_tokens=4)
        first = [e.generate(["a prompt"], sampling=sampling) for e in engines]
        for node in others:  # every host not on the head is lost with its node
            cluster.remove_node(node, allow_graceful=False)
        again = [e.generate(["a prompt"], sampling=sampling) for e in engines]
        assert [[g.text for g in gs] for gs in again] == [
            [g.text for g in gs] for gs in first
        ]
        stats = pools.stats()
        assert all("error" not in s for s in stats.values()), stats
        assert sum(s["calls"] for s in stats.values()) == 16
    finally:
        pools.close()
