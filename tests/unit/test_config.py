"""RunConfig: YAML loading, validation errors that name file, key and fix."""

from __future__ import annotations

from pathlib import Path

import pytest

from cube_ray.config import CorpusConfig, DimensionConfig, RunConfig, engine_fingerprint
from cube_ray.errors import ConfigError
from cube_ray.prompts import DEFAULT_DIMENSIONS

ROOT = Path(__file__).resolve().parents[2]

MINIMAL = """
corpus:
  path: data/records.jsonl
  id_field: id
  fields:
    - name: 名称
    - fee
    - {name: time, label: 时限}
generator: {backend: fake}
judges:
  a: {backend: fake, seed: 1}
allow_fake_engines: true
"""


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "conf.yaml"
    path.write_text(text, encoding="utf-8")
    return path


def test_minimal_config_defaults_and_relative_paths(tmp_path: Path) -> None:
    cfg = RunConfig.from_yaml(write(tmp_path, MINIMAL))
    assert cfg.corpus.path == str(tmp_path / "data" / "records.jsonl")
    assert [(f.name, f.display) for f in cfg.corpus.fields] == [
        ("名称", "名称"),
        ("fee", "fee"),
        ("time", "时限"),
    ]
    assert [d.name for d in cfg.dimensions] == list(DEFAULT_DIMENSIONS)
    assert set(cfg.rubrics()) == set(DEFAULT_DIMENSIONS)
    assert cfg.output_dir == "runs/default"  # defaults stay relative to the cwd
    assert cfg.aggregate.trim == 0.1
    assert cfg.corpus.resolved_format == "jsonl"


def test_fingerprint_is_stable_and_sensitive(tmp_path: Path) -> None:
    a = RunConfig.from_yaml(write(tmp_path, MINIMAL))
    b = RunConfig.from_yaml(write(tmp_path, MINIMAL))
    c = RunConfig.from_yaml(write(tmp_path, MINIMAL.replace("seed: 1", "seed: 2")))
    assert a.fingerprint() == b.fingerprint() != c.fingerprint()


def test_engine_fingerprint_ignores_pool(tmp_path: Path) -> None:
    a = RunConfig.from_yaml(write(tmp_path, MINIMAL)).judges["a"]
    b = a.model_copy(update={"pool": a.pool.model_copy(update={"batch_size": 99})})
    assert engine_fingerprint(a) == engine_fingerprint(b)


def test_bad_yaml_names_file_and_line(tmp_path: Path) -> None:
    path = write(tmp_path, "corpus:\n  path: [unclosed\n")
    with pytest.raises(ConfigError, match=r"not valid YAML at line \d+") as err:
        RunConfig.from_yaml(path)
    assert str(path) in str(err.value)


def test_unknown_engine_backend(tmp_path: Path) -> None:
    path = write(
        tmp_path, MINIMAL.replace("a: {backend: fake, seed: 1}", "a: {backend: gpt9}")
    )
    with pytest.raises(ConfigError) as err:
        RunConfig.from_yaml(path)
    text = str(err.value)
    assert "judges.a" in text
    assert "gpt9" in text
    assert "vllm" in text  # the fix lists the valid backends


def test_unknown_key_is_an_error_with_fix(tmp_path: Path) -> None:
    path = write(tmp_path, MINIMAL + "judgez: {}\n")
    with pytest.raises(ConfigError, match=r"judgez: .*remove it or check its spelling"):
        RunConfig.from_yaml(path)


def test_missing_key(tmp_path: Path) -> None:
    path = write(tmp_path, MINIMAL.replace("generator: {backend: fake}\n", ""))
    with pytest.raises(ConfigError, match=r"generator: .*add this key"):
        RunConfig.from_yaml(path)


def test_fake_engines_need_explicit_opt_in(tmp_path: Path) -> None:
    path = write(tmp_path, MINIMAL.replace("allow_fake_engines: true\n", ""))
    with pytest.raises(ConfigError, match="allow_fake_engines"):
        RunConfig.from_yaml(path)


def test_not_a_mapping(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="must hold a mapping"):
        RunConfig.from_yaml(write(tmp_path, "- a\n- b\n"))


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read config file"):
        RunConfig.from_yaml(tmp_path / "nope.yaml")


def test_duplicate_system_names(tmp_path: Path) -> None:
    text = MINIMAL + (
        "systems:\n  - {kind: qa_file, path: a.jsonl}\n"
        "  - {kind: qa_file, path: b.jsonl}\n"
    )
    with pytest.raises(ConfigError, match=r"\['rag'\] occur more than once"):
        RunConfig.from_yaml(write(tmp_path, text))


def test_fixed_weights_need_every_weight(tmp_path: Path) -> None:
    text = MINIMAL + (
        "dimensions:\n  - {name: relevance, weight: 1}\n  - {name: quality}\n"
        "aggregate: {weights: fixed}\n"
    )
    with pytest.raises(ConfigError, match=r"\['quality'\] have no weight"):
        RunConfig.from_yaml(write(tmp_path, text))


def test_custom_dimension_rubric_file(tmp_path: Path) -> None:
    (tmp_path / "r.txt").write_text("Rubric: tone. Be polite.\n", encoding="utf-8")
    text = MINIMAL + "dimensions:\n  - {name: tone, rubric_file: r.txt}\n"
    cfg = RunConfig.from_yaml(write(tmp_path, text))
    assert cfg.rubrics() == {"tone": "Rubric: tone. Be polite."}


def test_custom_dimension_without_rubric() -> None:
    with pytest.raises(ConfigError, match="has no rubric"):
        DimensionConfig(name="tone").rubric_text()


def test_question_file_needs_path(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"questions\.path is not set"):
        RunConfig.from_yaml(write(tmp_path, MINIMAL + "questions: {source: file}\n"))


def test_fields_as_mapping() -> None:
    cfg = CorpusConfig(path="x.csv", fields={"a": "A", "b": "B"})  # type: ignore[arg-type]
    assert [f.display for f in cfg.fields] == ["A", "B"]
    assert cfg.resolved_format == "csv"


def test_unknown_format() -> None:
    with pytest.raises(ConfigError, match=r"set corpus\.format"):
        _ = CorpusConfig(path="x.xlsx").resolved_format


@pytest.mark.parametrize("name", ["guangdong.yaml", "demo.yaml"])
def test_shipped_configs_validate(name: str) -> None:
    cfg = RunConfig.from_yaml(ROOT / "conf" / name)
    assert cfg.corpus.id_field == "TASK_CODE"
    assert len(cfg.judges) >= 2
