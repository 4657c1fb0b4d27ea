"""Break-it round 35, P1 (the user's own models): review of the fixers' commits (R1).

- C1, its second case: a complex parameter under run.precision = "fp16" passed the dry checks
  as the float16 ones had, and ended the run in the same scaler traceback
  ('"_amp_foreach_non_finite_check_and_unscale_cpu" not implemented for 'ComplexFloat''):
  the gradient scaler unscales real float32 gradients alone. Refused with the float16 ones.
- P2 C1's cause in the model's paths: model.name's file and model.weights written with an
  environment variable (in a TOML file, or --set in single quotes) or as a file:// URL were
  made absolute against the current directory and "not found" there; they are said to be
  one, naming the path meant, as data.root's are.
- C6: analyze/predict at fp16 or bf16 told any refusal whose text held "type" that the forward
  computes in float32 (x.float()) and to cast to the weights' dtype, an operator without a
  half kernel (linalg.inv) included; other refusals still said a run feeds it a half tensor.
  Every refusal at a half precision says what the count does, and to count at fp32.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from pydantic import ValidationError
from torch import nn

from dlperf.api import analyze
from dlperf.config.experiment import ModelConfig
from dlperf.engine.checks import check_scaled_dtypes
from dlperf.errors import UserError
from dlperf.models.registry import load_factory


def test_c1_a_complex_parameter_under_fp16_is_refused_up_front() -> None:
    model = nn.Module()
    model.w = nn.Parameter(torch.zeros(2, 2, dtype=torch.cfloat))
    model.mid = nn.Linear(2, 2).half()
    with pytest.raises(UserError) as caught:
        check_scaled_dtypes(model, "'cplx.py:net'", "fp16")
    assert caught.value.message == (
        "model 'cplx.py:net': its trained parameters w (complex64), mid.weight, mid.bias "
        '(float16) have gradients that run.precision = "fp16"\'s gradient scaler cannot unscale'
    )
    check_scaled_dtypes(model, "'cplx.py:net'", "bf16")  # no scaler: it trains


# --- P2 C1's cause in model.name and model.weights: $VAR and file:// URLs ---------------------


@pytest.mark.parametrize(
    ("key", "written", "said"),
    [
        (
            "name",
            "$MYD/net.py:net",
            "$MYD/net.py holds the environment variable $MYD, which dlperf does "
            "not expand (write the path itself, {d}/net.py",
        ),
        (
            "name",
            "file://{d}/net.py:net",
            "file://{d}/net.py is a file:// URL, not a path (give the path itself: {d}/net.py)",
        ),
        (
            "weights",
            "${MYD}/w.pt",
            "${MYD}/w.pt holds the environment variable ${MYD}, which dlperf "
            "does not expand (write the path itself, {d}/w.pt",
        ),
    ],
)
def test_a_model_file_written_with_a_variable_or_as_a_url_is_said_to_be_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, key: str, written: str, said: str
) -> None:
    """Before: made absolute against the current directory, "model file
    /cwd/$MYD/net.py not found", the URL as /cwd/file:/tmp/..., one slash lost."""
    monkeypatch.setenv("MYD", str(tmp_path))
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ValidationError) as caught:
        ModelConfig(**{key: written.replace("{d}", str(tmp_path))})
    assert said.replace("{d}", str(tmp_path)) in str(caught.value)


# --- C6: analyze at a half precision, a forward failing for another reason than x.float() --


class Inverts(nn.Module):
    """A forward calling an operator that takes no bfloat16 (torch.linalg.inv)."""

    def __init__(self) -> None:
        super().__init__()
        self.c = nn.Conv2d(3, 4, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.linalg.inv(self.c(x)[:, :, :4, :4]).flatten(1)


def test_c6_a_half_precision_refusal_says_what_the_count_does_not_guess_why() -> None:
    """Before: any error holding "type" ("Low precision dtypes not supported") was told "the
    forward computes in another dtype (x.float())" and to cast to the weights' dtype, the
    linalg.inv call unnamed; other errors still "what a run feeds it, one bfloat16 tensor"."""
    with pytest.raises(UserError) as caught:
        analyze(Inverts(), (3, 8, 8), dtype="bf16")
    assert "Low precision dtypes not supported" in caught.value.message
    assert caught.value.hint == (
        "dlperf.analyze at bf16 casts the weights and the input to bfloat16, where a run at "
        "bf16 keeps them float32 and autocasts operator by operator (a forward computing "
        "partly in float32, x.float(), trains there): count it at fp32"
    )


@pytest.mark.parametrize(
    ("written", "said", "fix"),
    [
        (
            "$MYD/net.py",
            "holds the environment variable $MYD, which dlperf does not expand",
            "write the path itself, {d}/net.py: only a shell expands a variable, outside "
            "single quotes",
        ),
        ("file://{d}/net.py", "is a file:// URL, not a path", "give the path itself: {d}/net.py"),
    ],
)
def test_a_model_argument_written_with_a_variable_or_as_a_url_is_said_to_be_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, written: str, said: str, fix: str
) -> None:
    """analyze's and predict's MODEL, read by load_factory, not through model.name: before,
    "model file $MYD/net.py not found", the URL as file:/..., one slash lost."""
    monkeypatch.setenv("MYD", str(tmp_path))
    path = written.replace("{d}", str(tmp_path))
    with pytest.raises(UserError) as caught:
        load_factory(f"{path}:net")
    assert caught.value.message == f"model file {path} {said}"
    assert caught.value.hint == fix.replace("{d}", str(tmp_path))
