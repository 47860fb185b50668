"""No import cycle among cube_ray's modules.

Every ``import`` counts, at module level or inside a function (a lazy import
is still a dependency); imports under ``if TYPE_CHECKING:`` count too (a type
that has to be imported from a module that imports you is a circle of the
design, whether or not Python runs it), and the helpers can leave them out. An edge goes
to the module named (``from pkg import mod`` to ``pkg.mod`` when that is a
module); a package's ``__init__`` importing its own modules is not a cycle.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _modules(root: Path, package: str) -> dict[str, Path]:
    out = {}
    for path in (root / package).rglob("*.py"):
        parts = list(path.relative_to(root).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


def _type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imported(
    tree: ast.AST, modules: dict[str, Path], *, type_checking: bool
) -> set[str]:
    found: set[str] = set()
    todo = [tree]
    while todo:
        node = todo.pop()
        for child in ast.iter_child_nodes(node):
            if (
                isinstance(child, ast.If)
                and _type_checking(child)
                and not type_checking
            ):
                todo.extend(child.orelse)
                continue
            if isinstance(child, ast.Import):
                found.update(a.name for a in child.names)
            elif isinstance(child, ast.ImportFrom) and child.module and not child.level:
                for alias in child.names:
                    full = f"{child.module}.{alias.name}"
                    found.add(full if full in modules else child.module)
            todo.append(child)
    return found & set(modules)


def import_graph(
    root: Path, package: str, *, type_checking: bool = True
) -> dict[str, set[str]]:
    """Module -> the package's modules it imports (with ``type_checking``, also
    those imported under ``if TYPE_CHECKING:``)."""
    modules = _modules(root, package)
    return {
        name: _imported(
            ast.parse(path.read_text(encoding="utf-8")),
            modules,
            type_checking=type_checking,
        )
        - {name}
        for name, path in modules.items()
    }


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_cube_ray_has_no_import_cycle() -> None:
    graph = import_graph(ROOT, "cube_ray")
    assert len(graph) > 100  # every module was read
    assert "cube_ray.corpus" in graph["cube_ray.plan"]
    assert cycles(graph) == []


def test_a_lazy_import_back_is_a_cycle(tmp_path: Path) -> None:
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("from pkg import a\n")
    (pkg / "a.py").write_text("from pkg.b import f\n")
    (pkg / "b.py").write_text("def f():\n    from pkg import a\n    return a\n")
    (pkg / "c.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg import a\n"
    )
    graph = import_graph(tmp_path, "pkg", type_checking=False)
    assert graph["pkg.c"] == set()  # left out on request
    assert cycles(graph) == [["pkg.a", "pkg.b"]]
    assert import_graph(tmp_path, "pkg")["pkg.c"] == {"pkg.a"}


def test_a_type_checking_import_back_is_a_cycle(tmp_path: Path) -> None:
    """``RunOptions`` once lived in ``run.py``, which imports ``driver.py``,
    which imported ``RunOptions`` for its annotations only: a circle."""
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "run.py").write_text("from pkg.driver import go\nclass Options: ...\n")
    (pkg / "driver.py").write_text(
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    from pkg.run import Options\n"
        "def go(o: 'Options') -> None: ...\n"
    )
    assert cycles(import_graph(tmp_path, "pkg")) == [["pkg.driver", "pkg.run"]]
    assert cycles(import_graph(tmp_path, "pkg", type_checking=False)) == []


def _package_of(module: str) -> str:
    """``cube_ray.pipeline.run`` -> ``cube_ray.pipeline``; a top-level module
    (``cube_ray.plan``) is its own package."""
    parts = module.split(".")
    return ".".join(parts[:2])


def private_imports(root: Path, package: str) -> list[str]:
    """``importer: module.name`` for every private name (``_x``, not dunder)
    imported from a module of another package, type-only imports included."""
    modules = _modules(root, package)
    found = []
    for name, path in sorted(modules.items()):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(node, ast.ImportFrom) or node.level or not node.module:
                continue
            if _package_of(node.module) == _package_of(name):
                continue
            for alias in node.names:
                private = alias.name.startswith("_") and not alias.name.startswith("__")
                if private and node.module.startswith(package + "."):
                    found.append(f"{name}: {node.module}.{alias.name}")
    return found


def _private_module(module: str, package: str) -> bool:
    """Whether a part of ``module`` below ``package`` is private (``_x``)."""
    parts = module.split(".")[1:] if module.startswith(package + ".") else []
    return any(p.startswith("_") and not p.startswith("__") for p in parts)


def private_module_imports(root: Path, package: str) -> list[str]:
    """``importer: module`` for every private module (``pkg._x``, ``pkg._x.y``)
    imported from another package, at any depth and type-only imports
    included: what another package needs is exported by the owner's public
    ``__init__`` (or lives in a public module)."""
    modules = _modules(root, package)
    found = []
    for name, path in sorted(modules.items()):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                targets = [node.module] + [
                    f"{node.module}.{a.name}"
                    for a in node.names
                    if f"{node.module}.{a.name}" in modules
                ]
            else:
                continue
            for target in targets:
                if _package_of(target) == _package_of(name):
                    continue
                if _private_module(target, package):
                    found.append(f"{name}: {target}")
    return found


def test_no_private_module_is_imported_across_packages() -> None:
    """``report._human`` and ``cube_ray._pydantic`` were imported by
    ``commands``, ``pipeline`` and the config packages."""
    assert private_module_imports(ROOT, "cube_ray") == []


def test_a_private_module_imported_across_packages_is_found(tmp_path: Path) -> None:
    (tmp_path / "pkg" / "a").mkdir(parents=True)
    (tmp_path / "pkg" / "__init__.py").write_text("")
    (tmp_path / "pkg" / "_base.py").write_text("class Base: ...\n")
    (tmp_path / "pkg" / "a" / "__init__.py").write_text("from pkg.a._x import f\n")
    (tmp_path / "pkg" / "a" / "_x.py").write_text("def f(): ...\n")
    (tmp_path / "pkg" / "a" / "y.py").write_text("from pkg.a._x import f\n")
    (tmp_path / "pkg" / "b.py").write_text(
        "from pkg.a import f\ndef g():\n    from pkg.a._x import f\n    return f\n"
    )
    (tmp_path / "pkg" / "c.py").write_text(
        "from pkg import _base\nimport pkg.a._x\nfrom pkg._base import Base\n"
    )
    assert private_module_imports(tmp_path, "pkg") == [
        "pkg.b: pkg.a._x",
        "pkg.c: pkg._base",
        "pkg.c: pkg.a._x",
        "pkg.c: pkg._base",
    ]


def test_no_private_name_is_imported_across_packages() -> None:
    """A name another package needs is public API of its owner (``plan``'s
    ``engine_label``, ``embedded.is_converted`` were ``_engine_name``/``_DONE``)."""
    assert private_imports(ROOT, "cube_ray") == []


def test_a_private_import_across_packages_is_found(tmp_path: Path) -> None:
    (tmp_path / "pkg" / "a").mkdir(parents=True)
    (tmp_path / "pkg" / "__init__.py").write_text("")
    (tmp_path / "pkg" / "a" / "__init__.py").write_text("")
    (tmp_path / "pkg" / "a" / "x.py").write_text("_SECRET = 1\n")
    (tmp_path / "pkg" / "a" / "y.py").write_text("from pkg.a.x import _SECRET\n")
    (tmp_path / "pkg" / "b.py").write_text("from pkg.a.x import _SECRET\n")
    assert private_imports(tmp_path, "pkg") == ["pkg.b: pkg.a.x._SECRET"]
