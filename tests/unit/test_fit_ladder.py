"""``--fit-minutes`` never goes below the questions a verdict needs (issue 36 item 7).

The minimum (:func:`cube_ray.aggregate.verdict_minimum`) against scipy's exact
Wilcoxon test; the pure choice of a ladder step and a size
(:func:`cube_ray.run_statement.choose_fit`); the ladder itself
(:func:`cube_ray.run_statement.fit_ladder`) on ``conf/demo.yaml``; and
:func:`~cube_ray.run_statement.fit_sample` on the demo with a fixed CPU.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from scipy import stats

from cube_ray.aggregate import MIN_NONZERO_PAIRS, verdict_minimum, wilcoxon_greater
from cube_ray.config import RunConfig
from cube_ray.run_statement import CpuInfo, choose_fit, fit_ladder, fit_sample

DEMO = Path(__file__).resolve().parents[2] / "conf" / "demo.yaml"


@pytest.mark.parametrize("alpha", [0.2, 0.1, 0.05, 0.02, 0.01, 0.005, 0.001])
def test_verdict_minimum_is_the_fewest_pairs_that_can_reach_alpha(
    alpha: float,
) -> None:
    n = verdict_minimum(alpha)
    # n differences, all positive: the best a judge can do on n questions.
    assert wilcoxon_greater([1.0] * n) < alpha
    exact = float(stats.wilcoxon(list(range(1, n + 1)), alternative="greater").pvalue)
    assert exact < alpha
    # One question fewer can never give a verdict, however the judge scores.
    assert wilcoxon_greater(list(range(1, n))) >= alpha
    assert n >= MIN_NONZERO_PAIRS


def _cost(step: int, n: int) -> float:
    """60 s start-up, then 100 s a question with all the work, 50 after step 1,
    5 after step 2 (the LLM judge left out)."""
    return 60.0 + (100.0, 50.0, 5.0)[step] * n


@pytest.mark.parametrize("budget", [1, 100, 300, 500, 700, 1000, 1300, 5000])
@pytest.mark.parametrize("steps", [0, 1, 2])
def test_choose_fit_never_below_the_minimum(budget: float, steps: int) -> None:
    fit = choose_fit(_cost, steps=steps, budget_s=budget, high=12, minimum=6)
    assert 6 <= fit.size <= 12
    assert 0 <= fit.step <= steps
    took = _cost(fit.step, fit.size)
    assert fit.fits == (took <= budget)
    if fit.fits and fit.size < 12:  # the largest size of that step
        assert _cost(fit.step, fit.size + 1) > budget
    if fit.step:  # work is dropped only when all of it cannot fit the minimum
        assert _cost(fit.step - 1, 6) > budget
    if not fit.fits:  # then everything that can be dropped is
        assert fit.step == steps
        assert fit.size == 6


def test_choose_fit_takes_the_first_step_that_fits() -> None:
    # All the work fits 6 questions at 700 s; at 420 s only 3, so step 1
    # (50 s a question) is taken: 6 fit, and 7, not 8.
    fit = choose_fit(_cost, steps=2, budget_s=700, high=12, minimum=6)
    assert (fit.step, fit.size, fit.fits) == (0, 6, True)
    fit = choose_fit(_cost, steps=2, budget_s=420, high=12, minimum=6)
    assert (fit.step, fit.size, fit.fits) == (1, 7, True)
    fit = choose_fit(_cost, steps=2, budget_s=200, high=12, minimum=6)
    assert (fit.step, fit.size, fit.fits) == (2, 12, True)
    # A sample smaller than the minimum is kept whole.
    fit = choose_fit(_cost, steps=2, budget_s=1, high=4, minimum=6)
    assert (fit.step, fit.size, fit.fits) == (2, 4, False)


def _demo(**update: object) -> RunConfig:
    config = RunConfig.from_yaml(DEMO)
    data = config.model_dump()
    for key, value in update.items():
        section, _, field = key.partition("__")
        if field:
            data[section] = {**(data[section] or {}), field: value}
        else:
            data[section] = value
    return RunConfig.model_validate(data)


def test_the_demo_ladder_drops_the_uncertified_llm_judge_only() -> None:
    config = RunConfig.from_yaml(DEMO)
    [step] = fit_ladder(config)
    assert list(step.config.judges) == ["reference"]
    assert step.what.startswith("qwen left out of the run")
    # The sample and everything else stay.
    assert step.config.sample == config.sample
    assert step.config.systems == config.systems


def test_no_step_drops_a_judge_that_may_enter_the_headline() -> None:
    # Every judge qualified: each may be certified, none is dropped.
    assert fit_ladder(_demo(qualification__judges=None)) == []
    # Without require_qualification an uncertified judge enters the headline.
    assert fit_ladder(_demo(aggregate__require_qualification=False)) == []
    # Without qualification there is no certificate to miss.
    assert fit_ladder(_demo(qualification=None)) == []


_CPU = CpuInfo("a test CPU", 2, True)


def test_fit_sample_on_the_demo_keeps_the_verdict_minimum() -> None:
    config = RunConfig.from_yaml(DEMO)
    roomy, note = fit_sample(config, minutes=600, limit=None, cpu=_CPU)
    assert roomy.sample is not None
    assert roomy.sample.size == 12
    assert list(roomy.judges) == ["qwen", "reference"]
    assert "dropped" not in note

    tight, note = fit_sample(config, minutes=1, limit=None, cpu=_CPU)
    assert tight.sample is not None
    assert tight.sample.size == verdict_minimum(config.aggregate.alpha) == 6
    assert list(tight.judges) == ["reference"]
    assert "sample size 6 of 12" in note
    assert "6 questions are the fewest that can give a verdict" in note
    assert "dropped: qwen left out of the run" in note
    assert "even that is over 1 min" in note  # the engine's start-up alone is


def test_fit_sample_without_a_ladder_says_it_is_over_budget() -> None:
    config = _demo(qualification__judges=None)  # qwen may be certified: kept
    fitted, note = fit_sample(config, minutes=1, limit=None, cpu=_CPU)
    assert fitted.sample is not None
    assert fitted.sample.size == 6
    assert list(fitted.judges) == ["qwen", "reference"]
    assert "even that is over 1 min" in note
    assert "nothing else could be dropped" in note
