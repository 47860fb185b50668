"""``serve-rag`` against hostile request lengths, over a real socket: a
negative, malformed or repeated ``Content-Length`` is a 400 and a huge one a
413, answered at once without reading the body; the server keeps serving."""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Iterator, Sequence

import pytest

from cube_ray.systems.base import QuestionIn, SystemAnswer
from cube_ray.systems.serve import RagHttpServer, make_server

pytestmark = pytest.mark.timeout(60)


class _Echo:
    name = "echo"
    k = 3

    def answer(self, questions: Sequence[QuestionIn]) -> list[SystemAnswer]:
        return [SystemAnswer(f"A: {q.question}", ["d1"]) for q in questions]

    def close(self) -> None:
        pass


@pytest.fixture
def server() -> Iterator[RagHttpServer]:
    srv = make_server(_Echo(), port=0)
    thread = threading.Thread(target=srv.serve_forever, daemon=True)
    thread.start()
    yield srv
    srv.shutdown()
    srv.server_close()
    thread.join(5)


def _raw(
    server: RagHttpServer, head: str, body: bytes = b""
) -> tuple[int, bytes, float]:
    """Send a raw request; the status code, the reply body and the seconds taken."""
    host, port = server.server_address[:2]
    started = time.monotonic()
    with socket.create_connection((str(host), port), timeout=10) as sock:
        sock.sendall(head.encode() + b"\r\n" + body)
        data = b""
        while b"\r\n\r\n" not in data:
            chunk = sock.recv(65536)
            if not chunk:
                break
            data += chunk
        header, _, rest = data.partition(b"\r\n\r\n")
        length = int(
            next(
                line.split(b":")[1]
                for line in header.split(b"\r\n")
                if line.lower().startswith(b"content-length:")
            )
        )
        while len(rest) < length:
            chunk = sock.recv(65536)
            if not chunk:
                break
            rest += chunk
    code = int(header.split(b" ")[1])
    return code, rest, time.monotonic() - started


def _post(length_lines: list[str]) -> str:
    lines = ["POST /v1/answer HTTP/1.1", "Host: x", "Content-Type: application/json"]
    return "\r\n".join([*lines, *length_lines]) + "\r\n"


@pytest.mark.parametrize(
    "lengths",
    [
        ["Content-Length: -1"],
        ["Content-Length: abc"],
        ["Content-Length: 1e3"],
        ["Content-Length: 0x10"],
        ["Content-Length: +5"],
        ["Content-Length: 5", "Content-Length: 6"],
    ],
)
def test_bad_content_length_is_400_at_once(
    server: RagHttpServer, lengths: list[str]
) -> None:
    # No body is sent: a server that tried to read one would wait.
    code, body, seconds = _raw(server, _post(lengths))
    assert code == 400
    assert "Content-Length" in json.loads(body)["error"]
    assert seconds < 3
    assert server.requests_served == 0


def test_huge_content_length_is_413_without_reading(server: RagHttpServer) -> None:
    code, body, seconds = _raw(server, _post(["Content-Length: 104857600"]))
    assert code == 413
    assert "too large" in json.loads(body)["error"]
    assert seconds < 3


def test_server_still_answers_after_hostile_requests(server: RagHttpServer) -> None:
    _raw(server, _post(["Content-Length: -1"]))
    payload = json.dumps({"question": "q?", "question_id": "q1"}).encode()
    code, body, _ = _raw(server, _post([f"Content-Length: {len(payload)}"]), payload)
    assert code == 200
    assert json.loads(body)["answer"] == "A: q?"
    assert server.requests_served == 1
