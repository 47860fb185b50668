"""How the driver plans its Parquet reads (no Ray started here).

Ray Data sizes its pool of ``FooterReader`` actors, one Python process each,
from ``RAY_DATA_PARQUET_FOOTER_NUM_ACTORS`` when a read is planned. The
driver sets it to ``ray.footer_readers`` for exactly that call; the scale
benchmark (``benchmarks/pipeline_scale.py``) measures the processes it saves.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from cube_ray import pipeline
from cube_ray.config import RunConfig
from cube_ray.pipeline import RunOptions
from tests.pipeline_helpers import fake_config, make_corpus, make_qa_file


def _driver(tmp_path: Path, **ray_opts: Any) -> pipeline._Driver:
    corpus, ids = make_corpus(tmp_path, 4)
    qa = make_qa_file(tmp_path, ids)
    cfg = fake_config(tmp_path, corpus, qa, ray_options=ray_opts)
    options = RunOptions(run_dir=tmp_path / "run", progress=False, report=False)
    return pipeline._Driver(RunConfig.from_yaml(cfg), options)


@pytest.mark.parametrize(("configured", "before"), [(None, None), (5, "32")])
def test_footer_readers_are_set_for_the_read_call_only(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    configured: int | None,
    before: str | None,
) -> None:
    import ray.data

    opts = {} if configured is None else {"footer_readers": configured}
    driver = _driver(tmp_path, **opts)
    if before is None:
        monkeypatch.delenv(pipeline.FOOTER_ACTORS_ENV, raising=False)
    else:
        monkeypatch.setenv(pipeline.FOOTER_ACTORS_ENV, before)
    seen: list[tuple[str | None, list[str], list[str] | None]] = []

    def read_parquet(paths: list[str], **kwargs: Any) -> str:
        seen.append(
            (os.environ.get(pipeline.FOOTER_ACTORS_ENV), paths, kwargs["columns"])
        )
        return "dataset"

    monkeypatch.setattr(ray.data, "read_parquet", read_parquet)
    files = [tmp_path / "a.parquet", tmp_path / "b.parquet"]
    assert driver.read_files(files, ["doc_id"]) == "dataset"
    expected = "2" if configured is None else str(configured)
    assert seen == [(expected, [str(f) for f in files], ["doc_id"])]
    assert os.environ.get(pipeline.FOOTER_ACTORS_ENV) == before


def test_footer_readers_env_is_restored_when_the_read_fails(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import ray.data

    driver = _driver(tmp_path, footer_readers=1)
    monkeypatch.delenv(pipeline.FOOTER_ACTORS_ENV, raising=False)

    def read_parquet(paths: list[str], **kwargs: Any) -> None:
        assert os.environ[pipeline.FOOTER_ACTORS_ENV] == "1"
        raise FileNotFoundError(paths[0])

    monkeypatch.setattr(ray.data, "read_parquet", read_parquet)
    with pytest.raises(FileNotFoundError):
        driver.read_files([tmp_path / "gone.parquet"])
    assert pipeline.FOOTER_ACTORS_ENV not in os.environ
