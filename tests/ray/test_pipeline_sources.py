"""A stage's source rows are the same whether the driver builds them with Arrow
(small inputs, ``ray.driver_source_mb``) or Ray Data reads and hash-joins them:
for every source (documents, questions, questions with their documents, answers
with both) and for a wave of them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from cube_ray import schema
from cube_ray.pipeline.method import ANSWERS, DOCUMENTS, QUESTIONS
from cube_ray.stages import ANSWER_HASH, DOC_HASH, JUDGE_SOURCE
from tests.pipeline_helpers import make_driver

pytestmark = [pytest.mark.ray]

N_DOCS = 9


def _write_tables(run_dir: Path) -> None:
    """Documents, questions and answers of 9 records, in two part files each.

    Document d-8 has no question and question q-x names no document: neither
    reaches a joined source.
    """
    ids = [f"d-{i}" for i in range(N_DOCS)]
    docs = pa.table(
        {
            schema.DOC_ID: ids,
            schema.TEXT: [f"text of {i}" for i in ids],
            schema.CONTENT_HASH: [f"h-{i}" for i in ids],
            "title": [f"title {i}" for i in ids],
        }
    )
    qids = ids[:-1]
    questions = pa.table(
        {
            schema.QUESTION_ID: [*qids, "q-x"],
            schema.DOC_ID: [*qids, "d-missing"],
            schema.QUESTION: [f"question on {i}?" for i in [*qids, "x"]],
            schema.CONTENT_HASH: [f"qh-{i}" for i in [*qids, "x"]],
        }
    )
    systems = ["zero", "full", "rag"]
    answers = pa.table(
        {
            schema.QUESTION_ID: [q for q in qids for _ in systems],
            schema.SYSTEM: systems * len(qids),
            schema.ANSWER: [f"{s} answer to {q}" for q in qids for s in systems],
            schema.CONTENT_HASH: [f"ah-{q}-{s}" for q in qids for s in systems],
        }
    )
    for name, table in ((DOCUMENTS, docs), (QUESTIONS, questions), (ANSWERS, answers)):
        folder = run_dir / name
        folder.mkdir(parents=True)
        half = table.num_rows // 2
        pq.write_table(
            table.slice(0, half),
            folder / f"part-20261201T000000Z-{name}-000000.parquet",
        )
        pq.write_table(
            table.slice(half), folder / f"part-20261201T000000Z-{name}-000001.parquet"
        )


def _rows(ds: Any) -> list[dict[str, Any]]:
    import ray

    table = pa.concat_tables(ray.get(ds.to_arrow_refs()))
    table = table.select(sorted(table.column_names))
    return sorted(table.to_pylist(), key=lambda r: sorted(r.items()))


@pytest.mark.timeout(600)
@pytest.mark.parametrize("waves", [1, 3])
def test_driver_and_ray_data_build_the_same_sources(
    ray_local: Any, tmp_path: Path, waves: int
) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    on_driver = make_driver(tmp_path / "a")
    with_ray = make_driver(tmp_path / "b", driver_source_mb=0)
    for driver in (on_driver, with_ray):
        _write_tables(driver.state.run_dir)
        driver.state.n_docs = N_DOCS
        driver.state.n_questions = N_DOCS
    assert with_ray.sources.on_driver(ANSWERS) is None
    expected_rows = {
        DOCUMENTS: N_DOCS,
        QUESTIONS: N_DOCS,
        "qdocs": N_DOCS - 1,
        ANSWERS: 3 * (N_DOCS - 1),
    }
    # Ray Data's side (each join starts actors: tens of seconds on 2 cores):
    # a plain read and the answers (joined with questions and documents);
    # with waves, the answers of the second wave.
    compared = [DOCUMENTS, ANSWERS] if waves == 1 else [ANSWERS]
    for name, total in expected_rows.items():
        assert on_driver.sources.on_driver(name) is not None, name
        seen = 0
        for wave in range(waves):
            a, count_a = on_driver.sources.wave_source(name, wave, waves)
            rows = _rows(a)
            assert count_a == len(rows)
            seen += len(rows)
            if name in compared and wave == min(1, waves - 1):
                b, count_b = with_ray.sources.wave_source(name, wave, waves)
                assert rows == _rows(b), (name, wave)
                if waves > 1:
                    assert count_b == count_a
        assert seen == total, name
    # The joined source carries the document and both hashes.
    row = _rows(on_driver.sources.wave_source(ANSWERS, 0, 1)[0])[0]
    assert set(row) == set(JUDGE_SOURCE)
    assert row[ANSWER_HASH].startswith("ah-")
    assert row[DOC_HASH].startswith("h-")
