"""Systems and retrieval import their heavy backends lazily."""

from __future__ import annotations

import json
import subprocess
import sys

HEAVY = ("ray", "vllm", "torch", "rjieba", "httpx", "bm25s")


def _loaded_after(code: str) -> list[str]:
    probe = (
        f"{code}\nimport json, sys\n"
        f"print(json.dumps([m for m in {HEAVY!r} if m in sys.modules]))"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True
    )
    return list(json.loads(out.stdout.strip().splitlines()[-1]))


def test_import_systems_and_retrieval_is_light() -> None:
    assert _loaded_after("import cube_ray.systems, cube_ray.retrieval") == []


def test_qa_file_system_needs_no_backend() -> None:
    code = (
        "import tempfile, pathlib\n"
        "from cube_ray.systems import QaFileSystemConfig, build_system\n"
        "p = pathlib.Path(tempfile.mkdtemp()) / 'qa.jsonl'\n"
        'p.write_text(\'{"question_id": "q", "answer": "a", '
        '"retrieved_doc_ids": []}\\n\')\n'
        "build_system(QaFileSystemConfig(path=str(p)), documents_path='x', "
        "generator=None)"
    )
    assert _loaded_after(code) == []
