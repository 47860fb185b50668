"""The built-in reference RAG: retrieval + the bounds' answer prompt + generator."""

from __future__ import annotations

from pathlib import Path

import pytest

from cube_ray.engines import FakeEngineConfig, SamplingParams
from cube_ray.engines.fake import FakeEngine
from cube_ray.errors import ConfigError
from cube_ray.prompts import render_answer
from cube_ray.systems import (
    BuiltinRagSystemConfig,
    QuestionIn,
    SystemUnderTest,
    build_system,
)
from cube_ray.systems.builtin_rag import BuiltinRagSystem
from tests.unit.test_retrieval import ZH_DOCS, ZH_QUERIES, write_documents

QUESTIONS = [
    QuestionIn(f"q{i}", q, gold) for i, (q, gold) in enumerate(ZH_QUERIES.items())
]

NONCE = "n0nce42"


@pytest.fixture
def documents(tmp_path: Path) -> Path:
    return write_documents(tmp_path / "run" / "documents", ZH_DOCS)


def test_answers_use_bounds_prompt_and_rank_order(documents: Path) -> None:
    generator = FakeEngineConfig(name="gen", seed=3)
    system = build_system(
        BuiltinRagSystemConfig(name="rag@k3", k=3),
        documents_path=str(documents),
        generator=generator,
        nonce=NONCE,
    )
    assert isinstance(system, SystemUnderTest)
    assert isinstance(system, BuiltinRagSystem)
    answers = system.answer(QUESTIONS)
    reference = FakeEngine("gen", seed=3)
    for q, a in zip(QUESTIONS, answers, strict=True):
        assert a.status == "ok"
        assert a.retrieved_doc_ids[0] == q.doc_id
        assert 1 <= len(a.retrieved_doc_ids) <= 3
        hits = system.index.search(q.question, k=3)
        assert a.retrieved_doc_ids == [h.doc_id for h in hits]
        texts = [ZH_DOCS[d] for d in a.retrieved_doc_ids]
        prompt = render_answer(q.question, texts, nonce=NONCE)
        expected = reference.generate([prompt], sampling=SamplingParams())[0].text
        assert a.answer == expected
        assert a.prompt_tokens == len(prompt)
    system.close()
    system.close()  # idempotent


def test_variants_share_one_index(documents: Path) -> None:
    gen = FakeEngineConfig()
    k4 = build_system(
        BuiltinRagSystemConfig(name="rag@k4", k=4),
        documents_path=str(documents),
        generator=gen,
    )
    k1 = build_system(
        BuiltinRagSystemConfig(name="rag@k1", k=1),
        documents_path=str(documents),
        generator=gen,
    )
    index_root = documents.parent / "index"
    assert len([p for p in index_root.iterdir() if p.name.startswith("bm25-")]) == 1
    a4, a1 = k4.answer(QUESTIONS), k1.answer(QUESTIONS)
    for x, y in zip(a4, a1, strict=True):
        assert y.retrieved_doc_ids == x.retrieved_doc_ids[:1]


def test_prepare_system_builds_the_index_once(documents: Path) -> None:
    from cube_ray.systems import QaFileSystemConfig, prepare_system

    cfg = BuiltinRagSystemConfig()
    prepare_system(cfg, documents_path=str(documents))
    built = list((documents.parent / "index").glob("bm25-*/meta.json"))
    assert len(built) == 1
    stamp = built[0].stat().st_mtime_ns
    system = build_system(
        cfg, documents_path=str(documents), generator=FakeEngineConfig()
    )
    assert system.answer(QUESTIONS[:1])[0].status == "ok"
    assert built[0].stat().st_mtime_ns == stamp
    prepare_system(QaFileSystemConfig(path="unused"), documents_path="unused")


def test_config_errors(documents: Path, tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="needs a generator"):
        build_system(
            BuiltinRagSystemConfig(), documents_path=str(documents), generator=None
        )
    fake_index = BuiltinRagSystem.from_config(
        BuiltinRagSystemConfig(), documents_path=str(documents), generator=None
    ).index
    dense_cfg = BuiltinRagSystemConfig(
        retriever="dense", embedding_url="http://127.0.0.1:9/v1", embedding_model="m"
    )
    with pytest.raises(ConfigError, match="needs a dense index and an embedder"):
        BuiltinRagSystem(dense_cfg, index=fake_index, engine=None)
    custom = tmp_path / "elsewhere"
    build_system(
        BuiltinRagSystemConfig(index_dir=str(custom), max_reference_chars=5),
        documents_path=str(documents),
        generator=FakeEngineConfig(),
    )
    assert any(p.name.startswith("bm25-") for p in custom.iterdir())


def test_max_reference_chars_cuts_documents(documents: Path) -> None:
    system = build_system(
        BuiltinRagSystemConfig(k=2, max_reference_chars=4),
        documents_path=str(documents),
        generator=FakeEngineConfig(),
        nonce=NONCE,
    )
    assert isinstance(system, BuiltinRagSystem)
    prompts, hits = system.prompts([QUESTIONS[0].question])
    texts = [ZH_DOCS[h.doc_id][:4] for h in hits[0]]
    assert prompts == [render_answer(QUESTIONS[0].question, texts, nonce=NONCE)]


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_real_vllm_engine_answers(
    documents: Path, tiny_model_dir: Path, tiny_engine_env: dict[str, str]
) -> None:
    """The built-in RAG with a real (tiny, random-weight) vLLM engine."""
    pytest.importorskip("vllm")
    from cube_ray.engines import VllmEngineConfig

    generator = VllmEngineConfig(
        model=str(tiny_model_dir),
        enforce_eager=True,
        max_model_len=2048,
        sampling={"max_tokens": 8},  # type: ignore[arg-type]
    )
    system = build_system(
        BuiltinRagSystemConfig(k=2, max_reference_chars=200),
        documents_path=str(documents),
        generator=generator,
    )
    try:
        answers = system.answer(QUESTIONS[:2])
    finally:
        system.close()
    for q, a in zip(QUESTIONS[:2], answers, strict=True):
        assert a.status == "ok", a
        assert isinstance(a.answer, str)
        assert a.retrieved_doc_ids[0] == q.doc_id
        assert a.completion_tokens is not None
        assert 0 < a.completion_tokens <= 8
