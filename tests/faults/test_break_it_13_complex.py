"""The thirteenth break-it round (issue 41), counting: complex-valued layers counted as real.

A model holding a complex64 weight w of 64x10 and computing `x.to(torch.cfloat) @ w`, then
`z.real + z.imag`, gave MACs 640, FLOPs 1.29 K and precision "fp32", exit 0, without a word,
in `analyze` and `predict` (the tester's /tmp/bk13/A/repro/cplx.py). Two things were wrong:
the count cast the model to fp32 as nn.Module.to(dtype) does, which keeps only the real part
of a complex weight (so a complex @ real product was counted, which torch off the meta device
refuses), and each operation was counted by its shape as if real.

Now complex weights are never cast (a run casts nothing either), and arithmetic on complex
tensors is counted in real operations: a complex multiply-accumulate is 4 real MACs (the
straightforward 4 multiplies and 4 adds, not Gauss's 3 multiplies), a complex add 2 FLOPs, a
complex multiply 6 (4 multiplies, 2 adds), abs 4; an operation with no complex rule is
reported as not counted. The counts say so: `conventions.complex` in --json, a row of
analyze's totals, a note from predict, and a precision line naming complex64.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
import torch

from dlperf.analytic.ops import COMPLEX_COUNTED, Cost, cost_of
from tests.conftest import CliResult
from tests.faults.test_store_faults import one_line

Cli = Callable[..., CliResult]

aten = torch.ops.aten

# The tester's model (/tmp/bk13/A/repro/cplx.py), beside element-wise complex work and its
# real twin.
MODELS = """
import torch, torch.nn as nn


class C(nn.Module):
    def __init__(self, num_classes=10):
        super().__init__(); self.w = nn.Parameter(torch.randn(64, num_classes, dtype=torch.cfloat))
    def forward(self, x):
        z = x.flatten(1).to(torch.cfloat) @ self.w
        return z.real + z.imag


def make(num_classes=10): return C(num_classes)


class Elementwise(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Parameter(torch.randn(64, dtype=torch.cfloat))
        self.b = nn.Parameter(torch.randn(64, dtype=torch.cfloat))
    def forward(self, x):
        z = x.flatten(1).to(torch.cfloat)
        return ((z * self.a + self.b) * 0.5).abs()


def elementwise(): return Elementwise()


class Tanh(nn.Module):
    def forward(self, x):
        return torch.tanh(x.flatten(1).to(torch.cfloat)).real


def tanh(): return Tanh()


class Real(nn.Module):
    def __init__(self, num_classes=10):
        super().__init__(); self.w = nn.Parameter(torch.randn(64, num_classes))
    def forward(self, x):
        return x.flatten(1) @ self.w


def real(num_classes=10): return Real(num_classes)
"""

INPUT = ["--input", "1,8,8"]
# x (1x64) @ w (64x10): 640 complex multiply-accumulates, 4 real MACs (8 FLOPs) each; then
# z.real + z.imag, 10 real adds.
CPLX_MACS = 640 * 4
CPLX_FLOPS = 640 * 8 + 10
# Bytes each operation reads and writes, a complex64 element 8 bytes: the cast of x (64 floats
# in, 64 complex out), the product (x, w, z), the real add (two 10-float views, its output).
CPLX_BYTES = (64 * 4 + 64 * 8) + (64 * 8 + 640 * 8 + 10 * 8) + 3 * 10 * 4
# 64 elements: z * a (complex x complex: 6), + b (2), * 0.5 (complex x real: 2), abs (4).
ELEMENTWISE_FLOPS = 64 * (6 + 2 + 2 + 4)


@pytest.fixture
def models(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    path = tmp_path / "cplx.py"
    path.write_text(MODELS)
    return path


def _analyze(cli: Cli, factory: str, *more: str) -> dict[str, object]:
    result = cli("analyze", f"cplx.py:{factory}", *INPUT, *more, "--json")
    assert result.code == 0, result.err
    doc: dict[str, object] = json.loads(result.out)
    return doc


def test_analyze_counts_a_complex_matmul_in_real_arithmetic(cli: Cli, models: Path) -> None:
    """Before: MACs 640, FLOPs 1,290, precision "fp32", nothing said."""
    doc: dict[str, dict[str, object]] = _analyze(cli, "make")  # type: ignore[assignment]
    totals, conventions = doc["totals"], doc["conventions"]
    assert (totals["macs"], totals["flops"]) == (CPLX_MACS, CPLX_FLOPS)
    assert totals["bytes"] == CPLX_BYTES  # the weight held complex, 8 bytes an element
    assert conventions["complex"] == COMPLEX_COUNTED
    assert conventions["precision"] != "fp32" and "complex64" in str(conventions["precision"])
    # and the table says it
    text = cli("analyze", "cplx.py:make", *INPUT)
    assert text.code == 0, text.err
    assert f"{CPLX_MACS:,}" in text.out and f"{CPLX_FLOPS:,}" in text.out
    assert "complex multiply-accumulate as 4 real MACs" in " ".join(text.out.split())
    assert "complex64" in text.out


def test_analyze_counts_complex_elementwise_work(cli: Cli, models: Path) -> None:
    doc: dict[str, dict[str, object]] = _analyze(cli, "elementwise")  # type: ignore[assignment]
    assert (doc["totals"]["macs"], doc["totals"]["flops"]) == (0, ELEMENTWISE_FLOPS)
    assert doc["conventions"]["complex"] == COMPLEX_COUNTED
    assert doc["unsupported_ops"] == {}


def test_a_complex_operation_without_a_rule_is_said_not_counted(cli: Cli, models: Path) -> None:
    """tanh counts 1 FLOP an element on real tensors; on complex ones it has no rule, and is
    reported, not counted as if real."""
    result = cli("analyze", "cplx.py:tanh", *INPUT, "--json")
    assert result.code == 0, result.err
    doc = json.loads(result.out)
    assert doc["unsupported_ops"] == {"aten.tanh on complex tensors": 1}
    assert doc["totals"]["flops"] == 0
    assert "warning: not counted (no handler for these operators): aten.tanh on complex" in (
        result.err
    )


def test_a_real_model_is_counted_as_before(cli: Cli, models: Path) -> None:
    doc: dict[str, dict[str, object]] = _analyze(cli, "real")  # type: ignore[assignment]
    assert (doc["totals"]["macs"], doc["totals"]["flops"]) == (640, 1280)
    assert doc["totals"]["bytes"] == (64 + 640 + 10) * 4
    assert "complex" not in doc["conventions"] and doc["conventions"]["precision"] == "fp32"


def test_analyze_at_bf16_keeps_complex_weights_complex(cli: Cli, models: Path) -> None:
    """nn.Module.to(bfloat16) would keep only the weight's real part."""
    doc: dict[str, dict[str, object]] = _analyze(cli, "make", "--precision", "bf16")  # type: ignore[assignment]
    assert (doc["totals"]["macs"], doc["totals"]["flops"]) == (CPLX_MACS, CPLX_FLOPS)
    assert "complex64" in str(doc["conventions"]["precision"])


def test_predict_counts_a_complex_model_and_says_so(cli: Cli, models: Path) -> None:
    """Before: '1.29 K counted (640 MACs)' per image, exit 0, nothing said."""
    result = cli("predict", "cplx.py:make", *INPUT, "--device", "K80", "--batch", "4", "--json")
    assert result.code == 0, result.err
    doc = json.loads(result.out)
    assert doc["flops_over_peak"]["counted_macs_per_image"] == CPLX_MACS
    # one note (the console wraps it to the terminal's width)
    assert result.err.count("note: ") == 1, result.err
    assert f"note: cplx.py:make: {COMPLEX_COUNTED}" in " ".join(result.err.split())


def test_a_complex_product_with_a_real_operand_is_refused_as_torch_refuses_it(
    cli: Cli, models: Path
) -> None:
    """Meta kernels accept complex @ real; torch's CPU and CUDA kernels do not."""
    Path("mixed.py").write_text(
        "import torch, torch.nn as nn\n"
        "class M(nn.Module):\n"
        "    def __init__(self):\n"
        "        super().__init__(); self.w = nn.Parameter(torch.randn(64, 10))\n"
        "    def forward(self, x):\n"
        "        return (x.flatten(1).to(torch.cfloat) @ self.w).real\n"
        "def make(): return M()\n"
    )
    result = cli("analyze", "mixed.py:make", *INPUT)
    one_line(result, 2, "the model rejects input", "but got complex64 and float32")


# --- the handlers, by hand ----------------------------------------------------------------


def _meta(*shape: int, dtype: torch.dtype = torch.cfloat) -> torch.Tensor:
    return torch.empty(shape, device="meta", dtype=dtype)


def test_complex_products_count_4_real_macs_each() -> None:
    a, b, out = _meta(2, 3), _meta(3, 5), _meta(2, 5)
    assert cost_of(aten.mm.default, [a, b], out) == Cost(4 * 30, 8 * 30)
    # addmm: the product, and a complex add (2 FLOPs) per output
    assert cost_of(aten.addmm.default, [_meta(5), a, b], out) == Cost(4 * 30, 8 * 30 + 2 * 10)
    # the same shapes in float32: as before
    f32 = torch.float32
    real = [_meta(5, dtype=f32), _meta(2, 3, dtype=f32), _meta(3, 5, dtype=f32)]
    assert cost_of(aten.addmm.default, real, _meta(2, 5, dtype=torch.float32)) == Cost(30, 70)
    # the count by shape, as fvcore's peer convention reproduces it
    assert cost_of(aten.mm.default, [a, b], out, as_real=False) == Cost(30, 60)


def test_a_complex_convolution_counts_4_real_macs_each() -> None:
    x, w, out = _meta(1, 2, 4, 4), _meta(3, 2, 3, 3), _meta(1, 3, 2, 2)
    args = [x, w, _meta(3), [1, 1], [0, 0], [1, 1], False, [0, 0], 1]
    macs = 1 * 4 * 3 * 2 * 9  # positions x out x in x kernel
    assert cost_of(aten.convolution.default, args, out) == Cost(4 * macs, 8 * macs + 2 * 12)


def test_complex_elementwise_rules() -> None:
    z, r = _meta(7), _meta(7, dtype=torch.float32)
    assert cost_of(aten.add.Tensor, [z, z], z) == Cost(0, 14)
    assert cost_of(aten.sub.Tensor, [z, r], z) == Cost(0, 14)
    assert cost_of(aten.mul.Tensor, [z, z], z) == Cost(0, 42)
    assert cost_of(aten.mul.Tensor, [z, r], z) == Cost(0, 14)
    assert cost_of(aten.mul.Tensor, [z, 2.0], z) == Cost(0, 14)
    assert cost_of(aten.mul.Tensor, [z, 2j], z) == Cost(0, 42)
    assert cost_of(aten.div.Tensor, [z, z], z) == Cost(0, 77)
    assert cost_of(aten.div.Tensor, [z, 2.0], z) == Cost(0, 14)
    assert cost_of(aten.div.Tensor, [r, z], z) == Cost(0, 77)  # by a complex number
    assert cost_of(aten.abs.default, [z], r) == Cost(0, 28)
    assert cost_of(aten.sum.default, [z], _meta()) == Cost(0, 14)
    assert cost_of(aten.tanh.default, [z], z) is None  # no rule: reported, not guessed
    assert cost_of(aten.view_as_real.default, [z], _meta(7, 2, dtype=torch.float32)) == Cost(0, 0)


def test_predict_measure_steps_a_complex_model_as_built(models: Path) -> None:
    """predict --measure's step cast the model with nn.Module.to(float32), keeping the weight's
    real part alone; its forward then failed ('expected m1 and m2 to have the same dtype')."""
    import importlib.util

    from dlperf.analytic.measure import make_step

    spec = importlib.util.spec_from_file_location("cplx", models)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    for precision in ("fp32", "bf16"):
        model = module.make()
        make_step(model, [1, 8, 8], 2, True, precision, torch.device("cpu"))()
        assert model.w.dtype == torch.cfloat and model.w.grad is not None
