"""A finished ``checklist`` qualification read against an empty answer.

``checklist_baseline: empty_answer`` (CUBE_METHOD.md section 14) changes no
prompt of a ``checklist`` judge: it adds one reading per (question, dimension,
rubric item) of an *empty* answer and reads each item's P(yes) against it
(``cube_ray.protocols.contrast``) before the weighted sum
(``checklist_score``). So a finished ``checklist`` run of
``benchmarks/qualification.py`` (its ``scores.jsonl`` keeps every item's P(yes)
in ``raw``, to 3 decimals) needs only those empty-answer readings — 10 prompts
a record for the two demo dimensions instead of the run's ~170 — to give the
baseline's scores:

1. the empty-answer prompts are rendered by the ``JudgeStage`` of the same
   judge, nonce, rubrics and template as the run (``_item_prompts``, the
   stage's own code) and read by the same engine call (``yes_no``);
2. every stored score is recomputed as ``checklist_score([contrast(p_i, b_i)],
   w)``, its ``raw`` extended as the stage writes it;
3. the result is a ``--work`` folder of ``benchmarks/qualification.py``
   (settings ``baseline: empty_answer``, every record done), so
   ``qualification.py --protocol checklist --baseline empty_answer --work OUT``
   prints its certificate without judging anything again.

The only difference from a fresh baseline run is the 3-decimal rounding of the
stored P(yes) (at most 0.0007 of an item's contrast near P = 0.78: under 0.01
of a score).

Usage::

    OMP_NUM_THREADS=2 PYTHONPATH=. .venv/bin/python benchmarks/checklist_rebase.py \
        --work runs/qwen-checklist --out-work runs/qwen-checklist-baseline
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from benchmarks.qualification import (  # noqa: E402 (after the path insert)
    SCORES,
    SETTINGS,
    judge_setup,
    question_for,
    read_done,
)


def p_yes(raw: str) -> list[float]:
    """The item readings a checklist row's ``raw`` keeps.

    >>> p_yes("P(yes) 0.798 0.777 0.5")
    [0.798, 0.777, 0.5]
    """
    head = raw.split(";")[0]
    if not head.startswith("P(yes) "):
        msg = f"not a checklist reading: {raw!r}"
        raise ValueError(msg)
    return [float(x) for x in head.removeprefix("P(yes) ").split()]


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("--work", type=Path, required=True, help="a checklist run")
    ap.add_argument("--out-work", type=Path, required=True)
    args = ap.parse_args(argv)

    from cube_ray.engines import build_engine
    from cube_ray.engines.base import BorrowedEngine, JudgeItem
    from cube_ray.engines.threads import apply_engine_threads
    from cube_ray.prompts import yes_no_words
    from cube_ray.protocols import checklist_score, contrast
    from cube_ray.stages import JudgeStage
    from tests.qualification_data import guangdong_documents

    settings = json.loads((args.work / SETTINGS).read_text(encoding="utf-8"))
    if settings.get("protocol") != "checklist" or settings.get("baseline") != "none":
        print(f"error: {args.work} is not a checklist run without baseline")
        return 2
    done = read_done(args.work / SCORES)
    cfg, rubrics, template, dims = judge_setup(
        "embedded", settings["dimensions"], None, protocol="checklist"
    )
    by_id = {d.doc_id: d for d in guangdong_documents(Path(settings["corpus"]))}
    apply_engine_threads(cfg)
    engine: Any = build_engine(cfg)
    stage = JudgeStage(
        "qwen",
        cfg,
        rubrics=rubrics,
        template=template,
        nonce=settings["nonce"],
        engine_factory=lambda _cfg: BorrowedEngine(engine),
    )
    base: dict[tuple[str, str], list[float]] = {}
    try:
        for n, (q, rec) in enumerate(done.items(), 1):
            question = rec["original"][0]
            doc = by_id[q]
            prompts: list[str] = []
            for d in dims:
                item = JudgeItem(
                    document=doc.text,
                    question=question_for(doc),
                    answer="",
                    dimension=d,
                    rubric=rubrics[d],
                )
                prompts += stage._item_prompts(item, "")
            got = stage._engine.yes_no(
                prompts, words=yes_no_words(stage._template), mode=stage._mode
            )
            if any(r.status != "ok" or r.score is None for r in got):
                print(f"error: record {q}: an empty-answer reading failed: {got}")
                return 1
            k = len(got) // len(dims)
            for i, d in enumerate(dims):
                base[(q, d)] = [float(r.score) for r in got[i * k : (i + 1) * k]]
            print(f"record {n}/{len(done)} {q} ({question['system']})", file=sys.stderr)
    finally:
        stage.close()
        engine.close()

    weights = {
        d: [i.weight for i in stage._checklists[d].items] for d in dims
    }  # the rubric items' weights, as the stage sums them
    args.out_work.mkdir(parents=True, exist_ok=True)
    out = {**settings, "baseline": "empty_answer"}
    (args.out_work / SETTINGS).write_text(json.dumps(out, ensure_ascii=False, indent=1))
    lines = []
    for q, rec in done.items():
        new = dict(rec)
        for part in ("original", "faulted"):
            rows = []
            for s in rec[part]:
                b = base[(q, s["dimension"])]
                p = p_yes(s["raw"])
                score = checklist_score(
                    [contrast(x, y) for x, y in zip(p, b, strict=True)],
                    weights[s["dimension"]],
                )
                raw = s["raw"] + "; empty answer " + " ".join(f"{x:.3f}" for x in b)
                rows.append({**s, "score": score, "raw": raw})
            new[part] = rows
        lines.append(json.dumps(new, ensure_ascii=False) + "\n")
    (args.out_work / SCORES).write_text("".join(lines), encoding="utf-8")
    print(f"wrote {len(lines)} records to {args.out_work / SCORES}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
