"""dlperf.config.export: [export]'s defaults (a fixed batch of 1, weights beside the file,
rtol 1e-3 and atol 1e-5) and its ranges (the input is exactly C,H,W)."""

from __future__ import annotations

import pytest

from dlperf.config.export import ExportConfig, ExportJob
from dlperf.config.loading import load_job
from dlperf.errors import UserError


def test_defaults() -> None:
    config = load_job(ExportJob, None, []).export
    assert config == ExportConfig()
    assert (config.input, config.num_classes, config.opset) == (None, None, None)
    assert (config.dynamic_batch, config.single_file) == (False, False)
    assert (config.rtol, config.atol) == (1e-3, 1e-5)


def test_an_input_of_three_sizes_and_the_flags_arrive_typed() -> None:
    job = load_job(
        ExportJob,
        None,
        ["export.input=[1,8,8]", "export.dynamic_batch=true", "export.opset=17", "export.atol=0"],
    )
    assert job.export.input == [1, 8, 8] and job.export.dynamic_batch is True
    assert (job.export.opset, job.export.atol) == (17, 0.0)


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("export.input=[3,4]", "export.input: must have 3 or more values (got [3, 4])"),
        ("export.input=[3,4,4,4]", "export.input: must have 3 or fewer values (got [3, 4, 4, 4])"),
        ("export.input=[3,0,4]", "export.input.1: must be at least 1 (got 0)"),
        ("export.rtol=-1", "export.rtol: must be at least 0 (got -1)"),
        ("export.num_classes=1", "export.num_classes: must be at least 2 (got 1)"),
        ("export.dynamic=true", "did you mean 'export.dynamic_batch'?"),
    ],
)
def test_bad_values_are_one_line_naming_the_key(override: str, message: str) -> None:
    with pytest.raises(UserError) as e:
        load_job(ExportJob, None, [override])
    assert message in str(e.value) and "\n" not in str(e.value)
