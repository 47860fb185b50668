"""The preflight reads node groups an autoscaler reported to the GCS (KubeRay).

Its own module: it starts its own Ray (a fresh GCS, no node groups reported),
which ``ray_local`` of another module would have occupied.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from cube_ray.cli import main
from tests.conftest import _shutdown_and_reap
from tests.pipeline_helpers import fake_config, make_corpus, make_qa_file

pytestmark = [pytest.mark.ray]


def _config(tmp: Path, **kwargs: object) -> Path:
    corpus, ids = make_corpus(tmp, 4)
    qa = make_qa_file(tmp, ids)
    return fake_config(tmp, corpus, qa, **kwargs)


@pytest.mark.timeout(300)
def test_autoscaler_node_types_from_the_gcs(
    tmp_path: Path, capfd: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """No cluster YAML on the head (KubeRay): node groups an autoscaler reported
    to the GCS count, so a pool only they can host waits (bounded) instead of
    failing; a plain local Ray (whose head runs Ray's monitor too) has none."""
    import ray
    from ray.core.generated import autoscaler_pb2
    from ray.experimental.internal_kv import _internal_kv_put

    from cube_ray.preflight import autoscaler_node_types

    monkeypatch.delenv("CUBE_RAY_AUTOSCALER_CONFIG", raising=False)
    monkeypatch.setattr(  # no ~/ray_bootstrap_config.yaml of `ray up`
        "cube_ray.preflight._cluster.BOOTSTRAP_CONFIG", str(tmp_path / "absent.yaml")
    )
    ray.init(address="local", num_cpus=4, include_dashboard=False)
    try:
        time.sleep(5)  # the head's monitor is up and has reported its status
        assert autoscaler_node_types() is None
        config = autoscaler_pb2.ClusterConfig()
        group = config.node_group_configs.add()
        group.name = "gpu-judges"
        group.resources["CPU"] = 8
        group.resources["judge"] = 2
        group.max_count = 3
        _internal_kv_put(
            "__autoscaler_cluster_config",
            config.SerializeToString(),
            namespace="__autoscaler",
        )
        [shape] = autoscaler_node_types() or []
        assert (shape.name, shape.count) == ("gpu-judges", 3)
        assert shape.resources == {"CPU": 8.0, "judge": 2.0}

        path = _config(
            tmp_path, judge_resources={"judge": 1}, ray_options={"resource_wait_s": 3}
        )
        run_dir = tmp_path / "run"
        code = main(["run", str(path), "--out", str(run_dir)])
        err = capfd.readouterr().err
        assert code == 3, err  # waited for the autoscaler, then stopped
        assert "asking the autoscaler and waiting up to 3 s" in err
        manifest = json.loads((run_dir / "manifest.json").read_text())
        assert manifest["status"] == "resource_timeout"
    finally:
        _shutdown_and_reap(ray)
