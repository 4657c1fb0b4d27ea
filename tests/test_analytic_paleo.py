"""The device catalog, user overrides, and the PALEO arithmetic on a made-up device."""

from __future__ import annotations

from pathlib import Path

import pytest
from torch import nn

from dlperf.analytic.counting import analyze_module
from dlperf.analytic.devices import Device, get_device, load_catalog, save_device
from dlperf.analytic.paleo import compare, fit_ppp, predict
from dlperf.errors import UserError

# 1 TFLOP/s fp32, 2 TFLOP/s fp16, 100 GB/s: round numbers to check the formula by hand.
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
    assert r["totals"]["flops"] == flops and r["totals"]["bytes"] == nbytes
    compute, memory = flops / (1e12 * 0.5), nbytes / (100e9 * 0.8)
    assert r["totals"]["compute_s"] == pytest.approx(compute)
    assert r["totals"]["memory_s"] == pytest.approx(memory)
    assert r["totals"]["time_s"] == pytest.approx(compute + memory)
    assert r["totals"]["images_per_s"] == pytest.approx(10 / (compute + memory))
    ideal = flops / 1e12 + nbytes / 100e9
    assert r["totals"]["theoretical_time_per_image_s"] == pytest.approx(ideal / 10)
    assert r["layers"][0]["time_s"] == pytest.approx(compute + memory)


def test_precision_picks_its_peak_and_missing_ones_are_bad_input() -> None:
    a = analyze_module(nn.Linear(100, 100), [100], precision="fp16")
    r = predict(a, FAKE)
    assert r["peak_flops"] == 2e12 and r["ppp"] == 1.0
    with pytest.raises(UserError, match="no bf16 peak"):
        predict(analyze_module(nn.Linear(4, 4), [4], precision="bf16"), FAKE)


def test_training_step_adds_backward_work() -> None:
    net = nn.Sequential(nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 8))
    infer = predict(analyze_module(net, [64], batch=4), FAKE)["totals"]["flops"]
    step = predict(analyze_module(net, [64], batch=4, train=True), FAKE)["totals"]["flops"]
    assert step > infer


def test_fitted_ppp_reproduces_the_measurement() -> None:
    a = analyze_module(nn.Linear(1000, 1000, bias=False), [1000], batch=10)
    r = predict(a, FAKE, ppp=1.0, ppp_mem=1.0)
    measured = 4 * r["totals"]["time_s"]
    ppp = fit_ppp(r["totals"]["flops"], r["totals"]["bytes"], measured, 1e12, 100e9, 1.0)
    assert predict(a, FAKE, ppp=ppp, ppp_mem=1.0)["totals"]["time_s"] == pytest.approx(measured)
    assert fit_ppp(1.0, 1e12, 1.0, 1e12, 100e9, 1.0) is None  # memory alone takes longer

    measurement = {"spread_s": {"median": measured}, "layers_s": {"(model)": measured}}
    c = compare(r, measurement)
    assert c["error_pct"] == pytest.approx(-75)
    assert c["fitted_ppp"] == pytest.approx(ppp)
    assert c["layers"][0]["error_pct"] == pytest.approx(-75)
