"""PALEO measured against itself at the same moment (issue 16), and every prediction's basis.

The interleaved calibration runs on a fake clock whose speed halves and recovers between
rounds: each probe and the model "take" their true time (from known rates) times the
round's slowdown, so the arithmetic is exact and nothing depends on this machine's load.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from torch import nn

from dlperf.analytic.counting import analyze_module
from dlperf.analytic.devices import Device
from dlperf.analytic.interleaved import Probes, calibrate_and_measure, fit, judged, marks
from dlperf.analytic.measure import KERNELS
from dlperf.analytic.paleo import CALIBRATED_BY, basis, error_pct, predict
from dlperf.contention import Contention, Reliability
from tests.analytic.test_paleo import KNOWN_PPP
from tests.conftest import CliResult

Cli = Callable[..., CliResult]

# The machine's true rates at full speed: round numbers, every kind's PPP its own.
TRUTH = Device(
    name="truth",
    peak_tflops={"fp32": 1.0},
    memory_bandwidth_gbs=100,
    # calibration leaves `other` at 1: its time is in the memory term
    ppp_by_kind={**KNOWN_PPP, "other": 1.0},
    ppp_mem=0.4,
    op_overhead_us=6.0,
    source="a test",
    date="2026-01-01",
)
SLOWDOWN = [1.0, 2.0, 1.0, 2.0, 2.0]
"""Per round: the machine runs at full speed, then at half, and back."""


class FakeClock:
    """Seconds that advance only when fake work runs: its true time x the slowdown of the
    round, which starts when the round's first probe (the fp32 matmul) runs."""

    def __init__(self) -> None:
        self.now, self.round, self.slowdown = 0.0, -1, 1.0

    def __call__(self) -> float:
        return self.now

    def work(self, seconds: float) -> Callable[[], None]:
        def step() -> None:
            self.now += seconds * self.slowdown

        return step

    def next_round(self, seconds: float) -> Callable[[], None]:
        def step() -> None:
            self.round += 1
            self.slowdown = SLOWDOWN[self.round]
            self.now += seconds * self.slowdown

        return step


def fake_probes(clock: FakeClock) -> Probes:
    flops, nbytes = 2 * 1024**3, 2 * 64 * 2**20
    kernels = []
    for kernel in KERNELS:
        a = analyze_module(kernel.make(), kernel.shape, kernel.batch, kernel.train)
        kernels.append((a, clock.work(predict(a, TRUTH).totals.time_s)))
    return Probes(
        matmul={"fp32": (flops, clock.next_round(flops / 1e12))},
        copy=(nbytes, clock.work(nbytes / 100e9)),
        kernels=kernels,
    )


def test_interleaved_calibration_cancels_a_2x_drift() -> None:
    clock = FakeClock()
    net = nn.Sequential(
        nn.Conv2d(3, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(16, 16, 3, padding=1, groups=16), nn.Flatten(), nn.Linear(16 * 16 * 16, 10),
    )  # fmt: skip
    a = analyze_module(net, [3, 32, 32], batch=4)
    true_s = predict(a, TRUTH).totals.time_s
    model = {"net": (a, clock.work(true_s))}
    base = TRUTH.model_copy(update={"name": "here", "peak_tflops": {}})
    same = calibrate_and_measure(
        base, fake_probes(clock), model, len(SLOWDOWN), torch.device("cpu"), clock, warmup=0
    )
    r = same.models["net"]
    assert r["times_s"] == pytest.approx([true_s * s for s in SLOWDOWN])
    # Each round's calibration saw that round's speed: its prediction matches that round's
    # measurement whether the machine ran fast or slow.
    assert [d.peak_tflops["fp32"] for d in same.rounds] == pytest.approx([1 / s for s in SLOWDOWN])
    for row in r["rounds"]:
        assert abs(row["error_pct"]) < 1
    assert abs(r["error_pct"]) < 1
    # Calibrated once, at the first (fast) round, the same model is predicted 2x too fast
    # against the median measurement: the drift, not the model, is the error.
    once = predict(a, same.rounds[0]).totals.time_s
    assert error_pct(once, r["measured_s"]["median"]) == pytest.approx(-50, abs=1)
    # the rounds were one contention window, and each probe's times are kept to judge
    assert same.contention is not None and 0 <= same.contention.cpu_wait_share <= 1
    assert same.probe_times["copy"] == pytest.approx([2 * 64 * 2**20 / 100e9 * s for s in SLOWDOWN])


def test_rounds_are_marked_by_their_window_and_their_widest_series() -> None:
    calm = Contention(1.0, 0.01, "schedstat", 1.0, 0.01)
    steady = [1.0, 1.01, 0.99, 1.0, 1.0]
    assert judged(calm, {"matmul fp32": steady, "copy": steady}) == Reliability(True, None)
    mark = judged(calm, {"matmul fp32": [1, 1.3, 1, 1.3, 1], "copy": steady, "conv": [1, 2, 1, 2]})
    assert not mark.reliable and mark.note is not None
    assert mark.note.startswith("conv: too spread to rank: the interquartile range of 4 ")
    assert mark.note.endswith("; also too spread: matmul fp32")
    busy = Contention(1.0, 0.4, "schedstat", 1.0, 0.66)
    assert judged(busy, {"copy": steady}).note == f"contended: {busy.note()}"
    assert marks(busy, judged(busy, {})) == {
        "cpu_wait_share": 0.4, "contention": busy.to_dict(), "reliable": False,
        "reliability_note": f"contended: {busy.note()}",
    }  # fmt: skip
    assert marks(None, judged(None, {}))["cpu_wait_share"] is None


def test_fit_recovers_the_rates_from_one_rounds_times() -> None:
    clock = FakeClock()
    probes = fake_probes(clock)
    seconds = {}
    for name, step in probes.steps().items():
        start = clock()
        step()
        seconds[name] = clock() - start
    device, unsolved = fit(TRUTH.model_copy(update={"peak_tflops": {}}), probes, seconds)
    assert unsolved == []
    assert device.peak_tflops["fp32"] == pytest.approx(1.0)
    assert device.memory_bandwidth_gbs == pytest.approx(100)
    assert device.ppp_mem == pytest.approx(0.4, rel=0.01)
    assert device.kind_ppp() == pytest.approx(TRUTH.kind_ppp(), rel=0.01)


def test_basis_of_each_kind_of_prediction() -> None:
    v100 = Device(
        name="V100", peak_tflops={"fp32": 15.7}, memory_bandwidth_gbs=900,
        source="datasheet", date="2018-01",
    )  # fmt: skip
    assert basis(v100, None).to_dict() == {
        "kind": "catalog peak",
        "device": "V100",
        "ppp": None,
        "calibrated_at": None,
        "on": None,
        "interleaved": False,
        "label": "peak (PPP=1) of V100 (datasheet, 2018-01)",
    }
    assert basis(v100, 0.62).label == "given PPP 0.62 of V100 (datasheet, 2018-01)"
    lab = v100.model_copy(update={"name": "lab", "ppp": 0.5})
    assert (basis(lab, None).kind, basis(lab, None).label) == (
        "device ppp",
        "PPP 0.5 of the lab entry",
    )
    # what `dlperf calibrate` wrote: its source says so (a hand entry's own figures are not)
    here = TRUTH.model_copy(
        update={"description": "a CPU, 2 threads", "source": f"{CALIBRATED_BY}: a test"}
    )
    b = basis(here, None)
    assert (b.kind, b.calibrated_at, b.on) == (
        "calibrated",
        "2026-01-01",
        "a CPU, 2 threads",
    )
    assert b.label == "calibrated 2026-01-01 on a CPU, 2 threads"
    assert basis(here, None, interleaved=True).label == (
        "calibrated in the same rounds as the measurement on a CPU, 2 threads"
    )


# --- through the command line -------------------------------------------------------------


@pytest.fixture(autouse=True)
def user_devices(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "devices.toml"
    path.touch()  # an empty user file: a missing one that DLPERF_DEVICES names is an error
    monkeypatch.setenv("DLPERF_DEVICES", str(path))
    return path


SMALL = ["smallcnn", "--input", "1,8,8", "--batch", "4"]


def totals_rows(out: str) -> dict[str, str]:
    """The `totals` table's rows: first column -> value."""
    rows = {}
    for line in out.split("totals", 1)[1].splitlines():
        if "│" in line:
            key, value = (cell.strip() for cell in line.split("│", 1))
            rows[key] = value
    return rows


def test_predict_on_a_catalog_gpu_says_it_is_the_peak(cli: Cli) -> None:
    result = cli("predict", *SMALL, "--device", "V100")
    assert result.code == 0, result.err
    rows = totals_rows(result.out)
    assert "peak (PPP=1), compute + memory: time per batch (ms)" in rows
    assert "peak (PPP=1), compute + memory: images/s" in rows
    assert not any(key.startswith("prediction") for key in rows)
    assert rows["basis"] == "peak (PPP=1) of V100 (NVIDIA Tesla V100 datasheet, 2018-01)"
    doc = json.loads(cli("predict", *SMALL, "--device", "V100", "--json").out)
    assert doc["basis"]["kind"] == "catalog peak" and doc["basis"]["calibrated_at"] is None


def test_ppp_changes_the_figures_and_the_label(cli: Cli) -> None:
    peak = json.loads(cli("predict", *SMALL, "--device", "V100", "--json").out)
    given = json.loads(cli("predict", *SMALL, "--device", "V100", "--ppp", "0.5", "--json").out)
    assert given["basis"]["kind"] == "given ppp" and given["basis"]["ppp"] == 0.5
    assert given["totals"]["compute_s"] == pytest.approx(2 * peak["totals"]["compute_s"])
    rows = totals_rows(cli("predict", *SMALL, "--device", "V100", "--ppp", "0.5").out)
    assert "prediction at given PPP 0.5, compute + memory: time per batch (ms)" in rows
    assert rows["basis"].startswith("given PPP 0.5 of V100")
    # the peak is still shown, and named so
    assert "peak (PPP=1), compute + memory: images/s" in rows


def test_predict_on_a_calibrated_device_names_when_and_on_what(
    cli: Cli, user_devices: Path
) -> None:
    user_devices.write_text(
        '[here]\ndescription = "a 2-core CPU, 2 threads"\nkind = "cpu"\n'
        "peak_tflops = { fp32 = 0.1 }\nmemory_bandwidth_gbs = 10\nppp_mem = 0.5\n"
        'op_overhead_us = 5.0\nppp_by_kind = { conv = 0.8 }\nsource = "dlperf calibrate"\n'
        'date = "2026-11-23T09:00:00+00:00"\n'
    )
    doc = json.loads(cli("predict", *SMALL, "--device", "here", "--json").out)
    assert doc["basis"]["kind"] == "calibrated"
    assert doc["basis"]["calibrated_at"] == "2026-11-23T09:00:00+00:00"
    assert doc["basis"]["on"] == "a 2-core CPU, 2 threads"
    rows = totals_rows(cli("predict", *SMALL, "--device", "here").out)
    assert "prediction from calibration, compute + memory + calls: time per batch (ms)" in rows
    assert rows["basis"] == "calibrated 2026-11-23T09:00:00+00:00 on a 2-core CPU, 2 threads"


@pytest.mark.parametrize(
    ("ppp", "why"),
    [
        ("0", "must be at least 1e-06"),
        ("1.5", "must be at most 1"),
        ("-0.2", "must be at least 1e-06"),
    ],
)
def test_ppp_outside_0_1_is_one_line_naming_the_flag_and_its_key(
    cli: Cli, ppp: str, why: str
) -> None:
    result = cli("predict", *SMALL, "--device", "V100", f"--ppp={ppp}")
    assert result.code == 2
    assert result.err.strip().splitlines() == [
        f"error: --ppp: predict.ppp: {why} (got {float(ppp)})"
    ]


def test_ppp_out_of_range_from_set_names_the_key() -> None:
    from dlperf.config import PredictJob, load_job
    from dlperf.errors import UserError

    with pytest.raises(UserError, match=r"^config with --set: predict.ppp: must be at most 1"):
        load_job(PredictJob, None, ["predict.ppp=2"], predict={"ppp": None})
