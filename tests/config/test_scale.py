"""dlperf.config.scale: [scale]'s keys, the one-or-a-list keys and their errors, modes and
batches."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from dlperf.config.loading import load_job
from dlperf.config.scale import ScaleConfig, ScaleJob
from dlperf.errors import UserError


def errors(**values: Any) -> list[dict[str, Any]]:
    with pytest.raises(ValidationError) as e:
        ScaleConfig.model_validate(values)
    return e.value.errors()  # type: ignore[return-value]


def test_defaults() -> None:
    s = ScaleConfig()
    assert s.workers == [1, 2]
    assert s.modes() == ["strong"]
    assert s.batches("strong") is None and s.batches("weak") is None
    assert s.comm == ["allreduce"] and s.repeat == 3


def test_modes_keep_the_order_given() -> None:
    # a repeated mode (or batch) is refused: tests/faults/test_break_it_37_lists.py
    assert ScaleConfig(mode=["weak", "strong"]).modes() == ["weak", "strong"]
    assert ScaleConfig(mode="weak").modes() == ["weak"]


def test_batches_are_sorted_per_mode() -> None:
    s = ScaleConfig(global_batch=[256, 64], per_worker_batch=32)
    assert s.batches("strong") == [64, 256]
    assert s.batches("weak") == [32]


def test_a_bad_single_value_reports_one_error_of_the_single_form() -> None:
    found = errors(global_batch=0)
    assert len(found) == 1 and found[0]["type"] == "greater_than_equal"
    assert found[0]["loc"] == ("global_batch",)


def test_a_bad_list_reports_the_lists_error() -> None:
    found = errors(per_worker_batch=[])
    assert len(found) == 1 and found[0]["type"] == "too_short"
    assert errors(mode=["weak", "fast"])[0]["type"] == "literal_error"
    assert errors(mode="fast")[0]["type"] == "literal_error"


def test_lists_must_not_be_empty() -> None:
    assert errors(workers=[])[0]["type"] == "too_short"
    assert errors(comm=[])[0]["type"] == "too_short"
    assert errors(workers=[0])[0]["type"] == "greater_than_equal"


def test_the_workers_flag_is_a_comma_list_and_its_error_names_the_flag() -> None:
    job = load_job(ScaleJob, None, [], scale={"workers": "1,2,4", "mode": "weak"})
    assert job.scale.workers == [1, 2, 4]
    assert job.scale.modes() == ["weak"]
    job = load_job(ScaleJob, None, [], scale={"mode": "weak,strong"})
    assert job.scale.modes() == ["weak", "strong"]
    with pytest.raises(UserError) as e:
        load_job(ScaleJob, None, [], scale={"workers": "1,0"})
    assert str(e.value) == "--workers: scale.workers.1: must be at least 1 (got 0)"
