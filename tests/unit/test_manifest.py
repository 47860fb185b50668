"""``manifest.json`` is one typed, versioned model, written and read in one place."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest

from cube_ray.errors import InputError
from cube_ray.manifest import MANIFEST, MANIFEST_VERSION, Manifest

ROOT = Path(__file__).resolve().parents[2]


def test_an_older_manifest_reads_and_keeps_unknown_keys(tmp_path: Path) -> None:
    old = {
        "status": "complete",
        "config_hash": "abc",
        "stages": {"questions": {"prompt_tokens": 3, "completion_tokens": 4}},
        "engines": {"vllm:m": {"stages": ["questions"], "busy_s": 2.5, "calls": 7}},
        "from_a_newer_version": {"x": 1},
    }
    (tmp_path / MANIFEST).write_text(json.dumps(old), encoding="utf-8")
    m = Manifest.load(tmp_path)
    assert m.schema_version == MANIFEST_VERSION
    assert m.stages["questions"].tokens == 7
    assert m.engines["vllm:m"].busy_s == 2.5
    assert m.engines["vllm:m"].extra() == {"calls": 7}
    assert m.recorded() == old  # what the file holds, for display
    m.updated(status="failed", error="KeyError: 'x'").write(tmp_path)
    again = json.loads((tmp_path / MANIFEST).read_text(encoding="utf-8"))
    assert again["from_a_newer_version"] == {"x": 1}
    assert again["engines"]["vllm:m"]["calls"] == 7
    assert (again["status"], again["schema_version"]) == ("failed", 1)
    assert [p.name for p in tmp_path.iterdir()] == [MANIFEST]  # no temp file left


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (None, "missing or unreadable"),
        ("{not json", "not JSON"),
        ("[1, 2]", "must hold a JSON object"),
        ('{"stages": {"q": {"prompt_tokens": "many"}}}', "stages.q.prompt_tokens"),
    ],
)
def test_a_bad_manifest_is_one_error_naming_the_file(
    tmp_path: Path, text: str | None, expected: str
) -> None:
    if text is not None:
        (tmp_path / MANIFEST).write_text(text, encoding="utf-8")
    with pytest.raises(InputError, match=expected) as info:
        Manifest.load(tmp_path)
    assert str(tmp_path / MANIFEST) in str(info.value)
    assert Manifest.read(tmp_path) is None  # a record: never stops a rerun


def test_manifest_keys_are_read_in_one_module() -> None:
    """Outside ``cube_ray/manifest.py`` no module opens manifest.json itself
    or reads its keys as a dict (``.get("config")``, ``["status"]``)."""
    keys = set(Manifest.model_fields)
    readers = []
    for path in sorted((ROOT / "cube_ray").rglob("*.py")):
        if path.name == "manifest.py" and path.parent.name == "cube_ray":
            continue
        text = path.read_text(encoding="utf-8")
        if '"manifest.json"' in text:
            readers.append(f"{path.relative_to(ROOT)}: names manifest.json")
        tree = ast.parse(text)
        for node in ast.walk(tree):
            if not (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr == "get"
                and isinstance(node.func.value, ast.Name)
                and "manifest" in node.func.value.id
                and node.args
                and isinstance(node.args[0], ast.Constant)
                and node.args[0].value in keys
            ):
                continue
            readers.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert readers == []
