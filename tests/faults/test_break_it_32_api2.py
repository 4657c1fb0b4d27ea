"""Break-it round 32, reviewer 1 F5 and F9 and fixer J's note, the Python API.

F5: a long or multi-line value still reached an error whole: `dlperf.run(dict)`'s validation
message (`(got {input!r})`: a 2,000-entry list one line of 10,954 characters, an array or a
tensor a line per row), `dlperf.track`'s config of non-UTF-8 text ({value!r}) and a tensor
used as a config key (its values).
F9: a shape given as a 1-d integer array or tensor (`np.array(img.shape)`) said "a
numpy.ndarray of shape (3,)", hiding the numbers, with the fix "x.shape[1:]", which is ().
J: `dlperf.analyze(module)` said nothing of what the count leaves out (unsupported operators,
layers in a plain list, functional layers' activations), which `dlperf analyze` warns of.
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

import dlperf
from dlperf.parsing import as_given
from tests.faults.test_break_it_32_api import refused


@pytest.mark.parametrize(
    ("section", "value", "said"),
    [
        ("train.epochs", list(range(2000)), "[0, 1, 2, 3, 4, 5, ...]"),
        ("train.epochs", np.zeros((3, 4)), "a numpy.ndarray of shape (3, 4)"),
        ("model.name", torch.randn(5, 8), "a torch.Tensor of shape (5, 8)"),
    ],
    ids=["long-list", "array", "tensor"],
)
def test_run_of_a_dict_names_a_refused_value_on_one_short_line(
    tmp_path: Any, section: str, value: object, said: str
) -> None:
    table, key = section.split(".")
    text = refused(lambda: dlperf.run({table: {key: value}}, store=tmp_path / "s.db"))
    assert said in text, text


def tracked(config: dict[Any, Any], tmp_path: Any) -> None:
    with dlperf.track("n", config=config, store=tmp_path / "s.db"):
        pass


def test_track_config_of_long_text_not_utf8_is_one_short_line(tmp_path: Any) -> None:
    text = refused(lambda: tracked({"a": "x" * 3000 + "\ud800"}, tmp_path))
    assert "config['a'] is not UTF-8 text" in text, text


def test_track_config_of_a_tensor_key_names_it_by_its_shape(tmp_path: Any) -> None:
    key = torch.randn(5, 8)
    text = refused(lambda: tracked({key: 1}, tmp_path))
    assert "a torch.Tensor of shape (5, 8)" in text, text


@pytest.mark.parametrize(
    "given", [np.array([3, 32, 32]), torch.tensor([3, 32, 32])], ids=["array", "tensor"]
)
def test_a_shape_given_as_an_integer_array_shows_its_numbers(given: object) -> None:
    text = refused(lambda: dlperf.analyze(nn.Conv2d(3, 4, 3), given))  # type: ignore[arg-type]
    assert "[3, 32, 32]" in text, text
    assert "x.shape[1:]" not in text and "tuple(x.tolist())" in text, text


def test_an_example_input_keeps_its_hint() -> None:
    text = refused(lambda: dlperf.analyze(nn.Linear(8, 2), torch.randn(4, 8)))  # type: ignore[arg-type]
    assert "a torch.Tensor of shape (4, 8)" in text and "x.shape[1:]" in text, text


class _Listed(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.blocks = [nn.Linear(8, 8)]  # unregistered: not in parameters()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.blocks[0](x)


class _Functional(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.randn(2, 8))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.linear(x, self.w)


class _Unsupported(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.fft.rfft(x).real


@pytest.mark.parametrize(
    ("model", "said"),
    [
        (_Listed(), "blocks"),
        (_Functional(), "not counted"),
        (_Unsupported(), "no handler for these operators"),
    ],
    ids=["unregistered", "functional", "unsupported"],
)
def test_analyze_warns_as_the_command_does(model: nn.Module, said: str) -> None:
    with pytest.warns(UserWarning) as caught:
        dlperf.analyze(model, (8,), activations="conv-pool-fc")
    texts = [str(w.message) for w in caught]
    assert any(said in t for t in texts), texts


def test_analyze_of_a_plain_model_warns_nothing() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        dlperf.analyze(nn.Linear(8, 2), (8,))


def test_a_refused_text_up_to_100_characters_is_shown_whole(tmp_path: Path) -> None:
    """as_given shortened every text over reprlib's 30 characters: a config error cut the
    misspelt name or the path the user must fix ('one epoch...please')."""
    typed = "one epoch and then some more of them please"
    with pytest.raises(dlperf.UserError) as raised:
        dlperf.run({"train": {"epochs": typed}}, store=tmp_path / "s.db")
    assert f"(got '{typed}')" in str(raised.value)
    assert len(as_given("x" * 150)) == 100  # longer text is still cut, on one short line
