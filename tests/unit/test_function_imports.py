"""Every import left inside a function says why, in a comment.

An import belongs at the top of its module. One inside a function is there for
a reason the reader cannot see: a heavy or optional dependency (ray, vllm,
torch, httpx, openpyxl, matplotlib), a light module that must stay light (the
CLI's parser imports every command module; the Ray stage workers import
``cube_ray.pipeline``), or a circle at load. That reason is written on the
import's line or on the line above it; consecutive imports share the comment
above the first of them. Imports that cost nothing to hoist (the standard
library, ``cube_ray.errors``) are never left inside a function.
"""

from __future__ import annotations

import ast
import io
import sys
import tokenize
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

ALWAYS_AT_TOP = ("cube_ray.errors",)
"""cube_ray modules that load nothing and close no circle: import at the top."""


def _comment_lines(source: str) -> set[int]:
    """Line numbers holding a comment (a ``#`` in a string is not one)."""
    tokens = tokenize.generate_tokens(io.StringIO(source).readline)
    return {t.start[0] for t in tokens if t.type == tokenize.COMMENT}


def function_imports(tree: ast.AST) -> list[ast.Import | ast.ImportFrom]:
    """The import statements inside a function body (nested ones too)."""
    found: list[ast.Import | ast.ImportFrom] = []

    def visit(node: ast.AST, in_function: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if in_function and isinstance(child, (ast.Import, ast.ImportFrom)):
                found.append(child)
            visit(
                child,
                in_function
                or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)),
            )

    visit(tree, False)
    return sorted(found, key=lambda node: node.lineno)


def _module(node: ast.Import | ast.ImportFrom) -> str:
    if isinstance(node, ast.ImportFrom):
        return "." * node.level + (node.module or "")
    return node.names[0].name


def unexplained_imports(root: Path, package: str) -> list[str]:
    """``path:line: module`` for each function-level import without a reason,
    and for each one that has no reason to be there (standard library,
    :data:`ALWAYS_AT_TOP`)."""
    found = []
    for path in sorted((root / package).rglob("*.py")):
        source = path.read_text(encoding="utf-8")
        comments = _comment_lines(source)
        explained: set[int] = set()  # last lines of explained imports
        where = path.relative_to(root)
        for node in function_imports(ast.parse(source)):
            module = _module(node)
            if module.split(".")[0] in sys.stdlib_module_names or module in (
                ALWAYS_AT_TOP
            ):
                found.append(f"{where}:{node.lineno}: {module} (import it at the top)")
                continue
            above = node.lineno - 1
            if node.lineno in comments or above in comments or above in explained:
                explained.add(node.end_lineno or node.lineno)
            else:
                found.append(f"{where}:{node.lineno}: {module} (say why it is here)")
    return found


def test_every_function_level_import_says_why() -> None:
    tree_imports = [
        node
        for path in (ROOT / "cube_ray").rglob("*.py")
        for node in function_imports(ast.parse(path.read_text(encoding="utf-8")))
    ]
    assert len(tree_imports) > 50  # the walk reached the function bodies
    assert unexplained_imports(ROOT, "cube_ray") == []


def test_an_import_without_a_reason_is_found(tmp_path: Path) -> None:
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text(
        "import json\n"
        "def f():\n"
        "    # heavy: ray, only here\n"
        "    import ray\n"
        "    from ray import data\n"
        "\n"
        "    import vllm\n"
        "    import torch  # heavy\n"
        "    from pkg import (\n"
        "        b,\n"
        "    )\n"
        "    s = '# not a comment'\n"
        "    import httpx\n"
        "    import tempfile  # stdlib: never inside a function\n"
        "    from cube_ray.errors import ConfigError  # light\n"
        "    return json, ray, data, vllm, torch, b, s, httpx, tempfile\n"
    )
    assert unexplained_imports(tmp_path, "pkg") == [
        "pkg/a.py:7: vllm (say why it is here)",
        "pkg/a.py:13: httpx (say why it is here)",
        "pkg/a.py:14: tempfile (import it at the top)",
        "pkg/a.py:15: cube_ray.errors (import it at the top)",
    ]
