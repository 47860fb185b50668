"""``cube-ray serve-rag``: a client that goes away is one log line, not a traceback.

The real command on 127.0.0.1; clients reset their connection while the
server reads the body or before it writes the reply. The server says so in
one line each, and answers the next client.
"""

from __future__ import annotations

import json
import os
import re
import socket
import struct
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from tests.unit.test_retrieval import ZH_DOCS

pytestmark = pytest.mark.timeout(180)


def _reset(sock: socket.socket) -> None:
    """Close with a TCP reset (linger 0), as a killed client does."""
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    sock.close()


def test_a_client_that_goes_away_is_one_line(tmp_path: Path) -> None:
    records = tmp_path / "records.jsonl"
    records.write_text(
        "".join(
            json.dumps({"id": d, "body": t}, ensure_ascii=False) + "\n"
            for d, t in ZH_DOCS.items()
        ),
        encoding="utf-8",
    )
    config = tmp_path / "serve.yaml"
    config.write_text(
        f"""
corpus:
  path: {records}
  id_field: id
  fields: [body]
generator: {{backend: fake, name: gen, latency_s: 0.5}}
judges:
  j1: {{backend: fake}}
systems:
  - {{kind: builtin_rag, name: rag, k: 3}}
allow_fake_engines: true
output_dir: {tmp_path / "out"}
""",
        encoding="utf-8",
    )
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    proc = subprocess.Popen(
        [sys.executable, "-m", "cube_ray.cli", "serve-rag", str(config), "--port", "0"],
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        assert proc.stderr is not None
        line = ""
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            line = proc.stderr.readline()
            if "http://" in line or not line:
                break
        match = re.search(r"http://127\.0\.0\.1:(\d+)", line)
        assert match, f"no server line; got {line!r}"
        port = int(match.group(1))
        # 1. Reset while the server reads a body shorter than its length.
        sock = socket.create_connection(("127.0.0.1", port), timeout=10)
        sock.sendall(
            b"POST /v1/answer HTTP/1.1\r\nHost: x\r\nContent-Type: application/json"
            b"\r\nContent-Length: 100\r\n\r\n" + b'{"question": '
        )
        time.sleep(0.3)
        _reset(sock)
        # 2. Reset while the (slow) generator answers: the reply has no reader.
        body = json.dumps({"question": "居民身份证换领需要多久？"}).encode()
        sock = socket.create_connection(("127.0.0.1", port), timeout=10)
        sock.sendall(
            b"POST /v1/answer HTTP/1.1\r\nHost: x\r\nContent-Type: application/json"
            + f"\r\nContent-Length: {len(body)}\r\n\r\n".encode()
            + body
        )
        time.sleep(0.1)
        _reset(sock)
        time.sleep(1.5)
        # The server carries on.
        reply = httpx.post(
            f"http://127.0.0.1:{port}/v1/answer",
            json={"question": "居民身份证换领需要多久？"},
            timeout=30,
        )
        assert reply.status_code == 200, reply.text
        assert reply.json()["answer"]
    finally:
        proc.terminate()
        _, err = proc.communicate(timeout=30)
    assert "Traceback" not in err, err
    gone = [ln for ln in err.splitlines() if "went away" in ln]
    assert len(gone) == 2, err
    for ln in gone:
        assert re.fullmatch(
            r"serve-rag: client 127\.0\.0\.1:\d+ went away before its reply was sent "
            r"\((ConnectionResetError|BrokenPipeError)\); carrying on",
            ln,
        ), ln
