"""How the driver plans its Parquet reads (no Ray started here).

Ray Data sizes its pool of ``FooterReader`` actors (one Python process each)
and its read units from ``RAY_DATA_PARQUET_FOOTER_NUM_ACTORS`` and
``RAY_DATA_PARQUET_BIN_PACKING_BYTES`` when a read is planned. The driver
sets them from ``ray.footer_readers`` and ``ray.read_unit_mb`` for exactly
that call; the scale benchmark (``benchmarks/pipeline_scale.py``) measures
the memory this saves.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from cube_ray import pipeline
from tests.pipeline_helpers import make_driver

VARS = (pipeline.FOOTER_ACTORS_ENV, pipeline.READ_UNIT_ENV)


@pytest.mark.parametrize(
    ("configured", "before", "expected"),
    [
        ({}, None, ("2", str(32 * 2**20))),
        ({"footer_readers": 5, "read_unit_mb": 8}, "32", ("5", str(8 * 2**20))),
    ],
)
def test_read_settings_are_set_for_the_read_call_only(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    configured: dict[str, int],
    before: str | None,
    expected: tuple[str, str],
) -> None:
    import ray.data

    driver = make_driver(tmp_path, **configured)
    for name in VARS:
        if before is None:
            monkeypatch.delenv(name, raising=False)
        else:
            monkeypatch.setenv(name, before)
    seen: list[tuple[tuple[str | None, ...], list[str], list[str] | None]] = []

    def read_parquet(paths: list[str], **kwargs: Any) -> str:
        now = tuple(os.environ.get(name) for name in VARS)
        seen.append((now, paths, kwargs["columns"]))
        return "dataset"

    monkeypatch.setattr(ray.data, "read_parquet", read_parquet)
    files = [tmp_path / "a.parquet", tmp_path / "b.parquet"]
    assert driver.data.read_files(files, ["doc_id"]) == "dataset"
    assert seen == [(expected, [str(f) for f in files], ["doc_id"])]
    assert tuple(os.environ.get(name) for name in VARS) == (before, before)


def test_read_settings_are_restored_when_the_read_fails(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import ray.data

    driver = make_driver(tmp_path, footer_readers=1, read_unit_mb=1)
    for name in VARS:
        monkeypatch.delenv(name, raising=False)

    def read_parquet(paths: list[str], **kwargs: Any) -> None:
        assert os.environ[pipeline.FOOTER_ACTORS_ENV] == "1"
        assert os.environ[pipeline.READ_UNIT_ENV] == str(2**20)
        raise FileNotFoundError(paths[0])

    monkeypatch.setattr(ray.data, "read_parquet", read_parquet)
    with pytest.raises(FileNotFoundError):
        driver.data.read_files([tmp_path / "gone.parquet"])
    assert not any(name in os.environ for name in VARS)


def test_ray_listing_race_stays_off_the_console(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Ray 2.60's listing race, forced: quiet after a read, loud before.

    The listing's ``completion-signaler`` thread puts the workers' stop
    sentinels after the consumer got the last result; when the consumer shuts
    the pool down first, the put raises ``InterruptedError`` in that thread (it
    failed one CI run). Here the signaler waits for the shutdown before those
    puts, so the race happens every time, on Ray's own code.
    """
    import threading

    import ray.data
    import ray.data._internal.dynamic_work_queue as queue

    seen: list[threading.ExceptHookArgs] = []
    monkeypatch.setattr(threading, "excepthook", seen.append)
    put = queue._InterruptibleQueue.put
    sentinels = threading.local()

    def late_put(self: Any, item: Any, *args: Any, **kwargs: Any) -> None:
        if item is queue.SENTINEL and threading.current_thread().name.endswith(
            "/completion-signaler"
        ):
            sentinels.n = getattr(sentinels, "n", 0) + 1
            if sentinels.n > 1:  # the first goes to the consumer
                assert self._interrupted_event.wait(10)
        put(self, item, *args, **kwargs)

    monkeypatch.setattr(queue._InterruptibleQueue, "put", late_put)

    def listing() -> list[int]:
        def process(item: int, add_work: Any, add_result: Any) -> None:
            add_result(item)

        items = queue.parallel_process_work_stealing([1, 2, 3], process, num_workers=2)
        return sorted(items)

    assert listing() == [1, 2, 3]
    assert [(a.thread.name.split("/")[1], a.exc_type) for a in seen if a.thread] == [
        ("completion-signaler", InterruptedError)
    ]
    seen.clear()
    monkeypatch.setattr(ray.data, "read_parquet", lambda paths, **kwargs: "dataset")
    make_driver(tmp_path).data.read_files([tmp_path / "a.parquet"])
    assert listing() == [1, 2, 3]
    assert seen == []
