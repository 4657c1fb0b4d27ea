"""dlperf.deploy.bench on its own: the tiny ONNX classifier of test_server against the same
network in PyTorch; the timings faked where the figures are checked by hand."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
import torch
from onnx import numpy_helper
from torch import nn

from dlperf.deploy import bench, meta
from dlperf.errors import UserError
from dlperf.store import RunStore
from tests.deploy.test_server import tiny_classifier


class Recorder:
    """A Reporter that keeps what it was told."""

    def __init__(self) -> None:
        self.tasks: list[tuple[str, int | None]] = []
        self.advanced: list[str] = []
        self.logs: list[str] = []

    def task(self, description: str, total: int | None = None) -> None:
        self.tasks.append((description, total))

    def advance(self, n: int = 1, status: str = "") -> None:
        self.advanced += [status] * n

    def log(self, message: str) -> None:
        self.logs.append(message)


@pytest.fixture(scope="module")
def model_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tiny_classifier(tmp_path_factory.mktemp("bench") / "tiny.onnx")


def same_network(path: Path) -> nn.Module:
    """The ONNX graph's Flatten -> Gemm in PyTorch, with its weights."""
    weights = {t.name: numpy_helper.to_array(t) for t in onnx.load(str(path)).graph.initializer}
    linear = nn.Linear(192, 3)
    with torch.no_grad():
        linear.weight.copy_(torch.from_numpy(weights["W"].T.copy()))
        linear.bias.copy_(torch.from_numpy(weights["B"].copy()))
    return nn.Sequential(nn.Flatten(), linear)


def holding_tensors_of(path: Path, name: str, input_shape: tuple[int, ...], classes: int) -> Path:
    """`path` with registry model `name`'s parameters and buffers added as initializers of
    their names, as its export would hold them: the check before a race compares them."""
    proto = onnx.load(str(path))
    built = bench.from_registry(name, input_shape, classes).model
    proto.graph.initializer.extend(
        numpy_helper.from_array(value.numpy(), key) for key, value in built.state_dict().items()
    )
    onnx.save(proto, str(path))
    return path


MS = 1e-3
FAKE_TIMES = {
    bench.ORT: [1 * MS, 2 * MS, 3 * MS, 10 * MS],
    "torch eager": [4 * MS, 4 * MS, 4 * MS, 4 * MS],
    "torch channels_last": [3 * MS, 5 * MS, 7 * MS, 9 * MS],
}


def test_rows_are_computed_from_the_timed_calls(
    model_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    outputs: dict[str, list[np.ndarray]] = {}

    def fake_interleave(
        calls: Mapping[str, Callable[[], Any]], warmup: int, rounds: int, **kw: Any
    ) -> dict[str, list[float]]:
        assert (warmup, rounds) == (2, 4)
        for name, call in calls.items():  # each contender once, on the same input
            out = call()
            outputs.setdefault(name, []).append(out[0] if name == bench.ORT else out.numpy())
        kw["on_round"]()
        return FAKE_TIMES

    monkeypatch.setattr(bench, "interleave", fake_interleave)
    reporter = Recorder()
    result = bench.bench(
        model_path, [1, 5], same_network(model_path), threads=1, repeats=4, warmup=2,
        reporter=reporter,
    )  # fmt: skip
    assert (result["threads"], result["repeats"], result["warmup"]) == (1, 4, 2)
    assert reporter.tasks == [("benchmarking", 8)] and reporter.advanced == ["batch 1", "batch 5"]
    for one, five in outputs.values():  # the contenders agree, batch by batch
        assert one.shape == (1, 3) and five.shape == (5, 3)
        np.testing.assert_allclose(one, outputs[bench.ORT][0], rtol=1e-4, atol=1e-5)
        np.testing.assert_allclose(five, outputs[bench.ORT][1], rtol=1e-4, atol=1e-5)
    rows = {(r["batch"], r["contender"]): r for r in result["rows"]}
    assert len(rows) == 6
    ort = rows[(5, bench.ORT)]
    # ORT: median of 1, 2, 3, 10 ms is 2.5 ms; 5 images x 4 calls over 16 ms
    assert ort["min_ms"] == pytest.approx(1) and ort["max_ms"] == pytest.approx(10)
    assert ort["p50_ms"] == pytest.approx(2.5)
    assert ort["throughput"] == pytest.approx(5 * 4 / 0.016)
    assert ort["ort_speedup"] == pytest.approx(1.0)
    # p90 of 1, 2, 3, 10 (numpy's linear): 3 + 0.7 x 7 = 7.9 ms; p99: 3 + 0.97 x 7
    assert ort["p90_ms"] == pytest.approx(7.9) and ort["p99_ms"] == pytest.approx(9.79)
    eager = rows[(1, "torch eager")]
    assert eager["ort_speedup"] == pytest.approx(4 / 2.5)  # contender p50 / ONNX Runtime p50
    assert eager["throughput"] == pytest.approx(1 * 4 / 0.016)
    assert rows[(1, "torch channels_last")]["ort_speedup"] == pytest.approx(6 / 2.5)


def test_a_real_short_race_of_onnx_runtime_alone(model_path: Path) -> None:
    result = bench.bench(model_path, [2], threads=1, repeats=3, warmup=1)
    (row,) = result["rows"]
    assert (row["batch"], row["contender"]) == (2, bench.ORT)
    assert 0 < row["min_ms"] <= row["p50_ms"] <= row["p90_ms"] <= row["p99_ms"] <= row["max_ms"]
    assert row["ort_speedup"] == 1.0 and row["throughput"] > 0


@pytest.mark.parametrize("batches", [[], [0], [4, -1]])
def test_batch_sizes_must_be_positive(model_path: Path, batches: list[int]) -> None:
    with pytest.raises(
        UserError, match=re.escape(f"batch sizes must be positive integers, got {batches}")
    ):
        bench.bench(model_path, batches, threads=1)


def test_a_fixed_batch_model_takes_only_its_batch(tmp_path: Path) -> None:
    path = tiny_classifier(tmp_path / "fixed.onnx", batch=1)
    with pytest.raises(UserError, match=r"fixed batch of 1 .*--dynamic-batch"):
        bench.bench(path, [1, 4], threads=1)
    assert len(bench.bench(path, [1], threads=1, repeats=1, warmup=0)["rows"]) == 1


def test_no_pytorch_contender_when_neither_run_nor_registry_has_it(
    store: RunStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def unknown(name: str, *args: Any) -> Any:
        # the registry's refusal, without its search of torchvision's zoo for close names
        raise UserError(f"unknown model '{name}'")

    monkeypatch.setattr(bench, "from_registry", unknown)
    path = tiny_classifier(tmp_path / "run.onnx")
    described = meta.load(path)
    described.run_id = 99  # a run the store does not hold
    meta.save(path, described)
    opened: list[int] = []

    def open_store() -> RunStore:
        opened.append(1)
        return store

    reporter = Recorder()
    assert bench.pytorch_contender(path, None, open_store, reporter) is None
    assert opened == [1]
    first, second = reporter.logs
    assert (
        first.startswith("warning: ")
        and "racing registry model 'tiny' with random weights" in first
    )
    assert second == (
        "warning: cannot rebuild the PyTorch model (unknown model 'tiny'); timing ONNX Runtime only"
    )


def test_a_registry_name_races_that_network_at_the_models_input(tmp_path: Path) -> None:
    def no_store() -> RunStore:
        raise AssertionError("a registry name needs no store")

    path = holding_tensors_of(tiny_classifier(tmp_path / "m.onnx"), "smallcnn", (3, 8, 8), 3)
    contender = bench.pytorch_contender(path, "smallcnn", no_store)
    assert contender is not None
    with torch.no_grad():
        assert contender(torch.zeros(2, 3, 8, 8)).shape == (2, 3)  # the ONNX file's 3 classes
