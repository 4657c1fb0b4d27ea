"""dlperf.config.analyze: [analyze]'s defaults and ranges, and AnalyzeJob counting an
architecture that names no weights."""

from __future__ import annotations

import pytest

from dlperf.config.analyze import AnalyzeConfig, AnalyzeJob
from dlperf.config.experiment import Job
from dlperf.config.loading import load_job
from dlperf.errors import UserError


def test_defaults_count_one_fp32_inference_image_with_biases() -> None:
    config = load_job(AnalyzeJob, None, []).analyze
    assert config == AnalyzeConfig()
    assert (config.input, config.batch, config.train, config.precision) == (None, 1, False, "fp32")
    assert (config.classes, config.bias, config.activations) == (None, True, "all")
    assert config.macs_convention == "dlperf"


def test_keys_set_with_set_arrive_typed() -> None:
    job = load_job(
        AnalyzeJob,
        None,
        [
            "analyze.input=[1,28,28]",
            "analyze.batch=8",
            "analyze.train=true",
            "analyze.precision=bf16",
            "analyze.activations=conv-pool-fc",
            "analyze.macs_convention=fvcore",
        ],
    )
    assert job.analyze.input == [1, 28, 28] and job.analyze.batch == 8
    assert job.analyze.train is True and job.analyze.precision == "bf16"
    assert (job.analyze.activations, job.analyze.macs_convention) == ("conv-pool-fc", "fvcore")


def test_a_transfer_model_without_weights_is_counted_only_by_analyze() -> None:
    # Counting needs the architecture alone; a training job needs the weights it starts from.
    job = load_job(AnalyzeJob, None, ["model.transfer=feature-extract"])
    assert job.experiment.model.transfer == "feature-extract"
    assert AnalyzeJob.counts_only and not Job.counts_only
    with pytest.raises(UserError, match=r"feature-extract needs model\.weights"):
        load_job(Job, None, ["model.transfer=feature-extract"])


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("analyze.input=[]", "analyze.input: must have 1 or more values (got [])"),
        ("analyze.input=[3,0,4]", "analyze.input.1: must be at least 1 (got 0)"),
        ("analyze.batch=0", "analyze.batch: must be at least 1 (got 0)"),
        ("analyze.precision=fp64", "analyze.precision: Input should be 'fp32', 'bf16' or 'fp16'"),
        ("analyze.activations=conv", "Input should be 'all' or 'conv-pool-fc' (got 'conv')"),
        ("analyze.macs_convetion=fvcore", "did you mean 'analyze.macs_convention'?"),
    ],
)
def test_bad_values_are_one_line_naming_the_key(override: str, message: str) -> None:
    with pytest.raises(UserError) as e:
        load_job(AnalyzeJob, None, [override])
    assert message in str(e.value) and "\n" not in str(e.value)
