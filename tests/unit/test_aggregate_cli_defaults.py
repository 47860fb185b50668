"""``cube-ray aggregate`` takes its defaults from the options model, not a copy."""

from __future__ import annotations

from cube_ray.cli import build_parser
from cube_ray.commands import aggregate as command
from cube_ray.config import AggregateConfig, AggregateOptions
from cube_ray.systems import QaFileSystemConfig
from cube_ray.systems.kinds import DEFAULT_K


def test_the_cli_defaults_are_the_models() -> None:
    args = build_parser().parse_args(["aggregate", "--answers", "a", "--scores", "s"])
    command._fill_defaults(args)
    options = command._options(args, args.weights)
    assert options == AggregateOptions()
    assert options.k == DEFAULT_K
    # Every option of the model gets its default from the model.
    assert set(command._DEFAULTS) == set(AggregateOptions.model_fields)


def test_the_help_names_the_models_defaults() -> None:
    parser = build_parser()
    sub = next(a for a in parser._actions if a.dest == "command")
    helps = {a.dest: a.help or "" for a in sub.choices["aggregate"]._actions}
    defaults = AggregateOptions()
    assert f"else {defaults.k})" in helps["k"]
    assert f"else {defaults.trim})" in helps["trim"]
    assert f"else {defaults.weights})" in helps["weights"]
    assert f"else {defaults.bounds_on}" in helps["bounds_on"]
    assert f"(default {defaults.min_gap};" in helps["min_gap"]
    assert f"(default {defaults.alpha})" in helps["alpha"]


def test_k_has_one_default() -> None:
    assert QaFileSystemConfig(path="x").k == DEFAULT_K
    assert AggregateConfig().options(system_k={}, dimension_weights={}).k == DEFAULT_K


def test_the_bootstrap_flags_default_to_the_runs_own_intervals() -> None:
    """--resamples/--seed/--interval default to what a run's summary uses
    (``with_intervals``'s own defaults), and the help names those values."""
    import inspect

    from cube_ray.aggregate import DEFAULT_INTERVAL, INTERVAL_METHODS, with_intervals

    params = inspect.signature(with_intervals).parameters
    parser = build_parser()
    args = parser.parse_args(["aggregate", "--answers", "a", "--scores", "s"])
    assert args.resamples == params["n_resamples"].default
    assert args.seed == params["seed"].default
    assert args.interval == params["method"].default == DEFAULT_INTERVAL
    sub = next(a for a in parser._actions if a.dest == "command")
    named = {
        "aggregate": f"(default {DEFAULT_INTERVAL}:",
        "report": f"({DEFAULT_INTERVAL}, whose",  # when summary.json has none
        "compare": f"({DEFAULT_INTERVAL}, whose",
    }
    for name, default in named.items():
        actions = {a.dest: a for a in sub.choices[name]._actions}
        assert tuple(actions["interval"].choices) == tuple(INTERVAL_METHODS)
        assert default in (actions["interval"].help or "")
    helps = {a.dest: a.help or "" for a in sub.choices["aggregate"]._actions}
    assert f"default {args.resamples})" in helps["resamples"]
    assert f"(default {args.seed})" in helps["seed"]
