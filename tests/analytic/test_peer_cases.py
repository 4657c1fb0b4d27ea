"""Counting cases that the peers' own test suites (fvcore, ptflops, torchinfo,
torch.utils.flop_counter) found wrong in dlperf (issue 41), each checked against the peer
that has the right answer: torch's FlopCounterMode where it applies, else a count worked out
by hand from the peer's code."""

from __future__ import annotations

import json
import warnings
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from torch import nn
from torch.utils.flop_counter import FlopCounterMode
from torchvision.models.convnext import LayerNorm2d

from dlperf.analytic.counting import analyze, analyze_module
from dlperf.errors import UserError
from tests.conftest import CliResult

Cli = Callable[..., CliResult]

torch.set_num_threads(1)  # FlopCounterMode runs the convolutions for real


def _script(module: nn.Module) -> nn.Module:
    # torch.jit.script is deprecated but still what users' models hold.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        scripted: nn.Module = torch.jit.script(module)
    return scripted


# --- 1. backward of a transposed convolution ----------------------------------------------


def test_transposed_conv_backward_is_counted_at_input_positions() -> None:
    """The issue's case: d-weight of a transposed convolution takes the forward's products,
    one 3x3 kernel per *input* position (100 x 8 x 4 x 9), not per output position (441)."""
    conv = nn.ConvTranspose2d(8, 4, 3, stride=2, bias=False)
    t = analyze_module(conv, [8, 10, 10], train=True).totals()
    assert t["macs"] == t["backward_macs"] == 100 * 8 * 4 * 9 == 28_800
    conv3d = nn.ConvTranspose3d(2, 2, 3, stride=2, bias=False)
    t = analyze_module(conv3d, [2, 4, 4, 4], train=True).totals()
    assert t["macs"] == t["backward_macs"] == 64 * 2 * 2 * 27 == 6_912


CONVS = {
    (1, False): nn.Conv1d,
    (2, False): nn.Conv2d,
    (3, False): nn.Conv3d,
    (1, True): nn.ConvTranspose1d,
    (2, True): nn.ConvTranspose2d,
    (3, True): nn.ConvTranspose3d,
}


@settings(max_examples=40, deadline=None)
@given(
    dims=st.integers(1, 3),
    transposed=st.booleans(),
    groups=st.integers(1, 2),
    per_group=st.tuples(st.integers(1, 3), st.integers(1, 3)),
    kernel=st.integers(1, 3),
    stride=st.integers(1, 3),
    padding=st.integers(0, 2),
    dilation=st.integers(1, 2),
    output_padding=st.integers(0, 2),
    size=st.integers(3, 6),
    batch=st.integers(1, 2),
    bias=st.booleans(),
)
def test_conv_forward_and_backward_agree_with_flop_counter_mode(
    dims: int,
    transposed: bool,
    groups: int,
    per_group: tuple[int, int],
    kernel: int,
    stride: int,
    padding: int,
    dilation: int,
    output_padding: int,
    size: int,
    batch: int,
    bias: bool,
) -> None:
    """A convolution after another one, so that its backward computes d-input and d-weight.
    FlopCounterMode counts 2 FLOPs per product and no bias; it counts d-weight of a grouped
    convolution `groups` times (each group's products once per group), so its backward is
    d-input + groups x forward where dlperf's is d-input + forward."""
    c_in, c_out = groups * per_group[0], groups * per_group[1]
    options = {"stride": stride, "padding": padding, "dilation": dilation, "groups": groups}
    if transposed:
        assume(output_padding < max(stride, dilation))
        options["output_padding"] = output_padding
        out = (size - 1) * stride - 2 * padding + dilation * (kernel - 1) + output_padding + 1
    else:
        assume(output_padding == 0)  # a plain convolution has none
        out = (size + 2 * padding - dilation * (kernel - 1) - 1) // stride + 1
    assume(out >= 1)
    first = CONVS[dims, False](c_in, c_in, 1, bias=False)
    model = nn.Sequential(first, CONVS[dims, transposed](c_in, c_out, kernel, bias=bias, **options))
    x = torch.randn(batch, c_in, *[size] * dims)
    with FlopCounterMode(display=False) as counter:
        model(x).sum().backward()
    torch_counts = {op.__name__: n for op, n in counter.get_flop_counts()["Sequential.1"].items()}
    forward, backward = torch_counts["convolution"], torch_counts["convolution_backward"]

    row = analyze_module(model, [c_in, *[size] * dims], batch=batch, train=True).layers[1]
    assert 2 * row.macs == forward
    assert 2 * row.backward_macs == backward - (groups - 1) * forward


# --- 2. ptflops matches the exact type ---------------------------------------------------


class MyConv(nn.Conv2d):
    """A subclass of a module ptflops has a hook for: ptflops looks up type(module)."""


def test_ptflops_convention_skips_subclasses_of_supported_modules() -> None:
    """ptflops hooks a module only if `type(module)` is a key of its MODULES_MAPPING
    (`is_supported_instance`), so torchvision's LayerNorm2d (a LayerNorm), a Conv2d subclass
    and nn.UpsamplingNearest2d (an Upsample) count 0; nn.Conv2d and nn.ReLU count."""
    model = nn.Sequential(
        nn.Conv2d(2, 4, 1, bias=False),  # 16 positions x 2 x 4 = 128
        LayerNorm2d(4),
        MyConv(4, 4, 1),
        nn.UpsamplingNearest2d(scale_factor=2),
        nn.ReLU(),  # 4 x 8 x 8 = 256 outputs
    )
    a = analyze_module(model, [2, 4, 4])
    a.macs_convention = "ptflops"
    assert [a.macs_of(layer) for layer in a.layers] == [128, 0, 0, 0, 256]
    assert a.totals()["macs"] == 384


_ATTENTION = """
from torch import nn


class MyAttention(nn.MultiheadAttention):
    pass


class Attention(nn.Module):
    def __init__(self, subclass: bool) -> None:
        super().__init__()
        kind = MyAttention if subclass else nn.MultiheadAttention
        self.attn = kind(8, 2, batch_first=True)

    def forward(self, x):
        return self.attn(x, x, x)[0]


def attention(subclass: bool = False) -> nn.Module:
    return Attention(subclass)
"""


def test_ptflops_refuses_only_the_exact_types_it_has_experimental_hooks_for(
    tmp_path: Path,
) -> None:
    """ptflops' attention hook is not reproduced, so nn.MultiheadAttention is refused; a
    subclass of it gets no hook in ptflops, so it counts 0 there as here (its out_proj is
    never called, so no Linear hook runs either)."""
    path = tmp_path / "attention.py"
    path.write_text(_ATTENTION)
    with pytest.raises(UserError, match="MultiheadAttention are not reproduced"):
        analyze(f"{path}:attention", [10, 8], macs_convention="ptflops")
    sub = {"subclass": True}
    a = analyze(f"{path}:attention", [10, 8], macs_convention="ptflops", model_kwargs=sub)
    assert a.totals()["macs"] == 0


# --- 3. MultiheadAttention's row ---------------------------------------------------------


class SelfAttention(nn.Module):
    def __init__(self, need_weights: bool) -> None:
        super().__init__()
        self.attn = nn.MultiheadAttention(8, 2, batch_first=True)
        self.need_weights = need_weights

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out, _ = self.attn(x, x, x, need_weights=self.need_weights)
        return out


@pytest.mark.parametrize("need_weights", [True, False])
def test_multihead_attention_row_is_its_attention_output(need_weights: bool) -> None:
    """Its output is the attention output [N, L, E] (not the averaged weights [N, L, S],
    nor the out-projection's [N*L, E] without its batch), its activations that tensor's
    elements (not every tensor computed inside), as for any other layer."""
    a = analyze_module(SelfAttention(need_weights), [10, 8], batch=2)
    (row,) = [r for r in a.layers if r.name == "attn"]
    assert row.output_shape == [2, 10, 8]
    assert row.activations == 2 * 10 * 8 == 160
    assert row.activation_bytes == 4 * 160
    assert a.totals()["activations"] == 160


# --- 4. PReLU, and ops without arithmetic ------------------------------------------------


def test_prelu_is_counted() -> None:
    """PReLU counts as leaky ReLU does, 1 FLOP per output (the slope's multiply); its
    backward 2 per element (d-input, and d-slope's product x * dy) plus the sum of those
    products over each slope's positions (1 per element)."""
    model = nn.Sequential(nn.Conv2d(2, 3, 1), nn.PReLU(3))
    a = analyze_module(model, [2, 4, 4], batch=2, train=True)
    assert a.unsupported_ops == {}
    prelu = a.layers[1]
    elements = 2 * 3 * 4 * 4
    assert (prelu.type, prelu.macs, prelu.flops) == ("PReLU", 0, elements)
    assert prelu.backward_flops == 2 * elements + elements


class Packed(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Linear(4, 4)
        self.lstm = nn.LSTM(4, 5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        lengths = torch.tensor([x.shape[0]] * x.shape[1])
        packed = nn.utils.rnn.pack_padded_sequence(self.embed(x), lengths)
        out, _ = self.lstm(packed)
        y, _ = nn.utils.rnn.pad_packed_sequence(out)
        return y.transpose_(0, 1)


@pytest.mark.parametrize("train", [False, True])
def test_packing_and_in_place_transpose_are_no_arithmetic(train: bool) -> None:
    a = analyze_module(Packed(), [2, 4], batch=3, train=train)
    assert a.unsupported_ops == {}


# --- 5. TorchScript submodules -----------------------------------------------------------


def _plain() -> nn.Module:
    return nn.Sequential(nn.Conv2d(3, 4, 3), nn.ReLU(), nn.Flatten(), nn.Linear(144, 10))


def _with_script() -> nn.Module:
    model = _plain()
    model[0] = _script(model[0])
    model[3] = _script(model[3])
    return model


@pytest.mark.parametrize("train", [False, True])
def test_a_model_with_torchscript_submodules_counts_as_the_plain_one(train: bool) -> None:
    plain = analyze_module(_plain(), [3, 8, 8], batch=2, train=train).to_dict()
    scripted = analyze_module(_with_script(), [3, 8, 8], batch=2, train=train).to_dict()
    assert scripted == plain
    assert [row["type"] for row in scripted["layers"]] == ["Conv2d", "ReLU", "Flatten", "Linear"]
    assert scripted["totals"]["macs"] == 2 * (36 * 4 * 27 + 144 * 10)


def test_a_scripted_container_is_one_row_with_the_same_totals() -> None:
    """Inside a scripted nn.Sequential its parts run as TorchScript, not as Python modules:
    one row holds their work, and the totals are the plain model's."""
    conv, relu, flatten, linear = _plain()
    model = nn.Sequential(_script(nn.Sequential(conv, relu)), flatten, linear)
    for train in (False, True):
        plain = analyze_module(_plain(), [3, 8, 8], train=train).totals()
        scripted = analyze_module(model, [3, 8, 8], train=train)
        assert [(r.name, r.type) for r in scripted.layers] == [
            ("0", "Sequential"),
            ("1", "Flatten"),
            ("2", "Linear"),
        ]
        counts = ("params", "macs", "flops", "backward_macs", "backward_flops")
        assert {k: scripted.totals().get(k) for k in counts} == {k: plain.get(k) for k in counts}
        assert scripted.not_run == []


_SCRIPTED = """
import torch
from torch import nn


def scripted(in_channels: int = 3, num_classes: int = 10) -> nn.Module:
    conv = torch.jit.script(nn.Conv2d(in_channels, 4, 3))
    return nn.Sequential(conv, nn.ReLU(), nn.Flatten(), nn.LazyLinear(num_classes))
"""


def test_cli_counts_a_model_file_with_a_torchscript_submodule(cli: Cli, tmp_path: Path) -> None:
    path = tmp_path / "scripted.py"
    path.write_text(_SCRIPTED)
    r = cli("analyze", f"{path}:scripted", "--input", "3,8,8", "--json")
    assert r.code == 0, r.err
    assert "Traceback" not in r.err
    report = json.loads(r.out)
    assert report["layers"][0]["type"] == "Conv2d"
    assert report["totals"]["macs"] == 36 * 4 * 27 + 144 * 10
    r = cli("analyze", f"{path}:scripted", "--input", "3,8,8", "--macs-convention", "torchinfo")
    assert r.code == 2
    assert r.err.startswith("error: analyze.macs_convention torchinfo: ")
    assert "TorchScript submodule 0 (Conv2d)" in r.err
    assert "Traceback" not in r.err
