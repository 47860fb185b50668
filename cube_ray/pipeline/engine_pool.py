"""One long-lived pool of engine actors per distinct engine, shared by stages.

Stages that use the same engine (same backend, model and load settings;
``sampling`` and ``score_mode`` travel with each request) share one pool for
the whole job instead of each loading the model. A pool is:

* ``min_size``..``max_size`` *engine hosts*: Ray actors holding one engine
  each, created with the pool's ``num_cpus``/``num_gpus``/``resources`` (so
  ``resources`` routing holds), restarted by Ray on another node when theirs
  is lost (``max_restarts=-1``), the batch they were serving retried there
  (``max_task_retries=-1``);
* one *dispatcher*: an async actor (no CPU) pinned to the driver's node that
  assigns each batch the least loaded host, adds a host while every host is
  busy and fewer than ``max_size`` exist, and adds up the time spent inside
  engine calls. The caller sends the batch to the host itself: batches and
  results never pass through the dispatcher, so it holds nothing.

Stages (light Ray tasks of ``ray.task_num_cpus``, or a system's actors)
reach the pool through a :class:`RemoteEngine`, which has the
:class:`~cube_ray.engines.base.Engine` protocol, so the stage classes in
``cube_ray.stages`` are unchanged: they get it from their ``engine_factory``.
docs/pipeline.md says why this design.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from cube_ray.console import console
from cube_ray.engines.base import (
    Engine,
    Generation,
    ItemJudge,
    JudgeItem,
    SamplingParams,
    ScoreMode,
    ScoreResult,
)
from cube_ray.engines.embedded import is_converted
from cube_ray.engines.identity import engine_id
from cube_ray.engines.registry import build_engine
from cube_ray.engines.threads import apply_engine_threads
from cube_ray.pipeline import heap

__all__ = [
    "EnginePools",
    "RemoteEngine",
    "RemoteItemJudge",
    "SharedEngines",
    "engine_id",
    "take_served_node",
]

HOST_UNAVAILABLE_RETRIES = 12
"""Times a batch is sent again to a host Ray is restarting (about 100 s)."""
START_QUIET_S = 3.0
"""An engine ready within this many seconds starts without a console line."""
START_PROGRESS_S = 15.0
"""Seconds between the console lines of an engine that is still starting."""


# --- in the engine host actor -----------------------------------------------------

_Served = tuple[Any, str, float, tuple[str, float]]
"""What a host returns: results, its node, seconds in the engine call, and the
(id, seconds) of the start-up that served it."""


class _EngineHost:
    """Holds one engine in a Ray actor; times its start-up and its calls.

    Every call also returns which start-up of the host served it (an id drawn
    in ``__init__``, which Ray runs again when it restarts the actor) and that
    start-up's seconds, so the dispatcher counts restarts as start-ups.
    """

    def __init__(self, config: Any) -> None:
        # heavy: ray, imported only where this code uses it
        import ray

        # Before the engine loads torch: Ray gave this fractional-CPU worker
        # one thread (cube_ray.engines.threads says why that is wrong here).
        apply_engine_threads(config)
        start = time.perf_counter()
        self._engine = build_engine(config)
        self._startup = (uuid.uuid4().hex, time.perf_counter() - start)
        self._node = ray.get_runtime_context().get_node_id()

    def ready(self) -> tuple[str, tuple[str, float], str, bool]:
        """Name, start-up (id, seconds), node, and whether it judges items."""
        items = isinstance(self._engine, ItemJudge)
        return self._engine.name, self._startup, self._node, items

    def _timed(self, call: Any, *args: Any, **kwargs: Any) -> _Served:
        start = time.perf_counter()
        out = call(*args, **kwargs)
        return out, self._node, time.perf_counter() - start, self._startup

    def generate(self, prompts: list[str], sampling: SamplingParams) -> _Served:
        return self._timed(self._engine.generate, prompts, sampling=sampling)

    def score(self, prompts: list[str], mode: ScoreMode) -> _Served:
        return self._timed(self._engine.score, prompts, mode=mode)

    def yes_no(
        self, prompts: list[str], arg: tuple[tuple[str, str], ScoreMode]
    ) -> _Served:
        words, mode = arg
        return self._timed(self._engine.yes_no, prompts, words=words, mode=mode)  # type: ignore[attr-defined]

    def score_lines(self, prompts: list[str], arg: tuple[int, ScoreMode]) -> _Served:
        count, mode = arg
        return self._timed(self._engine.score_lines, prompts, count=count, mode=mode)  # type: ignore[attr-defined]

    def judge_items(self, items: list[JudgeItem], _: None) -> _Served:
        return self._timed(self._engine.judge_items, items)  # type: ignore[attr-defined]


# --- the dispatcher (async actor) --------------------------------------------------


@dataclass
class _Host:
    handle: Any
    ready: Any
    load: int = 0


class _Dispatcher:
    """Assigns each batch the least loaded host; grows the pool while all are busy.

    It is told of each batch twice: when a caller asks for a host
    (:meth:`assign`) and when the call is over (:meth:`done`, with the seconds
    spent in the engine). Batches and results never pass through it: a
    dispatcher that made the engine calls itself kept about 40 KB per call
    (Ray held every result it had relayed; BENCHMARKS.md, "Pipeline scale").
    It never waits: a host's own queue holds what it cannot serve yet, so a
    caller lost with its node leaves at most a load count too high, which only
    skews the balance.
    """

    def __init__(
        self, config: Any, *, host_options: dict[str, Any], pool: dict[str, int]
    ) -> None:
        self._config = config
        self._options = host_options
        self._min = pool["min_size"]
        self._max = pool["max_size"]
        self._hosts: list[_Host] = []
        self._busy_s = 0.0
        self._calls = 0
        self._startups: dict[str, float] = {}
        """Every start-up of a host seen (id -> seconds), restarts included."""
        for _ in range(self._min):
            self._add_host()

    def _add_host(self) -> _Host:
        # heavy: ray, imported only where this code uses it
        import ray

        handle: Any = (
            ray.remote(_EngineHost).options(**self._options).remote(self._config)
        )
        host = _Host(handle, handle.ready.remote())
        self._hosts.append(host)
        return host

    async def assign(self) -> tuple[int, Any]:
        """A host for one batch: its index and handle.

        An idle host; else a new one (below ``max_size``); else the least
        loaded, which queues the batch.
        """
        i = min(range(len(self._hosts)), key=lambda k: self._hosts[k].load)
        if self._hosts[i].load and len(self._hosts) < self._max:
            self._add_host()
            i = len(self._hosts) - 1
        self._hosts[i].load += 1
        return i, self._hosts[i].handle

    async def done(self, index: int, served: tuple[float, str, float] | None) -> None:
        """A batch on host ``index`` is over.

        ``served`` is (engine seconds, start-up id, start-up seconds) when the
        engine answered.
        """
        host = self._hosts[index]
        host.load = max(0, host.load - 1)
        if served is not None:
            busy, startup_id, startup_s = served
            self._startups[startup_id] = startup_s
            self._busy_s += busy
            self._calls += 1

    async def node(self) -> str:
        """The node this dispatcher runs on (diagnostics, tests)."""
        # heavy: ray, imported only where this code uses it
        import ray

        return str(ray.get_runtime_context().get_node_id())

    async def hosts(self) -> list[Any]:
        """The engine host actors (diagnostics, tests)."""
        return [h.handle for h in self._hosts]

    async def describe(self) -> tuple[str, bool]:
        """The engine's name and whether it judges items (waits for a host)."""
        name, _, _, items = await self._hosts[0].ready
        return str(name), bool(items)

    async def stats(self) -> dict[str, Any]:
        """Start-ups, their seconds, and the seconds spent inside engine calls.

        Restarts of a host (after a lost actor or node) count as start-ups.
        """
        startups = dict(self._startups)
        for host in self._hosts:
            _, (startup_id, seconds), _, _ = await host.ready
            startups[startup_id] = seconds
        return {
            "startups": len(startups),
            "startup_s": round(sum(startups.values()), 3),
            "busy_s": round(self._busy_s, 3),
            "calls": self._calls,
        }


# --- in the stages' tasks and actors ----------------------------------------------

_SERVED_BY: list[str] = []


def take_served_node() -> str | None:
    """The node of the engine host that served this process's last call (once)."""
    node = _SERVED_BY[-1] if _SERVED_BY else None
    _SERVED_BY.clear()
    return node


class RemoteEngine:
    """The :class:`Engine` protocol over a shared pool; closing it closes nothing."""

    def __init__(self, dispatcher: Any, name: str) -> None:
        self._dispatcher = dispatcher
        self.name = name

    def _call(self, method: str, prompts: Sequence[Any], arg: Any) -> Any:
        """Run ``generate``/``score``/``judge_items`` on the host assigned.

        A host whose node was just lost answers ``ActorUnavailableError`` while
        Ray restarts it elsewhere; an engine call has no side effect, so the
        batch is sent again (up to ``HOST_UNAVAILABLE_RETRIES`` times, waiting
        1, 2, 4, 8, then 10 s) instead of failing the stage.
        """
        # heavy: ray, imported only where this code uses it
        import ray
        import ray.exceptions

        batch = list(prompts)
        for attempt in range(HOST_UNAVAILABLE_RETRIES + 1):
            index, host = ray.get(self._dispatcher.assign.remote())
            served: tuple[float, str, float] | None = None
            try:
                out, node, busy, (startup_id, startup_s) = ray.get(
                    getattr(host, method).remote(batch, arg)
                )
                served = (busy, startup_id, startup_s)
            except ray.exceptions.ActorUnavailableError:
                if attempt == HOST_UNAVAILABLE_RETRIES:
                    raise
                time.sleep(min(2.0**attempt, 10.0))
                continue
            finally:
                ray.get(self._dispatcher.done.remote(index, served))
            _SERVED_BY.append(node)
            return out
        raise AssertionError("unreachable")  # pragma: no cover

    def generate(
        self, prompts: Sequence[str], *, sampling: SamplingParams
    ) -> list[Generation]:
        """Generate on a host of the pool."""
        return list(self._call("generate", prompts, sampling))

    def score(self, prompts: Sequence[str], *, mode: ScoreMode) -> list[ScoreResult]:
        """Score on a host of the pool."""
        return list(self._call("score", prompts, mode))

    def yes_no(
        self, prompts: Sequence[str], *, words: tuple[str, str], mode: ScoreMode
    ) -> list[ScoreResult]:
        """P(yes) per prompt on a host of the pool (protocol ``checklist``)."""
        return list(self._call("yes_no", prompts, (words, mode)))

    def score_lines(
        self, prompts: Sequence[str], *, count: int, mode: ScoreMode
    ) -> list[list[ScoreResult]]:
        """Scores one a line on a host of the pool (``all_dimensions``)."""
        return list(self._call("score_lines", prompts, (count, mode)))

    def close(self) -> None:
        """The pool outlives its stages: nothing to release here."""


class RemoteItemJudge(RemoteEngine):
    """A shared pool whose engine judges items itself (the reference judge)."""

    def judge_items(self, items: Sequence[JudgeItem]) -> list[ScoreResult]:
        """Judge on a host of the pool."""
        return list(self._call("judge_items", items, None))


@dataclass(frozen=True)
class SharedEngines:
    """An ``engine_factory`` for stages: engine config -> :class:`RemoteEngine`."""

    pools: dict[str, tuple[Any, str, bool]]
    """Engine id -> (dispatcher handle, engine name, judges items)."""

    def __call__(self, config: Any) -> Engine:
        """The shared pool of the engine ``config`` loads."""
        dispatcher, name, items = self.pools[engine_id(config)]
        cls = RemoteItemJudge if items else RemoteEngine
        return cls(dispatcher, name)


# --- on the driver -----------------------------------------------------------


class EnginePools:
    """The job's engine pools, created on first use, kept until :meth:`close`."""

    def __init__(
        self,
        *,
        say: Callable[[str], None] | None = None,
        before_first: Callable[[], None] | None = None,
    ) -> None:
        self._say = say or _say_console
        """Where engine start-up progress goes (the console by default)."""
        self._before_first = before_first
        """Called once, before the first pool starts."""
        self._pools: dict[str, tuple[Any, str, bool]] = {}
        self._stages: dict[str, list[str]] = {}
        self._lock = threading.Lock()
        """Overlapping stages (driver threads) asking for one engine at once
        must get one pool."""

    def factory(self, configs: Sequence[Any], *, stage: str) -> SharedEngines:
        """An engine factory for a stage whose engines are ``configs``.

        Starts the pools not started yet (each waits for its first host).
        """
        with self._lock:
            return self._factory(configs, stage=stage)

    def _factory(self, configs: Sequence[Any], *, stage: str) -> SharedEngines:
        for config in configs:
            eid = engine_id(config)
            self._stages.setdefault(eid, [])
            if stage not in self._stages[eid]:
                self._stages[eid].append(stage)
            if eid not in self._pools:
                if self._before_first is not None:
                    before, self._before_first = self._before_first, None
                    before()
                dispatcher = _start_dispatcher(config)
                name, items = _await_start(dispatcher, config, eid, say=self._say)
                self._pools[eid] = (dispatcher, name, items)
        return SharedEngines({e: self._pools[e] for e in map(engine_id, configs)})

    def stats(self) -> dict[str, dict[str, Any]]:
        """``manifest.json``'s ``engines``: stages, start-ups, start-up and busy s."""
        # heavy: ray, imported only where this code uses it
        import ray

        out: dict[str, dict[str, Any]] = {}
        for eid, (dispatcher, _, _) in self._pools.items():
            try:
                stats = ray.get(dispatcher.stats.remote(), timeout=60)
            except Exception as exc:  # a lost dispatcher: say so, keep the run
                stats = {"error": f"{type(exc).__name__}: {exc}"[:200]}
            out[eid] = {"stages": list(self._stages[eid]), **stats}
        return out

    def close(self) -> None:
        """Kill the dispatchers and their hosts."""
        # heavy: ray, imported only where this code uses it
        import ray

        for dispatcher, _, _ in self._pools.values():
            try:
                ray.kill(dispatcher)
            except Exception:  # already gone with its node
                continue
        self._pools.clear()


def _say_console(text: str) -> None:

    print(f"cube-ray: {text}", file=console(), flush=True)


def _start_work(config: Any) -> str:
    """What an engine host does before its first call (for the console)."""
    if getattr(config, "backend", None) == "embedded":
        if not is_converted(config):
            return (
                "converting the embedded model once (a few minutes; later runs "
                "reuse it), then loading it"
            )
        return "loading the embedded model"
    return "loading the model" if getattr(config, "cpu_engine", False) else "starting"


def _await_start(
    dispatcher: Any, config: Any, eid: str, *, say: Callable[[str], None]
) -> tuple[str, bool]:
    """Wait for a pool's first host, saying so every ``START_PROGRESS_S`` seconds.

    A model conversion and an engine start take minutes on a CPU; the console
    says what is happening meanwhile instead of staying silent.
    """
    # heavy: ray, imported only where this code uses it
    import ray

    ref = dispatcher.describe.remote()
    start = time.monotonic()
    done, _ = ray.wait([ref], timeout=START_QUIET_S)
    if done:  # a fake, reference or warm engine: nothing to say
        name, items = ray.get(ref)
        return str(name), bool(items)
    say(f"engine {eid}: {_start_work(config)}")
    while True:
        done, _ = ray.wait([ref], timeout=START_PROGRESS_S)
        if done:
            break
        say(f"engine {eid}: still starting ({time.monotonic() - start:.0f} s)")
    name, items = ray.get(ref)
    say(f"engine {eid}: ready after {time.monotonic() - start:.0f} s")
    return str(name), bool(items)


def _start_dispatcher(config: Any) -> Any:
    # heavy: ray, imported only where this code uses it
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    pool = config.pool
    host_options: dict[str, Any] = {
        "num_cpus": pool.num_cpus,
        "max_restarts": -1,
        "max_task_retries": -1,
        "max_concurrency": 1,
    }
    if pool.num_gpus:
        host_options["num_gpus"] = pool.num_gpus
    if pool.resources:
        host_options["resources"] = dict(pool.resources)
    env = heap.engine_env()  # an engine keeps glibc's own heap thresholds
    if env:
        host_options["runtime_env"] = {"env_vars": env}
    # Hard affinity: Ray places an actor that asks for no resources on a
    # *random* node under any other strategy, soft node affinity included
    # (``ClusterResourceScheduler::GetBestSchedulableNode``: "the zero cpu
    # actor is a special case ... except for HARD node affinity"). A
    # dispatcher on a worker node dies with it, and with it every host it owns
    # (a Ray actor shares its owner's fate): CI lost a run that way. On the
    # driver's node it lives as long as the job does.
    here = NodeAffinitySchedulingStrategy(
        ray.get_runtime_context().get_node_id(), soft=False
    )
    sizes = {"min_size": pool.min_size, "max_size": pool.max_size}
    return (
        ray.remote(_Dispatcher)
        .options(num_cpus=0, max_concurrency=10_000, scheduling_strategy=here)
        .remote(config, host_options=host_options, pool=sizes)
    )
