"""``--dry-run``: engine calls, prompt tokens and environment variables of a run.

Engine calls and estimated prompt tokens per stage, and which environment
variables the run sends to which host.

Nothing is started: the corpus is streamed once on the driver to count documents
and their length; question and answer lengths that do not exist yet are
estimated (questions ~30 tokens, answers ~min(max_tokens, 256) tokens).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cube_ray.config import EnvUse, RunConfig
from cube_ray.corpus import iter_document_batches, with_prompt_language
from cube_ray.engines.config import engine_price
from cube_ray.env import url_host as _host
from cube_ray.errors import ConfigError
from cube_ray.pipeline.method import QUALIFICATION_SCORES, stage_graph
from cube_ray.prompts import load_template
from cube_ray.protocols import PROTOCOLS, calls_per_answer, checklist
from cube_ray.stages import AnswerStage, QuestionStage, SystemStage
from cube_ray.stages.qualify import FaultStage
from cube_ray.systems import load_question_file
from cube_ray.systems.kinds import system_kind

__all__ = [
    "FileUse",
    "JudgeCost",
    "PlanRow",
    "engine_label",
    "estimate_tokens",
    "file_uses",
    "format_env_uses",
    "format_file_uses",
    "format_plan",
    "format_protocols",
    "judge_cost",
    "plan_cost",
    "plan_run",
]

_CJK = re.compile(r"[\u3000-\u9fff\uac00-\ud7af\uff00-\uffef]")
QUESTION_TOKENS = 30
"""Assumed length of a generated question."""


def estimate_tokens(text: str) -> int:
    """Rough token count: one per CJK character, one per 4 other characters.

    >>> estimate_tokens("办理时限"), estimate_tokens("abcd efgh")
    (4, 3)
    """
    cjk = len(_CJK.findall(text))
    return cjk + -(-(len(text) - cjk) // 4)


@dataclass(frozen=True)
class JudgeCost:
    """Estimated calls and tokens of one judge under its protocol."""

    calls: int
    prompt_tokens: int
    unique_prompt_tokens: int
    """Prompt tokens left when each answer's shared prefix is counted once."""
    completion_tokens: int


@dataclass(frozen=True)
class PlanRow:
    """One line of the plan."""

    stage: str
    engine: str
    calls: int
    prompt_tokens: int
    unique_prefix_tokens: int | None = None
    """Prompt tokens left after sharing the prefix across dimensions."""
    completion_tokens: int = 0
    """Estimated completion tokens (questions ~30, answers ~min(max_tokens,
    256), a judge's score ~1 per call)."""
    price: tuple[float, float] | None = None
    """The engine's ``price_per_mtok`` (prompt, completion), if set; the batch
    price for an engine with ``batch: true``."""
    protocols: tuple[tuple[str, JudgeCost], ...] = ()
    """An LLM judge of the answers: what each protocol would cost it (section
    14), the configured one first."""
    answers: int = 0
    """Answers a judge row scores (to show costs per answer)."""


def _tpl_tokens(name: str) -> int:
    try:
        return estimate_tokens(load_template(name).template)
    except (OSError, FileNotFoundError) as exc:
        msg = f"prompt template {name!r} not found ({exc})"
        raise ConfigError(msg) from exc


def _price(cfg: object) -> tuple[float, float] | None:
    # The batch price for an engine with ``batch: true``.
    return engine_price(cfg)


def engine_label(cfg: object) -> str:
    """An engine's name in the plan's rows: ``backend:model`` (or the backend).

    An engine that sends through a Batch API (priced at its batch price) says
    so.

    >>> from types import SimpleNamespace as NS
    >>> engine_label(NS(backend="vllm", model="Qwen/Qwen2.5-7B"))
    'vllm:Qwen/Qwen2.5-7B'
    >>> engine_label(NS(backend="reference"))
    'reference'
    >>> engine_label(NS(backend="openai_http", model="gpt", batch=True))
    'openai_http:gpt (batch)'
    """
    backend = getattr(cfg, "backend", "?")
    model = getattr(cfg, "model", None) or getattr(cfg, "served_name", None)
    label = f"{backend}:{model}" if model else str(backend)
    return f"{label} (batch)" if getattr(cfg, "batch", False) else label


def plan_run(config: RunConfig, *, limit: int | None = None) -> list[PlanRow]:
    """Count engine calls and estimate prompt tokens per stage and judge."""
    config.prompts.check()
    if limit is None:
        limit = config.corpus.limit
    config = with_prompt_language(config, limit=limit)
    n_docs = 0
    doc_tokens = 0
    for batch in iter_document_batches(config.corpus, limit=limit):
        for text in batch.column("text").to_pylist():
            doc_tokens += estimate_tokens(text)
        n_docs += batch.num_rows
    if config.sample is not None:  # only the sampled documents get questions
        share = min(config.sample.size, n_docs) / max(n_docs, 1)
        doc_tokens = round(doc_tokens * share)
        n_docs = min(config.sample.size, n_docs)
    mean_doc = doc_tokens / max(n_docs, 1)
    gen = engine_label(config.generator)
    gen_price = _price(config.generator)
    rows: list[PlanRow] = []
    if config.questions.source == "generate":
        n_q = n_docs
        q_tokens = QUESTION_TOKENS * n_q
        gold_tokens = doc_tokens
    else:
        frame = _question_frame(config, limit)  # read once
        n_q = frame.height
        q_tokens = sum(estimate_tokens(t or "") for t in frame["question"].to_list())
        if config.sample is not None:  # the sample's gold documents' questions
            gold_docs = int(frame["doc_id"].n_unique())
            share = min(1.0, config.sample.size / max(gold_docs, 1))
            n_q, q_tokens = round(n_q * share), round(q_tokens * share)
        rows.append(PlanRow("questions (file)", "-", 0, 0))
        gold_tokens = int(mean_doc * n_q)
    answer_tpl = _tpl_tokens(config.prompts.answer)
    answer_len = min(config.generator.sampling.max_tokens, 256)
    n_sets = 2 + len(config.systems)
    n_answers = n_sets * n_q
    rubrics = config.rubrics()
    # The run's own stage graph, walked with estimated lengths.
    for spec in stage_graph(config):
        if spec.stage_cls is QuestionStage:
            tokens = n_q * _tpl_tokens(config.prompts.question) + doc_tokens
            rows.append(
                PlanRow(spec.label, gen, n_q, tokens, None, q_tokens, gen_price)
            )
        elif spec.stage_cls is AnswerStage:
            zero = n_q * answer_tpl + q_tokens
            out = n_q * answer_len
            rows.append(PlanRow("answers:zero", gen, n_q, zero, None, out, gen_price))
            rows.append(
                PlanRow(
                    "answers:full", gen, n_q, zero + gold_tokens, None, out, gen_price
                )
            )
        elif spec.stage_cls is SystemStage:
            system = spec.extra["system"]
            counts = system_kind(system).plan(
                system,
                questions=n_q,
                prompt_tokens=n_q * answer_tpl + q_tokens,
                doc_tokens=mean_doc,
            )
            engine = gen if spec.engines else counts.engine
            rows.append(
                PlanRow(
                    spec.label,
                    engine,
                    counts.calls,
                    counts.prompt_tokens,
                    None,
                    counts.calls * answer_len if spec.engines else 0,
                    gen_price if spec.engines else None,
                )
            )
        elif spec.stage_cls is FaultStage:  # CUBE_METHOD.md section 12
            rows.append(PlanRow(spec.label, "fault generator (no LLM)", 0, 0))
        else:  # a judge (of the answers, or of the faulted answers)
            engine = spec.stage_kwargs["engine"]
            if engine.backend == "reference":  # no model, no prompt
                n = n_answers
                if spec.table == QUALIFICATION_SCORES and config.qualification:
                    q = config.qualification
                    n = min(q.questions, n_q) * len(q.kinds) * 2  # and controls
                rows.append(
                    PlanRow(spec.label, "reference (no LLM)", n * len(rubrics), 0)
                )
                continue
            compared: tuple[tuple[str, JudgeCost], ...] = ()
            if spec.table == QUALIFICATION_SCORES and config.qualification:
                q = config.qualification
                asked = min(q.questions, n_q)
                # Each fault and its control (CUBE_METHOD.md section 12).
                n_faults = asked * len(q.kinds) * 2
                per_question = int(mean_doc) + q_tokens // max(n_q, 1)
                material = n_faults * (per_question + answer_len)
                cost = judge_cost(
                    config,
                    engine,
                    answers=n_faults,
                    material=material,
                    questions=asked,
                    question_material=asked * per_question,
                )
                unique = None
            else:
                sizes: dict[str, Any] = {
                    "answers": n_answers,
                    "material": n_sets * (gold_tokens + q_tokens)
                    + n_answers * answer_len,
                    "questions": n_q,
                    "question_material": gold_tokens + q_tokens,
                }
                cost = judge_cost(config, engine, **sizes)
                unique = cost.unique_prompt_tokens
                own = getattr(engine, "protocol", "score")
                compared = tuple(
                    (
                        p,
                        cost
                        if p == own
                        else judge_cost(config, engine, **sizes, protocol=p),
                    )
                    for p in (own, *(p for p in PROTOCOLS if p != own))
                    if p != "checklist" or _has_items(config)
                )
            rows.append(
                PlanRow(
                    spec.label,
                    engine_label(engine),
                    cost.calls,
                    cost.prompt_tokens,
                    unique,
                    cost.completion_tokens,
                    _price(engine),
                    compared,
                    n_answers if compared else 0,
                )
            )
    return rows


def judge_cost(
    config: RunConfig,
    engine: Any,
    *,
    answers: int,
    material: int,
    questions: int,
    question_material: int,
    protocol: str | None = None,
) -> JudgeCost:
    """Calls and prompt tokens of a judge under a protocol (CUBE_METHOD.md section 14).

    Each call's prompt is the protocol's template, the answer's material (gold
    document, question, answer: the prefix its calls share) and its own tail:
    a rubric (``score``), a rubric's opening and one item (``checklist``), or
    every rubric (``all_dimensions``, one call per answer).

    Args:
        config: The run config (rubrics, templates, dimensions).
        engine: The judge's engine config.
        answers: Answers judged.
        material: Their material's tokens, summed over the answers.
        questions: Distinct questions (a checklist baseline asks per question).
        question_material: Gold documents and questions of those, summed.
        protocol: Price this protocol instead of the engine's own.
    """
    protocol = str(protocol or getattr(engine, "protocol", "score"))
    rubrics = config.rubrics()
    tpl = _tpl_tokens(config.prompts.judge_template(protocol))
    prefix = answers * tpl + material
    rubric_tokens = sum(estimate_tokens(r) for r in rubrics.values())
    if protocol == "all_dimensions":
        total = prefix + answers * rubric_tokens
        return JudgeCost(answers, total, total, answers * 2 * len(rubrics))
    if protocol == "score":
        calls = answers * len(rubrics)
        total = len(rubrics) * prefix + answers * rubric_tokens
        return JudgeCost(calls, total, prefix + answers * rubric_tokens, calls)
    lists = {d: checklist(r, dimension=d) for d, r in rubrics.items()}
    per_answer = calls_per_answer(
        "checklist", {d: len(c.items) for d, c in lists.items()}
    )
    tails = sum(
        estimate_tokens(c.header) + estimate_tokens(i.text)
        for c in lists.values()
        for i in c.items
    )
    calls = answers * per_answer
    total = per_answer * prefix + answers * tails
    unique = prefix + answers * tails
    if getattr(engine, "checklist_baseline", "none") != "none":
        base = per_answer * (questions * tpl + question_material) + questions * tails
        calls += questions * per_answer
        total += base
        unique += questions * tpl + question_material + questions * tails
    return JudgeCost(calls, total, unique, calls)


def _has_items(config: RunConfig) -> bool:
    """Whether every rubric of the run lists items (protocol ``checklist``)."""
    try:
        for d, r in config.rubrics().items():
            checklist(r, dimension=d)
    except ConfigError:
        return False
    return True


def format_protocols(rows: list[PlanRow]) -> list[str]:
    """Per LLM judge, calls and prompt tokens per answer under each protocol.

    >>> c = JudgeCost(40, 40_000, 12_000, 40)
    >>> row = PlanRow("scores:j", "e", 40, 40_000, protocols=(("score", c),),
    ...     answers=10)
    >>> for line in format_protocols([row]):
    ...     print(line)
    Judging protocols (CUBE_METHOD.md section 14), per answer:
      judge        protocol                  calls  prompt tokens  after prefix sharing
      j            score (this run)            4.0          4,000                 1,200
    """
    judged = [r for r in rows if r.protocols and r.answers]
    if not judged:
        return []
    lines = [
        "Judging protocols (CUBE_METHOD.md section 14), per answer:",
        f"  {'judge':12s} {'protocol':25s} {'calls':>5s}  {'prompt tokens':>13s}"
        "  after prefix sharing",
    ]
    for r in judged:
        for k, (protocol, cost) in enumerate(r.protocols):
            name = f"{protocol} (this run)" if k == 0 else protocol
            judge = r.stage.partition(":")[2]  # not "scores:…": one line per stage
            lines.append(
                f"  {judge[:12]:12s} {name:25s} {cost.calls / r.answers:>5.1f}  "
                f"{cost.prompt_tokens / r.answers:>13,.0f}  "
                f"{cost.unique_prompt_tokens / r.answers:>20,.0f}"
            )
    return lines


def _question_frame(config: RunConfig, limit: int | None) -> Any:
    """The question file's rows (the first ``limit``), read once per plan."""
    q = config.questions
    assert q.path is not None
    frame = load_question_file(
        q.path,
        question_field=q.question_field,
        doc_id_field=q.doc_id_field,
        id_field=q.question_id_field,
        reference_answer_field=q.reference_answer_field,
    )
    return frame if limit is None else frame.head(limit)


def plan_cost(rows: list[PlanRow], *, questions: int) -> dict[str, Any]:
    """The dry run's cost columns (those of ``cube-ray plan``) from estimates.

    Engine- and GPU-hours need an engine speed, which only a pilot measures:
    they are None here.

    >>> r = PlanRow("scores:j", "e", 10, 2_000_000, None, 10, (1.0, 2.0))
    >>> plan_cost([r], questions=5)["api_cost"]
    2.00002
    """
    priced = [r for r in rows if r.price is not None]
    cost = None
    if priced:
        cost = sum(
            (r.prompt_tokens * r.price[0] + r.completion_tokens * r.price[1]) / 1e6
            for r in priced
            if r.price is not None
        )
    return {
        "questions": questions,
        "prompt_tokens": sum(r.prompt_tokens for r in rows),
        "completion_tokens": sum(r.completion_tokens for r in rows),
        "engine_hours": None,
        "gpu_hours": None,
        "api_cost": None if cost is None else round(cost, 6),
    }


def format_plan(rows: list[PlanRow]) -> str:
    """The plan as a text table with a total line."""
    head = f"{'stage':24s} {'engine':34s} {'calls':>10s} {'prompt tokens':>15s}"
    head += f" {'after prefix sharing':>21s}"
    lines = [head, "-" * len(head)]
    for r in rows:
        uniq = f"{r.unique_prefix_tokens:>21,d}" if r.unique_prefix_tokens else ""
        lines.append(
            f"{r.stage:24s} {r.engine[:34]:34s} {r.calls:>10,d} "
            f"{r.prompt_tokens:>15,d} {uniq}"
        )
    lines.append("-" * len(head))
    lines.append(
        f"{'total':24s} {'':34s} {sum(r.calls for r in rows):>10,d} "
        f"{sum(r.prompt_tokens for r in rows):>15,d}"
    )
    lines.append(
        "Token counts are estimates (1 per CJK character, 1 per 4 other characters; "
        "questions ~30, answers ~min(max_tokens, 256) tokens). No engine was started."
    )
    compared = format_protocols(rows)
    if compared:
        lines += ["", *compared]
    if rows:
        # lazy: loads polars, which importing plan does not
        from cube_ray.sizing import format_costs

        questions = max(r.calls for r in rows if r.stage.startswith("answers:"))
        lines.append("")
        lines.extend(format_costs({"this run": plan_cost(rows, questions=questions)}))
        lines.append(
            "Engine- and GPU-hours need an engine's measured speed: run a pilot "
            "(a small sample:) and `cube-ray plan RUN_DIR --half-width H`."
        )
    return "\n".join(lines)


def format_env_uses(uses: list[EnvUse]) -> str:
    """Which environment variable goes to which host (names only, never values).

    >>> print(format_env_uses([EnvUse("K", "systems[rag].headers.X", "h:1")]))
    Environment variables read (values not shown):
      K -> h:1  (systems[rag].headers.X)
    >>> print(format_env_uses([]))
    Environment variables read: none.
    """
    if not uses:
        return "Environment variables read: none."
    lines = ["Environment variables read (values not shown):"]
    lines += [f"  {u.name} -> {u.destination}  ({u.field})" for u in uses]
    return "\n".join(lines)


@dataclass(frozen=True)
class FileUse:
    """One file a run reads, and where its content goes."""

    path: str
    field: str
    """The config field that names it, e.g. ``dimensions[0].rubric_file``."""
    destinations: tuple[str, ...]
    """Engines and hosts its content (or text written from it) is sent to."""


def engine_destination(engine: Any) -> str:
    """Where an engine runs: the host of an HTTP engine, or a local process.

    >>> from types import SimpleNamespace as S
    >>> engine_destination(S(backend="openai_http", base_url="https://k@h:1/v1"))
    'h:1 (HTTP engine)'
    >>> engine_destination(S(backend="vllm", model="/m"))
    'local vLLM engine'
    """
    backend = getattr(engine, "backend", "?")
    if backend == "openai_http":
        return f"{_host(str(engine.base_url))} (HTTP engine)"
    return {
        "vllm": "local vLLM engine",
        "embedded": "local embedded engine",
        "reference": "reference judge (local, no LLM)",
        "fake": "fake engine (local)",
    }.get(str(backend), f"local {backend} engine")


def _unique(items: list[str]) -> tuple[str, ...]:
    return tuple(dict.fromkeys(items))


def file_uses(config: RunConfig) -> list[FileUse]:
    """Every file the run reads and where its content goes.

    The corpus goes to the generator (questions, the full bound) and the judges
    (the gold document); questions (from the corpus or the question file) go to
    every system; a rubric and the judge template to the judges; the question
    and answer templates to the generator; a QA file's answers to the judges.
    """
    generator = engine_destination(config.generator)
    judges = [engine_destination(e) for e in config.judges.values()]
    systems: list[str] = []
    for system in config.systems:
        dest = system_kind(system).destination(system, generator=generator)
        systems += [dest] if dest else []
    uses: list[FileUse] = []
    corpus_to = [generator, *judges]
    if config.questions.source == "generate":
        corpus_to += systems  # the questions written from it
    uses.append(FileUse(config.corpus.path, "corpus.path", _unique(corpus_to)))
    if config.questions.source == "file" and config.questions.path:
        uses.append(
            FileUse(
                config.questions.path,
                "questions.path",
                _unique([generator, *systems, *judges]),
            )
        )
    for i, system in enumerate(config.systems):
        path = getattr(system, "path", None)
        if isinstance(path, str):
            uses.append(FileUse(path, f"systems[{i}].path", _unique(judges)))
    for i, dim in enumerate(config.dimensions):
        if dim.rubric_file is not None:
            uses.append(
                FileUse(
                    dim.rubric_file, f"dimensions[{i}].rubric_file", _unique(judges)
                )
            )
    for kind, to in (
        ("question", [generator]),
        ("answer", [generator]),
        ("judge", judges),
    ):
        name = getattr(config.prompts, kind)
        if Path(name).suffix == ".txt" or Path(name).is_file():
            uses.append(FileUse(name, f"prompts.{kind}", _unique(to)))
    return uses


def format_file_uses(uses: list[FileUse]) -> str:
    """Which file's content goes where.

    >>> print(format_file_uses([FileUse("/c/r.txt", "dimensions[0].rubric_file",
    ...                                 ("h:1 (HTTP engine)",))]))
    Files read, and where their content goes:
      /c/r.txt  (dimensions[0].rubric_file) -> h:1 (HTTP engine)
    """
    lines = ["Files read, and where their content goes:"]
    lines += [f"  {u.path}  ({u.field}) -> {', '.join(u.destinations)}" for u in uses]
    return "\n".join(lines)
