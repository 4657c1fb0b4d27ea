"""dlperf.config.converge: [converge]'s defaults and ranges (upto is a fraction in (0, 1])."""

from __future__ import annotations

import pytest

from dlperf.config.converge import ConvergeConfig, ConvergeJob
from dlperf.config.loading import load_job
from dlperf.errors import UserError


def test_defaults_fit_the_whole_loss_curve_with_the_ensemble() -> None:
    config = load_job(ConvergeJob, None, []).converge
    assert config == ConvergeConfig()
    assert (config.x, config.y, config.key, config.target) == (None, None, None, None)
    assert (config.metric, config.form, config.upto, config.upto_step) == (
        "loss",
        "ensemble",
        None,
        None,
    )


@pytest.mark.parametrize("upto", [1e-9, 0.3, 1.0])
def test_upto_takes_any_fraction_above_0_up_to_1(upto: float) -> None:
    assert ConvergeConfig(upto=upto).upto == upto


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("converge.upto=0", "converge.upto: must be greater than 0 (got 0)"),
        ("converge.upto=1.5", "converge.upto: must be at most 1 (got 1.5)"),
        ("converge.upto_step=0", "converge.upto_step: must be greater than 0 (got 0)"),
        ("converge.metric=acc", "Input should be 'loss', 'accuracy' or 'error' (got 'acc')"),
        ("converge.form=exp", "Input should be 'ensemble', 'optimus' or 'power' (got 'exp')"),
    ],
)
def test_bad_values_are_one_line_naming_the_key(override: str, message: str) -> None:
    with pytest.raises(UserError) as e:
        load_job(ConvergeJob, None, [override])
    assert message in str(e.value) and "\n" not in str(e.value)


def test_columns_and_target_arrive_as_given() -> None:
    job = load_job(
        ConvergeJob,
        None,
        ["converge.x=step", "converge.y=acc", "converge.metric=accuracy", "converge.target=0.9"],
    )
    assert (job.converge.x, job.converge.y, job.converge.metric) == ("step", "acc", "accuracy")
    assert job.converge.target == 0.9
