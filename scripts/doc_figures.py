"""Regenerate every figure the docs quote from a command the tests can run.

A figure in README.md or docs/*.md sits between markers::

    <!-- fig:demo_prefill_tokens -->52,148<!-- /fig -->

(a multi-line figure, such as a dry run's table, has its markers on lines of
their own). Each name has one generator below, fed by ``cube-ray run CONFIG
--dry-run`` (the command a user runs, as a subprocess) and by the corpus the
config reads. Usage, from the repository root::

    python scripts/doc_figures.py --check   # exit 1 listing every drifted figure
    python scripts/doc_figures.py --write   # rewrite the drifted figures in place
    python scripts/doc_figures.py --list    # name, value and where each one is

Figures of a config whose data is absent (``conf/guangdong.yaml`` reads
``../shared/data``, which a clone does not have) are reported as skipped and
left as they are. ``tests/unit/test_doc_figures.py`` runs ``--check``.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOC_GLOBS = ("README.md", "docs/*.md")
MARKER = re.compile(
    r"<!-- fig:(?P<name>[a-z0-9_]+) -->(?P<value>.*?)<!-- /fig -->", re.S
)

DEMO = ROOT / "conf" / "demo.yaml"
GUANGDONG = ROOT / "conf" / "guangdong.yaml"
GUANGDONG_DATA = ROOT.parent / "shared" / "data" / "guangdong_service_items"
# conf/guangdong.yaml names an API judge's key variable; --dry-run checks that it
# is set and sends nothing, so a placeholder value is enough.
GUANGDONG_ENV = {"DEEPSEEK_API_KEY": "placeholder-for-dry-run"}

# The cost model's stated assumptions (docs/pipeline.md, "Cost model").
N_RECORDS = 2_000_000
N_DIMENSIONS = 4
N_VARIANTS = 2
QUESTION_TOKENS = 30  # the dry run's estimate of a generated question
ANSWER_TOKENS = 256  # and of an answer
PREFILL_TOK_S = 20_000  # one H100, a 7-9B model in vLLM, these batches
DECODE_TOK_S = 2_500


@dataclass(frozen=True)
class Row:
    """One stage line of a dry run's table."""

    stage: str
    engine: str
    calls: int
    prompt_tokens: int
    after_sharing: int | None


@dataclass(frozen=True)
class DryRun:
    """What ``cube-ray run CONFIG --dry-run`` printed."""

    table: str
    """The stage table as printed, from its header to its total line."""
    rows: list[Row]

    def row(self, stage: str) -> Row:
        """The row of one stage (``questions``, ``answers:zero``, ...)."""
        for r in self.rows:
            if r.stage == stage:
                return r
        msg = f"the dry run has no stage {stage!r}: {[r.stage for r in self.rows]}"
        raise KeyError(msg)

    def per_call(self, stage: str) -> float:
        """Prompt tokens per call of one stage."""
        r = self.row(stage)
        return r.prompt_tokens / r.calls


def dry_run(config: Path, env: dict[str, str] | None = None) -> DryRun:
    """Run ``cube-ray run CONFIG --dry-run`` and parse its stage table.

    Raises:
        RuntimeError: The command failed; its output is in the message.
    """
    proc = subprocess.run(
        [sys.executable, "-m", "cube_ray.cli", "run", str(config), "--dry-run"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={**os.environ, **(env or {}), "PYTHONPATH": str(ROOT)},
        timeout=600,
        check=False,
    )
    if proc.returncode != 0:
        msg = f"cube-ray run {config} --dry-run failed ({proc.returncode}):\n"
        raise RuntimeError(msg + proc.stdout + proc.stderr)
    return parse_dry_run(proc.stdout)


def parse_dry_run(text: str) -> DryRun:
    r"""The stage table of a dry run's output.

    >>> out = (
    ...     "stage                    engine                                  calls"
    ...     "   prompt tokens  after prefix sharing\n" + "-" * 108 + "\n"
    ...     "scores:qwen              embedded:qwen2.5-coder-1.5b-instru         72"
    ...     "          60,126                34,221\n" + "-" * 108 + "\n"
    ...     "total                                                               72"
    ...     "          60,126\nToken counts are estimates"
    ... )
    >>> r = parse_dry_run(out).rows[0]
    >>> r.stage, r.engine, r.calls, r.prompt_tokens, r.after_sharing
    ('scores:qwen', 'embedded:qwen2.5-coder-1.5b-instru', 72, 60126, 34221)
    """
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("stage "))
    rules = [i for i in range(start, len(lines)) if lines[i].startswith("-----")]
    if len(rules) < 2:
        msg = f"no stage table between two rules in:\n{text}"
        raise ValueError(msg)
    rows = []
    for line in lines[rules[0] + 1 : rules[1]]:
        numbers = line[60:].split()
        rows.append(
            Row(
                stage=line[:24].strip(),
                engine=line[25:59].strip(),
                calls=_int(numbers[0]),
                prompt_tokens=_int(numbers[1]),
                after_sharing=_int(numbers[2]) if len(numbers) > 2 else None,
            )
        )
    table = "\n".join(line.rstrip() for line in lines[start : rules[1] + 2])
    return DryRun(table=table, rows=rows)


def _int(text: str) -> int:
    return int(text.replace(",", ""))


def count_documents(config: Path) -> int:
    """Documents the config's corpus yields (its ``limit`` applied)."""
    from cube_ray.config import RunConfig
    from cube_ray.corpus import iter_document_batches

    cfg = RunConfig.from_yaml(config)
    return sum(
        b.num_rows for b in iter_document_batches(cfg.corpus, limit=cfg.corpus.limit)
    )


# ---- formatting ----------------------------------------------------------------


def n(x: float) -> str:
    """A count with thousands separators.

    >>> n(52148.4)
    '52,148'
    """
    return f"{round(x):,d}"


def billions(x: float) -> str:
    """Tokens in billions, two decimals below 10 B, one above.

    >>> billions(1.0143e9), billions(3.08e10)
    ('1.01 B', '30.8 B')
    """
    b = x / 1e9
    return f"{b:.2f} B" if b < 10 else f"{b:.1f} B"


def hours(x: float) -> str:
    """Hours, one decimal below 100, none above.

    >>> hours(14.08), hours(113.8)
    ('14.1', '114')
    """
    return f"{x:.1f}" if x < 100 else f"{x:.0f}"


# ---- the figures ---------------------------------------------------------------


class Sources:
    """Each dry run once, on first use."""

    def __init__(self) -> None:
        """No command has run yet."""
        self._cache: dict[str, object] = {}

    def _get(self, key: str, make: Callable[[], object]) -> object:
        if key not in self._cache:
            self._cache[key] = make()
        return self._cache[key]

    def demo(self) -> DryRun:
        """``cube-ray run conf/demo.yaml --dry-run``."""
        got = self._get("demo", lambda: dry_run(DEMO))
        assert isinstance(got, DryRun)
        return got

    def demo_documents(self) -> int:
        """Documents the demo indexes."""
        got = self._get("demo_documents", lambda: count_documents(DEMO))
        assert isinstance(got, int)
        return got

    def guangdong(self) -> DryRun:
        """``cube-ray run conf/guangdong.yaml --dry-run`` on the 2,262 records."""
        if not GUANGDONG_DATA.is_dir():
            raise Skipped(f"{GUANGDONG_DATA} is absent (not in a clone)")
        got = self._get("gd", lambda: dry_run(GUANGDONG, GUANGDONG_ENV))
        assert isinstance(got, DryRun)
        return got


class Skipped(Exception):
    """A figure's source is absent here; the figure is left as it is."""


def _llm_rows(run: DryRun) -> list[Row]:
    return [r for r in run.rows if not r.engine.startswith("reference")]


def _judge_rows(run: DryRun) -> list[Row]:
    return [r for r in _llm_rows(run) if r.stage.startswith("scores:")]


def _prefill(run: DryRun) -> int:
    """Prompt tokens once judge prompts share their prefix."""
    return sum(
        r.prompt_tokens if r.after_sharing is None else r.after_sharing
        for r in run.rows
    )


@dataclass(frozen=True)
class CostModel:
    """docs/pipeline.md's cost model: per-record dry-run figures x 2 M records."""

    q: float
    zero: float
    full: float
    rag8: float
    rag4: float
    judge: float
    shared: float  # share of judge prompt tokens left after prefix sharing

    @classmethod
    def of(cls, run: DryRun) -> CostModel:
        """Per-call prompt tokens of each stage of the Guangdong dry run."""
        judge = _judge_rows(run)[0]
        assert judge.after_sharing is not None
        return cls(
            q=run.per_call("questions"),
            zero=run.per_call("answers:zero"),
            full=run.per_call("answers:full"),
            rag8=run.per_call("answers:rag@k8"),
            rag4=run.per_call("answers:rag@k4"),
            judge=run.per_call(judge.stage),
            shared=judge.after_sharing / judge.prompt_tokens,
        )

    @property
    def judge_calls(self) -> int:
        """Calls of one judge: every answer set x dimension x record."""
        return (2 + N_VARIANTS) * N_RECORDS * N_DIMENSIONS

    def gpu(self) -> dict[str, tuple[float, float]]:
        """(prefill, decode) hours on one GPU per line of the cost table."""
        answers = N_RECORDS * ANSWER_TOKENS
        judge_tokens = self.judge_calls * self.judge
        return {
            "questions": (N_RECORDS * self.q, N_RECORDS * QUESTION_TOKENS),
            "both bounds": (N_RECORDS * (self.zero + self.full), 2 * answers),
            "`rag@k8`": (N_RECORDS * self.rag8, answers),
            "`rag@k4`": (N_RECORDS * self.rag4, answers),
            "one judge, prefix shared": (judge_tokens * self.shared, self.judge_calls),
            "one judge, no prefix cache": (judge_tokens, self.judge_calls),
        }

    def gpu_hours(self) -> dict[str, tuple[float, float, float]]:
        """(prefill h, decode h, GPU-hours rounded) per line."""
        out = {}
        for name, (pre, dec) in self.gpu().items():
            p, d = pre / PREFILL_TOK_S / 3600, dec / DECODE_TOK_S / 3600
            out[name] = (p, d, float(round(p + d)))
        return out

    def generator_hours(self) -> float:
        """GPU-hours of the generator group (questions, bounds, both variants)."""
        g = self.gpu_hours()
        return sum(
            g[k][2] for k in ("questions", "both bounds", "`rag@k8`", "`rag@k4`")
        )

    def judge_hours(self) -> float:
        """GPU-hours of one judge with prefix sharing."""
        return self.gpu_hours()["one judge, prefix shared"][2]


def _tokens_table(c: CostModel) -> str:
    rows = [
        "| stage | calls | prompt tokens | generated tokens |",
        "|---|---|---|---|",
        f"| questions | N = 2 M | {billions(N_RECORDS * c.q)} | N × 30 = 60 M |",
        f"| zero + full bounds | 2N = 4 M | {billions(N_RECORDS * c.zero)} + "
        f"{billions(N_RECORDS * c.full)} = {billions(N_RECORDS * (c.zero + c.full))}"
        f" | 2N × 256 = 1.02 B |",
        f"| `rag@k8` | N = 2 M | {billions(N_RECORDS * c.rag8)} | 0.51 B |",
        f"| `rag@k4` | N = 2 M | {billions(N_RECORDS * c.rag4)} | 0.51 B |",
        f"| each judge | (2 + S) × N × D = {c.judge_calls // 1_000_000} M | "
        f"{billions(c.judge_calls * c.judge)} | 32 M (one score token) |",
        f"| each judge, prefix shared | | "
        f"{billions(c.judge_calls * c.judge * c.shared)} to prefill "
        f"({c.shared:.0%} of {billions(c.judge_calls * c.judge)}) | |",
    ]
    return "\n".join(rows).replace("%", " %")


def _gpu_table(c: CostModel) -> str:
    rows = ["| work | prefill h | decode h | GPU-hours |", "|---|---|---|---|"]
    for name, (p, d, total) in c.gpu_hours().items():
        rows.append(f"| {name} | {hours(p)} | {hours(d)} | {total:.0f} |")
    return "\n".join(rows)


def _gpu_sum(c: CostModel) -> str:
    g = c.gpu_hours()
    parts = [g[k][2] for k in ("questions", "both bounds", "`rag@k8`", "`rag@k4`")]
    total = sum(parts) + 2 * c.judge_hours()
    return (
        " + ".join(f"{p:.0f}" for p in parts)
        + f" + 2 × {c.judge_hours():.0f} ≈ {total:,.0f} GPU-hours, i.e. ≈ "
        f"{total / 24:.0f} hours on the 24 GPUs of `cluster.yaml`"
        f" at full size (2 generator + 4 judge nodes × 4 GPUs, if the pools are sized"
        f" to use them), or ≈ {total / 8 / 24:.1f} days on 8 GPUs"
    )


WAVES = 20
GPUS = 24


def _waved(gen_h: float, judge_h: float) -> float:
    """Wall hours of two groups in a pipeline of WAVES equal waves.

    The slower group works throughout; the faster one adds its share of the
    first (or last) wave: ``max + min / WAVES``.

    >>> round(_waved(42.4, 14.9), 3)
    43.145
    """
    return max(gen_h, judge_h) + min(gen_h, judge_h) / WAVES


def _sized(gen: float, judges: float) -> tuple[int, float]:
    """The generator GPUs (of GPUS) that give the shortest waved wall time."""
    best = min(range(1, GPUS), key=lambda g: _waved(gen / g, judges / (GPUS - g)))
    return best, _waved(gen / best, judges / (GPUS - best))


def _wall(c: CostModel) -> dict[str, float]:
    gen, judges = c.generator_hours(), 2 * c.judge_hours()
    seq = gen / 8 + 2 * (c.judge_hours() / 16)
    waves = _waved(gen / 8, judges / 16)
    g, sized = _sized(gen, judges)
    return {
        "gen": gen,
        "judges": judges,
        "seq": seq,
        "waves": waves,
        "sized": sized,
        "g": g,
    }


def _wall_table(c: CostModel) -> str:
    w = _wall(c)
    gen8, one16, all16 = w["gen"] / 8, c.judge_hours() / 16, w["judges"] / 16
    g, j = int(w["g"]), GPUS - int(w["g"])
    gg, jj = w["gen"] / g, w["judges"] / j
    return "\n".join(
        [
            "| schedule | generator group | judge group | wall |",
            "|---|---|---|---|",
            f"| before: one stage after another, each judge alone | "
            f"{w['gen']:.0f} / 8 = {gen8:.1f} h | {c.judge_hours():.0f} / 16 = "
            f"{one16:.1f} h, twice | {gen8:.1f} + {2 * one16:.1f} = "
            f"**{w['seq']:.1f} h** |",
            f"| now with `ray.overlap: true`: systems beside the bounds, judges side "
            f"by side after the last answer | {gen8:.1f} h (one shared pool: the "
            f"stages only change order) | {w['judges']:.0f} / 16 = {all16:.1f} h | "
            f"{gen8:.1f} + {all16:.1f} = **{gen8 + all16:.1f} h** |",
            f"| now with `ray.overlap: true, waves: {WAVES}` (judges score wave *w* "
            f"while the generator writes wave *w* + 1) | {gen8:.1f} h | "
            f"{all16:.1f} h | the slower group's {max(gen8, all16):.1f} h + the "
            f"other's last wave ({min(gen8, all16):.1f} / {WAVES} = "
            f"{min(gen8, all16) / WAVES:.1f} h) ≈ **{w['waves']:.1f} h** |",
            f"| that, with the groups sized to the work ({g} generator + {j} judge "
            f"GPUs) | {w['gen']:.0f} / {g} = {gg:.1f} h | {w['judges']:.0f} / {j} = "
            f"{jj:.1f} h | {max(gg, jj):.1f} h + {min(gg, jj):.1f} / {WAVES} = "
            f"{min(gg, jj) / WAVES:.1f} h ≈ **{w['sized']:.1f} h** |",
        ]
    )


def _gd(f: Callable[[CostModel], str]) -> Callable[[Sources], str]:
    return lambda s: f(CostModel.of(s.guangdong()))


def _block(text: str) -> str:
    """A multi-line figure: its markers stand on lines of their own."""
    return f"\n{text}\n"


FIGURES: dict[str, Callable[[Sources], str]] = {
    # conf/demo.yaml
    "demo_documents": lambda s: n(s.demo_documents()),
    "demo_questions": lambda s: n(s.demo().row("questions").calls),
    "demo_llm_calls": lambda s: n(sum(r.calls for r in _llm_rows(s.demo()))),
    "demo_judgments": lambda s: n(sum(r.calls for r in _judge_rows(s.demo()))),
    "demo_prompt_tokens": lambda s: n(sum(r.prompt_tokens for r in s.demo().rows)),
    "demo_prefill_tokens": lambda s: n(_prefill(s.demo())),
    "demo_judge_prompt": lambda s: n(s.demo().per_call(_judge_rows(s.demo())[0].stage)),
    # conf/guangdong.yaml on the 2,262 records
    "gd_records": lambda s: n(s.guangdong().row("questions").calls),
    "gd_dry_run": lambda s: _block(f"```\n{s.guangdong().table}\n```"),
    "gd_doc_tokens": _gd(lambda c: n(c.full - c.zero)),
    "gd_question_prompt": _gd(lambda c: n(c.q)),
    "gd_zero_prompt": _gd(lambda c: n(c.zero)),
    "gd_full_prompt": _gd(lambda c: n(c.full)),
    "gd_rag8_prompt": _gd(lambda c: n(c.rag8)),
    "gd_judge_prompt": _gd(lambda c: n(c.judge)),
    "gd_shared_pct": _gd(lambda c: f"{c.shared:.0%}".replace("%", " %")),
    "gd_cost_tokens": _gd(lambda c: _block(_tokens_table(c))),
    "gd_cost_gpu": _gd(lambda c: _block(_gpu_table(c))),
    "gd_gpu_sum": _gd(_gpu_sum),
    "gd_api_tokens": _gd(lambda c: f"{c.judge_calls * c.judge / 1e9:.0f} B"),
    "gd_api_tokens_cached": _gd(
        lambda c: f"{c.judge_calls * c.judge * c.shared / 1e9:.0f} B"
    ),
    "gd_generator_hours": _gd(
        lambda c: (
            " + ".join(
                f"{c.gpu_hours()[k][2]:.0f}"
                for k in ("questions", "both bounds", "`rag@k8`", "`rag@k4`")
            )
            + f" = {c.generator_hours():.0f}"
        )
    ),
    "gd_judge_hours": _gd(
        lambda c: f"2 × {c.judge_hours():.0f} = {2 * c.judge_hours():.0f}"
    ),
    "gd_wall_table": _gd(lambda c: _block(_wall_table(c))),
    "gd_wall_gain": _gd(
        lambda c: (
            f"{_wall(c)['seq']:.0f} h → {_wall(c)['sized']:.0f}–"
            f"{_wall(c)['waves']:.0f} h"
        )
    ),
}


# ---- the docs ------------------------------------------------------------------


@dataclass(frozen=True)
class Site:
    """One quoted figure in one doc."""

    path: Path
    name: str
    value: str
    line: int


def doc_files(root: Path = ROOT) -> list[Path]:
    """The docs that may quote figures."""
    return sorted(p for pattern in DOC_GLOBS for p in root.glob(pattern))


def sites(root: Path = ROOT) -> Iterator[Site]:
    """Every marked figure in the docs, in file order."""
    for path in doc_files(root):
        text = path.read_text(encoding="utf-8")
        for m in MARKER.finditer(text):
            line = text.count("\n", 0, m.start()) + 1
            yield Site(path, m["name"], m["value"], line)


def compute(names: set[str], sources: Sources) -> dict[str, str | Skipped]:
    """The current value of each named figure (or why it was skipped)."""
    out: dict[str, str | Skipped] = {}
    for name in sorted(names):
        try:
            out[name] = FIGURES[name](sources)
        except Skipped as why:
            out[name] = why
    return out


def check(root: Path = ROOT, sources: Sources | None = None) -> list[str]:
    """One line per drifted, unknown or skipped figure ('drifted: ...' first)."""
    found = list(sites(root))
    unknown = [s for s in found if s.name not in FIGURES]
    values = compute({s.name for s in found if s.name in FIGURES}, sources or Sources())
    problems = [
        f"unknown figure {s.name!r} at {_rel(s.path, root)}:{s.line}: "
        f"add it to FIGURES in scripts/doc_figures.py"
        for s in unknown
    ]
    for s in found:
        value = values.get(s.name)
        if isinstance(value, str) and value != s.value:
            problems.append(
                f"drifted: {s.name} at {_rel(s.path, root)}:{s.line}: "
                f"the doc says {s.value.strip()!r}, the command gives {value.strip()!r}"
            )
    return problems


def skipped(root: Path = ROOT, sources: Sources | None = None) -> list[str]:
    """The figures whose source is absent here, with the reason."""
    values = compute(
        {s.name for s in sites(root) if s.name in FIGURES}, sources or Sources()
    )
    return [f"{k}: {v}" for k, v in values.items() if isinstance(v, Skipped)]


def write(root: Path = ROOT, sources: Sources | None = None) -> list[str]:
    """Rewrite drifted figures in place; the names rewritten."""
    found = list(sites(root))
    values = compute({s.name for s in found if s.name in FIGURES}, sources or Sources())
    changed: list[str] = []
    for path in doc_files(root):
        text = path.read_text(encoding="utf-8")

        def swap(m: re.Match[str], path: Path = path) -> str:
            value = values.get(m["name"])
            if not isinstance(value, str) or value == m["value"]:
                return m[0]
            changed.append(f"{_rel(path, root)}: {m['name']}")
            return f"<!-- fig:{m['name']} -->{value}<!-- /fig -->"

        new = MARKER.sub(swap, text)
        if new != text:
            path.write_text(new, encoding="utf-8")
    return changed


def _rel(path: Path, root: Path) -> str:
    return str(path.relative_to(root))


def main(argv: list[str] | None = None) -> int:
    """Check, write or list the docs' figures."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    mode = p.add_mutually_exclusive_group(required=True)
    mode.add_argument("--check", action="store_true", help="exit 1 if a figure drifted")
    mode.add_argument("--write", action="store_true", help="rewrite drifted figures")
    mode.add_argument("--list", action="store_true", help="list every figure")
    args = p.parse_args(argv)
    sources = Sources()
    if args.list:
        found = list(sites())
        values = compute({s.name for s in found if s.name in FIGURES}, sources)
        for s in found:
            v = values.get(s.name, "unknown figure")
            shown = str(v).strip().splitlines()[0] if str(v).strip() else ""
            print(f"{_rel(s.path, ROOT)}:{s.line}  {s.name} = {shown}")
        return 0
    for line in skipped(sources=sources):
        print(f"skipped: {line}")
    if args.write:
        for line in write(sources=sources):
            print(f"rewrote {line}")
        return 0
    problems = check(sources=sources)
    for line in problems:
        print(line)
    if problems:
        print("Fix: python scripts/doc_figures.py --write (then review the diff)")
        return 1
    print(f"doc figures: {sum(1 for _ in sites())} checked, none drifted")
    return 0


if __name__ == "__main__":
    sys.exit(main())
