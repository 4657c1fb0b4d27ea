"""Break-it round 35, P1 (the user's own models), fixer F12.

- C1: a model with a float16 layer that its forward casts to (`x.half()`), under
  run.precision = "fp16", passed the dry checks and ended the run in GradScaler's 60-line
  traceback, "Attempting to unscale FP16 gradients": the fp16 scaler unscales float32
  gradients only. Such a model is refused by the dry checks now, naming the layer's
  parameters and the fixes (build them in float32, autocast runs them in float16; or bf16).
- C2: under `dlperf scale`, a model whose forward calls a layer on one rank alone (it reads
  RANK) hung until gloo's 30-minute timeout: each worker told DDP to find unused parameters
  from its own dry backward, so only the rank that left the layer unused did, and its peer
  waited in backward for a bucket never sent. The ranks now agree on every rank's unused
  parameters before wrapping, and the warning names the ranks of each one not unused on all.
- C3: model.kwargs holding inf, nan or a TOML date or time trained with the value but were
  stored as null or an ISO string (JSON has neither), and export, --resume and a distill
  teacher rebuilt another model from the stored config; a sweep's [inf, nan] hashed alike.
  They are refused on load now, in one line naming the key.
- C4: nn.Fold's col2im, which sums overlapping blocks (and is nn.Unfold's backward), was
  counted as a copy, 0 FLOPs; it counts one add per column value that lands in the image.
- C5: adaptive pooling was counted one FLOP per input element, right only where the output
  size divides the input's: its windows overlap otherwise (AdaptiveAvgPool2d(6) on 7x7: 49
  for the 144 of AvgPool2d(2, 1), the same windows). It counts each window's elements now,
  as the window pools do, and so does adaptive average pooling's backward.
- C6: analyze and predict at fp16/bf16 refused a forward computing in float32 (`x.float()`)
  saying "analyze feeds the model what a run feeds it, one bfloat16 tensor ...: its forward
  must take that", though a run at that precision feeds float32 images under autocast and
  trains it. The line now says that the count casts weights and input, which the run does
  not, and to count at fp32. (Counting under autocast is left.)
- C7: run.channels_last with a model holding a 5-D tensor (a Conv3d's weight) ended in torch's
  "required rank 4 tensor to use channels_last format" traceback from the dry checks; it is
  refused there in one line naming the tensor.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

from dlperf.api import analyze
from dlperf.distributed import worker
from dlperf.engine.build import build_model
from dlperf.engine.checks import check_run_form
from dlperf.errors import UserError
from dlperf.store import RunStore
from tests.engine.test_build import FakeData, experiment
from tests.faults.test_break_it_6_scale import _args, _experiment

# --- C1: float16 parameters under run.precision = "fp16" ---------------------------------

MIXED = """
import torch, torch.nn as nn
class Net(nn.Module):
    def __init__(self, num_classes=10, in_channels=3, frozen=False):
        super().__init__()
        self.c = nn.Conv2d(in_channels, 8, 3, padding=1)
        self.mid = nn.Linear(8, 8).half().requires_grad_(not frozen)
        self.fc = nn.Linear(8, num_classes)
    def forward(self, x):
        x = torch.relu(self.c(x)).mean((2, 3))
        return self.fc(self.mid(x.half()).float())
def net(num_classes=10, in_channels=3, frozen=False):
    return Net(num_classes, in_channels, frozen)
"""


def mixed(tmp_path: Path) -> str:
    (tmp_path / "mix.py").write_text(MIXED)
    return f"{tmp_path / 'mix.py'}:net"


def test_c1_float16_parameters_under_fp16_are_refused_up_front(tmp_path: Path) -> None:
    name = mixed(tmp_path)
    exp = experiment(name, run={"precision": "fp16"})
    with pytest.raises(UserError) as caught:
        build_model(exp, FakeData(), torch.device("cpu"))  # type: ignore[arg-type]
    assert caught.value.message == (
        f"model '{name}': its trained parameters mid.weight, mid.bias (float16) have "
        'gradients that run.precision = "fp16"\'s gradient scaler cannot unscale'
    )
    assert caught.value.hint == (
        'set run.precision = "bf16", which needs no scaler, or build float16 ones in '
        "float32, which autocast runs in float16 as it trains"
    )


@pytest.mark.parametrize(
    ("precision", "kwargs"), [("bf16", {}), ("fp32", {}), ("fp16", {"frozen": True})]
)
def test_c1_float16_parameters_that_no_scaler_unscales_still_train(
    tmp_path: Path, precision: str, kwargs: dict[str, bool]
) -> None:
    exp = experiment(mixed(tmp_path), run={"precision": precision}, model={"kwargs": kwargs})
    model = build_model(exp, FakeData(), torch.device("cpu"))  # type: ignore[arg-type]
    assert isinstance(model, nn.Module)


# --- C2: a forward that differs between ranks under DDP ----------------------------------

RANKED = """
import os
from torch import nn


class Net_(nn.Module):
    def __init__(self, num_classes=10, in_channels=1):
        super().__init__()
        self.fc = nn.Linear(64 * in_channels, num_classes)
        self.extra = nn.Linear(64 * in_channels, 64 * in_channels)
        self.rank = int(os.environ.get("RANK", "0"))

    def forward(self, x):
        x = x.flatten(1)
        return self.fc(self.extra(x) if self.rank == 0 else x)


def Net(num_classes=10, in_channels=1):
    return Net_(num_classes, in_channels)
"""


def test_c2_ddp_finds_unused_parameters_on_every_rank_where_one_rank_has_some(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Rank 1 of two leaves extra unused: both ranks are told (before: rank 1 alone, and
    rank 0 waited in backward for the bucket rank 1's reducer never sent)."""
    everyone = [[], ["extra.weight", "extra.bias"]]
    monkeypatch.setattr(worker, "gathered", lambda mine: everyone)
    said = ["extra.weight on rank 1", "extra.bias on rank 1"]
    assert worker.unused_on_any_rank([]) == said
    assert worker.unused_on_any_rank(everyone[1]) == said
    everyone[0] = ["aux", "extra.bias"]
    assert worker.unused_on_any_rank([]) == [
        "aux on rank 0",
        "extra.bias",
        "extra.weight on rank 1",
    ]
    monkeypatch.setattr(worker, "gathered", lambda mine: [[], []])
    assert worker.unused_on_any_rank([]) == []


@pytest.mark.faults  # a torchrun start: over 10 s under load (make test-faults)
@pytest.mark.timeout(300)  # a hang (the fault itself) fails in 5 minutes, not the suite's 15
def test_c2_a_forward_that_differs_by_rank_trains_at_a_two_worker_point(
    cli: Callable[..., Any], db: str, tmp_path: Path
) -> None:
    """The tester's model, which calls a layer on rank 0 only (before: no output until gloo's
    30-minute timeout)."""
    r = cli(*_args(_experiment(tmp_path, RANKED), 8))
    assert r.code == 0, r.err
    (run,) = RunStore.open(db).list_runs(kind="scale")
    assert run.status == "finished", run.error
    [said] = [p.read_text() for p in tmp_path.rglob("rank-*.warning")]
    assert "(extra.weight on rank 1, extra.bias on rank 1): DDP runs" in said, said


# --- C5: adaptive pooling's windows, overlapping where the sizes do not divide ------------


@pytest.mark.parametrize(
    ("module", "side", "flops"),
    [
        # 7 to 6: six windows of 2 along each side, 12 elements a side: 12 x 12
        (nn.AdaptiveAvgPool2d(6), 7, 144),
        # 13 to 5: windows 0-3, 2-6, 5-8, 7-11, 10-13, 3+4+3+4+3 = 17 a side: 17 x 17
        (nn.AdaptiveMaxPool2d(5), 13, 289),
        # 1 to 7: seven windows of the one element, 7 a side
        (nn.AdaptiveAvgPool2d(7), 1, 49),
        (nn.AdaptiveAvgPool2d(3), 12, 144),  # a size that divides: each element once
    ],
)
def test_c5_adaptive_pooling_counts_the_elements_of_its_windows(
    module: nn.Module, side: int, flops: int
) -> None:
    totals = analyze(module, (1, side, side)).totals
    assert totals["flops"] == flops  # before: 49, 169, 1 and 144, one per input element


def test_c5_adaptive_pooling_agrees_with_the_window_pool_of_its_windows() -> None:
    x = torch.rand(1, 2, 7, 7)
    assert torch.equal(nn.AdaptiveAvgPool2d(6)(x), nn.AvgPool2d(2, 1)(x))

    def pooled(pool: nn.Module) -> dict[str, Any]:  # after a layer to train, as train= wants
        first = nn.Conv3d(1, 1, 1) if "3d" in type(pool).__name__ else nn.Conv2d(2, 2, 1)
        shape = (1, 5, 7, 11) if "3d" in type(pool).__name__ else (2, 7, 7)
        layer: dict[str, Any] = analyze(nn.Sequential(first, pool), shape, train=True).layers[1]
        return layer

    adaptive, window = pooled(nn.AdaptiveAvgPool2d(6)), pooled(nn.AvgPool2d(2, 1))
    assert adaptive["flops"] == window["flops"] == 2 * 144
    # the backward spreads each output's gradient over its window, as the window pool's
    assert adaptive["backward_flops"] == window["backward_flops"] == 2 * 144
    three = pooled(nn.AdaptiveAvgPool3d((2, 3, 5)))
    # 5 to 2: 3 + 3; 7 to 3: 3 + 3 + 3; 11 to 5: 3 + 3 + 3 + 3 + 3
    assert three["flops"] == three["backward_flops"] == 6 * 9 * 15


# --- C4: nn.Fold's overlapping sums (col2im), and so nn.Unfold's backward -----------------


def test_c4_fold_counts_one_add_per_column_value_that_lands_in_the_image() -> None:
    # Fold((6, 6), 3, padding=1): along a side, kernel offset 0 lands in the image for 5 of
    # the 6 block positions, offset 1 for 6, offset 2 for 5: 16; 3 channels x 16 x 16 = 768
    # (the 972 - 768 column values that fall in the padding are dropped, not added)
    fold = analyze(nn.Fold((6, 6), 3, padding=1), (27, 36)).layers[0]
    assert fold["flops"] == 768  # before: 0, and no word


def test_c4_unfold_counts_its_backward_sums_and_its_forward_as_a_copy() -> None:
    net = nn.Sequential(nn.Conv2d(3, 3, 1), nn.Unfold(3, padding=1), nn.Flatten())
    unfold = analyze(net, (3, 8, 8), train=True).layers[1]
    assert unfold["flops"] == 0  # im2col copies
    # col2im of its gradient: 7 + 8 + 7 = 22 a side, 3 channels x 22 x 22
    assert unfold["backward_flops"] == 3 * 22 * 22  # before: 0
    fold = nn.Fold((5, 7), (2, 3), stride=(3, 2), dilation=(2, 1), padding=1)
    # 5 rows: blocks from -1 and 2, offsets 0 and 2: rows -1, 1, 2, 4, of which 3 are in it;
    # 7 columns: blocks from -1, 1, 3, 5, offsets 0..2: 2 + 3 + 3 + 2 = 10 in it; 3 x 10
    assert analyze(fold, (6, 8)).totals["flops"] == 30
    # what folding ones sums to: one per value added in
    assert fold(torch.ones(1, 6, 8)).sum() == 30


# --- C3: model.kwargs that JSON cannot hold --------------------------------------------------


@pytest.mark.parametrize(
    ("written", "said"),
    [
        ("clip = inf", "model.kwargs: clip = inf: JSON has no infinity or NaN"),
        ("clip = -inf", "model.kwargs: clip = -inf: JSON has no infinity or NaN"),
        ("deep = {a = [1, nan]}", "model.kwargs: deep.a[1] = nan: JSON has no infinity or NaN"),
        ("since = 2021-03-04", "model.kwargs: since = 2021-03-04: JSON has no date or time"),
        ("at = 07:32:00", "model.kwargs: at = 07:32:00: JSON has no date or time"),
    ],
)
def test_c3_model_kwargs_json_cannot_hold_are_refused_on_load(
    cli: Callable[..., Any], tmp_path: Path, written: str, said: str
) -> None:
    """Before: trained with the value, stored as null or an ISO string, and export, --resume
    and a distill teacher rebuilt the model from the stored one (clamp(max=None) refused,
    "'str' object has no attribute 'year'")."""
    exp = tmp_path / "e.toml"
    exp.write_text(f'[model]\nname = "smallcnn"\n[model.kwargs]\n{written}\n')
    r = cli("config", "show", str(exp))
    assert r.code == 2, r.err
    assert said in r.err, r.err
    assert "the stored config" in r.err and "\n" not in r.err.strip(), r.err


# --- C7: run.channels_last with 5-D weights --------------------------------------------------


class Volume(nn.Module):
    """The tester's model (c7.sh): the image as a one-deep volume through a Conv3d."""

    def __init__(self, num_classes: int = 10) -> None:
        super().__init__()
        self.c = nn.Conv3d(1, 4, (1, 3, 3))
        self.fc = nn.Linear(4, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(self.c(x.unsqueeze(2)).mean((2, 3, 4)))


def test_c7_channels_last_with_five_dimensional_weights_is_refused_in_one_line() -> None:
    with pytest.raises(UserError) as caught:  # before: torch's RuntimeError, a traceback
        check_run_form(Volume(), (1, 8, 8), "'v.py:net'", channels_last=True)
    assert caught.value.message == (
        "model 'v.py:net': its c.weight is 5-D, and run.channels_last's memory format holds "
        "4-D tensors only"
    )
    assert caught.value.hint == "set run.channels_last = false"
    check_run_form(Volume(), (1, 8, 8), "'v.py:net'")  # without it, it trains


# --- C6: a float32 island under analyze's half precision ------------------------------------


class FloatFirst(nn.Module):
    """The tester's model (c6.sh): its forward takes uint8 or half images, `x.float()` first."""

    def __init__(self) -> None:
        super().__init__()
        self.c = nn.Conv2d(3, 4, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.c(x.float()).mean((2, 3))


def test_c6_a_forward_computing_in_float32_is_not_told_a_run_feeds_it_half() -> None:
    """Before: "dlperf.analyze feeds the model what a run feeds it, one bfloat16 tensor of
    images ...: its forward must take that", though a run at bf16 feeds float32 images under
    autocast, and trains it."""
    with pytest.raises(UserError) as caught:
        analyze(FloatFirst(), (3, 8, 8), dtype="bf16")
    assert caught.value.message.startswith("the model rejects input [1, 3, 8, 8]: RuntimeError")
    assert caught.value.hint == (
        "dlperf.analyze at bf16 casts the weights and the input to bfloat16, where a run at "
        "bf16 keeps them float32 and autocasts operator by operator (a forward computing "
        "partly in float32, x.float(), trains there): count it at fp32"
    )
