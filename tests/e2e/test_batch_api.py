"""The engine's Batch API path against a Batch API server on 127.0.0.1.

The server (``tests/batch_server.py``: files, batches, status changes, an
error file, expiry) answers each request as its direct endpoint would, so a
batch engine's results are compared with the same engine's direct ones. One
test per failure status; the resume records; the key kept out of every file.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from cube_ray.engines import OpenAIHttpEngineConfig, SamplingParams, build_engine
from cube_ray.engines.openai_http._batch import BatchLedger, open_batches
from cube_ray.errors import EngineError
from tests.batch_server import BatchState, serve

pytestmark = pytest.mark.timeout(60)

KEY = "sk-batch-DO-NOT-LEAK-77e1"
KEY_ENV = "CUBE_RAY_TEST_BATCH_KEY"
PROMPTS = [f"评分问题 {i}：这个回答是否相关？" for i in range(7)]


@pytest.fixture(autouse=True)
def _key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(KEY_ENV, KEY)


def _engine(base_url: str, tmp: Path, *, batch: bool = True, **kw: Any) -> Any:
    api = kw.pop("api", {})
    cfg: dict[str, Any] = {
        "base_url": base_url,
        "model": "judge",
        "api_key_env": KEY_ENV,
        "max_retries": 0,
        **kw,
    }
    if batch:
        cfg["batch"] = True
        cfg["batch_api"] = {"poll_s": 0.01, "poll_max_s": 0.05, **api}
    engine = build_engine(OpenAIHttpEngineConfig(**cfg))
    if batch:
        lines: list[str] = []
        ledger = BatchLedger(tmp / "batches", stage="scores:j", say=lines.append)
        engine.attach_batches(ledger)  # type: ignore[attr-defined]
        engine.lines = lines  # type: ignore[attr-defined]
        engine.ledger = ledger  # type: ignore[attr-defined]
    return engine


def _no_key_in(folder: Path) -> None:
    for path in folder.rglob("*"):
        if path.is_file():
            assert KEY not in path.read_text(encoding="utf-8", errors="replace")


def test_batch_scores_equal_direct_scores_and_send_no_direct_request(
    tmp_path: Path,
) -> None:
    with serve() as (url, state):
        direct = _engine(url, tmp_path, batch=False, logprobs=True)
        want = direct.score(PROMPTS, mode="expected")
        gen_want = direct.generate(PROMPTS[:3], sampling=SamplingParams(max_tokens=64))
        assert state.calls["POST /chat/completions"] == len(PROMPTS) + 3
        state.calls.clear()
        engine = _engine(url, tmp_path, logprobs=True)
        engine.name_requests([f"q{i}/rag/judge/relevance" for i in range(7)])
        got = engine.score(PROMPTS, mode="expected")
        gens = engine.generate(PROMPTS[:3], sampling=SamplingParams(max_tokens=64))
    strip = lambda r: (r.score, r.status, r.raw, r.prompt_tokens, r.completion_tokens)  # noqa: E731
    assert [strip(r) for r in got] == [strip(r) for r in want]
    assert any(r.score is not None and r.score != int(r.score) for r in got)
    assert [g.text for g in gens] == [g.text for g in gen_want]
    # Nothing direct: two uploads, two batches (the scores, the generations).
    assert state.calls["POST /chat/completions"] == 0
    assert state.calls["POST /files"] == 2
    assert state.calls["POST /batches"] == 2
    assert state.authorizations == {f"Bearer {KEY}"}
    # The lines carry the row keys and the very bodies of the direct path.
    first = state.files[state.batches["batch_1"]["input_file_id"]].decode().splitlines()
    line = json.loads(first[0])
    assert line["custom_id"] == "q0/rag/judge/relevance"
    assert line["method"] == "POST"
    assert line["url"] == "/v1/chat/completions"
    assert line["body"]["messages"][0]["content"] == PROMPTS[0]
    assert line["body"]["logprobs"] is True
    assert line["body"]["max_tokens"] == 8
    # Progress lines; records kept until settled, with the batch id.
    said = "\n".join(engine.lines)
    assert "submitted batch batch_1 (7 requests" in said
    assert "batch batch_1 completed: 7/7 done, 0 failed" in said
    assert set(open_batches(tmp_path)) == {"batch_1", "batch_2"}
    engine.ledger.settle()
    assert open_batches(tmp_path) == {}
    assert len(list((tmp_path / "batches" / "done").glob("*.json"))) == 2
    _no_key_in(tmp_path)


def test_parse_retry_is_one_more_batch(tmp_path: Path) -> None:
    def chatty(body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        said = "7" if len(body["messages"]) > 1 else "I think seven"
        return 200, {
            "choices": [{"message": {"role": "assistant", "content": said}}],
            "usage": {"prompt_tokens": 10, "completion_tokens": 2},
        }

    with serve(BatchState(answer=chatty)) as (url, state):
        engine = _engine(url, tmp_path)
        got = engine.score(PROMPTS[:3], mode="argmax")
    assert [r.score for r in got] == [7, 7, 7]
    assert [r.prompt_tokens for r in got] == [20, 20, 20]  # both requests
    assert state.calls["POST /batches"] == 2
    retried = state.files[state.batches["batch_2"]["input_file_id"]]
    ids = [json.loads(x)["custom_id"] for x in retried.splitlines()]
    assert ids == ["call1-0#retry1", "call1-1#retry1", "call1-2#retry1"]


def test_error_file_rows_are_batch_error(tmp_path: Path) -> None:
    prompts = [PROMPTS[0], PROMPTS[1] + " [[fail]]", PROMPTS[2]]
    with serve() as (url, _):
        got = _engine(url, tmp_path).score(prompts, mode="argmax")
    assert [r.status for r in got] == ["ok", "batch_error", "ok"]
    assert (
        got[1].raw
        == "batch line failed: HTTP 400, code invalid_prompt, message of 2 characters"
    )


def test_missing_lines_of_a_completed_batch_are_batch_missing(tmp_path: Path) -> None:
    prompts = [PROMPTS[0], PROMPTS[1] + " [[drop]]"]
    with serve() as (url, _):
        got = _engine(url, tmp_path).score(prompts, mode="argmax")
    assert [r.status for r in got] == ["ok", "batch_missing"]
    assert got[1].raw == "batch batch_1 completed"


@pytest.mark.parametrize(
    ("outcome", "statuses", "detail"),
    [
        ("expired", ["ok"] * 3 + ["batch_expired"] * 4, "batch batch_1 expired"),
        ("failed", ["batch_failed"] * 7, "batch batch_1 failed (invalid_json_line)"),
        ("cancelled", ["batch_cancelled"] * 7, "batch batch_1 cancelled"),
    ],
)
def test_a_finished_batch_gives_its_status_to_rows_without_a_line(
    tmp_path: Path, outcome: str, statuses: list[str], detail: str
) -> None:
    with serve(BatchState(outcome=outcome)) as (url, _):
        got = _engine(url, tmp_path).score(PROMPTS, mode="argmax")
    assert [r.status for r in got] == statuses
    assert got[-1].raw == detail
    assert all(r.score is None for r in got if r.status != "ok")


def test_files_split_at_the_request_limit(tmp_path: Path) -> None:
    with serve() as (url, state):
        direct = _engine(url, tmp_path, batch=False).score(PROMPTS, mode="argmax")
        engine = _engine(url, tmp_path, api={"max_requests_per_file": 3})
        got = engine.score(PROMPTS, mode="argmax")
    assert [r.score for r in got] == [r.score for r in direct]
    assert state.calls["POST /batches"] == 3
    sizes = [
        len(state.files[b["input_file_id"]].splitlines())
        for b in state.batches.values()
    ]
    assert sizes == [3, 3, 1]


def test_ctrl_c_while_waiting_then_rerun_reattaches(tmp_path: Path) -> None:
    """Stopped during the wait: the batch is listed; the rerun pays nothing."""
    with serve(held=True) as (url, state):
        engine = _engine(url, tmp_path)
        ledger = engine.ledger

        def stop(text: str) -> None:
            engine.lines.append(text)
            if "in_progress" in text:
                raise KeyboardInterrupt

        ledger.say = stop
        with pytest.raises(KeyboardInterrupt):
            engine.score(PROMPTS, mode="argmax")
        assert "stopped while batch batch_1 is in_progress" in engine.lines[-1]
        running = open_batches(tmp_path)
        assert running["batch_1"]["status"] == "in_progress"
        assert running["batch_1"]["requests"] == 7
        state.hold.set()
        again = _engine(url, tmp_path)
        got = again.score(PROMPTS, mode="argmax")
    assert all(r.status == "ok" for r in got)
    assert state.calls["POST /files"] == 1
    assert state.calls["POST /batches"] == 1
    assert "re-attaching to batch batch_1" in again.lines[0]


def test_a_failed_create_is_retried_without_a_second_upload(tmp_path: Path) -> None:
    with serve(BatchState(fail_create=1)) as (url, state):
        with pytest.raises(EngineError, match=r"POST batches .* failed 1 times"):
            _engine(url, tmp_path).score(PROMPTS, mode="argmax")
        got = _engine(url, tmp_path).score(PROMPTS, mode="argmax")
    assert all(r.status == "ok" for r in got)
    assert state.calls["POST /files"] == 1  # the recorded file is reused
    assert state.calls["GET /batches"] == 1  # looked up first: none was made
    assert len(state.batches) == 1


def test_no_batch_api_is_one_clear_error(tmp_path: Path) -> None:
    with serve() as (url, _):
        engine = _engine(url.removesuffix("/v1") + "/nothing", tmp_path)
        with pytest.raises(EngineError, match="no Batch API; set batch: false"):
            engine.score(PROMPTS, mode="argmax")


def test_a_batch_engine_off_the_driver_refuses_to_send(tmp_path: Path) -> None:
    with serve() as (url, state):
        engine = build_engine(
            OpenAIHttpEngineConfig(base_url=url, model="judge", batch=True)
        )
        with pytest.raises(
            EngineError, match="its requests go through the Batch API of"
        ):
            engine.score(PROMPTS, mode="argmax")
    assert sum(state.calls.values()) == 0
