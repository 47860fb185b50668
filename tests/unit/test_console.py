"""The quiet console: engine output to the run's log, cube-ray's own to the terminal."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

SCRIPT = r"""
import os, subprocess, sys
from pathlib import Path
from cube_ray.console import console, quiet_console

log = Path(sys.argv[1])
with quiet_console(log):
    print("INFO vllm engine line")
    os.write(2, b"[E core_worker.cc] C++ line\n")
    child = "import sys; sys.stderr.write('child line\\n')"
    subprocess.run([sys.executable, "-c", child])
    print("questions: 16/16", file=console())
print("run dir: x")
if sys.argv[2] == "raise":
    with quiet_console(log):
        raise RuntimeError("engine died")
"""


def _run(tmp_path: Path, mode: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", SCRIPT, str(tmp_path / "logs" / "run.log"), mode],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )


def test_engine_output_goes_to_the_log(tmp_path: Path) -> None:
    proc = _run(tmp_path, "ok")
    assert proc.returncode == 0, proc.stderr
    log = (tmp_path / "logs" / "run.log").read_text()
    for line in ("INFO vllm engine line", "C++ line", "child line"):
        assert line in log
        assert line not in proc.stdout + proc.stderr
    assert proc.stderr == "questions: 16/16\n"
    assert proc.stdout == "run dir: x\n"  # restored after the block


def test_an_error_leaves_its_traceback_in_the_log(tmp_path: Path) -> None:
    proc = _run(tmp_path, "raise")
    assert proc.returncode == 1
    log = (tmp_path / "logs" / "run.log").read_text()
    assert "Traceback" in log
    assert "RuntimeError: engine died" in log
    # The descriptors are back: Python's own report reaches the terminal.
    assert "RuntimeError: engine died" in proc.stderr
