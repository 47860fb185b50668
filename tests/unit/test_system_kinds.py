"""A system kind is one module plus one registration line.

A test-only kind (``echo``) is registered with one call and then validates in a
run config (its path field resolved and held to the config's folders), builds
through the factory and answers; an unregistered kind is a clear error in the
config and in the factory (no silent fallback to another kind).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, Literal

import pytest

from cube_ray.config import RunConfig, read_paths
from cube_ray.errors import ConfigError
from cube_ray.systems import (
    QuestionIn,
    SystemAnswer,
    SystemConfigBase,
    build_system,
    kinds as kinds_module,
)
from cube_ray.systems.kinds import SystemKind, register_system_kind, system_kind


class EchoSystemConfig(SystemConfigBase):
    """Answers every question with its own text and one fixed document."""

    kind: Literal["echo"] = "echo"
    doc_id: str = "d1"
    """The document it always retrieves."""
    notes: str | None = None
    """A file it reads (a path field of the kind)."""


class EchoSystem:
    def __init__(self, config: EchoSystemConfig) -> None:
        self.name, self.k, self.doc_id = config.name, config.k, config.doc_id

    def answer(self, questions: Sequence[QuestionIn]) -> list[SystemAnswer]:
        return [SystemAnswer(f"echo: {q.question}", [self.doc_id]) for q in questions]

    def close(self) -> None:
        pass


class EchoKind(SystemKind):
    """The whole kind: its config, how it is built, the file it reads."""

    config = EchoSystemConfig
    path_fields = ("notes",)

    def build(
        self, system: Any, *, engine_factory: Callable[..., Any] | None, **_: Any
    ) -> EchoSystem:
        return EchoSystem(system)


@pytest.fixture
def echo() -> Iterator[SystemKind]:
    kind = register_system_kind(EchoKind())  # the one registration line
    yield kind
    del kinds_module._KINDS["echo"]


CONFIG = """
corpus: {path: records.jsonl, id_field: id}
generator: {backend: fake}
judges: {a: {backend: fake, seed: 1}}
allow_fake_engines: true
systems:
  - {kind: echo, name: rag@echo, k: 3, doc_id: d7, notes: notes.txt}
"""


def _config_file(tmp_path: Path, text: str = CONFIG) -> Path:
    (tmp_path / "records.jsonl").write_text('{"id": "d7", "x": "y"}\n')
    (tmp_path / "notes.txt").write_text("notes\n")
    path = tmp_path / "conf.yaml"
    path.write_text(text, encoding="utf-8")
    return path


def test_a_registered_kind_validates_builds_and_answers(
    tmp_path: Path, echo: SystemKind
) -> None:
    config = RunConfig.from_yaml(_config_file(tmp_path))
    (system,) = config.systems
    assert isinstance(system, EchoSystemConfig)
    assert (system.name, system.k, system.doc_id) == ("rag@echo", 3, "d7")
    assert system.notes == str(tmp_path / "notes.txt")  # resolved like a corpus
    assert system_kind(system) is echo
    # The manifest keeps the kind's own fields, and reads back to the same config.
    dumped = config.manifest_config()["systems"][0]
    assert (dumped["kind"], dumped["doc_id"]) == ("echo", "d7")
    again = RunConfig.from_dict(config.manifest_config())
    assert again.fingerprint() == config.fingerprint()
    assert ("systems[0].notes", system.notes) in read_paths(
        config.model_dump(mode="json")
    )
    live = build_system(system, documents_path=str(tmp_path), generator=None)
    (reply,) = live.answer([QuestionIn("q1", "how?", "d7")])
    assert (reply.answer, reply.retrieved_doc_ids) == ("echo: how?", ["d7"])


def test_a_kind_path_outside_the_config_folder_is_refused(
    tmp_path: Path, echo: SystemKind
) -> None:
    text = CONFIG.replace("notes: notes.txt", "notes: /etc/passwd")
    with pytest.raises(ConfigError, match=r"systems\[0\]\.notes is '/etc/passwd'"):
        RunConfig.from_yaml(_config_file(tmp_path, text))


def test_an_unregistered_kind_is_an_error_in_config_and_factory(
    tmp_path: Path,
) -> None:
    with pytest.raises(ConfigError) as err:
        RunConfig.from_yaml(_config_file(tmp_path))
    assert "systems.0: Input tag 'echo'" in str(err.value)
    assert "'qa_file', 'builtin_rag', 'http'" in str(err.value)
    with pytest.raises(ConfigError, match="kind 'echo', which is not a registered"):
        build_system(EchoSystemConfig(), documents_path="x", generator=None)


def test_a_kind_name_is_registered_once(echo: SystemKind) -> None:
    assert register_system_kind(echo) is echo  # the same kind again: no change
    with pytest.raises(ValueError, match="'echo' is already registered"):
        register_system_kind(EchoKind())

    class Nameless(SystemKind):
        config = SystemConfigBase

    with pytest.raises(ValueError, match="needs a field kind: Literal"):
        register_system_kind(Nameless())
