"""Engine identity is defined once: the run's resume fingerprint, its engine
pools and ``cube-ray judges check``'s engine sharing read one definition."""

from __future__ import annotations

from typing import Any

import pytest

from cube_ray import config as config_module
from cube_ray.engines import OpenAIHttpEngineConfig
from cube_ray.engines.identity import engine_fingerprint, engine_id, engine_identity
from cube_ray.judge_check import _check as judge_check
from cube_ray.pipeline import method

BASE = OpenAIHttpEngineConfig(base_url="http://127.0.0.1:9/v1", model="m")


def _with(**update: Any) -> OpenAIHttpEngineConfig:
    data = BASE.model_dump()
    for key, value in update.items():
        if isinstance(value, dict):
            data[key] = {**(data.get(key) or {}), **value}
        else:
            data[key] = value
    return OpenAIHttpEngineConfig.model_validate(data)


# change -> (same outputs: rows kept on resume, same engine: a judge shares the
# generator's, same pool: stages share one engine pool)
CASES = {
    "sampling.temperature": ({"sampling": {"temperature": 0.7}}, False, True, True),
    "score_mode": ({"score_mode": "expected"}, False, True, True),
    "pool.batch_size": ({"pool": {"batch_size": 99}}, True, True, True),
    "pool.max_size": ({"pool": {"max_size": 3}}, True, True, False),
    "timeout_s": ({"timeout_s": 600.0}, True, False, False),
    # Through a Batch API: the same requests, the same rows (kept on resume).
    "batch": ({"batch": True, "batch_api": {"poll_s": 5.0}}, True, False, False),
    "price_per_mtok": (
        {"price_per_mtok": {"prompt": 1.0, "completion": 2.0}},
        True,
        True,
        True,
    ),
    "model": ({"model": "other"}, False, False, False),
}


@pytest.mark.parametrize("change", sorted(CASES))
def test_the_three_callers_agree_on_each_field(change: str) -> None:
    update, same_outputs, same_engine, same_pool = CASES[change]
    other = _with(**update)
    assert (method.engine_fingerprint(BASE) == method.engine_fingerprint(other)) is (
        same_outputs
    )
    assert judge_check._same_engine(BASE, other) is same_engine
    assert (engine_identity(BASE) == engine_identity(other)) is same_engine
    assert (engine_id(BASE) == engine_id(other)) is same_pool
    # One pool is one engine: a pool is never shared by two identities.
    assert not same_pool or same_engine


def test_every_caller_imports_the_one_definition() -> None:
    assert method.engine_fingerprint is engine_fingerprint
    assert config_module.engine_fingerprint is engine_fingerprint
    assert judge_check.engine_identity is engine_identity
