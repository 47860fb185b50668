"""The planned sample (CUBE_METHOD.md section 11): order, shares, nesting."""

from __future__ import annotations

import hashlib
import json
import random
import shutil
from pathlib import Path

import polars as pl
import pytest

from cube_ray.config import SampleConfig
from cube_ray.sample import (
    MISSING,
    SampleState,
    allocation_sequence,
    doc_hash,
    load_strata,
    sample_block,
    sample_order,
    stratum_key,
    unit_offset,
    write_sample,
)

RECORDS = (
    Path(__file__).resolve().parents[3]
    / "shared"
    / "data"
    / "guangdong_service_items"
    / "records.jsonl"
)


def _population(seed: int, n: int, strata: int) -> tuple[list[str], list[str]]:
    rng = random.Random(seed)
    ids = [f"doc-{seed}-{i}" for i in range(n)]
    # Unequal strata: a few big ones and a tail of small ones.
    weights = [1.0 / (h + 1) for h in range(strata)]
    return ids, rng.choices([f"s{h}" for h in range(strata)], weights, k=n)


def _check_quota(order: pl.DataFrame) -> None:
    """At every n (1..N) each stratum holds n * N_h / N within
    delta = 1 - 1 / (2H - 2) (0 for one stratum): floor or ceil of it."""
    sequence = order["stratum"].to_list()
    total = len(sequence)
    pops = {h: sequence.count(h) for h in set(sequence)}
    scale, slack = (2 * len(pops) - 2, 2 * len(pops) - 3) if len(pops) > 1 else (1, 0)
    running = dict.fromkeys(pops, 0)
    for n, h in enumerate(sequence, start=1):
        running[h] += 1
        for g, n_g in running.items():
            low, high = n * pops[g] // total, -(-n * pops[g] // total)
            assert low <= n_g <= high, (n, g, n_g, n * pops[g] / total)
            # |n_g - n N_g / N| <= slack / scale, in integers
            assert scale * abs(n_g * total - n * pops[g]) <= slack * total, (n, g)


def test_order_follows_the_rule() -> None:
    """Position n goes to the stratum of the quota sequence and, within the
    stratum, documents come in the order of sha256(f"{s}:{doc_id}")."""
    ids = [f"d{i}" for i in range(7)]
    strata = ["a", "b", "a", "a", "b", "a", "b"]
    out = sample_order(ids, strata, seed=11)
    assert out["order"].to_list() == list(range(7))
    assert out["stratum"].to_list() == allocation_sequence({"a": 4, "b": 3}, seed=11)
    for h in ("a", "b"):
        members = [d for d, s in zip(ids, strata, strict=True) if s == h]
        ranked = sorted(
            members, key=lambda d: hashlib.sha256(f"11:{d}".encode()).hexdigest()
        )
        assert out.filter(pl.col("stratum") == h)["doc_id"].to_list() == ranked
    assert doc_hash(11, "d1") == hashlib.sha256(b"11:d1").hexdigest()
    assert unit_offset(11, "a") == pytest.approx(
        int.from_bytes(hashlib.sha256(b"11:a").digest()[:8], "big") / 2**64
    )


@pytest.mark.parametrize("seed", range(20))
def test_within_one_of_proportional_at_every_size(seed: int) -> None:
    """Whatever the number of strata (1 to 39), every n_h is within
    1 - 1 / (2H - 2) of n * N_h / N at every n (section 11's key rule missed
    +-1 with 8 strata, up to 2.9 documents off: BENCHMARKS.md)."""
    ids, strata = _population(seed, 200 + 97 * seed, 1 + 2 * seed)
    _check_quota(sample_order(ids, strata, seed=seed))


@pytest.mark.parametrize(
    "fields",
    [
        ["AREA_CODE_TEXT"],
        ["TASK_TYPE_TEXT"],
        ["AREA_CODE_TEXT", "TASK_TYPE_TEXT"],
        ["DEPT_NAME"],
    ],
)
def test_guangdong_strata_exact_and_nested(fields: list[str]) -> None:
    """The 2,262 Guangdong records: +-1 of proportional at every n = 1..2262,
    and the summary's shares are those of the order's first n rows."""
    if not RECORDS.is_file():
        pytest.skip(f"the shared Guangdong corpus is not at {RECORDS}")
    lines = RECORDS.read_text(encoding="utf-8").splitlines()
    records = [json.loads(x) for x in lines]
    ids = [r["TASK_CODE"] for r in records]
    strata = [stratum_key([r.get(f) for f in fields]) for r in records]
    order = sample_order(ids, strata, seed=7)
    assert order.height == len(set(ids)) == 2262
    assert sorted(order["doc_id"].to_list()) == sorted(ids)
    _check_quota(order)
    # One order whatever the records' order: a rerun with a larger size draws
    # the same first n documents, so every sample contains the smaller ones.
    shuffled = list(zip(ids, strata, strict=True))
    random.Random(1).shuffle(shuffled)
    again = sample_order([d for d, _ in shuffled], [h for _, h in shuffled], seed=7)
    assert again.equals(order)
    for n in (1, 60, 120, 1000, 2262):
        block = sample_block(order, size=n, seed=7, fields=fields)
        head = order.head(n)["stratum"].to_list()
        assert {k: v["size"] for k, v in block["strata"].items() if v["size"]} == {
            h: head.count(h) for h in set(head)
        }


def test_allocation_sequence_edges() -> None:
    assert allocation_sequence({}, seed=0) == []
    assert allocation_sequence({"a": 3}, seed=0) == ["a", "a", "a"]
    assert allocation_sequence({"a": 2, "empty": 0}, seed=0) == ["a", "a"]
    # Equal strata alternate; the seed decides which goes first.
    firsts = {allocation_sequence({"x": 5, "y": 5}, seed=s)[0] for s in range(20)}
    assert firsts == {"x", "y"}
    seq = allocation_sequence({"x": 5, "y": 5}, seed=0)
    assert all(seq[i] != seq[i + 1] for i in range(0, 10, 2))


def test_nested_and_deterministic() -> None:
    ids, strata = _population(3, 1000, 5)
    a = sample_order(ids, strata, seed=42)
    b = sample_order(list(reversed(ids)), list(reversed(strata)), seed=42)
    assert a.equals(b)  # input order does not matter
    for n, m in ((10, 11), (60, 120), (1, 999)):
        small = set(a.head(n)["doc_id"].to_list())
        assert small < set(a.head(m)["doc_id"].to_list())
    other = sample_order(ids, strata, seed=43)
    assert set(other.head(60)["doc_id"].to_list()) != set(
        a.head(60)["doc_id"].to_list()
    )


def test_edge_cases() -> None:
    # One document, one stratum; size above the population takes it all.
    one = sample_order(["only"], ["all"], seed=0)
    assert one["order"].to_list() == [0]
    block = sample_block(one, size=5, seed=0, fields=[])
    assert block["size"] == 1
    assert block["strata"] == {"all": {"population": 1, "size": 1}}
    # Every document its own stratum: all fall due at N, ties go by u_h.
    ids = [f"d{i}" for i in range(5)]
    own = sample_order(ids, ids, seed=9)
    assert own["doc_id"].to_list() == sorted(ids, key=lambda d: unit_offset(9, d))
    # A missing or empty value is one stratum of its own.
    assert stratum_key([None]) == stratum_key([""]) == MISSING
    assert stratum_key(["x", None]) == f"x / {MISSING}"
    # Empty population.
    empty = sample_order([], [], seed=0)
    assert empty.height == 0
    assert sample_block(empty, size=3, seed=0, fields=["f"])["size"] == 0


def test_config_is_strict() -> None:
    assert SampleConfig(size=5).strata == []
    with pytest.raises(ValueError, match="list each corpus field once"):
        SampleConfig(size=5, strata=["a", "a"])
    with pytest.raises(ValueError, match="greater than or equal to 1"):
        SampleConfig(size=0)
    with pytest.raises(ValueError, match="Extra inputs"):
        SampleConfig.model_validate({"size": 5, "fraction": 0.1})


def test_load_strata_maps_questions_of_the_sample(tmp_path: Path) -> None:
    order = sample_order(["a", "b", "c", "d"], ["x", "x", "y", "y"], seed=1)
    block = sample_block(order, size=2, seed=1, fields=["f"])
    write_sample(tmp_path / "sample", order, SampleState(2, 1, ("f",), "fp", block))
    assert load_strata(tmp_path) is not None
    assert load_strata(tmp_path).height == 0  # type: ignore[union-attr]
    (tmp_path / "questions").mkdir()
    pl.DataFrame(
        {"question_id": ["qa", "qb", "qc", "qd"], "doc_id": ["a", "b", "c", "d"]}
    ).write_parquet(tmp_path / "questions" / "part-1.parquet")
    got = load_strata(tmp_path)
    assert got is not None
    sampled = set(order.head(2)["doc_id"].to_list())
    assert set(got["question_id"].to_list()) == {f"q{d}" for d in sampled}
    assert sorted(got["stratum"].to_list()) == ["x", "y"]
    assert load_strata(tmp_path / "nothing") is None


def test_dry_run_costs_the_sample(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--dry-run`` with ``sample:`` counts the sample's questions and prices
    the priced engines (the same columns as ``cube-ray plan``)."""
    import yaml

    from cube_ray.cli import main
    from tests.pipeline_helpers import fake_config, make_corpus, make_qa_file

    corpus, ids = make_corpus(tmp_path, 40)
    cfg_path = fake_config(tmp_path, corpus, make_qa_file(tmp_path, ids))
    cfg = yaml.safe_load(cfg_path.read_text(encoding="utf-8"))
    cfg["sample"] = {"size": 10, "strata": ["AREA_CODE_TEXT"], "seed": 3}
    cfg["judges"]["j1"]["price_per_mtok"] = {"prompt": 1.0, "completion": 2.0}
    cfg_path.write_text(yaml.safe_dump(cfg, allow_unicode=True), encoding="utf-8")
    assert main(["run", str(cfg_path), "--dry-run"]) == 0
    out = capsys.readouterr().out
    rows = {line.split()[0]: line.split() for line in out.splitlines() if line}
    assert rows["questions"][2] == "10"
    assert rows["scores:j1"][2] == str(3 * 10 * 4)
    assert rows["size"][1:] == [
        "questions",
        "prompt_tokens",
        "completion_tokens",
        "engine_hours",
        "gpu_hours",
        "api_cost",
    ]
    this_run = next(x for x in out.splitlines() if x.startswith("this run")).split()
    assert this_run[2] == "10"
    assert this_run[5:7] == ["n/a", "n/a"]  # no pilot: no measured speed
    assert float(this_run[7]) > 0  # j1 is priced


def test_unknown_strata_field_is_one_error_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A strata field no record has: exit 2 before Ray starts, nothing written."""
    import yaml

    from cube_ray.cli import main
    from tests.pipeline_helpers import fake_config, make_corpus, make_qa_file

    corpus, ids = make_corpus(tmp_path, 5)
    cfg_path = fake_config(tmp_path, corpus, make_qa_file(tmp_path, ids))
    cfg = yaml.safe_load(cfg_path.read_text(encoding="utf-8"))
    cfg["sample"] = {"size": 2, "strata": ["AREA_CODE_TEXT", "REGION"]}
    cfg_path.write_text(yaml.safe_dump(cfg, allow_unicode=True), encoding="utf-8")
    run_dir = tmp_path / "run"
    assert main(["run", str(cfg_path), "--out", str(run_dir)]) == 2
    err = capsys.readouterr().err
    assert "field 'REGION'" in err
    assert "sample.strata names ['REGION'], which no record has a value for" in err
    assert not run_dir.exists()
    assert [p.name for p in tmp_path.iterdir() if "staging" in p.name] == []


def _old_rule_dir(run_dir: Path, ids: list[str], strata: list[str], size: int) -> None:
    """A run dir's ``sample/`` as the key rule wrote it (before ``rule``)."""
    pops = {h: strata.count(h) for h in set(strata)}
    rank: dict[str, int] = {}
    for h in pops:
        members = sorted(
            (d for d, s in zip(ids, strata, strict=True) if s == h),
            key=lambda d: doc_hash(5, d),
        )
        rank.update({d: i for i, d in enumerate(members)})
    keys = [
        (rank[d] + unit_offset(5, h)) / pops[h]
        for d, h in zip(ids, strata, strict=True)
    ]
    frame = pl.DataFrame({"doc_id": ids, "stratum": strata, "key": keys})
    frame = (
        frame.sort("key")
        .with_row_index("order")
        .select("doc_id", "stratum", "key", pl.col("order").cast(pl.Int64))
    )
    folder = run_dir / "sample"
    folder.mkdir(parents=True)
    frame.write_parquet(folder / "sample.parquet")
    fields = ["AREA_CODE_TEXT", "TASK_TYPE_TEXT"]
    block = sample_block(frame, size=size, seed=5, fields=fields)
    meta = {
        "size": size,
        "seed": 5,
        "fields": fields,
        "population_fingerprint": "old",
        "sample": block,
    }
    (folder / "sample.json").write_text(json.dumps(meta), encoding="utf-8")


def test_dir_sampled_by_the_old_key_rule(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A run dir whose sample the key rule drew: the same config now draws
    other documents, so it is refused (exit 2, before Ray starts, nothing
    written) with a message naming the rule change; ``--shrink`` takes the new
    rule's sample and writes its order with ``rule: quota``."""
    import yaml

    from cube_ray.cli import main
    from cube_ray.config import RunConfig
    from cube_ray.errors import ConfigError
    from cube_ray.pipeline import RunOptions, _Driver
    from cube_ray.sample import read_sample
    from tests.pipeline_helpers import fake_config, make_corpus, make_qa_file

    corpus, ids = make_corpus(tmp_path, 120)
    records = [json.loads(x) for x in corpus.read_text(encoding="utf-8").splitlines()]
    fields = ["AREA_CODE_TEXT", "TASK_TYPE_TEXT"]
    strata = [stratum_key([r.get(f) for f in fields]) for r in records]
    assert len(set(strata)) >= 3
    cfg_path = fake_config(tmp_path, corpus, make_qa_file(tmp_path, ids))
    cfg = yaml.safe_load(cfg_path.read_text(encoding="utf-8"))
    cfg["sample"] = {"size": 30, "strata": fields, "seed": 5}
    cfg_path.write_text(yaml.safe_dump(cfg, allow_unicode=True), encoding="utf-8")
    run_dir = tmp_path / "run"
    _old_rule_dir(run_dir, ids, strata, 30)
    before = {p.name: p.read_bytes() for p in (run_dir / "sample").iterdir()}
    old_ids = set(
        pl.read_parquet(run_dir / "sample" / "sample.parquet").head(30)["doc_id"]
    )
    new_ids = set(sample_order(ids, strata, seed=5).head(30)["doc_id"])
    assert old_ids != new_ids  # the rules draw different samples here

    assert main(["run", str(cfg_path), "--out", str(run_dir)]) == 2
    err = capsys.readouterr().err
    assert "drawn by the earlier sample rule 'key'" in err
    assert f"leaves out {len(old_ids - new_ids)} of those documents" in err
    assert "Pass --shrink" in err
    assert sorted(p.name for p in run_dir.iterdir()) == ["sample"]
    assert {p.name: p.read_bytes() for p in (run_dir / "sample").iterdir()} == before
    assert read_sample(run_dir).rule == "key"  # type: ignore[union-attr]

    def driver(*, shrink: bool) -> _Driver:
        options = RunOptions(
            run_dir=run_dir, progress=False, report=False, shrink=shrink
        )
        return _Driver(RunConfig.from_yaml(cfg_path), options)

    with pytest.raises(ConfigError, match="earlier sample rule"):
        driver(shrink=False).intake.stage_documents()
    shrunk = driver(shrink=True)
    staging, _, _ = shrunk.intake.stage_documents()
    shrunk.sample.write_sample_dir()
    shutil.rmtree(staging)
    state = read_sample(run_dir)
    assert state is not None
    assert (state.rule, state.size) == ("quota", 30)
    table = pl.read_parquet(run_dir / "sample" / "sample.parquet")
    assert table.columns == ["doc_id", "stratum", "order"]
    assert set(table.head(30)["doc_id"]) == new_ids
