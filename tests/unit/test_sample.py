"""The planned sample (CUBE_METHOD.md section 11): keys, shares, nesting."""

from __future__ import annotations

import hashlib
import random
from pathlib import Path

import polars as pl
import pytest

from cube_ray.config import SampleConfig
from cube_ray.sample import (
    MISSING,
    SampleState,
    doc_hash,
    load_strata,
    sample_block,
    sample_order,
    stratum_key,
    unit_offset,
    write_sample,
)


def _population(seed: int, n: int, strata: int) -> tuple[list[str], list[str]]:
    rng = random.Random(seed)
    ids = [f"doc-{seed}-{i}" for i in range(n)]
    # Unequal strata: a few big ones and a tail of small ones.
    weights = [1.0 / (h + 1) for h in range(strata)]
    return ids, rng.choices([f"s{h}" for h in range(strata)], weights, k=n)


def _counts(order: pl.DataFrame, n: int) -> dict[str, tuple[int, int]]:
    """Stratum -> (N_h, n_h) for the sample of size n."""
    block = sample_block(order, size=n, seed=0, fields=[])
    return {k: (v["population"], v["size"]) for k, v in block["strata"].items()}


def test_keys_follow_the_contract() -> None:
    """key = (i + u_h) / N_h with i the rank of sha256(f"{s}:{doc_id}")."""
    ids = [f"d{i}" for i in range(7)]
    strata = ["a", "b", "a", "a", "b", "a", "b"]
    out = sample_order(ids, strata, seed=11)
    for h in ("a", "b"):
        members = [d for d, s in zip(ids, strata, strict=True) if s == h]
        ranked = sorted(
            members, key=lambda d: hashlib.sha256(f"11:{d}".encode()).hexdigest()
        )
        u = (
            int.from_bytes(hashlib.sha256(f"11:{h}".encode()).digest()[:8], "big")
            / 2**64
        )
        expected = {d: (i + u) / len(members) for i, d in enumerate(ranked)}
        got = dict(
            out.filter(pl.col("stratum") == h).select("doc_id", "key").iter_rows()
        )
        assert got == pytest.approx(expected)
    assert out["key"].is_sorted()
    assert out["order"].to_list() == list(range(7))
    assert doc_hash(11, "d1") == hashlib.sha256(b"11:d1").hexdigest()
    assert unit_offset(11, "a") == pytest.approx(
        int.from_bytes(hashlib.sha256(b"11:a").digest()[:8], "big") / 2**64
    )


@pytest.mark.parametrize("seed", range(20))
def test_two_strata_within_one_of_proportional_at_every_size(seed: int) -> None:
    """With up to two strata every n_h is within +-1 of n * N_h / N (every n)."""
    ids, strata = _population(seed, 300 + 37 * seed, 2)
    order = sample_order(ids, strata, seed=seed)
    total = order.height
    running = dict.fromkeys(set(strata), 0)
    pops = {h: strata.count(h) for h in running}
    for n, h in enumerate(order["stratum"].to_list(), start=1):
        running[h] += 1
        for g, n_g in running.items():
            assert abs(n_g - n * pops[g] / total) <= 1.0, (n, g, n_g)


@pytest.mark.parametrize("seed", range(10))
def test_many_strata_shares_stay_near_proportional(seed: int) -> None:
    """With H strata the deviation of n_h from n * N_h / N is below
    1 + (N_h / N) * (H - 1) (each stratum's own rounding, plus its share of the
    others'); it is within +-1 for most strata."""
    n_strata = 12
    ids, strata = _population(seed, 2000, n_strata)
    order = sample_order(ids, strata, seed=seed)
    within_one = checked = 0
    for n in (20, 60, 120, 500, 1999):
        for _h, (pop, got) in _counts(order, n).items():
            dev = abs(got - n * pop / 2000)
            assert dev < 1.0 + pop / 2000 * (n_strata - 1)
            checked += 1
            within_one += dev <= 1.0
        assert sum(got for _, got in _counts(order, n).values()) == n
    assert within_one / checked >= 0.9


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
    # Every document its own stratum: each gets key u_h, the order is by u_h.
    ids = [f"d{i}" for i in range(5)]
    own = sample_order(ids, ids, seed=9)
    assert own["key"].to_list() == sorted(unit_offset(9, d) for d in ids)
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
