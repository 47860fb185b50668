"""The preflight against a real local Ray: a pool asking for a resource no node
offers is exit 2 within seconds (it used to hang), an autoscaler-only demand
waits ``ray.resource_wait_s`` then stops with exit 3 and a manifest status,
and the other checks (env, endpoints, model paths, run dir) name what fails."""

from __future__ import annotations

import http.server
import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from cube_ray.cli import main
from cube_ray.config import RunConfig
from cube_ray.errors import ClusterError
from cube_ray.preflight import (
    check_endpoints,
    check_env,
    check_model_paths,
    check_run_dir,
    live_nodes,
    preflight,
)
from cube_ray.preflight._nodes import _probe
from tests.pipeline_helpers import fake_config, make_corpus, make_qa_file

pytestmark = [pytest.mark.ray]


def snapshot(path: Path) -> dict[str, tuple[int, float]]:
    if not path.exists():
        return {}
    return {
        str(p.relative_to(path)): (p.stat().st_size, p.stat().st_mtime)
        for p in sorted(path.rglob("*"))
    }


def _config(tmp: Path, **kwargs: Any) -> Path:
    corpus, ids = make_corpus(tmp, 4)
    qa = make_qa_file(tmp, ids)
    return fake_config(tmp, corpus, qa, **kwargs)


@pytest.mark.timeout(300)
@pytest.mark.parametrize("existing_run", [False, True], ids=["new", "resumed"])
def test_infeasible_pool_is_exit_2_within_seconds(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], existing_run: bool
) -> None:
    """The hang of issue 15: a judge pool with {judge: 1} on a local Ray."""
    path = _config(tmp_path, judge_resources={"judge": 1})
    run_dir = tmp_path / "run"
    if existing_run:  # a run dir with earlier results must stay as it was
        (run_dir / "scores").mkdir(parents=True)
        (run_dir / "manifest.json").write_text('{"status": "complete"}')
        (run_dir / "scores" / "part-x.parquet").write_bytes(b"PAR1")
    before = snapshot(run_dir)
    calls = tmp_path / "calls.log"
    start = time.monotonic()
    code = main(["run", str(path), "--out", str(run_dir), "--call-log", str(calls)])
    elapsed = time.monotonic() - start
    err = capsys.readouterr().err
    assert code == 2, err
    assert elapsed < 120, f"took {elapsed:.0f} s"  # the hang was unbounded
    assert "cube-ray: error: a pool can never start on this cluster" in err
    # engine, pool, missing resource and the fix, for both judges
    for judge in ("j1", "j2"):
        assert f"judges.{judge}.pool asks {{CPU: 0.5, judge: 1}} per actor" in err
    assert "no node offers 'judge'" in err
    assert "no autoscaler found" in err
    assert "ray start --resources='{\"judge\": 4}'" in err
    assert "judges.j1.pool.resources" in err
    # (Ray's own logger may complain about an earlier test's closed stream)
    assert "Traceback" not in err.split("cube-ray: error:", 1)[1]
    assert snapshot(run_dir) == before
    assert not calls.exists()
    leftovers = [p for p in tmp_path.iterdir() if p.name.startswith(".")]
    assert leftovers == []  # no staging dir, no probe file


@pytest.mark.timeout(300)
def test_autoscaler_only_demand_waits_then_stops(
    tmp_path: Path, capfd: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # capfd: the waiting line goes to the terminal itself while the quiet
    # console sends descriptors 1 and 2 to the run's log.
    scaler = tmp_path / "cluster.yaml"
    scaler.write_text(
        yaml.safe_dump(
            {
                "max_workers": 4,
                "head_node_type": "head",
                "available_node_types": {
                    "head": {"resources": {}, "max_workers": 0},
                    "gpu_judge": {"resources": {"judge": 4}, "max_workers": 2},
                },
            }
        )
    )
    monkeypatch.setenv("CUBE_RAY_AUTOSCALER_CONFIG", str(scaler))
    path = _config(
        tmp_path, judge_resources={"judge": 1}, ray_options={"resource_wait_s": 3}
    )
    run_dir = tmp_path / "run"
    start = time.monotonic()
    code = main(["run", str(path), "--out", str(run_dir)])
    elapsed = time.monotonic() - start
    err = capfd.readouterr().err
    assert code == 3, err
    assert elapsed < 120
    assert (
        "cube-ray: preflight: judges.j1.pool, judges.j2.pool: no node fits yet; "
        "asking the autoscaler and waiting up to 3 s (ray.resource_wait_s)" in err
    )
    assert "the autoscaler added no node for judges.j1.pool" in err
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["status"] == "resource_timeout"
    assert "ray.resource_wait_s" in manifest["error"]
    assert sorted(p.name for p in run_dir.iterdir()) == ["manifest.json"]


@pytest.mark.timeout(300)
def test_check_command(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    path = _config(tmp_path)
    assert main(["check", str(path), "--out", str(tmp_path / "run")]) == 0
    out = capsys.readouterr().out
    assert "preflight: 4 pools fit 1 node(s)" in out
    assert out.rstrip().endswith("check: ok")
    assert not (tmp_path / "run").exists()
    # --dry-run with --address runs the same checks after the plan
    path = _config(tmp_path, judge_resources={"judge": 1})
    code = main(["run", str(path), "--dry-run", "--address", "local"])
    captured = capsys.readouterr()
    assert code == 2
    assert "scores:j1" in captured.out  # the plan came first
    assert "no node offers 'judge'" in captured.err


@pytest.fixture(scope="module")
def models_server() -> Iterator[str]:
    """A real HTTP server on 127.0.0.1 answering GET /v1/models."""

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if self.path != "/v1/models":
                self.send_error(404)
                return
            body = json.dumps({"data": [{"id": "judge-7b"}]}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    finally:
        server.shutdown()
        server.server_close()


def _with_judge(tmp: Path, judge: dict[str, Any]) -> RunConfig:
    path = _config(tmp)
    cfg = yaml.safe_load(path.read_text(encoding="utf-8"))
    cfg["judges"]["j2"] = judge
    return RunConfig.from_dict(cfg)


def test_env_and_endpoints(
    tmp_path: Path, models_server: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    judge = {
        "backend": "openai_http",
        "base_url": models_server,
        "model": "judge-7b",
        "api_key_env": "CUBE_TEST_JUDGE_KEY",
    }
    monkeypatch.delenv("CUBE_TEST_JUDGE_KEY", raising=False)
    config = _with_judge(tmp_path, judge)
    with pytest.raises(
        ClusterError,
        match=r"judges\.j2\.api_key_env names "
        r"CUBE_TEST_JUDGE_KEY, which is not set",
    ):
        check_env(config)
    monkeypatch.setenv("CUBE_TEST_JUDGE_KEY", "s3cret")
    check_env(config)
    check_endpoints(config)  # the server lists judge-7b
    wrong = _with_judge(tmp_path, {**judge, "model": "judge-70b"})
    with pytest.raises(ClusterError) as err:
        check_endpoints(wrong)
    assert (
        f"judges.j2: {models_server}/models serves ['judge-7b'], not 'judge-70b'"
        in (str(err.value))
    )
    assert "s3cret" not in str(err.value)
    down = _with_judge(tmp_path, {**judge, "base_url": "http://127.0.0.1:9/v1"})
    with pytest.raises(
        ClusterError,
        match=r"judges\.j2: GET http://127\.0\.0\.1:9/v1"
        r"/models failed",
    ):
        check_endpoints(down)


def test_model_paths_and_run_dir(
    ray_local: Any, tmp_path: Path, tiny_model_dir: Path
) -> None:
    nodes = live_nodes()
    assert len(nodes) == 1
    judge = {"backend": "vllm", "model": str(tiny_model_dir)}
    check_model_paths(_with_judge(tmp_path, judge), nodes)
    missing = _with_judge(tmp_path, {**judge, "model": str(tmp_path / "no-model")})
    with pytest.raises(ClusterError) as err:
        check_model_paths(missing, nodes)
    assert f"judges.j2: '{tmp_path / 'no-model'}' does not exist on node" in str(
        err.value
    )
    assert "which can host judges.j2.pool" in str(err.value)
    run_dir = tmp_path / "deep" / "run"
    check_run_dir(run_dir, nodes)  # checked in tmp_path, the nearest parent
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".")) == []
    blocked = tmp_path / "a-file"  # a path no one can create a dir under
    blocked.write_text("x")
    with pytest.raises(ClusterError, match="the driver cannot write in"):
        check_run_dir(blocked / "run", nodes)
    # A node that mounts another volume at the path reads another file there.
    (tmp_path / ".probe").write_text("another volume's file")
    assert _probe(str(tmp_path), ".probe", "driver's token") == (
        "reads a different file at that path (not the driver's volume)"
    )
    assert _probe(str(tmp_path), ".nothing", "t").startswith(
        "cannot read the driver's probe file"
    )


def test_preflight_passes_on_a_fitting_cluster(ray_local: Any, tmp_path: Path) -> None:
    lines: list[str] = []
    preflight(
        RunConfig.from_yaml(_config(tmp_path)),
        run_dir=tmp_path / "run",
        say=lines.append,
    )
    assert len(lines) == 1
    assert lines[0].startswith("4 pools fit 1 node(s)")
    assert not (tmp_path / "run").exists()
