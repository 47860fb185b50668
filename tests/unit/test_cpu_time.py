"""The demo's time on this CPU: the profile from the CPU's flags, the estimate of
the demo's plan, and the sample ``--fit-minutes`` chooses (no Ray, no engine)."""

from __future__ import annotations

from pathlib import Path

import pytest

from cube_ray.config import RunConfig
from cube_ray.cpu_time import SPEEDS, stage_seconds
from cube_ray.errors import ConfigError
from cube_ray.plan import plan_run
from cube_ray.run_statement import (
    CpuInfo,
    cpu_info,
    estimate_run,
    fit_sample,
    run_statement,
    with_sample_size,
)
from tests.pipeline_helpers import fake_config, make_corpus, make_qa_file

DEMO = Path(__file__).resolve().parents[2] / "conf" / "demo.yaml"
BF16 = CpuInfo("test CPU", 2, native_bfloat16=True)
AVX2 = CpuInfo("test CPU", 2, native_bfloat16=False)


def _demo(tmp_path: Path, *, converted: bool = True) -> RunConfig:
    """conf/demo.yaml with its embedded model cached under ``tmp_path``."""
    config = RunConfig.from_yaml(DEMO)
    cache = tmp_path / "models"
    if converted:
        done = cache / "qwen2.5-coder-1.5b-instruct" / "cube_ray_converted.json"
        done.parent.mkdir(parents=True)
        done.write_text("{}", encoding="utf-8")
    judges = {
        name: j.model_copy(update={"cache_dir": str(cache)})
        if j.backend == "embedded"
        else j
        for name, j in config.judges.items()
    }
    return config.model_copy(
        update={
            "generator": config.generator.model_copy(update={"cache_dir": str(cache)}),
            "judges": judges,
        }
    )


def _total(config: RunConfig, cpu: CpuInfo) -> float:
    found = estimate_run(config, plan_run(config), cpu)
    assert found is not None
    return found[0].total_s


@pytest.mark.parametrize(
    ("flags", "native"),
    [
        ("fpu avx2 avx512f avx512_bf16", True),
        ("fpu avx2 amx_bf16 amx_tile", True),
        ("fpu avx2 avx512f", False),
        ("fpu avx2", False),
    ],
)
def test_cpu_info_reads_bfloat16_from_the_flags(
    tmp_path: Path, flags: str, native: bool
) -> None:
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text(
        f"processor\t: 0\nmodel name\t: Some CPU 9000\nflags\t\t: {flags}\n",
        encoding="utf-8",
    )
    info = cpu_info(cpuinfo)
    assert (info.model, info.native_bfloat16) == ("Some CPU 9000", native)
    assert info.cores >= 1


def test_float32_profile_is_slower() -> None:
    fast, slow = SPEEDS["bfloat16"], SPEEDS["float32"]
    assert stage_seconds(10_000, 1_000, speed=slow, scale=1.0) > stage_seconds(
        10_000, 1_000, speed=fast, scale=1.0
    )


def test_demo_estimate_follows_the_cpu_and_the_sample(tmp_path: Path) -> None:
    config = _demo(tmp_path)
    rows = plan_run(config)
    found = estimate_run(config, rows, AVX2)
    assert found is not None
    est, missing = found
    assert missing == []  # the reference judge has no model: not a stage here
    assert [s for s, _ in est.stages] == [
        "questions",
        "answers:zero",
        "answers:full",
        "answers:rag",
        "answers:rag@k1",
        "scores:qwen",
    ]
    assert est.convert_s == 0  # converted already
    assert est.startup_s == SPEEDS["float32"].startup_s  # one engine, four stages
    # Without native bfloat16 the demo computes in float32: slower.
    assert _total(config, AVX2) > 1.3 * _total(config, BF16)
    # More cores: faster; a larger sample: longer.
    assert _total(config, CpuInfo("x", 8, native_bfloat16=False)) < _total(config, AVX2)
    sizes = [_total(with_sample_size(config, n), AVX2) for n in (2, 4, 8, 12)]
    assert sizes == sorted(sizes)
    assert len(set(sizes)) == 4
    # A forced float32 dtype takes the float32 profile on any CPU.
    forced = config.model_copy(
        update={"generator": config.generator.model_copy(update={"dtype": "float32"})}
    )
    assert _total(forced, BF16) > _total(config, BF16)


def test_unconverted_model_adds_the_conversion_once(tmp_path: Path) -> None:
    config = _demo(tmp_path, converted=False)
    found = estimate_run(config, plan_run(config), BF16)
    assert found is not None
    assert found[0].convert_s == SPEEDS["bfloat16"].convert_s


def test_fit_minutes_chooses_the_largest_sample_that_fits(tmp_path: Path) -> None:
    config = _demo(tmp_path)
    between = (
        _total(with_sample_size(config, 7), AVX2)
        + _total(with_sample_size(config, 8), AVX2)
    ) / 2
    sized, note = fit_sample(config, minutes=between / 60, limit=None, cpu=AVX2)
    assert sized.sample is not None
    assert config.sample is not None
    assert sized.sample.size == 7
    assert sized.sample.strata == config.sample.strata == ["AREA_CODE_TEXT"]
    assert list(sized.judges) == ["qwen", "reference"]  # nothing dropped
    assert "sample size 7 of 12" in note
    assert "8 would take" in note
    assert note.endswith("; all 12: --sample-size 12")
    # Time enough: the config's own size, never more.
    sized, note = fit_sample(config, minutes=10_000, limit=None, cpu=AVX2)
    assert sized.sample is not None
    assert sized.sample.size == 12
    assert "sample size 12 of 12" in note
    # Not even the 6 questions a verdict needs fit: 6, without the LLM judge
    # (not qualified, so never in the headline), and it says so.
    sized, note = fit_sample(config, minutes=0.1, limit=None, cpu=AVX2)
    assert sized.sample is not None
    assert sized.sample.size == 6
    assert list(sized.judges) == ["reference"]
    assert "even that is over 0.1 min" in note
    assert "dropped: qwen left out of the run" in note


def test_statement_says_work_time_and_how_to_shorten(tmp_path: Path) -> None:
    config = _demo(tmp_path)
    statement = run_statement(config, limit=None, cpu=AVX2, config_path="demo.yaml")
    text = "\n".join(statement.lines)
    assert statement.estimate_s == pytest.approx(_total(config, AVX2))
    assert text.startswith("work: 12 questions (a sample of 12 documents; strata: ")
    assert "492 engine calls" in text  # 156 LLM calls, 336 of the reference judge
    assert (
        "time on this CPU (test CPU, 2 cores, no native bfloat16; the engine "
        "computes in float32): ≈ "
    ) in text
    # A forced float32 on a CPU with bfloat16 says which the estimate is for.
    forced = config.model_copy(
        update={
            "generator": config.generator.model_copy(update={"dtype": "float32"}),
            "judges": {
                n: j.model_copy(update={"dtype": "float32"}) if n == "qwen" else j
                for n, j in config.judges.items()
            },
        }
    )
    line = run_statement(forced, limit=None, cpu=BF16).lines[1]
    assert "native bfloat16; the engine computes in float32" in line
    assert "`cube-ray run demo.yaml --sample-size " in text
    # On a cluster this CPU says nothing about the time.
    remote = run_statement(config, limit=None, cpu=AVX2, remote=True)
    assert remote.estimate_s is None
    assert remote.lines[-1].startswith("time: not estimated")


def test_no_local_engine_no_estimate(tmp_path: Path) -> None:
    corpus, ids = make_corpus(tmp_path, 3)
    config = RunConfig.from_yaml(
        fake_config(tmp_path, corpus, make_qa_file(tmp_path, ids))
    )
    statement = run_statement(config, limit=None, cpu=AVX2)
    assert statement.estimate_s is None
    with pytest.raises(ConfigError, match="not local CPU engines"):
        fit_sample(config, minutes=5, limit=None, cpu=AVX2)
