"""The stall of issue 34: four pools of 0.5 CPU on a local Ray of 2 CPUs.

The preflight said "4 pools fit 1 node" and the run hung after its engines
started. Now the preflight refuses it (exit 2, the rule and the
``ray.num_cpus`` that fits) before anything is written; with that many CPUs
the same run completes. A stage that writes nothing for
``ray.stall_report_s`` is reported: on a slow judge (it waits on its engine),
and on the real stall with the preflight's rule switched off (it waits for a
CPU the engine pools hold).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from cube_ray.cli import main
from tests.pipeline_helpers import fake_config, make_corpus, make_qa_file

pytestmark = [pytest.mark.ray]


def _config(tmp: Path, **kwargs: Any) -> Path:
    corpus, ids = make_corpus(tmp, 4)
    return fake_config(tmp, corpus, make_qa_file(tmp, ids), **kwargs)


@pytest.mark.timeout(300)
def test_pools_that_leave_no_cpu_for_the_stages_are_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _config(tmp_path, ray_options={"num_cpus": 2})
    run_dir = tmp_path / "run"
    start = time.monotonic()
    code = main(["run", str(path), "--out", str(run_dir), "--no-progress"])
    err = capsys.readouterr().err
    assert code == 2, err
    assert time.monotonic() - start < 200
    assert "cube-ray: error: the stages cannot run beside the engine pools" in err
    assert "the engine pools hold 1.5 of the 2 CPUs" in err, err
    for pool in ("generator 0.5", "judges.j1 0.5", "judges.j2 0.5"):
        assert pool in err, err
    assert "leaving 0.5 for the stages' own work" in err, err
    assert "set ray.num_cpus to 3 or more" in err, err
    assert "Traceback" not in err.split("cube-ray: error:", 1)[1]
    assert not (run_dir / "manifest.json").exists()  # nothing started


@pytest.mark.timeout(900)
def test_with_the_cpus_the_rule_asks_the_run_completes_and_a_slow_stage_is_reported(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    path = _config(
        tmp_path,
        ray_options={"num_cpus": 3, "stall_report_s": 2},
        judge_latency=5.0,  # each judge batch takes 5 s: no row for a while
        judge_batch=16,
    )
    run_dir = tmp_path / "run"
    code = main(["run", str(path), "--out", str(run_dir), "--no-progress"])
    captured = capfd.readouterr()  # the console writes to the terminal's fd
    err = captured.out + captured.err
    assert code == 0, err[-4000:]
    manifest = json.loads((run_dir / "manifest.json").read_text(encoding="utf-8"))
    assert manifest["status"] == "complete"
    stalls = [ln for ln in err.splitlines() if "no row written for" in ln]
    assert stalls, err[-4000:]
    judged = [ln for ln in stalls if "scores:j" in ln]
    assert judged, stalls
    assert "ray.stall_report_s). Ray has" in judged[0], judged[0]
    assert "as many as the stage needs (1): it waits on its engines" in judged[0]


_STALL_DRIVER = """
import sys
import cube_ray.preflight._cluster as cluster
cluster._check_headroom = lambda *args, **kwargs: None  # the rule switched off
from cube_ray.cli import main
sys.exit(main(sys.argv[1:]))
"""


@pytest.mark.timeout(600)
def test_the_real_stall_is_reported_with_what_waits_for_what(tmp_path: Path) -> None:
    path = _config(tmp_path, ray_options={"num_cpus": 2, "stall_report_s": 3})
    run_dir = tmp_path / "run"
    proc = subprocess.Popen(
        [sys.executable, "-c", _STALL_DRIVER, "run", str(path), "--out",
         str(run_dir), "--no-progress"],
        stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True,
        start_new_session=True,
    )  # fmt: skip
    lines: list[str] = []
    found = None
    try:
        assert proc.stderr is not None
        deadline = time.monotonic() + 420
        while time.monotonic() < deadline:
            line = proc.stderr.readline()
            if not line:
                break  # it ended: it did not stall
            lines.append(line)
            if "no row written for" in line and "wait for CPUs" in line:
                found = line
                break
    finally:
        os.killpg(proc.pid, signal.SIGKILL)  # the driver and the Ray it started
        proc.wait(30)
    assert found is not None, "".join(lines[-40:])
    assert "Ray has 0.5 of 2 CPUs free, and the stage needs 1 (" in found, found
    assert "ray.task_num_cpus 0.5" in found, found
    assert "generator 0.5" in found, found
    assert "judges.j1 0.5" in found, found
    assert "Fix: raise ray.num_cpus" in found, found
