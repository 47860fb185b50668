"""The ``qa_file`` kind: answers collected elsewhere, read from a file."""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cube_ray.errors import InputError
from cube_ray.systems.config import QaFileSystemConfig
from cube_ray.systems.kinds import (
    Preparation,
    SystemKind,
    file_digest,
    header_columns,
)

if TYPE_CHECKING:
    from cube_ray.engines.base import Engine
    from cube_ray.engines.config import EngineConfig
    from cube_ray.systems.base import SystemUnderTest

__all__ = ["QaFileKind"]


class QaFileKind(SystemKind):
    """A QA file: checked and indexed before the first stage."""

    config = QaFileSystemConfig
    prepares_early = True
    path_fields = ("path",)

    def build(
        self,
        system: Any,
        *,
        documents_path: str,
        generator: EngineConfig | None,
        answer_template: str,
        nonce: str | None,
        engine_factory: Callable[[EngineConfig], Engine] | None,
    ) -> SystemUnderTest:
        """The live system."""
        # circle at load: cube_ray/systems/__init__ imports this kind
        from cube_ray.systems.qa_file import QaFileSystem

        # In a run, the QA file's index sits beside the documents in the run
        # dir's index/ (built once by the pipeline); outside one, a temporary one.
        docs = Path(documents_path)
        return QaFileSystem(system, docs.parent / "index" if docs.is_dir() else None)

    def check(self, system: Any) -> None:
        """The file exists and its header has the configured columns."""
        path = Path(system.path)
        if not path.exists():
            msg = f"the QA file of system {system.name!r} does not exist"
            raise InputError(msg, path=str(path))
        columns = header_columns(path)
        if columns is None:
            return
        wanted = [
            system.question_field or system.question_id_field,
            system.answer_field,
            system.retrieved_field,
        ]
        for name in wanted:
            if name not in columns:
                msg = (
                    f"the QA file of system {system.name!r} has no column "
                    f"{name!r} (columns: {sorted(columns)}); fix the file or "
                    "the system's *_field settings"
                )
                raise InputError(msg, path=str(path), field=name)

    def check_rows(self, system: Any) -> None:
        """Every row, as the run's preparation reads them (a temporary index)."""
        # circle at load: cube_ray/systems/__init__ imports this kind
        from cube_ray.systems.qa_file import build_qa_index

        with tempfile.TemporaryDirectory(prefix="cube-ray-dry-run-") as index:
            build_qa_index(system, index)

    def prepare(self, system: Any, *, run_dir: Path) -> Preparation:
        """Its one-off set-up task."""
        # circle at load: cube_ray/systems/__init__ imports this kind
        from cube_ray.systems.qa_file import build_qa_index

        return Preparation(build_qa_index, {"index_dir": str(run_dir / "index")})

    def fingerprint_parts(
        self, system: Any, *, generator_fp: str, corpus_fp: str
    ) -> list[str]:
        """Inputs of its answers beyond its config and the answer template."""
        return [file_digest(system.path)]
