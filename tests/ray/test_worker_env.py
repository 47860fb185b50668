"""The run's Ray workers free what Arrow freed (``WORKER_ENV``), unless the user
chose an allocator: on a local Ray the run starts, checked in a fresh process."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.pipeline_helpers import fake_config, make_corpus, make_qa_file

pytestmark = [pytest.mark.ray]

_CHILD = """
import sys
import ray
from cube_ray.config import RunConfig
from cube_ray.pipeline import connect_ray

assert connect_ray(RunConfig.from_yaml(sys.argv[1]))

@ray.remote(num_cpus=0.1)
def backend() -> str:
    import pyarrow as pa
    return pa.default_memory_pool().backend_name

print("backend", ray.get(backend.remote()))
ray.shutdown()
"""


@pytest.mark.timeout(300)
@pytest.mark.parametrize(
    ("chosen", "expected"), [(None, "system"), ("jemalloc", "jemalloc")]
)
def test_workers_use_the_system_allocator_unless_the_user_chose(
    tmp_path: Path, chosen: str | None, expected: str
) -> None:
    corpus, ids = make_corpus(tmp_path, 3)
    cfg = fake_config(tmp_path, corpus, make_qa_file(tmp_path, ids))
    env = {k: v for k, v in os.environ.items() if k != "ARROW_DEFAULT_MEMORY_POOL"}
    env.pop("RAY_ADDRESS", None)
    if chosen:
        env["ARROW_DEFAULT_MEMORY_POOL"] = chosen
    out = subprocess.run(
        [sys.executable, "-c", _CHILD, str(cfg)],
        env=env,
        capture_output=True,
        text=True,
        timeout=280,
        check=False,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert f"backend {expected}" in out.stdout
