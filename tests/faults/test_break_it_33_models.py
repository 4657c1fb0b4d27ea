"""Break-it round 33, P1 (the user's own models), fixer F1.

- C1: `export` of a model returning probabilities (a softmax ending its forward, or only in
  eval mode) said nothing, where `run` warns, and `dlperf infer` and /predict softmax the
  scores again (every probability they show near 1/classes). Export's dry forward now warns
  in run's words of why, before the export, and the report's `warnings` hold it. (R3) The
  export also records it in the model's metadata (`probabilities`), and `dlperf infer` and
  /predict rank such scores as they are, saying so once; a file exported before the record
  is softmaxed as before.
- C2: `analyze`/`predict --train` left the backward of common torch.nn pools uncounted ("not
  counted (no handler ...)"), dlperf's own alexnet_paper among them: LocalResponseNorm's
  avg_pool3d_backward, AdaptiveMaxPool1d/2d/3d's backward (and 3d's forward), MaxPool3d's,
  AdaptiveAvgPool3d's, FractionalMaxPool2d/3d's forward and backward, LPPool's sgn. Every
  pool whose forward is counted now has its backward counted too. (R3) So are reflection
  and replication padding's backward (Conv2d's padding_mode="reflect"/"replicate") and
  CrossMapLRN2d's `resize_as_`.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import httpx
import numpy as np
import onnx
import pytest
import torch
from onnx import helper
from torch import nn
from torch.utils.flop_counter import FlopCounterMode

import dlperf
from dlperf.analytic.ops import HANDLERS, Cost, kind_of
from dlperf.deploy import export as exporting
from dlperf.deploy import infer, runtime
from dlperf.deploy import meta as meta_io
from dlperf.deploy.served_model import ServedModel
from dlperf.deploy.server import create_app
from tests.conftest import CliResult, Logged
from tests.deploy.test_server import LABELS, png, running, tiny_classifier

Cli = Callable[..., CliResult]

# --- C1: export of a model that returns probabilities ---------------------------------------

# The tester's model (bk33 P1, m.py), one softmaxing in eval mode only, and two that are fine
PROBABILITIES = """
import torch, torch.nn as nn
def softmax_end(num_classes=10):
    return nn.Sequential(nn.Flatten(), nn.Linear(64, 32), nn.ReLU(), nn.Linear(32, num_classes),
                         nn.Softmax(dim=1))
class EvalSoftmax(nn.Module):
    def __init__(s, n=10): super().__init__(); s.l = nn.Linear(64, n)
    def forward(s, x):
        z = s.l(x.flatten(1))
        return z if s.training else z.softmax(1)
def eval_softmax(num_classes=10): return EvalSoftmax(num_classes)
def logits(num_classes=10): return nn.Sequential(nn.Flatten(), nn.Linear(64, num_classes))
def log_softmax(num_classes=10):
    return nn.Sequential(nn.Flatten(), nn.Linear(64, num_classes), nn.LogSoftmax(dim=1))
"""

SAID = (
    "warning: model '{spec}' returns probabilities in eval mode (each row of its scores is "
    "non-negative and sums to 1, as after a softmax): its metadata records it, and `dlperf "
    "infer` and /predict show them as they are, not softmaxed again; if it was trained with "
    "cross-entropy, which takes logits, return the scores before the softmax (the logits; "
    "log_softmax is fine)"
)


@pytest.fixture
def probabilities(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "m.py").write_text(PROBABILITIES)
    return tmp_path


class _Exported(Exception):
    """Raised in place of the export: what the dry check said is all the test asks."""


@pytest.mark.parametrize(
    ("factory", "warned"),
    [("softmax_end", True), ("eval_softmax", True), ("logits", False), ("log_softmax", False)],
)
def test_c1_export_warns_of_a_model_returning_probabilities_before_exporting(
    probabilities: Path, monkeypatch: pytest.MonkeyPatch, factory: str, warned: bool
) -> None:
    """Before: nothing said (run warns; export's dry forward checked the scores' type alone)."""

    def exported(*args: object, **kwargs: object) -> str:
        raise _Exported

    monkeypatch.setattr(exporting, "_torch_export", exported)
    spec = f"m.py:{factory}"
    source = exporting.from_registry(spec, (1, 8, 8), from_user=True)
    heard = Logged()
    with pytest.raises(_Exported):
        exporting.export(source, probabilities / "m.onnx", reporter=heard)
    assert heard.lines == ([SAID.format(spec=spec)] if warned else [])
    # what the metadata saved with the graph records, for infer and /predict (R3)
    assert source.meta.probabilities is warned


@pytest.mark.faults  # a whole export, 10-20 s on a busy core
def test_c1_export_of_a_softmax_ended_model_says_so_and_reports_it(
    cli: Cli, probabilities: Path
) -> None:
    """The tester's case: the line on stderr and in --json's warnings; the export is made."""
    result = cli("export", "m.py:softmax_end", "--input", "1,8,8", "--out", "m.onnx", "--json")
    assert result.code == 0, result.err
    said = SAID.format(spec="m.py:softmax_end")
    assert said in " ".join(result.err.split()), result.err  # wrapped at 160 columns off a tty
    assert json.loads(result.out)["warnings"] == [said.removeprefix("warning: ")]
    assert meta_io.load(probabilities / "m.onnx").probabilities is True


# --- C1 (R3): infer and /predict of an exported model that returns probabilities ------------


def _softmaxed(path: Path, recorded: bool | None) -> Path:
    """tiny_classifier's graph with a Softmax after its logits, as the export of a model
    ending in a softmax gives; its metadata's record `recorded` (None: exported before
    export recorded it)."""
    tiny_classifier(path)
    proto = onnx.load(str(path))
    proto.graph.node.append(helper.make_node("Softmax", ["logits"], ["probs"], axis=1))
    proto.graph.output[0].name = "probs"
    onnx.save(proto, str(path))
    kept = meta_io.load(path)
    kept.probabilities = recorded
    meta_io.save(path, kept)
    return path


def _outputs(path: Path, image: bytes) -> np.ndarray:
    """The graph's own first output (the probabilities) for the image's one row."""
    pre = meta_io.load(path).preprocess
    x = runtime.to_array(runtime.decode(image, "x.png"), pre, "x.png")
    return runtime.run_onnx(runtime.session(path, 1), x[None])[0]


@pytest.mark.parametrize("recorded", [True, None], ids=["recorded", "exported-before"])
def test_c1_infer_ranks_recorded_probabilities_as_they_are(
    tmp_path: Path, recorded: bool | None
) -> None:
    """Before: infer softmaxed the graph's probabilities again (each near 1/3 here)."""
    model = _softmaxed(tmp_path / "p.onnx", recorded)
    image = png(seed=1)
    (tmp_path / "x.png").write_bytes(image)
    result = infer.predict(model, [tmp_path / "x.png"], k=3)
    outputs = _outputs(model, image)
    expected = outputs if recorded else runtime.softmax(outputs.astype(np.float64))
    shown = {t["label"]: t["probability"] for t in result["predictions"][0]["top"]}
    assert shown == pytest.approx(dict(zip(LABELS, expected.tolist(), strict=True)), abs=1e-6)
    said = "the model's scores are probabilities (recorded at export): shown as they are"
    assert result.get("note") == (said if recorded else None)


def test_c1_predict_serves_recorded_probabilities_as_they_are(tmp_path: Path) -> None:
    """Before: /predict softmaxed them again. Said once, as the server starts (its model's
    `said`, and in /v2/models/{name}'s metadata)."""
    model = _softmaxed(tmp_path / "p.onnx", True)
    image = png(seed=2)
    with running(create_app(model, threads=1)) as url:
        answer = httpx.post(f"{url}/predict?topk=3", content=image, timeout=60)
        described = httpx.get(f"{url}/v2/models/p", timeout=60).json()
    assert answer.status_code == 200, answer.text
    shown = {p["label"]: p["probability"] for p in answer.json()["predictions"]}
    expected = dict(zip(LABELS, _outputs(model, image).tolist(), strict=True))
    assert shown == pytest.approx(expected, abs=1e-6)
    assert described["probabilities"] is True
    served = ServedModel(model, 1)
    assert served.said == (
        "the model's scores are probabilities (recorded at export): /predict shows them as they are"
    )
    assert ServedModel(tiny_classifier(tmp_path / "t.onnx"), 1).said is None


# --- C2: the backward of every pool ---------------------------------------------------------


def _conv(dims: int) -> nn.Module:
    """A first layer without bias (its backward is d-weight alone, 2 FLOPs per MAC, so what the
    backward counts beyond 2 x its MACs is the pool's and the last layer's d-bias): 4 channels
    of 8x8 from (3, 10, 10), or 2 of 4x4x4 from (1, 6, 6, 6)."""
    return nn.Conv3d(1, 2, 3, bias=False) if dims == 3 else nn.Conv2d(3, 4, 3, bias=False)


# (pool, the sample's shape, its dimensions, FLOPs of its backward by hand at batch 2)
POOLS = [
    # one add per output gradient, into its max's position: 2 x 4 x 2 x 2
    pytest.param(nn.AdaptiveMaxPool2d(2), (3, 10, 10), 2, 32, id="AdaptiveMaxPool2d"),
    # 2 x 2 channels x 2x2x2 outputs
    pytest.param(nn.MaxPool3d(2), (1, 6, 6, 6), 3, 32, id="MaxPool3d"),
    pytest.param(nn.AdaptiveMaxPool3d(2), (1, 6, 6, 6), 3, 32, id="AdaptiveMaxPool3d"),
    # fractional: 2 x 4 x 3 x 3 outputs (FractionalMaxPool3d's backward has no meta kernel in
    # torch: --train is refused in one line, "the model's backward cannot be counted")
    pytest.param(nn.FractionalMaxPool2d(2, output_size=3), (3, 10, 10), 2, 72, id="Fractional2d"),
    # each output gradient spread over its 2x2x2 window: 8 x 32
    pytest.param(nn.AvgPool3d(2), (1, 6, 6, 6), 3, 256, id="AvgPool3d"),
    # one add per input gradient: 2 x 2 x 4x4x4
    pytest.param(nn.AdaptiveAvgPool3d(2), (1, 6, 6, 6), 3, 256, id="AdaptiveAvgPool3d"),
]


def _counted(model: nn.Module, sample: tuple[int, ...]) -> dict[str, object]:
    """analyze --train at batch 2: its totals and what it left uncounted."""
    result = dlperf.analyze(model, sample, batch=2, train=True)
    return {**result.totals, "unsupported": result.unsupported_ops}


def _fcm_flops(model: nn.Module, sample: tuple[int, ...]) -> int:
    """torch.utils.flop_counter's forward + backward FLOPs (2 per MAC; it counts no pooling)."""
    x = torch.randn(2, *sample)
    with FlopCounterMode(display=False) as fcm:
        model(x).sum().backward()
    return int(fcm.get_total_flops())


@pytest.mark.parametrize(("pool", "sample", "dims", "backward"), POOLS)
def test_c2_a_pools_backward_is_counted_by_hand(
    pool: nn.Module, sample: tuple[int, ...], dims: int, backward: int
) -> None:
    """Before: "not counted (no handler for these operators): aten.max_pool3d_with_indices_
    backward" (adaptive_max_pool2d_backward, avg_pool3d_backward ...), the step a lower bound."""
    model = nn.Sequential(_conv(dims), pool, nn.Flatten(), nn.LazyLinear(3))
    model(torch.zeros(1, *sample))  # the linear layer's width
    counted = _counted(model, sample)
    assert counted["unsupported"] == {}
    assert 2 * (counted["macs"] + counted["backward_macs"]) == _fcm_flops(model, sample)
    # the backward beyond its products: the linear layer's bias (its d-bias, 2 x 3 adds) and
    # the pool's
    linear_bias = 2 * 3
    assert counted["backward_flops"] - 2 * counted["backward_macs"] - linear_bias == backward


@pytest.mark.parametrize(
    "pool",
    [
        pytest.param(nn.AdaptiveMaxPool1d(2), id="AdaptiveMaxPool1d"),
        pytest.param(nn.LPPool1d(2, 2), id="LPPool1d"),
        pytest.param(nn.LocalResponseNorm(3), id="LocalResponseNorm1d"),
    ],
)
def test_c2_a_1d_pools_step_is_counted_whole(pool: nn.Module) -> None:
    model = nn.Sequential(nn.Flatten(2), nn.Conv1d(3, 4, 3), pool, nn.Flatten(), nn.LazyLinear(3))
    model(torch.zeros(1, 3, 10, 10))
    counted = _counted(model, (3, 10, 10))
    assert counted["unsupported"] == {}
    assert 2 * (counted["macs"] + counted["backward_macs"]) == _fcm_flops(model, (3, 10, 10))


@pytest.mark.parametrize(
    "pool",
    [
        pytest.param(nn.LPPool2d(2, 2), id="LPPool2d"),
        pytest.param(nn.LocalResponseNorm(3), id="LocalResponseNorm"),
    ],
)
def test_c2_lppool_and_local_response_norm_steps_are_counted_whole(pool: nn.Module) -> None:
    """LPPool2d's backward runs aten.sgn; LocalResponseNorm's forward an avg_pool3d over the
    channels, and its backward avg_pool3d_backward."""
    model = nn.Sequential(nn.Conv2d(3, 4, 3), pool, nn.Flatten(), nn.LazyLinear(3))
    model(torch.zeros(1, 3, 10, 10))
    counted = _counted(model, (3, 10, 10))
    assert counted["unsupported"] == {}
    assert 2 * (counted["macs"] + counted["backward_macs"]) == _fcm_flops(model, (3, 10, 10))


def test_c2_the_new_handlers_by_hand() -> None:
    """The handlers on meta tensors: sgn one FLOP per element; avg_pool3d_backward(grad, input,
    kernel, ...) each gradient over its window; the max pools' backward one add per output
    gradient; adaptive average 3d's backward each gradient over its window; and their kinds."""
    meta = {"device": "meta"}
    grad, x = torch.empty(2, 1, 4, 5, 5, **meta), torch.empty(2, 1, 6, 5, 5, **meta)
    assert HANDLERS["sgn"]([grad], grad) == Cost(0, 200)
    assert HANDLERS["avg_pool3d_backward"]([grad, x, [3, 1, 1]], x) == Cost(0, 3 * 200)
    for name in ("max_pool3d_with_indices_backward", "fractional_max_pool2d_backward",
                 "adaptive_max_pool2d_backward", "adaptive_max_pool3d_backward"):  # fmt: skip
        assert HANDLERS[name]([grad, x], x) == Cost(0, 200), name
    # 6 to 4 deep: windows of 2 (round 35, P1 C5: each gradient over its window, not one
    # per input gradient, 300)
    assert HANDLERS["_adaptive_avg_pool3d_backward"]([grad, x], x) == Cost(0, 400)
    # fractional_max_pool2d(input, kernel, output_size, samples): 2x2 per output
    out = torch.empty(2, 3, 3, 3, **meta)
    assert HANDLERS["fractional_max_pool2d"]([x, [2, 2], [3, 3], None], (out, out)) == Cost(0, 216)
    # window pools and their backward are "pool"; adaptive ones "other", as their forward
    assert kind_of("avg_pool3d_backward", []) == kind_of("fractional_max_pool3d", []) == "pool"
    assert kind_of("max_pool3d_with_indices_backward", []) == "pool"
    assert kind_of("adaptive_max_pool2d_backward", []) == "other"


def test_c2_alexnet_paper_training_step_is_counted_whole() -> None:
    """Before: "warning: not counted (no handler for these operators): aten.avg_pool3d_backward
    x2", its two LocalResponseNorm layers' backward."""
    result = dlperf.analyze("alexnet_paper", train=True)
    assert result.unsupported_ops == {}


# --- C2 (R3): padding's backward, and CrossMapLRN2d ------------------------------------------

# (padding, the sample's shape, the conv before it, FLOPs of its backward by hand at batch 2:
# one add per element of the padded output's gradient, into the input it was copied from)
PADS = [
    pytest.param(nn.ReflectionPad1d(1), (3, 10), nn.Conv1d(3, 4, 3, bias=False), 2 * 4 * 10,
                 id="ReflectionPad1d"),
    pytest.param(nn.ReflectionPad2d(1), (3, 10, 10), _conv(2), 2 * 4 * 10 * 10,
                 id="ReflectionPad2d"),
    pytest.param(nn.ReflectionPad3d(1), (1, 6, 6, 6), _conv(3), 2 * 2 * 6 * 6 * 6,
                 id="ReflectionPad3d"),
    pytest.param(nn.ReplicationPad1d(1), (3, 10), nn.Conv1d(3, 4, 3, bias=False), 2 * 4 * 10,
                 id="ReplicationPad1d"),
    pytest.param(nn.ReplicationPad2d(1), (3, 10, 10), _conv(2), 2 * 4 * 10 * 10,
                 id="ReplicationPad2d"),
    pytest.param(nn.ReplicationPad3d(1), (1, 6, 6, 6), _conv(3), 2 * 2 * 6 * 6 * 6,
                 id="ReplicationPad3d"),
]  # fmt: skip


@pytest.mark.parametrize(("pad", "sample", "conv", "backward"), PADS)
def test_c2_reflection_and_replication_paddings_backward_is_counted_by_hand(
    pad: nn.Module, sample: tuple[int, ...], conv: nn.Module, backward: int
) -> None:
    """Before: "not counted (no handler for these operators): aten.reflection_pad2d_backward",
    as after any Conv2d(padding_mode="reflect") or "replicate" (CycleGAN's, pix2pix's)."""
    model = nn.Sequential(conv, pad, nn.Flatten(), nn.LazyLinear(3))
    model(torch.zeros(1, *sample))
    counted = _counted(model, sample)
    assert counted["unsupported"] == {}
    assert 2 * (counted["macs"] + counted["backward_macs"]) == _fcm_flops(model, sample)
    assert counted["backward_flops"] - 2 * counted["backward_macs"] - 2 * 3 == backward


def test_c2_cross_map_lrn_step_is_counted_whole() -> None:
    """Before: "not counted ...: aten.resize_as_ x3", torch.nn.CrossMapLRN2d's (legacy
    autograd Function) resizes of its buffers, which compute nothing."""
    counts = []
    for norm in (nn.CrossMapLRN2d(3), nn.Identity()):
        model = nn.Sequential(nn.Conv2d(3, 4, 3), norm, nn.Flatten(), nn.LazyLinear(3))
        model(torch.zeros(1, 3, 10, 10))
        counts.append(_counted(model, (3, 10, 10)))
    assert counts[0]["unsupported"] == {}
    # its own work (pow, mul, add, and their backward) is counted
    assert counts[0]["flops"] > counts[1]["flops"]
    assert counts[0]["backward_flops"] > counts[1]["backward_flops"]
