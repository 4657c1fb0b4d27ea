"""Break-it round 23, P2 cause C8's remaining readers: text numbers holding '_'.

Python's float() takes '_' as a digit separator ('1_0' is 10). Round 23 refused it in VOC
annotations and converge CSVs; the other readers of numbers a user writes as text read it
still: a curve JSON's coefficients (`converge plan` / `scale plan --curve`), a regression's
feature values (read as the number 10, not the level "1_0"), the `name=value` options
(`--fix`, `--speeds`, `--predict`) and predict.flops with an SI prefix ("1_0G"). All now
read through `parsing.plain_number`, which refuses it as float() refuses any non-number.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pydantic import ValidationError

from dlperf.config.predict import PredictConfig
from dlperf.converge import plan, regress
from dlperf.errors import UserError
from dlperf.parsing import parse_numbers, plain_number


@pytest.mark.parametrize("text", ["1_0", "1_000.5", "1e1_0", "_1", "0x_1"])
def test_plain_number_refuses_what_float_reads_past_an_underscore(text: str) -> None:
    with pytest.raises(ValueError, match="_"):
        plain_number(text)


@pytest.mark.parametrize(("value", "number"), [("10", 10.0), (" -2.5e3 ", -2500.0), (3, 3.0)])
def test_plain_number_reads_what_tools_write(value: object, number: float) -> None:
    assert plain_number(value) == number


def test_a_curve_file_coefficient_with_an_underscore_is_no_curve(tmp_path: Path) -> None:
    path = tmp_path / "c.json"
    document = {"metric": "loss", "beta0": "1_0", "beta1": 0.5, "beta2": 0.1}
    path.write_text(json.dumps(document))
    with pytest.raises(UserError, match="is not a curve"):  # before: beta0 read as 10
        plan.remaining_steps(path, 0.5)


def test_a_feature_value_with_an_underscore_is_a_level_not_a_number() -> None:
    assert not regress._is_number("1_0")  # before: the number 10
    assert regress._is_number("10") and regress._is_number(" 2.5 ")


def test_name_value_options_refuse_an_underscore() -> None:
    with pytest.raises(UserError, match="every value must be a number"):
        parse_numbers("L1=1_0", "--speeds", "--speeds L1=1.0,L2=0.4")
    assert parse_numbers("L1=1.0,L2=0.4", "--speeds", "--speeds L1=1.0") == {"L1": 1.0, "L2": 0.4}


def test_predict_flops_with_a_prefix_refuses_an_underscore() -> None:
    with pytest.raises(ValidationError, match="expected a number of FLOPs per image"):
        PredictConfig(flops="1_0G")
    assert PredictConfig(flops="15.5G").flops == 15.5e9
