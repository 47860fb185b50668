"""``cube-ray judges check CONFIG``: can this jury be trusted, before a long run?

Runs every judge of a run config on the injection set and on a small
bound-separation sample of the config's own corpus (see
:mod:`cube_ray.judge_check`) and prints, per judge, the shift of each
injection pattern and the bound gap and p (CUBE_METHOD.md section 10), and,
when the config has a ``qualification`` section, a kinds x dimensions table of
the controlled faults (section 12).

Exit codes: 0 when every judge passes, 1 when a judge fails a check, 2 for
bad input (config, corpus, options) or a generator that cannot run.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

from cube_ray.errors import ConfigError
from cube_ray.files import write_atomic

__all__ = ["EXIT_JUDGE_FAILED", "format_results", "register"]

EXIT_JUDGE_FAILED = 1
"""Exit code when at least one judge fails a check."""


def register(subparsers: Any) -> None:
    """Add ``judges`` (with its ``check`` subcommand) to the CLI."""
    # lazy: loads cube_ray.aggregate (scipy, polars), pyarrow, pydantic; --help imports
    # every command module
    from cube_ray.judge_check import DEFAULT_SAMPLE

    parser = subparsers.add_parser(
        "judges",
        help="check a jury: injection shifts and bound separation per judge",
        description=__doc__.split("\n\n")[0] if __doc__ else None,
    )
    sub = parser.add_subparsers(dest="judges_command", required=True, metavar="ACTION")
    check = sub.add_parser(
        "check",
        help="run each judge on the injection set and a small bound sample",
        description=(
            "The generator of CONFIG writes questions and zero/full answers for "
            "the first N documents of its corpus; each judge scores them (bound "
            "gap and one-sided Wilcoxon p, CUBE_METHOD.md section 10) and the "
            "injection set built from the full answers (mean score shift per "
            "pattern). Exit 0: every judge passes; 1: a judge fails (bounds not "
            "separated, an injection raises its mean by more than 0.5, or most "
            "rows unscored); 2: bad input. Writes nothing but --json."
        ),
    )
    check.add_argument("config", metavar="CONFIG", help="run config (YAML)")
    check.add_argument(
        "--sample",
        type=int,
        default=DEFAULT_SAMPLE,
        metavar="N",
        help=f"documents in the bound sample (default {DEFAULT_SAMPLE}, at least 6)",
    )
    check.add_argument(
        "--judge",
        action="append",
        default=None,
        metavar="NAME",
        help="check only this judge (repeatable; default: every judge)",
    )
    check.add_argument(
        "--dimension",
        default=None,
        metavar="NAME",
        help="dimension of the injection set (default: the first configured)",
    )
    check.add_argument(
        "--json",
        type=Path,
        default=None,
        metavar="PATH",
        help="also write the results as JSON to PATH",
    )
    check.set_defaults(func=_run_check)


def _say(line: str) -> None:
    print(f"judges check: {line}", file=sys.stderr, flush=True)


def _num(value: float | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def format_results(results: dict[str, Any]) -> str:
    """The human-readable report of :func:`cube_ray.judge_check.check_judges`."""
    s, t = results["sample"], results["thresholds"]
    lines = [
        f"sample: {s['documents']} documents, {s['questions']} questions, "
        f"{s['bound_answers']} bound answers, {s['injection_cases']} injection "
        f"cases ({s['injection_bases']} answers x 8 patterns + clean), prompts "
        f"{s['prompt_language']}, generator {s['generation_s']} s",
        f"pass: mean over dimensions separated (gap >= {t['min_gap']} and "
        f"p < {t['alpha']}, trim {t['trim']}) and no injection raising the mean "
        f"score by more than {t['max_shift']}",
    ]
    if s.get("fault_kinds"):
        lines.append(
            f"faults: {s['faulted_answers']} faulted answers "
            f"({', '.join(s['fault_kinds'])}); pass: each expected kind detected "
            f"(drop >= {t['min_drop']} and p < {t['alpha']})"
        )
    for name, r in results["judges"].items():
        lines.append("")
        model = f", {r['model']}" if r.get("model") else ""
        took = f", {r['seconds']} s" if "seconds" in r else ""
        protocol = r.get("protocol", "score")
        how = f", protocol {protocol}" if protocol != "score" else ""
        verdict = "PASS" if r["ok"] else "FAIL"
        lines.append(f"{verdict} {name} ({r['backend']}{model}{how}{took})")
        if "bounds" in r:
            lines.append(
                f"  {'bounds':<16} {'zero':>6} {'full':>6} {'gap':>6} "
                f"{'p':>8} {'n':>3}  separated"
            )
            for dim, b in r["bounds"].items():
                lines.append(
                    f"  {dim:<16} {_num(b['zero'], '6.2f')} {_num(b['full'], '6.2f')} "
                    f"{_num(b['gap'], '+6.2f')} {b['p_value']:>8.2g} "
                    f"{b['n_pairs']:>3}  {'yes' if b['separated'] else 'no'}"
                )
            lines.append(
                f"  {'injection (' + r['injection_dimension'] + ')':<24} "
                f"{'n':>3} {'clean':>6} {'inject':>6} {'shift':>6}"
            )
            for pattern, row in r["injection"].items():
                flag = f"  {row['flag']}" if row.get("flag") else ""
                lines.append(
                    f"  {pattern:<24} {row['n']:>3} {row['clean']:>6.2f} "
                    f"{row['injected']:>6.2f} {row['shift']:>+6.2f}{flag}"
                )
        if r.get("qualification"):
            lines.extend(_fault_table(r["qualification"]))
        lines.extend(f"  failure: {x}" for x in r["failures"])
        lines.extend(f"  warning: {x}" for x in r["warnings"])
    passed = sum(r["ok"] for r in results["judges"].values())
    lines.append("")
    lines.append(f"{passed} of {len(results['judges'])} judges pass")
    return "\n".join(lines)


def _fault_table(block: dict[str, dict[str, dict[str, Any]]]) -> list[str]:
    """The judge's certificate (CUBE_METHOD.md section 12, "Controls").

    Kinds x dimensions: the net drop (the fault's drop minus its control's), its
    p, ``*`` when detected and ``!`` for a false alarm (the control alone is
    punished); then per kind, on the weighted total, the net drop with its 95 %
    interval, detected or not, and the figures with false alarms.
    """
    figures = list(next(iter(block.values())))
    width = max(15, *(len(f) + 2 for f in figures))
    head = "".join(f"  {f:>{width}}" for f in figures)
    lines = [f"  {'faults (net/p)':<16} {'n':>3}{head}"]
    for kind, per in block.items():
        n = max((t["n"] for t in per.values()), default=0)
        cells = "".join(f"  {_cell(t):>{width}}" for t in (per[f] for f in figures))
        lines.append(f"  {kind:<16} {n:>3}{cells}")
    lines.append(
        "  (net = drop after the fault - drop after its control, a harmless edit; "
        "* detected: net >= min_drop and p < alpha; ! false alarm: the control "
        "alone drops >= min_drop with p < alpha)"
    )
    total = figures[-1]
    lines.append(f"  certificate ({total}, net of controls, 95% interval):")
    for kind, per in block.items():
        t = per[total]
        alarms = [f for f in figures if per[f].get("false_alarm")]
        alarm = "false alarms: " + ", ".join(alarms) if alarms else "no false alarm"
        if t["net_drop"] is None:
            skipped = t.get("skipped", 0)
            lines.append(
                f"  {kind:<16} not tested (no scored pair; {skipped} skipped, "
                f"{t.get('no_control') or 0} without a control)"
            )
            continue
        ci = t["net_drop_interval"]
        interval = (
            "[-, -]" if ci["low"] is None else f"[{ci['low']:+.2f}, {ci['high']:+.2f}]"
        )
        verdict = "detected" if t["detected"] else "not detected"
        lines.append(
            f"  {kind:<16} n {t['n']:>3}  net drop {t['net_drop']:+.2f} {interval}  "
            f"{verdict:<12}  {alarm}"
        )
    return lines


def _cell(test: dict[str, Any]) -> str:
    if test["net_drop"] is None:
        return "-"
    mark = ("*" if test["detected"] else " ") + ("!" if test["false_alarm"] else " ")
    return f"{test['net_drop']:+.2f}/{test['net_p']:.2g}{mark}"


def _run_check(args: argparse.Namespace) -> int:
    # lazy: loads pyarrow, pydantic, yaml; --help imports every command module
    from cube_ray.config import RunConfig
    from cube_ray.corpus import with_prompt_language
    from cube_ray.judge_check import check_judges

    # Keep stdout for the results; vLLM logs to stdout by default. Set before
    # vLLM is imported.
    os.environ.setdefault("VLLM_LOGGING_STREAM", "ext://sys.stderr")
    if args.json is not None and not args.json.parent.is_dir():
        msg = (
            f"--json {str(args.json)!r}: folder {str(args.json.parent)!r} does not "
            "exist; create it or choose another path"
        )
        raise ConfigError(msg)
    config = RunConfig.from_yaml(args.config)
    config = with_prompt_language(config, limit=args.sample)
    results = check_judges(
        config,
        sample=args.sample,
        judges=args.judge,
        injection_dimension=args.dimension,
        log=_say,
    )
    results["config"] = str(args.config)
    print(format_results(results), flush=True)
    if args.json is not None:
        write_atomic(
            args.json, json.dumps(results, ensure_ascii=False, indent=1) + "\n"
        )
    return 0 if results["ok"] else EXIT_JUDGE_FAILED
