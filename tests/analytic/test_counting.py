"""Hand-counted cases for the counting engine: one per handler kind.

Conventions (dlperf.analytic.ops): a MAC is a multiply-accumulate, FLOPs = 2 * MACs plus
bias/residual adds and 1 FLOP per element of an element-wise op.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from torch import nn

from dlperf.analytic.counting import analyze, analyze_module, backward_hint
from dlperf.errors import UserError
from tests.conftest import CliResult

Cli = Callable[..., CliResult]


def test_single_conv() -> None:
    a = analyze_module(nn.Conv2d(3, 8, 3, padding=1), [3, 8, 8])
    t = a.totals()
    # 64 output positions x 8 filters x (3 channels x 3 x 3) products
    assert t["macs"] == 64 * 8 * 27 == 13824
    assert t["flops"] == 2 * 13824 + 8 * 64  # plus one bias add per output element
    assert t["params"] == 8 * 27 + 8
    assert a.layers[0].output_shape == [1, 8, 8, 8]
    assert t["activations"] == 512 and t["activation_bytes"] == 2048


def test_strided_transposed_conv() -> None:
    conv = nn.ConvTranspose2d(4, 2, 3, stride=2, padding=1, output_padding=1, bias=False)
    a = analyze_module(conv, [4, 5, 5])
    assert a.layers[0].output_shape == [1, 2, 10, 10]
    # one 3x3 kernel per *input* position: 25 positions x 4 in x 2 out x 9
    assert a.totals()["macs"] == 25 * 4 * 2 * 9 == 1800


def test_depthwise_conv_and_its_backward() -> None:
    conv = nn.Conv2d(8, 8, 3, groups=8, bias=False)
    a = analyze_module(conv, [8, 6, 6], batch=2, train=True)
    t = a.totals()
    assert t["macs"] == 2 * 16 * 8 * 9 == 2304  # 16 positions, 8 channels, 9 taps each
    # The input needs no gradient, so backward is d-weight only: the same 2304 products.
    # (torch.utils.flop_counter counts grouped d-weight `groups` times: 8 x 2304.)
    assert t["backward_macs"] == 2304


class MatmulInForward(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.zeros(4, 6))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x @ self.w


def test_matmul_in_forward_is_attributed_to_its_module() -> None:
    a = analyze_module(MatmulInForward(), [3, 4], batch=2)
    [row] = a.layers
    assert (row.name, row.type, row.params) == ("(model)", "MatmulInForward", 24)
    assert row.macs == 2 * 3 * 4 * 6 == 144
    assert row.output_shape == [2, 3, 6]


class Inception(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.b1 = nn.Conv2d(4, 2, 1, bias=False)
        self.b3 = nn.Conv2d(4, 3, 3, padding=1, bias=False)
        self.pool = nn.MaxPool2d(3, stride=1, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.cat([self.b1(x), self.b3(x), self.pool(x)], dim=1)


def test_inception_block_with_cat() -> None:
    a = analyze_module(Inception(), [4, 5, 5])
    rows = {r.name: r for r in a.layers}
    assert [r.name for r in a.layers] == ["b1", "b3", "pool", "(model)"]
    assert rows["b1"].macs == 25 * 2 * 4
    assert rows["b3"].macs == 25 * 3 * 4 * 9
    assert rows["pool"].flops == 25 * 4 * 9  # one compare per window element
    cat = rows["(model)"]
    assert (cat.flops, cat.output_shape, cat.activations) == (0, [1, 9, 5, 5], 225)
    assert cat.bytes == 2 * 225 * 4  # reads the three branches, writes the result
    assert a.totals()["macs"] == 200 + 2700
    assert a.totals()["flops"] == 2 * 2900 + 900
    assert a.totals()["conv_flops_share"] == 5800 / 6700
    assert a.receptive_field["defined"] and a.receptive_field["size"] == [3, 3]


def test_transformer_encoder_layer_eval_no_grad() -> None:
    """On a real CPU this takes the fused fast path; on meta tensors its parts are counted,
    its attention as the fused kernel a CPU runs (the scale is inside it)."""
    layer = nn.TransformerEncoderLayer(8, 2, 16, dropout=0.0, batch_first=True).eval()
    with torch.no_grad():
        a = analyze_module(layer, [5, 8], batch=2)
    tokens, heads, seq, head_dim = 10, 2, 5, 4
    macs = (
        tokens * 8 * 24  # q, k, v projection
        + 2 * heads * seq * head_dim * seq * 2  # q k^T and p v, batch 2
        + tokens * 8 * 8  # output projection
        + tokens * 8 * 16 * 2  # feed-forward
    )
    assert a.totals()["macs"] == macs == 5920
    other = (
        tokens * 24  # q, k, v bias
        + 5 * 2 * heads * seq * seq  # softmax, 5 per score
        + tokens * 8 * 2  # output-projection bias, residual add
        + 2 * 8 * tokens * 8  # two layer norms, 8 per element
        + tokens * 16 * 2  # feed-forward bias 1, ReLU
        + tokens * 8 * 2  # feed-forward bias 2, residual add
    )
    assert a.totals()["flops"] == 2 * macs + other == 14500
    assert not a.unsupported_ops
    assert not a.receptive_field["defined"]


def test_attention_out_proj_used_through_its_weight_is_in_a_row() -> None:
    """MultiheadAttention never calls its out_proj module: F.multi_head_attention_forward
    reads out_proj.weight and .bias, so the attention's row counts them."""
    layer = nn.TransformerEncoderLayer(8, 2, 16, dropout=0.0, batch_first=True).eval()
    a = analyze_module(layer, [5, 8], batch=2)
    rows = {r.name: r for r in a.layers}
    assert rows["self_attn"].params == 8 * 24 + 24 + 8 * 8 + 8  # in_proj, out_proj
    assert rows["self_attn"].bias_params == 24 + 8
    assert a.totals()["params"] == a.params == sum(p.numel() for p in layer.parameters())
    assert a.not_run == []


def test_mlp_backward_flops_are_counted_not_estimated() -> None:
    mlp = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
    t = analyze_module(mlp, [4], batch=3, train=True).totals()
    assert (t["macs"], t["flops"]) == (96 + 48, 2 * 96 + 24 + 24 + 2 * 48 + 6)
    # Linear 2: d-input 3x2x8, d-weight 2x3x8, d-bias 6 adds; ReLU: 24; Linear 1: d-weight
    # 8x3x4 and d-bias 24 adds (no d-input: the data needs no gradient).
    assert t["backward_macs"] == 48 + 48 + 96 == 192
    assert t["backward_flops"] == 2 * 192 + 6 + 24 + 24 == 438
    assert t["step_flops"] == 342 + 438 != 3 * 342


def test_cnn_backward_flops_and_training_memory() -> None:
    cnn = nn.Sequential(nn.Conv2d(1, 2, 3, bias=False), nn.ReLU(), nn.Flatten(), nn.Linear(32, 3))
    a = analyze_module(cnn, [1, 6, 6], batch=2, train=True)
    t = a.totals()
    assert t["macs"] == 2 * 16 * 2 * 9 + 2 * 32 * 3 == 768
    assert t["backward_macs"] == 192 + 192 + 576  # linear d-input, d-weight; conv d-weight
    assert t["backward_flops"] == 2 * 960 + 6 + 64 == 1990
    assert [r.name for r in a.layers] == ["0", "1", "2", "3"]
    assert a.layers[3].backward_macs == 384
    memory = t["training_memory"]
    assert memory["weights_bytes"] == memory["gradients_bytes"] == (18 + 99) * 4
    assert memory["optimizer_state_bytes"] == {"sgd_momentum": 468, "adam": 936}
    # autograd keeps the conv's input (2x1x6x6) and the ReLU's output (2x2x4x4, which the
    # flattened linear input shares): weights are not counted again
    assert memory["saved_activations_bytes"] == (72 + 64) * 4


def test_lazy_smallcnn_is_materialised_and_nothing_is_unsupported() -> None:
    a = analyze("smallcnn", [1, 28, 28])
    assert a.params == 1199882  # the Keras MNIST example's network
    assert not a.unsupported_ops


def test_unsupported_ops_are_listed_by_name() -> None:
    class Fft(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return torch.fft.rfft(x).abs()

    a = analyze_module(Fft(), [8])
    assert a.unsupported_ops == {"aten._fft_r2c": 1}
    assert a.unsupported_note() == "not counted (no handler for these operators): aten._fft_r2c x1"
    assert analyze_module(nn.Linear(4, 2), [4]).unsupported_note() is None


def test_bad_input_shape_is_one_line() -> None:
    with pytest.raises(UserError, match=r"rejects input \[1, 5\]: RuntimeError: .*5"):
        analyze_module(nn.Linear(4, 2), [5])


def test_precision_changes_bytes_not_counts() -> None:
    fp32 = analyze("resnet20").totals()
    bf16 = analyze("resnet20", precision="bf16").totals()
    assert bf16["macs"] == fp32["macs"]
    assert bf16["activation_bytes"] * 2 == fp32["activation_bytes"]


def test_train_count_of_a_model_with_nothing_to_train(cli: Cli, tmp_path: Path) -> None:
    # Its outputs need no gradient: the backward sum was the int 0, and `.backward()` on it
    # a traceback. Then a backward of 0 was counted; now it is refused as `run` refuses it
    # (docs/analyze.md; break-it round 27, P1 C3)
    path = tmp_path / "nets.py"
    path.write_text("from torch import nn\ndef pool():\n    return nn.MaxPool2d(2)\n")
    result = cli("analyze", f"{path}:pool", "--input", "1,4,4", "--train", "--json")
    assert result.code == 2, result.err
    assert "Traceback" not in result.err
    assert "has no parameters to train" in result.err.splitlines()[-1]


# --- issue 30: counting defects ------------------------------------------------------------

TIED_FILE = """
from torch import nn


class Tied(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Linear(8, 8, bias=False)
        self.b = nn.Linear(8, 8, bias=False)
        self.b.weight = self.a.weight

    def forward(self, x):
        return self.b(self.a(x))


def tied():
    return Tied()
"""


def test_tied_weights_of_a_model_file_are_counted_once(cli: Cli, tmp_path: Path) -> None:
    """Built on the meta device, the second assignment of a tied weight made a new parameter
    (128 counted); the module as built holds 64."""
    path = tmp_path / "tie.py"
    path.write_text(TIED_FILE)
    doc = json.loads(cli("analyze", f"{path}:tied", "--input", "8", "--json").out)
    assert doc["totals"]["params"] == 64
    assert [row["params"] for row in doc["layers"]] == [64, 0]
    assert doc["totals"]["macs"] == 2 * 64  # the weight is used twice


class SharedReLU(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        relu = nn.ReLU()
        self.p = nn.Sequential(nn.Linear(4, 4), relu)
        self.q = nn.Sequential(nn.Linear(4, 4), relu)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.q(self.p(x))


def test_a_module_in_two_parents_is_counted() -> None:
    """torch's ModuleTracker names it by its last parent, `q.1`, which the deduplicated
    module names lacked: KeyError, reported as a bad input shape. It is one row, under its
    first name, with both of its calls (break-it round 31)."""
    a = analyze_module(SharedReLU(), [4])
    t = a.totals()
    assert t["params"] == 40 and t["macs"] == 32
    assert t["flops"] == 2 * 32 + 4 + 4 + 4 + 4  # two bias adds, the ReLU run twice
    assert [(r.name, r.flops, r.activations) for r in a.layers] == [
        ("p.0", 2 * 16 + 4, 4),
        ("p.1", 4 + 4, 4 + 4),
        ("q.0", 2 * 16 + 4, 4),
    ]


class Gaussian(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.head = nn.Linear(4, 2)

    def forward(self, x: torch.Tensor) -> torch.distributions.Normal:
        mean, log_std = self.head(x).chunk(2, dim=-1)
        return torch.distributions.Normal(mean, log_std.exp())


@pytest.mark.parametrize("train", [False, True])
def test_a_model_returning_a_distribution_is_counted(train: bool) -> None:
    """The distribution's argument checks called Tensor.item() on meta tensors."""
    t = analyze_module(Gaussian(), [4], batch=2, train=train).totals()
    assert t["params"] == 10 and t["macs"] == 2 * 4 * 2
    if train:  # the backward runs from the distribution's parameters
        assert t["backward_macs"] == 2 * 4 * 2  # d-weight only: the input needs no gradient


class NoArithmetic(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.pad = nn.ReflectionPad2d(1)
        self.replicate = nn.ReplicationPad2d(1)
        self.pool = nn.MaxPool2d(2, return_indices=True)
        self.unpool = nn.MaxUnpool2d(2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y, indices = self.pool(self.replicate(self.pad(x)))
        return self.unpool(y, indices)


def test_ops_without_arithmetic_are_ignored_not_unsupported() -> None:
    a = analyze_module(NoArithmetic(), [1, 4, 4])
    assert a.unsupported_ops == {}
    rows = {r.name: r.flops for r in a.layers}
    # 4x4 padded twice to 8x8, pooled to 4x4: 16 outputs of a 2x2 window
    assert rows == {"pad": 0, "replicate": 0, "pool": 16 * 4, "unpool": 0}
    lstm = analyze_module(nn.LSTM(4, 4), [3, 4])  # aten.unsafe_split splits the gates
    assert lstm.unsupported_ops == {}


def test_bilinear_upsampling_is_counted() -> None:
    """Each output is a weighted sum of its 4 nearest inputs: 4 multiplies and 3 adds; the
    backward spreads each output's gradient over them: 4 multiplies, 4 adds."""
    up = nn.Sequential(nn.Conv2d(1, 1, 1, bias=False), nn.Upsample(scale_factor=2, mode="bilinear"))
    a = analyze_module(up, [1, 3, 3], train=True)
    row = a.layers[1]
    assert (row.type, row.output_shape) == ("Upsample", [1, 1, 6, 6])
    assert row.flops == 7 * 36 and row.macs == 0
    assert row.backward_flops == 8 * 36
    assert a.unsupported_ops == {}
    linear = analyze_module(nn.Upsample(scale_factor=2, mode="linear"), [2, 5])
    assert linear.totals()["flops"] == 3 * 2 * 10  # 2 inputs: 2 multiplies, 1 add


@pytest.mark.parametrize("affine", [True, False])
def test_normalisation_flops_follow_affine(affine: bool) -> None:
    """(x - mean) * rstd is 2 FLOPs; gamma and beta one each where the layer has them; the
    statistics 4 more in training; the backward 6, plus 3 for d-gamma and d-beta."""
    elements, extra = 2 * 3 * 4 * 4, 2 if affine else 0
    bn = nn.BatchNorm2d(3, affine=affine)
    assert analyze_module(bn, [3, 4, 4], batch=2).totals()["flops"] == (2 + extra) * elements
    conv_bn = nn.Sequential(nn.Conv2d(3, 3, 1, bias=False), bn)
    t = analyze_module(conv_bn, [3, 4, 4], batch=2, train=True).layers[1]
    assert t.flops == (6 + extra) * elements + 1  # and num_batches_tracked += 1
    assert t.backward_flops == (6 + (3 if affine else 0)) * elements
    ln = nn.LayerNorm(8, elementwise_affine=affine)
    assert analyze_module(ln, [5, 8]).totals()["flops"] == (6 + extra) * 40
    gn = nn.GroupNorm(1, 3, affine=affine)
    assert analyze_module(gn, [3, 4, 4]).totals()["flops"] == (6 + extra) * 48
    inorm = nn.InstanceNorm2d(3, affine=affine)  # statistics per sample and channel
    assert analyze_module(inorm, [3, 4, 4]).totals()["flops"] == (6 + extra) * 48


def test_backward_hints_name_the_fix_of_each_failure() -> None:
    assert "out-of-place" in backward_hint("... modified by an inplace operation ...")
    assert "no derivative" in backward_hint("the derivative for 'x' is not implemented")
    assert "turned gradients off" in backward_hint(
        "element 0 of tensors does not require grad and does not have a grad_fn"
    )
    assert backward_hint("anything else").startswith("every operation")
