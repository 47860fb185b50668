"""When a stage is retried after a Ray failure, and how long it waits first.

The loop and the wait are driven here without Ray: attempts are scripted, the
cluster's node list and the clock are patched. The real failures are injected
into real runs in ``tests/ray/test_pipeline_retry.py`` and
``tests/ray/test_pipeline_cluster.py``.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from cube_ray import pipeline
from cube_ray.pipeline import faults
from tests.pipeline_helpers import make_driver


def _lost_node() -> Exception:
    import ray.exceptions

    return ray.exceptions.NodeDiedError("n2")


class _Script:
    """Attempts of one stage: each entry writes that many rows, then fails
    with the error (or succeeds when it is None)."""

    def __init__(self, steps: list[tuple[int, Exception | None]]) -> None:
        self.steps: Iterator[tuple[int, Exception | None]] = iter(steps)
        self.attempts = 0
        self.first_seqs: list[int] = []
        self.waits: list[int] = []

    def run_once(self, label: str, **kwargs: Any) -> None:
        self.attempts += 1
        self.first_seqs.append(kwargs["first_seq"])
        rows, error = next(self.steps)
        kwargs["stats"].written += rows
        if error is not None:
            interrupted = pipeline._StageInterrupted(next_seq=10 * self.attempts)
            raise interrupted from error

    def await_loss(self, label: str, before: set[str], n: int) -> None:
        self.waits.append(n)


def _run(driver: pipeline._Driver, script: _Script, mp: pytest.MonkeyPatch) -> None:
    mp.setattr(driver.runner, "_run_stage_once", script.run_once)
    mp.setattr(driver.state, "await_node_loss", script.await_loss)
    spec = pipeline.StageSpec(
        "scores:j1",
        "scores",
        object,
        {},
        pipeline.Inputs("answers", lambda batch: batch, {}),
        driver.state.config.generator.pool,
    )
    driver.runner.run_stage(spec, inputs=None, expected=100)  # type: ignore[arg-type]


def test_retries_in_a_row_without_progress_are_bounded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    driver = make_driver(tmp_path, stage_retries=2)
    script = _Script([(5, _lost_node()), (0, _lost_node()), (0, _lost_node())])
    with pytest.raises(Exception, match="n2") as info:
        _run(driver, script, monkeypatch)
    assert type(info.value).__name__ == "NodeDiedError"
    assert script.attempts == 3
    assert script.waits == [1, 2]
    assert len(driver.state.stats["scores:j1"].retries) == 2
    # Part numbering continues where the failed attempt stopped.
    assert script.first_seqs == [0, 10, 20]


def test_a_retry_that_writes_rows_resets_the_count(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    driver = make_driver(tmp_path, stage_retries=1)
    # Four node losses in one stage, each after some progress: a long run on
    # spot instances must survive them all.
    steps: list[tuple[int, Exception | None]] = [(10, _lost_node())] * 4
    script = _Script([*steps, (60, None)])
    _run(driver, script, monkeypatch)
    assert script.attempts == 5
    assert script.waits == [1, 1, 1, 1]
    stats = driver.state.stats["scores:j1"]
    assert stats.written == 100
    assert len(stats.retries) == 4
    assert all("NodeDiedError" in r for r in stats.retries)


def test_code_errors_are_not_retried(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    driver = make_driver(tmp_path)
    script = _Script([(3, ValueError("bad row"))])
    with pytest.raises(ValueError, match="bad row"):
        _run(driver, script, monkeypatch)
    assert script.attempts == 1
    assert script.waits == []


class _Clock:
    def __init__(self) -> None:
        self.now = 0.0
        self.slept: list[float] = []

    def monotonic(self) -> float:
        return self.now

    def sleep(self, s: float) -> None:
        self.slept.append(s)
        self.now += s


def _await(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    views: list[set[str]],
    *,
    wait_s: float = 45.0,
    failures: int = 1,
) -> _Clock:
    driver = make_driver(tmp_path, node_loss_wait_s=wait_s)
    clock = _Clock()
    seen = iter(views)
    last = views[-1]
    monkeypatch.setattr(faults, "alive_nodes", lambda: next(seen, last))
    monkeypatch.setattr(faults.time, "monotonic", clock.monotonic)
    monkeypatch.setattr(faults.time, "sleep", clock.sleep)
    driver.state.await_node_loss("scores:j1", {"a", "b", "c"}, failures)
    return clock


def test_wait_ends_when_ray_marks_the_node_dead(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # "b" was killed; Ray notices after 16 polls (its missed heartbeats).
    views = [{"a", "b", "c"}] * 17 + [{"a", "c"}]
    clock = _await(tmp_path, monkeypatch, views)
    assert clock.slept == [1.0] * 17 + [2.0]


def test_no_wait_beyond_backoff_when_the_loss_is_already_known(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    clock = _await(tmp_path, monkeypatch, [{"a", "c"}], failures=2)
    assert clock.slept == [4.0]


def test_a_crashed_worker_on_live_nodes_waits_at_most_the_limit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    clock = _await(tmp_path, monkeypatch, [{"a", "b", "c"}], wait_s=10.0)
    assert clock.now == pytest.approx(10.0)
    assert all(s == 1.0 for s in clock.slept)


def test_plain_ray_task_error_is_followed_to_its_cause() -> None:
    import ray.exceptions

    cause = ray.exceptions.ActorDiedError()
    # A RayTaskError that could not take its cause's class keeps it in .cause.
    wrapped = ray.exceptions.RayTaskError("read_footers", "traceback", cause)
    assert not isinstance(wrapped, ray.exceptions.ActorDiedError)
    assert pipeline._is_infra_failure(wrapped)
    # The way Ray Data raises: the error itself, caused by a SystemException.
    import ray.data.exceptions

    with pytest.raises(ray.exceptions.RayTaskError) as info:
        raise wrapped from ray.data.exceptions.SystemException()
    assert pipeline._is_infra_failure(info.value)
    user = ray.exceptions.RayTaskError("udf", "tb", ValueError("bad row"))
    assert not pipeline._is_infra_failure(user)


# What CI saw when a node died under a Ray Data Parquet listing task: Ray could
# not unpickle the task's RayTaskError(ActorDiedError) and handed back its text.
_LISTING_TRACEBACK = """\
ray.exceptions.RayTaskError: ray::ListFiles() (pid=19154, ip=192.0.2.2)
  File ".../footer_file_indexer.py", line 262, in _read_footers
    for file_chunks in ray.get(ref):
ray.exceptions.ActorDiedError: The actor died unexpectedly before finishing this task.
\tclass_name: FooterReader
The actor died because its node has died. Node Id: 0902521612e6a9704bbb16d4
\tthe actor's node was terminated unexpectedly: health check failed
The actor never ran - it was cancelled before it started running.
"""


def test_an_unpicklable_lost_node_error_is_recognised_from_its_text() -> None:
    import ray.data.exceptions
    import ray.exceptions

    lost = ray.exceptions.UnserializableException(_LISTING_TRACEBACK)
    with pytest.raises(ray.exceptions.UnserializableException) as info:
        raise lost from ray.data.exceptions.SystemException()
    assert pipeline._is_infra_failure(info.value)
    assert pipeline._infra_reason(info.value) == (
        "lost a Ray worker or node (ActorDiedError: "
        "The actor died unexpectedly before finishing this task.)"
    )
    user = _LISTING_TRACEBACK.replace(
        "ray.exceptions.ActorDiedError", "ray.exceptions.UserCodeException"
    )
    assert not pipeline._is_infra_failure(ray.exceptions.UnserializableException(user))
    other = "ray.exceptions.RayTaskError: ray::Map()\nValueError: bad row\n"
    assert not pipeline._is_infra_failure(ray.exceptions.UnserializableException(other))


# What CI saw when a judge node died while a light stage's Ray task waited on
# the engine pool: Ray Data reports a UserCodeException caused by the lost actor.
_LIGHT_STAGE_TRACEBACK = """\
ray::MapBatches(_light_stage)->MapBatches(_write_part)() (pid=25928, ip=192.0.2.2)
  File "cube_ray/pipeline/engine_pool.py", line 273, in _call
    out, node = ray.get(self._dispatcher.call.remote(method, list(prompts), arg))
ray.exceptions.ActorUnavailableError: The actor 1d8156aa431a5f28c57ec90e01000000 \
is unavailable: The actor is temporarily unavailable: RpcError: RPC error: Socket \
closed rpc_code: 14. The task may or may not have been executed on the actor.

The above exception was the direct cause of the following exception:

ray::MapBatches(_light_stage)->MapBatches(_write_part)() (pid=25928, ip=192.0.2.2)
ray.exceptions.UserCodeException: UDF failed to process a data block.
Failed to apply UDF transform after 1/1 attempts (total backoff 0.0s).
"""


def test_a_stage_function_that_lost_its_engine_host_is_a_ray_failure() -> None:
    import ray.exceptions

    def raised(text: str) -> BaseException:
        cause = ray.exceptions.UserCodeException("UDF failed to process a data block.")
        err = ray.exceptions.RayTaskError("MapBatches", text, cause)
        return err.as_instanceof_cause()

    lost = raised(_LIGHT_STAGE_TRACEBACK)
    assert isinstance(lost, ray.exceptions.UserCodeException)
    assert pipeline._is_infra_failure(lost)
    assert pipeline._infra_reason(lost).startswith(
        "lost a Ray worker or node (ActorUnavailableError: The actor 1d8156aa"
    )
    # The same wrapper around the stage's own error is not retried.
    own = _LIGHT_STAGE_TRACEBACK.replace(
        "ray.exceptions.ActorUnavailableError", "KeyError"
    )
    assert not pipeline._is_infra_failure(raised(own))
    # Nor one whose actor failed in its constructor.
    ctor = _LIGHT_STAGE_TRACEBACK.replace(
        "is unavailable:", "died because of an error raised in its creation task:"
    )
    assert not pipeline._is_infra_failure(raised(ctor))
