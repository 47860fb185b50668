"""The report's section on controlled faults (CUBE_METHOD.md section 12).

Per judge, a kinds x figures table of the mean drop, its p-value and whether
the fault was detected, read from ``judges.<judge>.qualification`` of the
summary, and one sentence naming the faults the judge does not notice (its
"misses faults" flags). Nothing is computed here.
"""

from __future__ import annotations

from cube_ray.report._data import RunData
from cube_ray.report._format import plain_list
from cube_ray.report._render import Para, Section, Table

__all__ = ["qualification_section"]

_FAULT_WORDS = {
    "number": "a changed number (time limit, fee, date, phone)",
    "entity": "a swapped name (agency, item, material, place)",
    "negation": "a flipped permission or obligation",
    "omission": "a dropped part of the answer",
    "unsupported": "an added claim the guide does not make",
}
"""What each fault kind is, for a reader."""

_MISSES = "misses faults"
"""The aggregation's flag of a missed expected kind."""


def qualification_section(run: RunData) -> Section | None:
    """Per judge, kinds x figures: did it notice the controlled faults?"""
    blocks = {j: b for j in run.judges if (b := run.judge(j).qualification)}
    if not blocks:
        return None
    sec = Section("qualification", "Judge qualification (controlled faults)")
    sec.blocks.append(
        Para(
            "Each judge scored copies of full-bound answers with exactly one fault "
            "each. A fault is detected when the judge scores the faulted copy at "
            "least min_drop points lower on average and a one-sided Wilcoxon test "
            "gives p < alpha; each cell shows the mean drop, p and whether it was "
            "detected (CUBE_METHOD.md section 12; the qualification/ table holds "
            "every faulted answer the judges were shown)."
        )
    )
    for judge, block in blocks.items():
        figures = list(next(iter(block.values())))
        rows = []
        for kind, tests in block.items():
            cells = []
            for fig in figures:
                t = tests.get(fig)
                if t is None or t.drop is None or t.p_value is None:
                    cells.append("—")
                    continue
                verdict = "detected" if t.detected else "missed"
                cells.append(f"{t.drop:+.2f} (p {t.p_value:.2g}) {verdict}")
            n = max((t.n for t in tests.values()), default=0)
            skipped = max((t.skipped for t in tests.values()), default=0)
            rows.append([kind, str(n), str(skipped), *cells])
        sec.blocks.append(
            Table(
                ["fault", "n", "skipped", *figures],
                rows,
                caption=f"{judge}: mean drop score(original) − score(faulted)",
                anchor=f"qualification-{judge}",
                numeric=frozenset({1, 2}),
            )
        )
        missed = sorted(
            {
                str(f.figure).split(".")[1]
                for f in run.summary.flags
                if f.judge == judge
                and f.flag.startswith(_MISSES)
                and str(f.figure or "").count(".") == 2
            }
        )
        words = [_FAULT_WORDS.get(k, k) for k in missed]
        sec.blocks.append(
            Para(
                f"{judge} does not notice {plain_list(words)}."
                if words
                else f"{judge} notices every fault its dimensions are expected to.",
                "warn" if words else "text",
            )
        )
    return sec
