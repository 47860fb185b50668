"""Reading scores from text and from score-token log-probabilities."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from cube_ray.engines._scoring import (
    expected_value,
    parse_score,
    score_distribution,
    split_one_ten,
)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("0", 0.0),
        ("10", 10.0),
        (" 7\n", 7.0),
        ("7/10", None),
        ("Score: 7", None),
        ("11", None),
        ("-1", None),
        ("7.5", None),
        ("", None),
        (None, None),
        ("01", None),
    ],
)
def test_parse_score_is_strict(text: str | None, expected: float | None) -> None:
    assert parse_score(text) == expected


def test_distribution_renormalises_over_score_tokens() -> None:
    pairs = [("7", math.log(0.5)), (" 8", math.log(0.3)), ("Sure", math.log(0.2))]
    dist = score_distribution(pairs, ten_is_one_token=True)
    assert dist is not None
    assert dist[7] == pytest.approx(0.5 / 0.8)
    assert dist[8] == pytest.approx(0.3 / 0.8)
    assert expected_value(dist) == pytest.approx((3.5 + 2.4) / 0.8)


def test_distribution_sums_duplicates_and_ignores_masked_tokens() -> None:
    pairs = [("7", math.log(0.25)), (" 7", math.log(0.25)), ("3", -math.inf)]
    assert score_distribution(pairs, ten_is_one_token=True) == {7: 1.0}


def test_distribution_without_score_tokens_is_none() -> None:
    assert score_distribution([("yes", 0.0)], ten_is_one_token=True) is None
    assert score_distribution([], ten_is_one_token=False) is None


def test_one_is_split_between_one_and_ten() -> None:
    pairs = [("1", math.log(0.8)), ("9", math.log(0.2))]
    dist = score_distribution(pairs, ten_is_one_token=False, one_then_zero=0.75)
    assert dist == pytest.approx({1: 0.2, 10: 0.6, 9: 0.2})
    # Unknown split: the mass stays on 1 (documented bias, never 0).
    dist = score_distribution(pairs, ten_is_one_token=False, one_then_zero=None)
    assert dist == pytest.approx({1: 0.8, 9: 0.2})


def test_split_clamps_probability() -> None:
    assert split_one_ten({1: 1.0}, 1.5) == {1: 0.0, 10: 1.0}


@given(
    st.dictionaries(
        st.sampled_from([str(i) for i in range(11)] + ["x", " 5", "10 "]),
        st.floats(min_value=-30, max_value=0),
        min_size=1,
    ),
    st.booleans(),
    st.one_of(st.none(), st.floats(min_value=0, max_value=1)),
)
def test_expected_score_is_always_in_range(
    lps: dict[str, float], ten_single: bool, split: float | None
) -> None:
    dist = score_distribution(
        lps.items(), ten_is_one_token=ten_single, one_then_zero=split
    )
    if dist is None:
        assert all(k.strip() not in {str(i) for i in range(11)} for k in lps)
        return
    assert sum(dist.values()) == pytest.approx(1.0)
    assert 0.0 <= expected_value(dist) <= 10.0
