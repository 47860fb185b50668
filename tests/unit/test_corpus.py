"""Records -> one-chunk documents, and every bad-input case as one InputError."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from cube_ray import schema
from cube_ray.config import CorpusConfig
from cube_ray.corpus import iter_document_batches, record_to_document
from cube_ray.errors import InputError

ROOT = Path(__file__).resolve().parents[2]
SAMPLE = ROOT / "examples" / "data" / "guangdong_sample.jsonl"


def cfg(path: Path, **kw: object) -> CorpusConfig:
    base: dict[str, object] = {
        "path": str(path),
        "id_field": "id",
        "fields": [{"name": "name", "label": "事项名称"}, "fee", {"time": "时限"}],
    }
    base.update(kw)
    return CorpusConfig.model_validate(base)


def write_jsonl(path: Path, records: list[dict[str, object]]) -> Path:
    path.write_text(
        "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records),
        encoding="utf-8",
    )
    return path


def docs(c: CorpusConfig, **kw: int) -> pa.Table:
    return pa.concat_tables(list(iter_document_batches(c, **kw)))


def test_fields_in_order_empty_markers_lists(tmp_path: Path) -> None:
    path = write_jsonl(
        tmp_path / "r.jsonl",
        [
            {"id": "a", "time": "5天", "name": "开办许可", "fee": "无", "x": 1},
            {"id": "b", "name": "变更", "fee": ["10元", "", "20元"], "time": None},
        ],
    )
    table = docs(cfg(path))
    assert table.schema == schema.DOCUMENTS_SCHEMA
    assert table.column(schema.DOC_ID).to_pylist() == ["a", "b"]
    assert table.column(schema.TEXT).to_pylist() == [
        "事项名称: 开办许可\n时限: 5天",
        "事项名称: 变更\nfee: 10元、20元",
    ]
    assert table.column(schema.TITLE).to_pylist() == ["开办许可", "变更"]
    hashes = table.column(schema.CONTENT_HASH).to_pylist()
    assert len(set(hashes)) == 2


def test_content_hash_tracks_text(tmp_path: Path) -> None:
    c = cfg(tmp_path / "x.jsonl")
    a = record_to_document({"id": 1, "name": "x"}, c, path="p", row=0)
    b = record_to_document({"id": 1, "name": "x", "other": 5}, c, path="p", row=0)
    d = record_to_document({"id": 1, "name": "y"}, c, path="p", row=0)
    assert a.content_hash == b.content_hash != d.content_hash


def test_hashed_ids_are_stable_without_id_field(tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "r.jsonl", [{"name": "a"}, {"name": "b"}])
    c = cfg(path, id_field=None, fields=["name"])
    first = docs(c).column(schema.DOC_ID).to_pylist()
    assert first == docs(c).column(schema.DOC_ID).to_pylist()
    assert len(set(first)) == 2


def test_duplicate_ids_name_both_rows(tmp_path: Path) -> None:
    path = write_jsonl(
        tmp_path / "r.jsonl",
        [{"id": "a", "name": "x"}, {"id": "b", "name": "y"}, {"id": "a", "name": "z"}],
    )
    with pytest.raises(
        InputError,
        match=r"line 3, field .id.: duplicate document id .a. \(first at line 1,",
    ) as e:
        docs(cfg(path, fields=["name"]), batch_rows=1)
    assert (e.value.path, e.value.row, e.value.field) == (str(path), 2, "id")


def test_duplicate_records_without_id_field(tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "r.jsonl", [{"name": "x"}, {"name": "x"}])
    with pytest.raises(InputError, match="exact duplicate"):
        docs(cfg(path, id_field=None, fields=["name"]))


def test_missing_id_field(tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "r.jsonl", [{"id": "a", "name": "x"}, {"name": "y"}])
    with pytest.raises(InputError, match="id field is missing") as e:
        docs(cfg(path))
    assert (e.value.row, e.value.field) == (1, "id")
    assert str(path) in str(e.value)


def test_empty_id(tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "r.jsonl", [{"id": " ", "name": "x"}])
    with pytest.raises(InputError, match="id field is empty"):
        docs(cfg(path))


def test_empty_document(tmp_path: Path) -> None:
    path = write_jsonl(
        tmp_path / "r.jsonl",
        [{"id": "a", "name": "x"}, {"id": "b", "name": "无", "fee": ""}],
    )
    with pytest.raises(InputError, match="empty document") as e:
        docs(cfg(path))
    assert e.value.row == 1


def test_non_utf8(tmp_path: Path) -> None:
    path = tmp_path / "r.jsonl"
    path.write_bytes(
        b'{"id": "a", "name": "x"}\n' + '{"id": "b", "name": "许可"}\n'.encode("gbk")
    )
    with pytest.raises(InputError, match="not valid UTF-8") as e:
        docs(cfg(path))
    assert e.value.row == 1


def test_invalid_json(tmp_path: Path) -> None:
    path = tmp_path / "r.jsonl"
    path.write_text('{"id": "a", "name": "x"}\n{"id": \n', encoding="utf-8")
    with pytest.raises(InputError, match="not valid JSON") as e:
        docs(cfg(path))
    assert e.value.row == 1
    assert e.value.line == 2
    assert str(e.value).startswith(f"file {path}, line 2: not valid JSON")


def test_a_json_array_file_is_read_as_records(tmp_path: Path) -> None:
    records = [{"id": "a", "name": "x"}, {"id": "b", "name": "y"}]
    path = tmp_path / "r.json"
    path.write_text(json.dumps(records, indent=2), encoding="utf-8")
    table = docs(cfg(path, fields=["name"]))
    assert table.column(schema.DOC_ID).to_pylist() == ["a", "b"]
    path.write_text('[{"id": "a", "name": "x"},\n 3]', encoding="utf-8")
    with pytest.raises(InputError, match="item 2 of the JSON array is a int"):
        docs(cfg(path, fields=["name"]))


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="does not exist"):
        docs(cfg(tmp_path / "nope.jsonl"))


def test_empty_corpus(tmp_path: Path) -> None:
    path = tmp_path / "r.jsonl"
    path.write_text("\n", encoding="utf-8")
    with pytest.raises(InputError, match="no records"):
        docs(cfg(path))


def test_csv_and_parquet_agree_with_jsonl(tmp_path: Path) -> None:
    records = [
        {"id": "a", "name": "x", "fee": "1", "time": "2"},
        {"id": "b", "name": "y"},
    ]
    expected = docs(cfg(write_jsonl(tmp_path / "r.jsonl", records)))
    csv = tmp_path / "r.csv"
    csv.write_text("id,name,fee,time\na,x,1,2\nb,y,,\n", encoding="utf-8")
    assert docs(cfg(csv)).equals(expected)
    pq.write_table(pa.Table.from_pylist(records), tmp_path / "r.parquet")
    assert docs(cfg(tmp_path / "r.parquet")).equals(expected)


def test_csv_non_utf8(tmp_path: Path) -> None:
    csv = tmp_path / "r.csv"
    csv.write_bytes(b"id,name\na,x\n" + "b,许可\n".encode("gbk"))
    with pytest.raises(InputError, match="not valid UTF-8"):
        docs(cfg(csv))


def test_txt_folder(tmp_path: Path) -> None:
    folder = tmp_path / "docs"
    (folder / "sub").mkdir(parents=True)
    (folder / "a.txt").write_text("第一篇\n", encoding="utf-8")
    (folder / "sub" / "b.txt").write_text("second", encoding="utf-8")
    table = docs(CorpusConfig(path=str(folder)))
    assert table.column(schema.DOC_ID).to_pylist() == ["a", "sub/b"]
    assert table.column(schema.TEXT).to_pylist() == ["第一篇", "second"]


def test_limit_and_batches(tmp_path: Path) -> None:
    path = write_jsonl(
        tmp_path / "r.jsonl", [{"id": str(i), "name": "x"} for i in range(10)]
    )
    batches = list(
        iter_document_batches(cfg(path, fields=["name"]), batch_rows=3, limit=7)
    )
    assert [b.num_rows for b in batches] == [3, 3, 1]


@pytest.mark.skipif(not SAMPLE.exists(), reason="examples/data sample is absent")
def test_guangdong_sample_with_shipped_field_map() -> None:
    from cube_ray.config import RunConfig

    c = RunConfig.from_yaml(ROOT / "conf" / "demo.yaml").corpus
    table = docs(c.model_copy(update={"limit": None}))
    assert table.num_rows == 120
    first = table.column(schema.TEXT)[0].as_py()
    assert first.startswith("事项名称: ")
    assert "无" not in first.splitlines()[-1].split(": ", 1)[1:]


@pytest.mark.parametrize("fmt", ["jsonl", "csv", "parquet"])
@pytest.mark.parametrize("key", ["fields", "title_field"])
def test_a_mistyped_field_is_one_error_naming_the_columns(
    tmp_path: Path, fmt: str, key: str
) -> None:
    """A field no record has would make every document lose it silently."""
    records = [{"id": "a", "name": "x", "fee": "1"}, {"id": "b", "name": "y"}]
    path = tmp_path / f"r.{fmt}"
    if fmt == "jsonl":
        write_jsonl(path, records)
    elif fmt == "csv":
        path.write_text("id,name,fee\na,x,1\nb,y,\n", encoding="utf-8")
    else:
        pq.write_table(pa.Table.from_pylist(records), path)
    good = cfg(path, fields=["name", "fee"], title_field="name")
    assert docs(good).num_rows == 2
    bad = (
        cfg(path, fields=["name", "fees"])
        if key == "fields"
        else cfg(path, fields=["name"], title_field="nmae")
    )
    with pytest.raises(InputError) as info:
        docs(bad)
    text = str(info.value)
    typo, fix = ("fees", "fee") if key == "fields" else ("nmae", "name")
    assert text.startswith(f"file {path}, field {typo!r}: corpus.{key} names {typo!r}")
    assert f"did you mean {fix!r}?" in text
    assert "'id', 'name'" in text
