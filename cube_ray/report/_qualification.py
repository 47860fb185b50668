"""The report's section on controlled faults (CUBE_METHOD.md section 12).

Per judge its certificate: per fault kind, on the weighted total, the drop
after the fault, the drop after its control (a harmless edit that keeps every
fact) and the net drop, each with its 95 % interval, detected or not, and the
false alarms; then a kinds x figures table of the net drops; and sentences
naming the faults the judge does not notice ("misses faults") and the harmless
edits it punishes ("punishes harmless edits"). Read from
``judges.<judge>.qualification`` of the summary; nothing is computed here.
"""

from __future__ import annotations

from cube_ray.aggregate import FALSE_ALARM, Qualification
from cube_ray.report._data import RunData
from cube_ray.report._format import interval_text, plain_list
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


def _signed(value: float | None) -> str:
    return "n/a" if value is None else f"{value:+.2f}"


def _drop(value: float | None, test: Qualification, which: str) -> str:
    ci = getattr(test, which)
    return (
        f"{_signed(value)} {interval_text(ci, 2)}" if ci is not None else _signed(value)
    )


def _certificate(judge: str, block: dict[str, dict[str, Qualification]]) -> Table:
    """Per kind, on the weighted total: drops, net drop, verdict, false alarms."""
    rows = []
    for kind, tests in block.items():
        figures = list(tests)
        t = tests[figures[-1]]
        alarms = [f for f in figures if tests[f].false_alarm]
        if t.net_drop is None:
            verdict = "not tested" if t.control_drop is None else "missed"
        else:
            verdict = "detected" if t.detected else "missed"
        rows.append(
            [
                kind,
                str(t.n),
                f"{t.skipped} ({t.no_control or 0} without control)",
                _drop(t.drop, t, "drop_interval"),
                _drop(t.control_drop, t, "control_drop_interval"),
                _drop(t.net_drop, t, "net_drop_interval"),
                "n/a" if t.net_p is None else f"{t.net_p:.2g}",
                verdict,
                ", ".join(alarms) or "none",
            ]
        )
    return Table(
        [
            "fault",
            "n",
            "skipped",
            "drop",
            "control drop",
            "net drop",
            "p (net)",
            "verdict",
            "false alarms",
        ],
        rows,
        caption=f"{judge}: certificate on the weighted total (drops in points, "
        "95 % intervals over questions)",
        anchor=f"certificate-{judge}",
        numeric=frozenset({1}),
    )


def qualification_section(run: RunData) -> Section | None:
    """Per judge its certificate: which faults it notices beyond harmless edits."""
    blocks = {j: b for j in run.judges if (b := run.judge(j).qualification)}
    if not blocks:
        return None
    sec = Section("qualification", "Judge qualification (controlled faults)")
    sec.blocks.append(
        Para(
            "Each judge scored copies of full-bound answers with exactly one fault "
            "each, and a control of each: an edit of the same answer, at the same "
            "place and of about the same size, that keeps every fact (the same "
            "number written another way, a name set in quotes, a permission "
            "restated, a supported sentence appended). The net drop is the drop "
            "after the fault minus the drop after its control, so a judge that "
            "marks down any change, or scores length, gains nothing. A fault is "
            "detected when the net drop is at least min_drop points and a one-sided "
            "Wilcoxon test gives p < alpha; a false alarm is a control alone "
            "marked down as much (CUBE_METHOD.md section 12; the qualification/ "
            "table holds every edited answer the judges were shown)."
        )
    )
    for judge, block in blocks.items():
        sec.blocks.append(_certificate(judge, block))
        figures = list(next(iter(block.values())))
        rows = []
        for kind, tests in block.items():
            cells = []
            for fig in figures:
                t = tests.get(fig)
                if t is None or t.net_drop is None or t.net_p is None:
                    cells.append("—")
                    continue
                verdict = "detected" if t.detected else "missed"
                alarm = ", false alarm" if t.false_alarm else ""
                cells.append(f"{t.net_drop:+.2f} (p {t.net_p:.2g}) {verdict}{alarm}")
            n = max((t.n for t in tests.values()), default=0)
            rows.append([kind, str(n), *cells])
        sec.blocks.append(
            Table(
                ["fault", "n", *figures],
                rows,
                caption=f"{judge}: net drop per figure, (original − faulted) − "
                "(original − control)",
                anchor=f"qualification-{judge}",
                numeric=frozenset({1}),
            )
        )
        flags = [f for f in run.summary.flags if f.judge == judge and f.figure]
        missed = sorted(
            {
                str(f.figure).split(".")[1]
                for f in flags
                if f.flag.startswith(_MISSES) and str(f.figure).count(".") == 2
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
        alarms = sorted(
            {
                str(f.figure).split(".")[1]
                for f in flags
                if f.flag.startswith(FALSE_ALARM) and str(f.figure).count(".") == 2
            }
        )
        if alarms:
            sec.blocks.append(
                Para(
                    f"{judge} punishes harmless edits (the controls of "
                    f"{plain_list(alarms)}): its drops after those faults say "
                    "little on their own.",
                    "warn",
                )
            )
    return sec
