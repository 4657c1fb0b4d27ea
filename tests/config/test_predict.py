"""dlperf.config.predict: [predict]'s keys, FLOPs with SI prefixes, and the ranges."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from dlperf.config.loading import load_job
from dlperf.config.predict import SI, PredictConfig, PredictJob
from dlperf.errors import UserError


@pytest.mark.parametrize(
    ("text", "flops"),
    [("15.5G", 15.5e9), ("2k", 2e3), ("3M", 3e6), ("1.5T", 1.5e12), ("1P", 1e15)],
)
def test_flops_take_an_si_prefix(text: str, flops: float) -> None:
    assert PredictConfig.model_validate({"flops": text}).flops == pytest.approx(flops)


def test_si_prefixes_are_powers_of_a_thousand() -> None:
    assert [SI[k] for k in "KMGTP"] == [1e3, 1e6, 1e9, 1e12, 1e15]


def test_flops_a_plain_number_passes_and_text_without_a_prefix_is_refused() -> None:
    assert PredictConfig.model_validate({"flops": 4.0}).flops == 4.0
    with pytest.raises(ValidationError) as e:
        PredictConfig.model_validate({"flops": "12"})
    assert e.value.errors()[0]["type"] == "float_type"


def test_flops_a_bad_number_before_the_prefix_says_the_form() -> None:
    with pytest.raises(ValidationError) as e:
        PredictConfig.model_validate({"flops": "lotsG"})
    first = e.value.errors()[0]
    assert first["msg"] == "Value error, expected a number of FLOPs per image, e.g. 15.5G"
    assert first["input"] == "lotsG"


def test_flops_must_be_positive_even_with_a_prefix() -> None:
    with pytest.raises(ValidationError) as e:
        PredictConfig.model_validate({"flops": "-1G"})
    assert e.value.errors()[0]["type"] == "greater_than_equal"  # at least 1: a count


def test_ppp_and_peak_ranges() -> None:
    assert PredictConfig(ppp=1.0).ppp == 1.0
    for bad in (0.0, 1.01):
        with pytest.raises(ValidationError):
            PredictConfig(ppp=bad)
    with pytest.raises(ValidationError):
        PredictConfig(peak_tflops=2e9)  # past FIGURE_MAX


def test_a_predict_job_counts_an_architecture_without_weights() -> None:
    job = load_job(PredictJob, None, ["model.transfer=feature-extract", "predict.flops=2G"])
    assert job.predict.flops == 2e9
    assert job.experiment.model.transfer == "feature-extract"


def test_a_bad_flops_via_set_is_one_line_naming_the_value_once() -> None:
    with pytest.raises(UserError) as e:
        load_job(PredictJob, None, ["predict.flops=xG"])
    assert str(e.value) == (
        "config with --set: predict.flops: expected a number of FLOPs per image, e.g. 15.5G "
        "(got 'xG')"
    )
