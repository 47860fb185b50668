"""The figures the docs quote are the ones the commands give today.

``scripts/doc_figures.py --check`` reruns ``cube-ray run CONFIG --dry-run`` for
the configs the docs quote (the demo; the Guangdong corpus where
``../shared/data`` is present) and compares every marked figure. A drifted
figure must fail it: the second test changes one figure in a copy of the docs.
"""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "doc_figures.py"


def _load() -> ModuleType:
    spec = importlib.util.spec_from_file_location("doc_figures", SCRIPT)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["doc_figures"] = module  # dataclasses resolve their module
    spec.loader.exec_module(module)
    return module


doc_figures = _load()


@pytest.fixture(scope="module")
def sources() -> object:
    return doc_figures.Sources()


def _copy_docs(dst: Path) -> None:
    shutil.copy(ROOT / "README.md", dst / "README.md")
    shutil.copytree(ROOT / "docs", dst / "docs")


@pytest.mark.timeout(300)
def test_check_passes_on_the_repository() -> None:
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "--check"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=280,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "none drifted" in proc.stdout
    names = {s.name for s in doc_figures.sites()}
    # the figures issue 28 found stale are all under check
    assert {"demo_prefill_tokens", "demo_questions", "gd_judge_prompt"} <= names


@pytest.mark.timeout(300)
def test_a_drifted_figure_fails_and_write_restores_it(
    tmp_path: Path, sources: object
) -> None:
    _copy_docs(tmp_path)
    readme = tmp_path / "README.md"
    text = readme.read_text(encoding="utf-8")
    site = next(
        s for s in doc_figures.sites(tmp_path) if s.name == "demo_prefill_tokens"
    )
    drifted = text.replace(
        f"<!-- fig:{site.name} -->{site.value}<!-- /fig -->",
        f"<!-- fig:{site.name} -->44,000<!-- /fig -->",
        1,
    )
    assert drifted != text
    readme.write_text(drifted, encoding="utf-8")
    problems = doc_figures.check(tmp_path, sources)
    assert len(problems) == 1, problems
    assert problems[0].startswith(
        f"drifted: demo_prefill_tokens at README.md:{site.line}"
    )
    assert "the doc says '44,000'" in problems[0]
    assert f"the command gives '{site.value}'" in problems[0]

    assert doc_figures.write(tmp_path, sources) == ["README.md: demo_prefill_tokens"]
    assert readme.read_text(encoding="utf-8") == text
    assert doc_figures.check(tmp_path, sources) == []


def test_an_unknown_figure_name_is_reported(tmp_path: Path, sources: object) -> None:
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "x.md").write_text(
        "a\n<!-- fig:no_such_figure -->3<!-- /fig -->\n", encoding="utf-8"
    )
    assert doc_figures.check(tmp_path, sources) == [
        "unknown figure 'no_such_figure' at docs/x.md:2: "
        "add it to FIGURES in scripts/doc_figures.py"
    ]
