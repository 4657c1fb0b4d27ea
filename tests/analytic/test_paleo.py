"""The device catalog, user overrides, and the PALEO arithmetic on a made-up device."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from torch import nn

from dlperf.analytic.counting import analyze, analyze_module
from dlperf.analytic.devices import Device, get_device, load_catalog, save_device
from dlperf.analytic.measure import KERNELS, Kernel, make_step, solve
from dlperf.analytic.paleo import compare, fit_ppp, predict
from dlperf.analytic.recorded import measure_recorded, predict_model
from dlperf.errors import UserError
from dlperf.store import RunStore
from tests.conftest import Logged

# 1 TFLOP/s fp32, 2 TFLOP/s fp16, 100 GB/s: round numbers to check the formula by hand.
# Per-kind PPPs a calibration should give back (tests here and in test_paleo_interleaved).
KNOWN_PPP = {"conv": 0.7, "conv_backward": 0.4, "depthwise_conv": 0.05,
             "depthwise_conv_backward": 0.03, "matmul": 0.9, "pool": 0.002, "norm": 0.04,
             "other": 0.3}  # fmt: skip
FAKE = Device(
    name="fake",
    peak_tflops={"fp32": 1.0, "fp16": 2.0},
    memory_bandwidth_gbs=100,
    source="a test",
    date="2026-01-01",
)


@pytest.fixture
def no_user_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "devices.toml"
    path.touch()  # an empty user file: a missing one that DLPERF_DEVICES names is an error
    monkeypatch.setenv("DLPERF_DEVICES", str(path))
    return path


def test_catalog_has_the_issue_devices_with_sources(no_user_file: Path) -> None:
    catalog = load_catalog()
    for name in ("K80", "P100", "V100", "T4", "A100-40GB", "A100-80GB", "H100-SXM", "H200"):
        device = catalog[name]
        assert device.kind == "gpu" and device.source and device.date
        assert device.peak_tflops["fp32"] > 0 and device.memory_bandwidth_gbs > 0
    assert any(d.kind == "cpu" for d in catalog.values())
    assert catalog["V100"].peak_tflops == {"fp32": 15.7, "fp16": 125}


def test_user_file_overrides_key_by_key_and_adds_devices(no_user_file: Path) -> None:
    no_user_file.write_text(
        "[T4]\nprice_per_hour_usd = 0.29\n\n[lab-gpu]\npeak_tflops = { fp32 = 2.0 }\n"
        'memory_bandwidth_gbs = 50\nsource = "our own measurement"\ndate = "2026-11-01"\n'
    )
    catalog = load_catalog()
    assert catalog["T4"].price_per_hour_usd == 0.29
    assert catalog["T4"].peak_tflops["fp32"] == 8.1  # the rest of the entry is kept
    assert catalog["lab-gpu"].memory_bandwidth_gbs == 50
    assert get_device("LAB-GPU").name == "lab-gpu"


def test_save_device_keeps_the_other_entries(no_user_file: Path) -> None:
    no_user_file.write_text("[T4]\nprice_per_hour_usd = 0.29\n")
    save_device(FAKE)
    catalog = load_catalog()
    assert catalog["T4"].price_per_hour_usd == 0.29
    assert catalog["fake"] == FAKE


def test_bad_user_file_and_unknown_device_are_one_line(no_user_file: Path) -> None:
    with pytest.raises(UserError, match=r"unknown device 'V10'.*V100"):
        get_device("V10")
    no_user_file.write_text('[T4]\npeak_tflops = "fast"\n')
    with pytest.raises(UserError, match="device T4: peak_tflops"):
        load_catalog()


def test_prediction_arithmetic() -> None:
    # Linear 1000 -> 1000 without bias at batch 10: 10^7 MACs = 2 * 10^7 FLOPs;
    # bytes: input 10x1000, weight 1000x1000, output 10x1000, all fp32 = 4.08 * 10^6.
    a = analyze_module(nn.Linear(1000, 1000, bias=False), [1000], batch=10)
    r = predict(a, FAKE, ppp=0.5, ppp_mem=0.8)
    flops, nbytes = 2e7, 4 * (10_000 + 1_000_000 + 10_000)
    t = r.totals
    assert t.flops == flops and t.bytes == nbytes
    compute, memory = flops / (1e12 * 0.5), nbytes / (100e9 * 0.8)
    assert t.compute_s == pytest.approx(compute)
    assert t.memory_s == pytest.approx(memory)
    assert t.time_s == pytest.approx(compute + memory)
    assert t.images_per_s == pytest.approx(10 / (compute + memory))
    ideal = flops / 1e12 + nbytes / 100e9
    assert t.theoretical_time_per_image_s == pytest.approx(ideal / 10)
    assert r.layers[0].time_s == pytest.approx(compute + memory)


def test_precision_picks_its_peak_and_missing_ones_are_bad_input() -> None:
    a = analyze_module(nn.Linear(100, 100), [100], precision="fp16")
    r = predict(a, FAKE)
    assert r.peak_flops == 2e12 and r.ppp == 1.0
    with pytest.raises(UserError, match="no bf16 peak"):
        predict(analyze_module(nn.Linear(4, 4), [4], precision="bf16"), FAKE)


def test_training_step_adds_backward_work() -> None:
    net = nn.Sequential(nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 8))
    infer = predict(analyze_module(net, [64], batch=4), FAKE).totals.flops
    step = predict(analyze_module(net, [64], batch=4, train=True), FAKE).totals.flops
    assert step > infer


def test_fitted_ppp_reproduces_the_measurement() -> None:
    a = analyze_module(nn.Linear(1000, 1000, bias=False), [1000], batch=10)
    r = predict(a, FAKE, ppp=1.0, ppp_mem=1.0)
    measured = 4 * r.totals.time_s
    ppp = fit_ppp(r, measured)
    assert ppp is not None
    assert predict(a, FAKE, ppp=ppp, ppp_mem=1.0).totals.time_s == pytest.approx(measured)
    assert fit_ppp(r, r.totals.memory_s) is None  # memory alone takes that long

    c = compare(r, {"median": measured}, {"(model)": measured})
    assert c.error_pct == pytest.approx(-75)
    assert c.fitted_ppp == pytest.approx(ppp)
    assert c.layers[0].error_pct == pytest.approx(-75)
    # A GPU's profiler can time a tiny layer at 0 s: no error, rather than a division by 0.
    zero = compare(r, {"median": measured}, {"(model)": 0.0})
    assert zero.layers[0].error_pct is None and zero.error_pct == pytest.approx(-75)


class ThreeKinds(nn.Module):
    """A dense conv, a depthwise conv, a ReLU and a matmul: one of each operator kind."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(2, 4, 3, padding=1, bias=False)
        self.depthwise = nn.Conv2d(4, 4, 3, padding=1, groups=4, bias=False)
        self.w = nn.Parameter(torch.zeros(5, 3))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.depthwise(self.conv(x))) @ self.w


def test_per_kind_ppp_and_call_overhead_arithmetic() -> None:
    a = analyze_module(ThreeKinds(), [2, 5, 5], batch=2)
    conv, depthwise, matmul, relu = 2 * 2 * 25 * 4 * 18, 2 * 2 * 25 * 4 * 9, 2 * 2 * 4 * 5 * 15, 200
    device = FAKE.model_copy(
        update={
            "ppp": 0.5,
            "ppp_by_kind": {"conv": 0.8, "depthwise_conv": 0.1, "matmul": 0.9},
            "ppp_mem": 0.25,
            "op_overhead_us": 10.0,
        }
    )
    t = predict(a, device).totals
    assert {k: v for k, v in t.flops_by_kind.items() if v} == {
        "conv": conv,
        "depthwise_conv": depthwise,
        "matmul": matmul,
        "other": relu,
    }
    assert a.totals()["conv_flops_share"] == (conv + depthwise) / (conv + depthwise + matmul + relu)
    compute = (conv / 0.8 + depthwise / 0.1 + matmul / 0.9 + relu / 0.5) / 1e12
    assert t.compute_s == pytest.approx(compute)
    assert t.memory_s == pytest.approx(t.bytes / (100e9 * 0.25))
    assert t.calls == 4 and t.overhead_s == pytest.approx(40e-6)
    assert t.time_s == pytest.approx(compute + t.memory_s + 40e-6)
    # --ppp replaces every kind's PPP; the theoretical figures ignore PPPs and overhead.
    one = predict(a, device, ppp=0.5).totals
    assert one.compute_s == pytest.approx((conv + depthwise + matmul + relu) / 0.5e12)
    ideal = (conv + depthwise + matmul + relu) / 1e12 + t.bytes / 100e9
    assert one.theoretical_time_per_image_s == pytest.approx(ideal / 2)


@pytest.mark.parametrize("kernel", KERNELS, ids=lambda k: k.unknown)
def test_calibration_recovers_each_constant(kernel: Kernel) -> None:
    """Each kernel's measured time, made up from known constants, gives them back."""
    truth = FAKE.model_copy(
        update={
            "ppp_by_kind": KNOWN_PPP,
            "ppp_mem": 0.4,
            "op_overhead_us": 6.0,
        }
    )
    a = analyze_module(kernel.make(), kernel.shape, kernel.batch, kernel.train)
    measured = predict(a, truth).totals.time_s
    field, value = {
        "overhead": ("op_overhead_us", 6.0),
        "ppp_mem": ("ppp_mem", 0.4),
    }.get(kernel.unknown, ("ppp_by_kind", truth.kind_ppp()))
    unknown = truth.model_copy(
        update={field: {k: v for k, v in value.items() if k != kernel.unknown}}
        if isinstance(value, dict)
        else {field: None}
    )
    solved = solve(kernel, unknown, measured, a)
    assert getattr(solved, field) == pytest.approx(value)
    # A measurement the other terms already exceed leaves the unknown unknown.
    assert solve(kernel, unknown, 1e-12, a) is None


def no_store() -> RunStore:
    raise AssertionError("a prediction without --measure needs no store")


def test_predict_model_by_name_on_a_catalog_device(no_user_file: Path) -> None:
    r = predict_model("smallcnn", "V100", no_store, input_shape=[1, 8, 8], batch=4, ppp=0.5)
    assert (r.model, r.device, r.batch, r.ppp) == ("smallcnn", "V100", 4, 0.5)
    assert r.measured is None and "measured" not in r.to_dict() and r.totals.time_s > 0
    with pytest.raises(UserError, match=r"give predict\.device"):
        predict_model("smallcnn", None, no_store)
    with pytest.raises(UserError, match=r"predict\.reps must be at least 1"):
        predict_model("smallcnn", "V100", no_store, measure=True, reps=0)


def test_measure_recorded_warns_of_other_threads(no_user_file: Path, tmp_path: Path) -> None:
    store = RunStore.open(f"sqlite:///{tmp_path / 'dlperf.db'}")
    a = analyze("smallcnn", [1, 8, 8])
    log = Logged()
    entry = FAKE.model_copy(update={"threads": 999})
    r = measure_recorded(lambda: store, "smallcnn", a, entry, None, 1, log)
    m = r.measured
    assert m is not None and m.run_id is not None and m.same_moment is not None
    stored = store.get_run(m.run_id)
    assert stored.status == "finished" and m.measured_s["min"] > 0
    assert r.basis is not None and r.basis.kind == "catalog peak" and m.basis == r.basis
    assert m.same_moment.basis.interleaved and len(m.same_moment.rounds) == 1
    # The stored summary keeps its fields, the basis as the JSON document's.
    assert stored.summary["basis"] == r.basis.to_dict()
    assert stored.summary["measured_median_s"] == m.measured_s["median"]
    warning = (
        "warning: fake was calibrated with 999 threads, this measurement runs "
        f"{torch.get_num_threads()}: expect the rates to differ"
    )
    assert log.lines == ([warning] if m.local_device == "cpu" else [])


def test_training_step_of_a_model_with_nothing_to_train_runs_forward() -> None:
    # No output needs a gradient: the backward sum was the int 0, and `.backward()` on it
    # an AttributeError.
    seen: list[torch.Size] = []
    model = nn.MaxPool2d(2)
    model.register_forward_hook(lambda _m, _i, out: seen.append(out.shape))
    make_step(model, [1, 4, 4], 2, True, "fp32", torch.device("cpu"))()
    assert seen == [torch.Size([2, 1, 2, 2])]
