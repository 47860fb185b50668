"""An OpenAI-compatible HTTP engine (API models, ``vllm serve``, Ollama).

The engine is synchronous and batch-oriented like every engine; inside, each
call runs its own asyncio event loop with one ``httpx.AsyncClient`` and at most
``max_concurrency`` requests in flight, so it is safe in a Ray actor (and in a
thread whose loop is already running: the batch then runs on a helper thread).

Failure handling, per request:

* 429, 5xx, timeouts, connection errors and malformed JSON bodies are retried
  up to ``max_retries`` times, waiting ``Retry-After`` when the server sends it,
  else an exponential backoff (``backoff_base_s * 2**attempt``, capped at
  ``backoff_max_s``) with jitter;
* 401, 403 and 404 are engine-fatal (wrong key, URL or model: every request
  would fail) and raise :class:`~cube_ray.errors.EngineError`;
* each request has a whole-request deadline (``timeout_s``, body included) and
  a byte limit on its reply (:mod:`cube_ray.http_reply`); a longer reply is
  ``response_too_large`` and is neither kept nor sent back;
* what still fails becomes a row status (``http_error``, ``timeout``,
  ``connect_error``, ``malformed_response``, ``response_too_large``, ``error``)
  with a short raw text: an error status's body is kept as its length only (it
  may echo the key); a 2xx body that is not a reply (invalid or deeply nested
  JSON, wrong shapes, undecodable bytes) is ``malformed_response`` for its row
  alone; no reply raises out of a batch;
* an unconstrained score that is not exactly one integer 0..10 is asked again
  with a reminder, ``parse_retries`` times, then stored as ``parse_error`` with
  the raw text (never 0);
* ``expected`` scores follow :func:`~cube_ray.engines._scoring.read_expected`
  (``low_score_mass`` below ``min_score_mass``); the "1"/"10" split is read
  from the next step or one follow-up request where the endpoint allows it,
  else the row is ``argmax_fallback`` (see :mod:`cube_ray.engines.openai_http._scores`).

The API key is read from the environment variable named by ``api_key_env`` and
only ever placed in the ``Authorization`` header: it is redacted from every raw
text, status and exception message this package produces.

Modules: ``_engine`` (the class and the per-row flow), ``_request`` (bodies),
``_retry`` (status policy, ``Retry-After``, backoff), ``_client`` (one client
per batch, bounded concurrency), ``_reply`` (reading a body), ``_scores``
(argmax and expected scores), ``_usage`` (counters).
"""

from cube_ray.engines.openai_http._batch import BATCHES_DIR, BatchLedger, open_batches
from cube_ray.engines.openai_http._engine import OpenAIHttpEngine
from cube_ray.engines.openai_http._request import REMINDER
from cube_ray.engines.openai_http._usage import Usage

__all__ = [
    "BATCHES_DIR",
    "REMINDER",
    "BatchLedger",
    "OpenAIHttpEngine",
    "Usage",
    "open_batches",
]
