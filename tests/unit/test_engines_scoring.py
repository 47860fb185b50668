"""Reading scores from text and from score-token log-probabilities."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, strategies as st

from cube_ray.engines._scoring import (
    SPLIT_TOLERANCE,
    expected_value,
    parse_score,
    read_expected,
    score_distribution,
    split_matters,
    split_one_ten,
    zero_share,
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


def _lp(dist: dict[str, float]) -> list[tuple[str, float]]:
    return [(t, math.log(p)) for t, p in dist.items()]


@pytest.mark.parametrize(
    ("mass_on_scores", "min_mass", "status"),
    [
        (0.6, 0.5, "ok"),
        (0.5, 0.5, "ok"),  # the threshold itself passes
        (0.49, 0.5, "low_score_mass"),
        (0.02, 0.0, "ok"),  # 0 switches the check off
        (0.99, 1.0, "low_score_mass"),
    ],
)
def test_min_score_mass(mass_on_scores: float, min_mass: float, status: str) -> None:
    first = _lp({"7": mass_on_scores * 0.5, "9": mass_on_scores * 0.5})
    first.append(("Sure", math.log(1.0 - mass_on_scores)))
    got = read_expected(
        first, text="7", ten_is_one_token=True, one_then_zero=None, min_mass=min_mass
    )
    assert got.status == status
    assert got.mass == pytest.approx(mass_on_scores)
    if status == "ok":
        assert got.score == pytest.approx(8.0)
        assert got.raw == "7"
    else:
        # No score, never 0; the raw text keeps the judge's text and the mass.
        assert got.score is None
        assert got.raw == (
            f"7 [score-token mass {mass_on_scores:.4f} < min_score_mass {min_mass:g}]"
        )


def test_no_score_token_is_no_logprobs_not_zero() -> None:
    got = read_expected(
        _lp({"Sure": 0.9, "**": 0.1}),
        text="7",
        ten_is_one_token=True,
        one_then_zero=None,
        min_mass=0.0,
    )
    assert (got.score, got.status, got.mass) == (None, "no_logprobs", 0.0)
    assert got.raw is not None
    assert got.raw.startswith("7 [")


def test_one_ten_split_resolved_by_the_second_step() -> None:
    # "10" is "1" + "0": P(first "1") = 0.6, P("0" | "1") = 0.75.
    first = _lp({"1": 0.6, "9": 0.4})
    q = zero_share(_lp({"0": 0.75, "<eos>": 0.25}))
    assert q == pytest.approx(0.75)
    got = read_expected(
        first, text="10", ten_is_one_token=False, one_then_zero=q, min_mass=0.5
    )
    assert got.status == "ok"
    # 1 * 0.15 + 10 * 0.45 + 9 * 0.4
    assert got.score == pytest.approx(0.15 + 4.5 + 3.6)


def test_one_ten_split_unread_falls_back_to_argmax() -> None:
    first = _lp({"9": 0.6, "1": 0.4})
    for ten in (False, None):  # known split tokenizer, or unknown
        got = read_expected(
            first, text="9", ten_is_one_token=ten, one_then_zero=None, min_mass=0.5
        )
        assert (got.score, got.status) == (9.0, "argmax_fallback")
        assert got.raw is not None
        assert got.raw.startswith("9 [")
        assert "3.60" in got.raw  # how far the split could move the score
    # A fallback text that is not a score stays missing, never 0.
    got = read_expected(
        first, text="x", ten_is_one_token=False, one_then_zero=None, min_mass=0.5
    )
    assert (got.score, got.status) == (None, "parse_error")


def test_one_ten_split_not_needed() -> None:
    # "10" among the alternatives proves it is one token: "1" is the score 1.
    first = _lp({"9": 0.5, "1": 0.25, "10": 0.25})
    got = read_expected(
        first, text="9", ten_is_one_token=None, one_then_zero=None, min_mass=0.5
    )
    assert (got.score, got.status) == (pytest.approx(4.5 + 0.25 + 2.5), "ok")
    # A negligible "1" counts as 1: the error is below the tolerance.
    p1 = SPLIT_TOLERANCE / 9 * 0.9
    first = _lp({"7": 1.0 - p1, "1": p1})
    assert not split_matters(
        dict(zip((7, 1), (1.0 - p1, p1), strict=True)), ten_is_one_token=False
    )
    got = read_expected(
        first, text="7", ten_is_one_token=False, one_then_zero=None, min_mass=0.5
    )
    assert got.status == "ok"
    assert got.score is not None
    exact_if_ten = 7 * (1 - p1) + 10 * p1
    assert abs(got.score - exact_if_ten) <= SPLIT_TOLERANCE


def test_zero_share_is_the_model_probability() -> None:
    # Not renormalised over a top-k cut; duplicates with spacing add up.
    assert zero_share(_lp({"0": 0.3, " 0": 0.1, "/": 0.2})) == pytest.approx(0.4)
    assert zero_share([]) == 0.0


@given(
    st.dictionaries(
        st.sampled_from([str(i) for i in range(11)] + ["x", " 5", "10 "]),
        st.floats(min_value=-30, max_value=0),
        min_size=1,
    ),
    st.one_of(st.none(), st.booleans()),
    st.one_of(st.none(), st.floats(min_value=0, max_value=1)),
    st.floats(min_value=0, max_value=1),
)
def test_read_expected_statuses(
    lps: dict[str, float],
    ten_single: bool | None,
    split: float | None,
    min_mass: float,
) -> None:
    got = read_expected(
        lps.items(),
        text="5",
        ten_is_one_token=ten_single,
        one_then_zero=split,
        min_mass=min_mass,
    )
    assert got.mass >= 0.0
    if got.status == "ok":
        assert got.mass >= min_mass
        assert got.score is not None
        assert 0.0 <= got.score <= 10.0
    elif got.status == "argmax_fallback":
        assert got.score == 5.0
        assert split is None
        assert ten_single is not True
    else:
        assert got.status in {"low_score_mass", "no_logprobs"}
        assert got.score is None
        assert got.mass < min_mass or got.mass == 0.0
