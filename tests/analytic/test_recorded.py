"""dlperf.analytic.recorded: predict's argument checks (before any counting or store), its
wiring to the count and the PALEO prediction, and calibrate recorded as a run, with the
calibration itself faked (its kernels are timed in tests/analytic/test_interleaved.py)."""

from __future__ import annotations

import math
import tomllib
from pathlib import Path
from typing import Any
from unittest import mock

import pytest
import torch

from dlperf.analytic import recorded
from dlperf.analytic.devices import Device
from dlperf.analytic.interleaved import SameMoment
from dlperf.analytic.recorded import calibrate_recorded, predict_model
from dlperf.errors import UserError
from dlperf.store import RunStore
from tests.conftest import Logged


def no_store() -> RunStore:
    raise AssertionError("nothing here may open the store")


@pytest.fixture
def user_devices(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The user's device file, in tmp_path (absent until written)."""
    path = tmp_path / "devices.toml"
    monkeypatch.setenv("DLPERF_DEVICES", str(path))
    path.write_text("")
    return path


@pytest.mark.parametrize(
    ("device", "options", "message"),
    [
        (None, {}, "give predict.device, a catalog device (see `dlperf devices`, or measure "
         "here with predict.measure)"),
        ("V100", {"ppp": 0.0}, "predict.ppp must lie in [1e-06, 1], got 0 (it is the fraction "
         "of the peak reached, e.g. 0.62)"),
        ("V100", {"ppp": 1.5}, "predict.ppp must lie in [1e-06, 1], got 1.5"),
        ("V100", {"peak_tflops": -1.0}, "predict.peak_tflops must lie in [1e-06, 1e+09], "
         "got -1"),
        ("V100", {"flops": math.inf}, "predict.flops must lie in [1, 1e+18], got inf"),
        (None, {"measure": True, "peak_tflops": 8.0}, "predict.peak_tflops needs "
         "predict.device (its memory bandwidth is used too)"),
        ("V10O", {}, "unknown device 'V10O' (did you mean"),
        ("V100", {"measure": True, "reps": 0}, "predict.reps must be at least 1, got 0"),
        ("V100", {"reps": 5}, "predict.reps goes with predict.measure (--measure runs them)"),
    ],
)  # fmt: skip
def test_predict_refuses_before_counting_or_opening_the_store(
    user_devices: Path,
    monkeypatch: pytest.MonkeyPatch,
    device: str | None,
    options: dict[str, Any],
    message: str,
) -> None:
    def no_count(*args: object, **kwargs: object) -> None:
        raise AssertionError("refused input is never counted")

    monkeypatch.setattr(recorded, "analyze", no_count)
    with pytest.raises(UserError) as e:
        predict_model("smallcnn", device, no_store, **options)
    assert str(e.value).startswith(message)


class FakeAnalysis:
    kept = None  # a float32 model: predict notes nothing of its dtype
    complex_dtypes = ()  # nor of complex arithmetic
    model_notes = ()  # nor of what its model file did to the process

    def __init__(self, note: str | None) -> None:
        self.note = note

    def unsupported_note(self) -> str | None:
        return self.note

    def totals(self) -> dict[str, int]:
        return {"flops": 1}  # some arithmetic: predict_model checks it before predicting


def test_predict_counts_warns_of_uncounted_ops_and_predicts_on_the_entry(
    user_devices: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    counted: list[tuple[Any, ...]] = []
    predicted: list[dict[str, Any]] = []
    analysis = FakeAnalysis("2 calls of aten.foo are not counted")

    def fake_analyze(*args: Any, **kwargs: Any) -> FakeAnalysis:
        counted.append((*args, kwargs))
        return analysis

    prediction: Any = object()

    def fake_predict(a: Any, entry: Device, ppp: Any, **kwargs: Any) -> Any:
        predicted.append({"a": a, "entry": entry, "ppp": ppp, **kwargs})
        return prediction

    monkeypatch.setattr(recorded, "analyze", fake_analyze)
    monkeypatch.setattr(recorded, "predict_with_basis", fake_predict)
    log = Logged()
    result = predict_model(
        "resnet20", "k80", no_store, input_shape=[3, 32, 32], batch=4, train=True,
        precision="fp32", classes=10, ppp=0.5, peak_tflops=8.73, flops=2e9, reporter=log,
        model_kwargs={"width": 2},
    )  # fmt: skip
    assert result is prediction
    # counted naming predict in a refusal ("predict runs it on the meta device")
    # and telling the model file's notes as it is built (tell=), before a refusal
    kwargs = {"model_kwargs": {"width": 2}, "command": "predict", "tell": mock.ANY}
    assert counted == [("resnet20", [3, 32, 32], 4, True, "fp32", 10, kwargs)]
    assert log.lines == ["warning: 2 calls of aten.foo are not counted"]
    (call,) = predicted
    assert call["a"] is analysis and call["entry"].name == "K80" and call["ppp"] == 0.5
    assert (call["peak_tflops"], call["flops"]) == (8.73, 2e9)


def test_predict_with_measure_goes_to_measure_recorded(
    user_devices: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    analysis = FakeAnalysis(None)
    monkeypatch.setattr(recorded, "analyze", lambda *a, **k: analysis)
    calls: list[tuple[Any, ...]] = []
    measured: Any = object()

    def fake_measure(open_store: Any, model: str, a: Any, entry: Any, ppp: Any, reps: int,
                     reporter: Any, **kwargs: Any) -> Any:  # fmt: skip
        calls.append((model, a, entry, ppp, reps, kwargs))
        return measured

    monkeypatch.setattr(recorded, "measure_recorded", fake_measure)
    log = Logged()
    result = predict_model("smallcnn", None, no_store, measure=True, reps=3, reporter=log)
    assert result is measured
    assert calls == [
        ("smallcnn", analysis, None, None, 3,
         {"peak_tflops": None, "flops": None, "model_kwargs": None}),
    ]  # fmt: skip
    assert log.lines == []  # nothing uncounted: no warning


def fitted_device() -> Device:
    return Device(
        name="box",
        kind="cpu",
        peak_tflops={"fp32": 0.5, "bf16": 0.25},
        memory_bandwidth_gbs=20.0,
        ppp=0.4,
        ppp_by_kind={"conv": 0.6},
        ppp_mem=0.7,
        op_overhead_us=3.0,
        threads=2,
        source="calibrated",
        date="2026-11-26",
    )


def test_calibrate_saves_the_device_and_records_a_run(
    user_devices: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = RunStore.open(f"sqlite:///{tmp_path / 'runs.db'}")
    asked: list[tuple[Any, ...]] = []

    def fake_calibrate(device: torch.device, name: str | None, reporter: Any) -> SameMoment:
        asked.append((device, name))
        # the peaks' probes are steady; a tiny kernel's spread is not judged
        times = {"matmul_fp32": [1.0, 1.0, 1.01], "copy": [2.0, 2.0, 2.0],
                 "kernel_overhead": [1.0, 5.0, 9.0]}  # fmt: skip
        return SameMoment(fitted_device(), [], {}, None, times)

    monkeypatch.setattr(recorded, "calibrate", fake_calibrate)
    monkeypatch.setattr(recorded, "pick_device", lambda spec: torch.device("cpu"))
    monkeypatch.setattr(recorded, "set_threads", lambda threads: 2)
    done = calibrate_recorded(lambda: store, "box")
    assert asked == [(torch.device("cpu"), "box")]
    assert done["path"] == user_devices
    assert done["device"] == fitted_device()
    assert done["marks"]["reliable"] is True and done["marks"]["cpu_wait_share"] is None
    saved = tomllib.loads(user_devices.read_text())["box"]
    assert saved["peak_tflops"] == {"fp32": 0.5, "bf16": 0.25} and saved["threads"] == 2

    run = store.get_run(done["run_id"])
    assert (run.name, run.kind, run.status) == ("calibrate box", "calibrate", "finished")
    assert run.config == {"name": "box", "device": "cpu"}
    assert run.summary["ppp_mem"] == 0.7 and run.summary["reliable"] is True
    assert store.metrics(run.id, "matmul_tflops_bf16") == [(0, 0.25)]
    assert store.metrics(run.id, "ppp_conv") == [(0, 0.6)]
    assert store.metrics(run.id, "ppp_matmul") == [(0, 0.4)]  # uncalibrated kinds: ppp
    assert store.metrics(run.id, "op_overhead_us") == [(0, 3.0)]
    assert store.artifacts(run.id) == [{"kind": "devices", "path": str(user_devices)}]


def test_calibrate_marks_too_spread_peaks_unreliable(
    user_devices: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = RunStore.open(f"sqlite:///{tmp_path / 'runs.db'}")
    times = {"matmul_fp32": [1.0, 2.0, 4.0, 8.0], "copy": [2.0, 2.0, 2.0, 2.0]}
    monkeypatch.setattr(
        recorded, "calibrate", lambda *a: SameMoment(fitted_device(), [], {}, None, times)
    )
    monkeypatch.setattr(recorded, "pick_device", lambda spec: torch.device("cpu"))
    monkeypatch.setattr(recorded, "set_threads", lambda threads: 2)
    done = calibrate_recorded(lambda: store)
    assert done["marks"]["reliable"] is False
    assert "matmul_fp32" in done["marks"]["reliability_note"]
    assert store.get_run(done["run_id"]).name.startswith("calibrate ")  # the host's name


def test_calibrate_fails_at_once_when_the_user_file_cannot_be_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    blocked = tmp_path / "file"
    blocked.write_text("")
    monkeypatch.setenv("DLPERF_DEVICES", str(blocked / "devices.toml"))  # under a file

    def never(*args: object) -> None:
        raise AssertionError("no measuring before the output is known writable")

    monkeypatch.setattr(recorded, "calibrate", never)
    with pytest.raises(UserError, match="cannot write the device file"):  # naming it (round 28)
        calibrate_recorded(no_store)
