"""The Batch API path of the engine (``batch: true``): submit, record, wait, read.

One call of :meth:`BatchRunner.run` sends a list of request bodies as one
batch per input file (split at ``batch_api.max_requests_per_file`` and
``max_file_mb``), and returns one :class:`Reply` per body, read back by
``custom_id``:

1. each file's record is written to the run dir's ``batches/`` folder
   (:class:`BatchLedger`, atomic writes) *before* each step that costs: the
   file's digest before ``POST /files``, its file id before ``POST
   /batches``, the batch id before the wait. A rerun that builds the same file
   (same rows, same bodies: the same digest) finds the record and re-attaches:
   it downloads a finished batch, waits for a running one, and looks up a
   batch by its input file (``GET /batches``) when the kill came between
   creating it and recording its id. Nothing is submitted twice;
2. ``GET /batches/{id}`` is polled, waiting ``poll_s`` then 1.5 times longer
   each time up to ``poll_max_s``, with a progress line when the status or
   the counts change. Ctrl-C lists the batches still running (with their
   ids) and stops; the manifest lists them too (:func:`open_batches`);
3. the output and error files are downloaded (``GET /files/{id}/content``)
   and read by ``_batch_file.read_lines``; rows without a line get their
   batch's status (``batch_expired``, ``batch_failed``, ...).

Once the stage has written its rows, the runner moves the records to
``batches/done/`` (:meth:`BatchLedger.settle`): a ``--retry-failed`` rerun then
submits the failed rows again instead of re-attaching to the finished batch.

Every request goes through the one HTTP client (:mod:`cube_ray.http_reply`: no
redirects, bounded replies); the key is only in the ``Authorization`` header
sent to ``base_url``, never in a record, a line or a message.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from cube_ray.engines.openai_http._batch_file import (
    missing_status,
    read_lines,
    request_line,
    split_lines,
)
from cube_ray.engines.openai_http._reply import Reply
from cube_ray.engines.openai_http._request import endpoint_path
from cube_ray.engines.openai_http._retry import (
    KEY_REFUSED,
    backoff_s,
    retry_after_s,
)
from cube_ray.engines.openai_http._usage import UsageMeter
from cube_ray.errors import EngineError
from cube_ray.files import write_atomic
from cube_ray.http_reply import (
    MAX_REPLY_BYTES,
    BoundedReply,
    async_client,
    run_sync,
    send_bounded,
)

if TYPE_CHECKING:
    from cube_ray.engines.config import OpenAIHttpEngineConfig

__all__ = [
    "BATCHES_DIR",
    "FINISHED",
    "BatchClient",
    "BatchLedger",
    "BatchRunner",
    "batch_url",
    "open_batches",
]

logger = logging.getLogger("cube_ray.engines.openai_http")

BATCHES_DIR = "batches"
"""The run dir's folder of batch records (``done/`` holds the settled ones)."""
FINISHED = frozenset({"completed", "expired", "failed", "cancelled"})
"""Batch statuses after which nothing changes."""


def batch_url(config: OpenAIHttpEngineConfig) -> str:
    """The ``url`` of the request lines and the batch's ``endpoint``.

    >>> from cube_ray.engines.config import OpenAIHttpEngineConfig as C
    >>> batch_url(C(base_url="https://api.openai.com/v1/", model="m"))
    '/v1/chat/completions'
    >>> batch_url(C(base_url="http://h:8/", model="m", api="completions"))
    '/completions'
    """
    root = urlsplit(config.base_url).path.rstrip("/")
    return f"{root}/{endpoint_path(config)}"


def _safe(label: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in label)


class BatchLedger:
    """The records of one stage's batches in ``RUN_DIR/batches/``.

    Args:
        folder: ``RUN_DIR/batches``.
        stage: The stage's label (records are named by it and the digest).
        say: Where progress lines go.
    """

    def __init__(self, folder: Path, *, stage: str, say: Callable[[str], None]):
        self.folder = Path(folder)
        self.stage = stage
        self.say = say

    def path(self, digest: str) -> Path:
        """The record of the input file with this digest."""
        return self.folder / f"{_safe(self.stage)}-{digest[:24]}.json"

    def get(self, digest: str) -> dict[str, Any] | None:
        """The record of an input file, or None (none, or unreadable)."""
        path = self.path(digest)
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None
        return data if isinstance(data, dict) else None

    def put(self, digest: str, record: dict[str, Any]) -> None:
        """Write (or replace) a record, whole or not at all."""
        path = self.path(digest)
        path.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(path, json.dumps(record, ensure_ascii=False, indent=1) + "\n")

    def settle(self) -> None:
        """Move the stage's records to ``done/``: its rows are written.

        Every record of the stage, also those of an earlier run whose rows
        are written (a kill after the write, before this) or whose file no
        rerun builds again (other rows to do).
        """
        done = self.folder / "done"
        paths = sorted(self.folder.glob("*.json")) if self.folder.is_dir() else []
        for path in paths:
            record = self.get_path(path)
            if record is None or record.get("stage") != self.stage:
                continue
            done.mkdir(parents=True, exist_ok=True)
            bid = _safe(str(record.get("batch_id") or "none"))
            path.replace(done / f"{path.stem}-{bid}.json")

    @staticmethod
    def get_path(path: Path) -> dict[str, Any] | None:
        """A record file's content, or None."""
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None
        return data if isinstance(data, dict) else None


def open_batches(run_dir: str | Path) -> dict[str, dict[str, Any]]:
    """Batches submitted and not settled (still running, or not yet read).

    ``manifest.json``'s ``batches``: batch id -> stage, status, counts. A
    rerun of the same command re-attaches to each.
    """
    folder = Path(run_dir) / BATCHES_DIR
    out: dict[str, dict[str, Any]] = {}
    if not folder.is_dir():
        return out
    for path in sorted(folder.glob("*.json")):
        record = BatchLedger.get_path(path)
        if not record:
            continue
        name = str(record.get("batch_id") or f"(not created: {path.name})")
        out[name] = {
            k: record.get(k)
            for k in ("stage", "engine", "status", "requests", "counts", "submitted")
        }
        out[name]["input_file_id"] = record.get("input_file_id")
    return out


def _utc() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


class BatchClient:
    """The Batch API's requests (files, batches), with retries and the key.

    Args:
        config: The engine config (base URL, retries, backoff, batch_api).
        httpx: The ``httpx`` module.
        key: The API key (only in the ``Authorization`` header).
        transport: An ``httpx`` transport for tests (None: the network).
        redact: Masks the key in (and cuts) an error's text.
    """

    def __init__(
        self,
        config: OpenAIHttpEngineConfig,
        *,
        httpx: Any,
        key: str | None,
        transport: Any,
        redact: Callable[[str], str],
    ) -> None:
        self.config = config
        self._httpx = httpx
        self._key = key
        self._transport = transport
        self._redact = redact

    def request(
        self,
        method: str,
        path: str,
        *,
        transfer: bool = False,
        raw: bool = False,
        max_bytes: int = MAX_REPLY_BYTES,
        **kwargs: Any,
    ) -> Any:
        """One Batch API request, retried on 429, 5xx, timeouts and lost links.

        Returns the JSON of the reply (its bytes when ``raw``: a file's
        content). ``transfer``: a file's upload or download, under
        ``batch_api.transfer_timeout_s``. Raises EngineError for what a retry
        cannot fix.
        """
        cfg = self.config
        timeout_s = cfg.batch_api.transfer_timeout_s if transfer else cfg.timeout_s
        headers = {}
        if self._key:
            headers["Authorization"] = f"Bearer {self._key}"
        httpx = self._httpx
        said = "no attempt made"
        for attempt in range(cfg.max_retries + 1):
            wait: float | None = None

            async def go() -> BoundedReply:
                async with async_client(
                    httpx,
                    timeout_s=timeout_s,
                    base_url=cfg.base_url.rstrip("/") + "/",
                    headers=headers,
                    transport=self._transport,
                ) as client:
                    return await send_bounded(
                        client,
                        method,
                        path,
                        timeout_s=timeout_s,
                        max_bytes=max_bytes,
                        **kwargs,
                    )

            try:
                resp = run_sync(go)
            except (httpx.TimeoutException, asyncio.TimeoutError) as exc:
                said = f"no reply within {timeout_s:g} s ({type(exc).__name__})"
            except httpx.HTTPError as exc:
                said = self._redact(f"{type(exc).__name__}: {exc}")
            else:
                code = resp.status_code
                said = f"HTTP {code} ({resp.size} bytes)"
                if code in KEY_REFUSED:
                    msg = (
                        f"the API rejected the key (HTTP {code}) at {cfg.base_url} "
                        f"({method} {path}); check the API key in "
                        f"{cfg.api_key_env or '(no api_key_env)'}, and that it may "
                        "use the Batch API"
                    )
                    raise EngineError(msg)
                if code == 404 and path in ("files", "batches"):
                    msg = (
                        f"engine {cfg.model!r}: {method} {cfg.base_url.rstrip('/')}"
                        f"/{path} answered HTTP 404: the server has no Batch API; "
                        "set batch: false for this engine (or use a provider that "
                        "has one)"
                    )
                    raise EngineError(msg)
                if code == 429 or code >= 500:
                    wait = retry_after_s(resp.headers.get("retry-after"))
                elif code >= 300:
                    msg = (
                        f"engine {cfg.model!r}: {method} {path} at {cfg.base_url} "
                        f"answered {said}; check base_url and batch_api (the "
                        "batches already submitted are recorded in the run dir's "
                        "batches/ folder: a rerun re-attaches to them)"
                    )
                    raise EngineError(msg)
                elif resp.too_large:
                    msg = (
                        f"engine {cfg.model!r}: {method} {path}: the file is over "
                        f"{max_bytes} bytes and was not read; raise "
                        "batch_api.max_output_mb"
                    )
                    raise EngineError(msg)
                elif raw:
                    return resp.body
                else:
                    try:
                        return json.loads(resp.body)
                    except ValueError:
                        said = f"HTTP {code}: a body that is not JSON"
            if attempt < cfg.max_retries:
                time.sleep(
                    wait
                    if wait is not None
                    else backoff_s(
                        attempt, base_s=cfg.backoff_base_s, max_s=cfg.backoff_max_s
                    )
                )
        msg = (
            f"engine {cfg.model!r}: {method} {path} at {cfg.base_url} failed "
            f"{cfg.max_retries + 1} times (last: {said}); rerun the same command "
            "later: batches already submitted are recorded in the run dir's "
            "batches/ folder and re-attached, not submitted again"
        )
        raise EngineError(msg)

    def upload(self, data: bytes) -> str:
        """``POST /files`` (purpose ``batch``): the file id."""
        got = self.request(
            "POST",
            "files",
            transfer=True,
            data={"purpose": "batch"},
            files={"file": ("requests.jsonl", data, "application/jsonl")},
        )
        return _field(got, "id", "POST files", self.config)

    def create(self, file_id: str, *, stage: str) -> dict[str, Any]:
        """``POST /batches`` over an uploaded file."""
        got = self.request(
            "POST",
            "batches",
            json={
                "input_file_id": file_id,
                "endpoint": batch_url(self.config),
                "completion_window": self.config.batch_api.completion_window,
                "metadata": {"cube_ray_stage": stage[:500]},
            },
        )
        _field(got, "id", "POST batches", self.config)
        return dict(got)

    def get(self, batch_id: str) -> dict[str, Any]:
        """``GET /batches/{id}``."""
        got = self.request("GET", f"batches/{batch_id}")
        _field(got, "status", f"GET batches/{batch_id}", self.config)
        return dict(got)

    def find(self, file_id: str) -> dict[str, Any] | None:
        """The batch created over ``file_id`` (among the last 100), or None."""
        got = self.request("GET", "batches", params={"limit": 100})
        data = got.get("data") if isinstance(got, dict) else None
        for batch in data if isinstance(data, list) else []:
            if isinstance(batch, dict) and batch.get("input_file_id") == file_id:
                return batch
        return None

    def content(self, file_id: str) -> bytes:
        """``GET /files/{id}/content``: an output or error file."""
        limit = int(self.config.batch_api.max_output_mb * 10**6)
        got = self.request(
            "GET", f"files/{file_id}/content", transfer=True, raw=True, max_bytes=limit
        )
        return bytes(got)


def _field(got: Any, name: str, what: str, config: OpenAIHttpEngineConfig) -> str:
    value = got.get(name) if isinstance(got, dict) else None
    if not isinstance(value, str) or not value:
        msg = (
            f"engine {config.model!r}: {what} at {config.base_url} answered "
            f"without a string {name!r}; is it an OpenAI-compatible Batch API?"
        )
        raise EngineError(msg)
    return value


class BatchRunner:
    """Sends lists of bodies through the Batch API; see the module docstring.

    Args:
        client: The Batch API client.
        ledger: The stage's records in the run dir.
        meter: The engine's counters (requests, tokens).
    """

    def __init__(
        self, client: BatchClient, ledger: BatchLedger, *, meter: UsageMeter
    ) -> None:
        self.client = client
        self.ledger = ledger
        self._meter = meter

    def run(
        self, payloads: Sequence[dict[str, Any]], ids: Sequence[str]
    ) -> list[Reply]:
        """One reply per payload; ``ids`` are the lines' (unique) custom_ids."""
        cfg = self.client.config
        url = batch_url(cfg)
        lines = [request_line(c, url, p) for c, p in zip(ids, payloads, strict=True)]
        try:
            chunks = split_lines(
                lines,
                max_requests=cfg.batch_api.max_requests_per_file,
                max_bytes=int(cfg.batch_api.max_file_mb * 10**6),
            )
        except ValueError as exc:
            msg = f"engine {cfg.model!r}: {exc}; raise it or shorten the prompts"
            raise EngineError(msg) from None
        batches = [self._submit(lines, ids, chunk) for chunk in chunks]
        self._wait(batches)
        replies: list[Reply] = []
        for (digest, record), chunk in zip(batches, chunks, strict=True):
            replies += self._read(digest, record, [ids[i] for i in chunk])
        for reply in replies:
            self._meter.request(attempt=0)
            if reply.status == "ok":
                self._meter.tokens(
                    prompt=reply.prompt_tokens, completion=reply.completion_tokens
                )
        return replies

    def _submit(
        self, lines: Sequence[bytes], ids: Sequence[str], chunk: range
    ) -> tuple[str, dict[str, Any]]:
        """The record of one input file's batch: found, re-attached or created."""
        data = b"".join(lines[i] for i in chunk)
        digest = hashlib.sha256(data).hexdigest()
        ledger, client = self.ledger, self.client
        record = ledger.get(digest)
        if record is not None and record.get("batch_id"):
            ledger.say(
                f"re-attaching to batch {record['batch_id']} ({len(chunk)} "
                "requests, submitted by an earlier run; not submitted again)"
            )
            return digest, record
        if record is None:
            record = {
                "stage": ledger.stage,
                "engine": client.config.model,
                "digest": digest,
                "requests": len(chunk),
                "custom_ids": [ids[i] for i in chunk],
                "input_file_id": None,
                "batch_id": None,
                "status": "uploading",
            }
            ledger.put(digest, record)
        if not record.get("input_file_id"):
            record["input_file_id"] = client.upload(data)
            record["status"] = "uploaded"
            ledger.put(digest, record)
        else:  # killed between the upload and the batch: was it created?
            found = client.find(record["input_file_id"])
            if found is not None:
                record.update(batch_id=found["id"], status=found.get("status"))
                ledger.put(digest, record)
                ledger.say(f"re-attaching to batch {found['id']} (found by its file)")
                return digest, record
        batch = client.create(record["input_file_id"], stage=ledger.stage)
        record.update(
            batch_id=batch["id"], status=batch.get("status"), submitted=_utc()
        )
        ledger.put(digest, record)
        ledger.say(
            f"submitted batch {batch['id']} ({len(chunk)} requests, "
            f"{len(data)} bytes, window {client.config.batch_api.completion_window})"
        )
        return digest, record

    def _wait(self, batches: list[tuple[str, dict[str, Any]]]) -> None:
        """Poll until every batch is finished; Ctrl-C lists the running ones."""
        api = self.client.config.batch_api
        wait = api.poll_s
        shown: dict[str, tuple[Any, ...]] = {}
        try:
            while True:
                running = 0
                for digest, record in batches:
                    if record.get("status") in FINISHED and record.get("polled"):
                        continue
                    got = self.client.get(record["batch_id"])
                    counts = got.get("request_counts")
                    counts = counts if isinstance(counts, dict) else {}
                    record.update(
                        status=got.get("status"),
                        counts={
                            k: counts.get(k) for k in ("completed", "failed", "total")
                        },
                        output_file_id=got.get("output_file_id"),
                        error_file_id=got.get("error_file_id"),
                        errors=_errors_code(got.get("errors")),
                        polled=True,
                    )
                    seen = (record["status"], *record["counts"].values())
                    if shown.get(digest) != seen:
                        shown[digest] = seen
                        self.ledger.put(digest, record)
                        c = record["counts"]
                        self.ledger.say(
                            f"batch {record['batch_id']} {record['status']}: "
                            f"{c['completed'] or 0}/{c['total'] or record['requests']}"
                            f" done, {c['failed'] or 0} failed"
                        )
                    running += record["status"] not in FINISHED
                if not running:
                    return
                time.sleep(wait)
                wait = min(wait * 1.5, api.poll_max_s)
        except KeyboardInterrupt:
            for _, record in batches:
                if record.get("status") not in FINISHED:
                    self.ledger.say(
                        f"stopped while batch {record.get('batch_id')} is "
                        f"{record.get('status')}: it keeps running at the provider "
                        "(and is billed); rerun the same command to re-attach to "
                        "it (it is not submitted again)"
                    )
            raise

    def _read(self, digest: str, record: dict[str, Any], ids: list[str]) -> list[Reply]:
        """The replies of one finished batch, in the order of ``ids``."""
        client = self.client
        api = client.config.api
        redact = client._redact
        got: dict[str, Reply] = {}
        for field in ("error_file_id", "output_file_id"):
            file_id = record.get(field)
            if file_id:
                got.update(read_lines(client.content(file_id), api=api, redact=redact))
        status = str(record.get("status"))
        missing = missing_status(status)
        why = f"batch {record.get('batch_id')} {status}"
        if record.get("errors"):
            why += f" ({record['errors']})"
        return [
            got.get(cid) or Reply(None, status=missing, detail=redact(why))
            for cid in ids
        ]


def _errors_code(errors: Any) -> str | None:
    """The first error code of a failed batch (``errors.data[0].code``)."""
    data = errors.get("data") if isinstance(errors, dict) else None
    if isinstance(data, list) and data and isinstance(data[0], dict):
        code = data[0].get("code")
        return str(code)[:80] if code is not None else None
    return None
