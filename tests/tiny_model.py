"""Build a tiny random-weight Llama-style model with its own tokenizer, offline.

Used by tests and benchmarks that need a real vLLM engine without any hub
access. The model has head_dim 64 (what vLLM's CPU attention needs), a
byte-level BPE tokenizer trained locally on a few hundred lines of English and
Chinese text (the Guangdong corpus when ``/work/shared/data`` is present, else
built-in lines), the digits ``0``..``9`` and ``10`` as single tokens, and a small
chat template.

The build is cached under ``$CUBE_RAY_CACHE/test-models/<name>-<hash>``, where the
hash covers this file's source and the size arguments, so reruns take
milliseconds and any change to the builder rebuilds. The directory is written to
a temporary sibling first and renamed, so concurrent builders never see a
half-written model.

Usage::

    from tests.tiny_model import build_tiny_model
    model_dir = build_tiny_model()          # pathlib.Path
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from pathlib import Path

__all__ = ["CHAT_TEMPLATE", "SCORE_TOKENS", "build_tiny_model", "training_lines"]

SCORE_TOKENS: tuple[str, ...] = tuple(str(i) for i in range(11))
"""Each of these is exactly one token of the tiny tokenizer."""

CHAT_TEMPLATE = (
    "{{ bos_token }}{% for m in messages %}"
    "<|{{ m['role'] }}|>\n{{ m['content'] }}</s>\n{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>\n{% endif %}"
)
"""A minimal chat template, so ``prompt_format: auto`` picks chat."""

_SHARED_CORPUS = Path("/work/shared/data/guangdong_service_items/records.jsonl")

_BUILTIN_LINES = (
    "You are a strict evaluator of answers given by a consultation assistant.",
    "Score the answer on that rubric only, as one integer from 0 to 10.",
    "Rubric: relevance. Is the answer faithful to the source document?",
    "Rubric: completeness. Does the answer give all the information needed?",
    "Rubric: quality. Is the answer clear and usable by a citizen?",
    "Rubric: specificity. Does the answer address this question directly?",
    "<document> <question> <answer> </document> </question> </answer>",
    "How do I apply for a business licence, and how long does it take?",
    "The application is handled by the market supervision bureau within 5 days.",
    "临时价格干预范围事项提价申报，办理地点：广州市越秀区东风中路305号。",
    "法定办结时限30个工作日，承诺办结时限7个工作日，不收费。",
    "申请材料：营业执照复印件、申请表、身份证明。",
    "请问办理建设项目环境影响评价审批需要哪些材料？",
    "广东省发展和改革委员会负责受理，咨询电话020-12345678。",
    "行政许可 行政确认 公共服务 其他行政权力",
)


def training_lines(*, max_lines: int = 400) -> list[str]:
    """A few hundred lines of English and Chinese text to train the tokenizer."""
    lines = list(_BUILTIN_LINES) * 4
    lines += [f"score {i} of 10: {i}" for i in range(11)]
    if _SHARED_CORPUS.is_file():
        with _SHARED_CORPUS.open(encoding="utf-8") as fh:
            for i, raw in enumerate(fh):
                if i >= max_lines:
                    break
                record = json.loads(raw)
                lines += [
                    str(record.get(key) or "")
                    for key in ("TASK_NAME", "DEPT_NAME", "accept_standard")
                ]
    return [line for line in lines if line]


def _key(**params: object) -> str:
    h = hashlib.sha256(Path(__file__).read_bytes())
    h.update(json.dumps(params, sort_keys=True).encode())
    return h.hexdigest()[:16]


def _default_root() -> Path:
    explicit = os.environ.get("CUBE_RAY_CACHE")
    if explicit:
        return Path(explicit) / "test-models"
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg) if xdg else Path.home() / ".cache"
    return base / "cube_ray" / "test-models"


def _build_tokenizer(out: Path, vocab_size: int) -> int:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE(unk_token=None))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=["<s>", "</s>", "<pad>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(training_lines(), trainer=trainer)
    # "10" as one token, so the first generated token determines every score.
    tok.add_tokens(["10", "<|system|>", "<|user|>", "<|assistant|>"])
    for digit in SCORE_TOKENS:
        ids = tok.encode(digit).ids
        if len(ids) != 1:  # pragma: no cover - guards the builder itself
            msg = f"tiny tokenizer splits {digit!r} into {ids}"
            raise RuntimeError(msg)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token="<s>",
        eos_token="</s>",
        pad_token="<pad>",
    )
    fast.chat_template = CHAT_TEMPLATE
    fast.save_pretrained(str(out))
    return len(fast)


def _build(
    out: Path,
    *,
    hidden_size: int,
    num_layers: int,
    vocab_size: int,
    max_position_embeddings: int,
) -> None:
    import torch
    from transformers import GenerationConfig, LlamaConfig, LlamaForCausalLM

    n_vocab = _build_tokenizer(out, vocab_size)
    config = LlamaConfig(
        vocab_size=n_vocab,
        hidden_size=hidden_size,
        intermediate_size=hidden_size * 2,
        num_hidden_layers=num_layers,
        num_attention_heads=hidden_size // 64,
        num_key_value_heads=hidden_size // 64,
        head_dim=64,
        max_position_embeddings=max_position_embeddings,
        bos_token_id=0,
        eos_token_id=1,
        pad_token_id=2,
        tie_word_embeddings=True,
    )
    torch.manual_seed(0)
    model = LlamaForCausalLM(config).to(torch.bfloat16)
    model.save_pretrained(str(out))
    GenerationConfig(bos_token_id=0, eos_token_id=1, pad_token_id=2).save_pretrained(
        str(out)
    )


def build_tiny_model(
    *,
    root: Path | None = None,
    hidden_size: int = 128,
    num_layers: int = 2,
    vocab_size: int = 3000,
    max_position_embeddings: int = 4096,
) -> Path:
    """Build (or reuse) the tiny model; returns its directory.

    Args:
        root: Cache root; default ``$CUBE_RAY_CACHE/test-models`` (the same
            fallbacks as :func:`cube_ray.env.cache_dir`).
        hidden_size: Model width, a multiple of 64 (heads of dimension 64).
        num_layers: Transformer layers.
        vocab_size: Target size of the trained BPE vocabulary.
        max_position_embeddings: Longest context the model accepts.
    """
    if hidden_size % 64:
        msg = f"hidden_size must be a multiple of 64, got {hidden_size}"
        raise ValueError(msg)
    params = {
        "hidden_size": hidden_size,
        "num_layers": num_layers,
        "vocab_size": vocab_size,
        "max_position_embeddings": max_position_embeddings,
    }
    base = root if root is not None else _default_root()
    final = base / f"tiny-llama-{_key(**params)}"
    if (final / "config.json").is_file():
        return final
    base.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".building-", dir=base))
    try:
        _build(tmp, **params)  # type: ignore[arg-type]
        try:
            tmp.rename(final)
        except OSError:
            # Another process won the race; its model is identical.
            if not (final / "config.json").is_file():
                raise
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return final


if __name__ == "__main__":
    print(build_tiny_model())
