"""Controls in judge qualification, validated by simulation (CUBE_METHOD.md §12).

Real Guangdong records (the first ``--records`` documents in the seeded order
of section 11; the package's 120-record sample when shared/ is absent), one
answer per document, its faults and their controls exactly as a run builds
them (``cube_ray.qualification._table.fault_rows``), scored by four synthetic
judges on the four dimensions, and tested by the run's statistics
(``cube_ray.aggregate.fault_detection``: net drop, control drop, intervals):

- ``oracle``: the question's base score (5-9) plus noise (-1, 0, +1) for the
  original and every control; 3 points less for a faulted answer. It must be
  detected on every kind that can be tested, with no false alarm;
- ``length``: ``min(10, len(answer) / 25)``: the score follows the length.
  Detected on no kind net of controls;
- ``any_edit``: 9 for the original exactly as written, 6 for any edit.
  Detected on no kind, and a false alarm on every kind tested;
- ``blind``: the base score plus noise, never the answer. Detected on at most
  ``alpha`` of the kinds tested, over ``--seeds`` seeds (the seed of the faults,
  the controls and the noise).

Answers (``--style``): ``composed`` is ``compose_answer`` (a guide-reading
answer built from every field: each sentence carries a fact, so an omission
has no fact-free text to remove and is skipped for want of a control);
``brief`` is two sentences of facts and a courtesy closing (as chat models
write), where the omission's control removes the closing. A kind is *tested*
when at least ``MIN_NONZERO_PAIRS`` (6) pairs were scored.

Pure CPU, no model, a few seconds per seed: the figures are counts, not
timings. Usage::

    PYTHONPATH=. .venv/bin/python benchmarks/qualification_controls.py \\
        --records 50 --seeds 20 --style composed --out runs/controls.json
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

RECORDS = REPO.parent / "shared" / "data" / "guangdong_service_items" / "records.jsonl"
SAMPLE = REPO / "examples" / "data" / "guangdong_sample.jsonl"
DIMS = ("relevance", "specificity", "completeness", "quality")
JUDGES = ("oracle", "length", "any_edit", "blind")
MIN_DROP = 0.5
ALPHA = 0.05
CLOSING = (
    "如您还有其他疑问，欢迎随时咨询相关部门，我们将竭诚为您服务，祝您办事顺利、"
    "生活愉快！"
)
"""A courtesy closing with no fact of any guide (the ``brief`` answers')."""

Scorer = Callable[[str, str, str, str, random.Random], float]
"""``(question_id, dimension, answer, original, rng) -> score``."""


def _base(question_id: str, dimension: str) -> int:
    digest = hashlib.sha256(f"{question_id}:{dimension}".encode()).digest()
    return 5 + digest[0] % 5


def _clip(x: float) -> float:
    return float(min(10.0, max(0.0, x)))


def length(q: str, d: str, answer: str, original: str, rng: random.Random) -> float:
    """The score follows the answer's length."""
    return _clip(len(answer) / 25.0)


def any_edit(q: str, d: str, answer: str, original: str, rng: random.Random) -> float:
    """9 for the original as written, 6 for any edit."""
    return 9.0 if answer == original else 6.0


def blind(q: str, d: str, answer: str, original: str, rng: random.Random) -> float:
    """The question's base score plus noise; never the answer."""
    return _clip(_base(q, d) + rng.choice([-2, -1, 0, 0, 1, 2]))


def brief_answer(doc: Any) -> str | None:
    """Two sentences of facts and :data:`CLOSING`; None without the fields."""
    from cube_ray.qualification._document import strip_label

    name, agency = doc.fields.get("事项名称"), doc.fields.get("实施机构")
    limit = doc.fields.get("承诺办结时限") or doc.fields.get("法定办结时限")
    if not (name and agency and limit):
        return None
    return (
        f"“{strip_label(name)}”由{strip_label(agency)}负责办理。"
        f"承诺办结时限为{strip_label(limit)}。{CLOSING}"
    )


def simulate(
    docs: Sequence[Any], *, style: str, seed: int, judges: Sequence[str] = JUDGES
) -> dict[str, Any]:
    """One study: faults and controls of ``docs``' answers, scored and tested.

    Returns ``{"built": kind -> pairs, "judges": judge -> kind -> test}`` (the
    weighted total's test of :func:`cube_ray.aggregate.fault_detection`).
    """
    import polars as pl

    from cube_ray import schema
    from cube_ray.aggregate import fault_detection
    from cube_ray.qualification import KINDS, compose_answer, is_control
    from cube_ray.qualification._table import fault_rows

    items = []
    for doc in docs:
        answer = compose_answer(doc) if style == "composed" else brief_answer(doc)
        if answer:
            items.append((doc.doc_id, doc.doc_id, answer, doc))
    rows = fault_rows(items, donors=list(docs), kinds=KINDS, seed=seed)
    originals = {q: a for q, _, a, _ in items}
    rng = random.Random(seed)

    def oracle_score(
        q: str, d: str, answer: str, original: str, r: random.Random
    ) -> float:
        """Lowers faulted answers only: it knows which edits keep the facts."""
        faulted = answer != original and not control_of.get((q, answer), False)
        return _clip(_base(q, d) + r.choice([-1, 0, 1]) - (3 if faulted else 0))

    control_of = {
        (r[schema.QUESTION_ID], r["faulted"]): is_control(r["kind"])
        for r in rows
        if r[schema.STATUS] == schema.STATUS_OK
    }
    scorers: dict[str, Scorer] = {
        "oracle": oracle_score,
        "length": length,
        "any_edit": any_edit,
        "blind": blind,
    }
    original_rows, edited_rows = [], []
    for judge in judges:
        score = scorers[judge]
        for q, answer in originals.items():
            for d in DIMS:
                original_rows.append(
                    (q, schema.FULL, judge, d, score(q, d, answer, answer, rng))
                )
        for r in rows:
            if r[schema.STATUS] != schema.STATUS_OK:
                continue
            q = r[schema.QUESTION_ID]
            for d in DIMS:
                s = score(q, d, r["faulted"], originals[q], rng)
                edited_rows.append((q, r["kind"], judge, d, s))
    cols = [
        schema.QUESTION_ID,
        schema.SYSTEM,
        schema.JUDGE,
        schema.DIMENSION,
        schema.SCORE,
    ]
    frame_schema = {c: pl.String for c in cols} | {schema.SCORE: pl.Float64}
    faults = pl.DataFrame(
        [{k: r[k] for k in (schema.QUESTION_ID, "kind", schema.STATUS)} for r in rows],
        schema={schema.QUESTION_ID: pl.String, "kind": pl.String, "status": pl.String},
    )
    detection = fault_detection(
        pl.DataFrame(original_rows, schema=frame_schema, orient="row"),
        pl.DataFrame(edited_rows, schema=frame_schema, orient="row"),
        faults,
        weights={j: {d: 1.0 / len(DIMS) for d in DIMS} for j in judges},
        min_drop=MIN_DROP,
        alpha=ALPHA,
        seed=seed,
    )
    out: dict[str, dict[str, Any]] = {j: {} for j in judges}
    for row in detection:
        if row["figure"] == "weighted":
            out[row[schema.JUDGE]][row["kind"]] = row
    built = {
        k: sum(r["kind"] == k and r[schema.STATUS] == schema.STATUS_OK for r in rows)
        for k in KINDS
    }
    return {"answers": len(items), "built": built, "judges": out}


def summarize_seeds(studies: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Per judge over the studies: kinds tested, detected, false alarms."""
    from cube_ray.aggregate import MIN_NONZERO_PAIRS

    out: dict[str, Any] = {}
    for judge in studies[0]["judges"]:
        tested = detected = alarms = 0
        per_kind: dict[str, list[int]] = {}
        for study in studies:
            for kind, t in study["judges"][judge].items():
                if t["n"] < MIN_NONZERO_PAIRS:
                    continue
                tested += 1
                detected += bool(t["detected"])
                alarms += bool(t["false_alarm"])
                counts = per_kind.setdefault(kind, [0, 0, 0])
                counts[0] += 1
                counts[1] += bool(t["detected"])
                counts[2] += bool(t["false_alarm"])
        out[judge] = {
            "tests": tested,
            "detected": detected,
            "detected_share": round(detected / tested, 3) if tested else None,
            "false_alarms": alarms,
            "per_kind": {
                k: {"tests": c[0], "detected": c[1], "false_alarms": c[2]}
                for k, c in per_kind.items()
            },
        }
    return out


def markdown(first: dict[str, Any], over: dict[str, Any], seeds: int) -> str:
    """The first study's certificates and the rates over the seeds."""
    kinds = list(first["built"])
    lines = [
        "| judge | " + " | ".join(kinds) + f" | over {seeds} seeds |",
        "|---|" + "---|" * (len(kinds) + 1),
    ]
    for judge, tests in first["judges"].items():
        cells = []
        for kind in kinds:
            t = tests.get(kind)
            if t is None or t["n"] < 6:
                cells.append(f"not tested (n = {0 if t is None else t['n']})")
                continue
            ci = t["net_drop_interval"]
            verdict = "**detected**" if t["detected"] else "not detected"
            alarm = ", false alarm" if t["false_alarm"] else ""
            cells.append(
                f"net {t['net_drop']:+.2f} [{ci['low']:+.2f}, {ci['high']:+.2f}], "
                f"n = {t['n']}, {verdict}{alarm}"
            )
        o = over[judge]
        rate = (
            f"{o['detected']}/{o['tests']} detected, {o['false_alarms']} false alarms"
        )
        lines.append(f"| {judge} | " + " | ".join(cells) + f" | {rate} |")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the simulation; print JSON and a Markdown table."""
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("--records", type=int, default=50)
    ap.add_argument("--seeds", type=int, default=20)
    ap.add_argument("--style", choices=("composed", "brief"), default="composed")
    ap.add_argument("--corpus", type=Path, default=None, help="records.jsonl")
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args(argv)

    from cube_ray.qualification import seeded_sample
    from tests.qualification_data import guangdong_documents

    corpus = args.corpus or (RECORDS if RECORDS.is_file() else SAMPLE)
    docs = guangdong_documents(corpus)
    by_id = {d.doc_id: d for d in docs}
    studies = []
    for seed in range(args.seeds):
        chosen = seeded_sample(((d, d) for d in by_id), size=args.records, seed=seed)
        studies.append(
            simulate([by_id[q] for q in chosen], style=args.style, seed=seed)
        )
    over = summarize_seeds(studies)
    result = {
        "corpus": str(corpus),
        "records": args.records,
        "seeds": args.seeds,
        "style": args.style,
        "min_drop": MIN_DROP,
        "alpha": ALPHA,
        "first_study": studies[0],
        "over_seeds": over,
    }
    text = json.dumps(result, ensure_ascii=False, indent=1, default=str)
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text + "\n", encoding="utf-8")
    print(text)
    print()
    print(markdown(studies[0], over, args.seeds))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
