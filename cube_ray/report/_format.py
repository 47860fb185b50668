"""Formatting shared by the report's sections: numbers, intervals, the jury."""

from __future__ import annotations

from collections.abc import Sequence

from cube_ray.aggregate import (
    BOUNDS_NOT_SEPARATED,
    NO_CERTIFICATE,
    NO_CERTIFIED_JUDGE,
    UNQUALIFIED_JUDGE,
    FigureInterval,
    Qualification,
    Reason,
    incomplete_reasons,
)
from cube_ray.report._data import RunData, num
from cube_ray.report._words import plural

__all__ = [
    "CAUGHT_WORDS",
    "NO_VERDICT",
    "caught_kinds",
    "certificate_text",
    "deterministic_jury_line",
    "fmt",
    "interval_text",
    "jury_names",
    "jury_sentence",
    "left_out",
    "plain_list",
    "short_reason",
]

NO_VERDICT = "no verdict"
"""What the headline shows instead of a number when no judge separates the bounds."""


CAUGHT_WORDS = {
    "number": "changed numbers",
    "entity": "swapped names",
    "negation": "flipped permissions",
    "omission": "cut answers",
    "unsupported": "added claims",
}
"""Each fault kind (CUBE_METHOD.md section 12) in a few words, in the order of
``cube_ray.qualification.KINDS``."""
_CERTIFICATE_CODES = frozenset({NO_CERTIFICATE, UNQUALIFIED_JUDGE})


def caught_kinds(block: dict[str, dict[str, Qualification]] | None) -> list[str]:
    """The fault kinds a judge was shown to catch (its certificate).

    Detected net of the control on some dimension or on the weighted total.

    >>> hit = Qualification(n=8, skipped=0, drop=2.0, p_value=0.01, detected=True)
    >>> miss = Qualification(n=8, skipped=0, drop=0.1, p_value=0.4, detected=False)
    >>> caught_kinds({"negation": {"relevance": miss},
    ...               "number": {"relevance": hit, "weighted": miss}})
    ['number']
    """
    order = list(CAUGHT_WORDS)
    found = [
        kind
        for kind, tests in (block or {}).items()
        if any(t.detected for t in tests.values())
    ]
    return sorted(found, key=lambda k: order.index(k) if k in order else len(order))


def certificate_text(run: RunData, judge: str) -> str | None:
    """``certified here: changed numbers, ...``: what a judge's certificate shows.

    None without qualification, or for a judge that holds no certificate.
    """
    figures = run.judge(judge)
    if not figures.certified:
        return None
    kinds = caught_kinds(figures.qualification)
    words = ", ".join(CAUGHT_WORDS.get(k, k) for k in kinds)
    return f"certified here: {words or 'no fault kind tested'}"


def jury_names(run: RunData, judges: Sequence[str]) -> str:
    """The judges, each with what its certificate shows on this run.

    ``reference (certified here: changed numbers, swapped names)``; a judge
    without qualification is named alone.
    """
    out = []
    for judge in judges:
        cert = certificate_text(run, judge)
        out.append(judge if cert is None else f"{judge} ({cert})")
    return ", ".join(out)


def deterministic_jury_line(run: RunData) -> str | None:
    """The console's line when no LLM judge holds a certificate on this run.

    The headline is then a deterministic jury's (or none), said plainly.
    None when the run has no qualification or an LLM judge is certified.
    """
    qualified = [j for j in run.judges if run.judge(j).certified is not None]
    if not qualified:
        return None
    llm = [j for j in run.judges if run.judge_kind(j) == "LLM"]
    if not llm or any(run.judge(j).certified for j in llm):
        return None
    used = {j for system in run.systems for j in run.headline_judges(system)}
    headline = [j for j in run.judges if j in used]
    uncertified = [j for j in headline if j in llm]
    if uncertified:  # aggregate.require_qualification is off
        jury = (
            f"the headline still averages {', '.join(uncertified)} "
            "(aggregate.require_qualification is off)"
        )
    elif headline:
        jury = f"the headline's jury is deterministic ({', '.join(headline)}, no LLM)"
    else:
        jury = "no judge enters the headline"
    return (
        f"jury: no LLM judge holds a certificate on this run ({', '.join(llm)}); {jury}"
    )


def fmt(value: object, digits: int = 1) -> str:
    """A number for a table cell; ``n/a`` for null/NaN.

    >>> fmt(44.97416), fmt(None), fmt(0.75, 3)
    ('45.0', 'n/a', '0.750')
    """
    v = num(value)
    return "n/a" if v is None else f"{v:.{digits}f}"


def interval_text(ci: FigureInterval | None, digits: int = 1) -> str:
    """``[low, high]``, or ``n/a``.

    >>> interval_text(FigureInterval.of(1.0, 2.5)), interval_text(None)
    ('[1.0, 2.5]', 'n/a')
    """
    if ci is None or ci.low is None or ci.high is None:
        return "n/a"
    return f"[{ci.low:.{digits}f}, {ci.high:.{digits}f}]"


def plain_list(names: Sequence[str]) -> str:
    """``a``, ``a and b``, ``a, b and c``.

    >>> plain_list(["a"]), plain_list(["a", "b", "c"])
    ('a', 'a, b and c')
    """
    names = list(names)
    if len(names) <= 1:
        return "".join(names)
    return ", ".join(names[:-1]) + " and " + names[-1]


def _why(reason: Reason) -> str:
    """A recorded reason in words, with the test's p-value if they lack it."""
    text = reason.text
    # No gap: the test had no pairs, and its p = 1 says nothing.
    if reason.p_value is not None and reason.gap is not None and "p =" not in text:
        text += f" (one-sided Wilcoxon p = {fmt(reason.p_value, 3)})"
    return text


def left_out(run: RunData, system: str) -> list[tuple[str, Reason | None, str]]:
    """``(judge, recorded reason, why in words)`` per judge not in the headline."""
    used = set(run.headline_judges(system))
    recorded = run.excluded(system)
    out = []
    for judge in run.judges:
        if judge in used:
            continue
        reason = recorded.get(judge)
        if reason is not None:
            why = _why(reason)
        elif num(run.judge(judge).cube.get(system)) is None:
            why = "its CuBE is undefined (degenerate bounds or missing scores)"
        else:
            why = "not among the judges the summary used"
        out.append((judge, reason, why))
    return out


def short_reason(reason: Reason | None, why: str, *, missed: Sequence[str] = ()) -> str:
    """The console's one-line form of why a judge was left out.

    ``missed``: the ``<kind> on <figure>`` of the judge's "misses faults"
    flags, named after a certificate's refusal.

    >>> r = Reason(code="bounds_not_separated", text="bounds not separated: x",
    ...            gap=-0.14, p_value=0.999)
    >>> short_reason(r, r.text)
    'bounds not separated (gap -0.14 points, p = 0.999)'
    >>> r = Reason(code="misses_faults", text="misses faults: x")
    >>> short_reason(r, r.text, missed=["negation on relevance"])
    'misses faults (negation on relevance)'
    """
    short = why.split(":", 1)[0]
    if reason is not None and reason.code == UNQUALIFIED_JUDGE and missed:
        short += f" ({', '.join(missed)})"
    if (
        reason is not None
        and reason.code == BOUNDS_NOT_SEPARATED
        and reason.gap is not None
        and reason.p_value is not None
    ):
        short += f" (gap {fmt(reason.gap, 2)} points, p = {fmt(reason.p_value, 3)})"
    return short


def jury_sentence(run: RunData, system: str) -> str:
    """The headline's account of the jury, in words for a decision maker."""
    used = run.headline_judges(system)
    left = left_out(run, system)
    verdict = run.no_verdict(system)
    if verdict is not None and system in incomplete_reasons(run.summary):
        # Failed answers, not the jury: say what failed and how to finish.
        return (
            f"{system}: {NO_VERDICT} — {verdict.text}. Failed answers are left out "
            "of their set (CUBE_METHOD.md §10); with no usable answer in a bound, "
            "or from the system, there is no scale to place the system on, so no "
            "judge's CuBE is defined. Fix what made them fail (the run's warnings "
            "name the setting, e.g. the engine's timeout_s) and rerun with "
            "cube-ray run … --retry-failed."
        )
    if verdict is not None and verdict.code == NO_CERTIFIED_JUDGE:
        text = (
            f"{system}: {NO_VERDICT} — {verdict.text}. The judges that tell a "
            "grounded answer from no answer were not shown, on this run's "
            "controlled faults, to notice a wrong fact (CUBE_METHOD.md §12), and "
            "aggregate.require_qualification keeps such judges out of the headline."
        )
    elif verdict is not None:
        text = (
            f"{system}: {NO_VERDICT} — {verdict.text}. None of the judges scored "
            "answers written from the gold document clearly above answers written "
            "without any context, so the scale from 0 (no context) to 100 (gold "
            "document) has no meaning for this jury and no CuBE is shown."
        )
    else:
        named = [jury_names(run, [j]) for j in used]
        text = (
            f"{system}: the headline averages {plural(len(used), 'judge')}: "
            f"{plain_list(named)}."
        )
        for_certificate = [
            r is not None and r.code in _CERTIFICATE_CODES for _, r, _ in left
        ]
        if left and all(for_certificate):
            text += (
                " Left out because the headline keeps only judges shown, on this "
                "run's controlled faults, to notice a wrong fact "
                "(aggregate.require_qualification):"
            )
        elif left:
            text += (
                " Left out because a judge that cannot tell a grounded answer from "
                "no answer cannot place the system between the two"
                + (
                    ", or holds no certificate (aggregate.require_qualification):"
                    if any(for_certificate)
                    else ":"
                )
            )
    for judge, _, why in left:
        text += f" {judge}: {why}."
    return text
