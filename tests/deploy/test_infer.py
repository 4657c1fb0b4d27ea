"""Inference on image files with the saved preprocessing, and the ONNX Runtime benchmark."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest
import torch
from PIL import Image

from dlperf.config import Experiment
from dlperf.data import load_data
from dlperf.data.augment import normalize
from dlperf.deploy.bench import bench, pytorch_contender
from dlperf.deploy.export import export, from_run
from dlperf.deploy.infer import predict
from dlperf.errors import UserError
from dlperf.store import RunStore
from tests.conftest import TrainedRun


@dataclass
class Exported:
    path: Path
    store: RunStore
    run_id: int
    model: torch.nn.Module
    exp: Experiment


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory, trained_digits: TrainedRun) -> Exported:
    """A one-epoch smallcnn digits run, exported with a dynamic batch."""
    torch.set_num_threads(1)
    root = tmp_path_factory.mktemp("infer")
    store, run_id, exp = trained_digits.copy_to(root)
    source = from_run(store, run_id)
    path = root / "digits.onnx"
    assert export(source, path, dynamic_batch=True)["parity"]
    return Exported(path, store, run_id, source.model, exp)


def test_predictions_match_pytorch_with_training_preprocessing(
    exported: Exported, tmp_path: Path
) -> None:
    data = load_data(exported.exp.data)
    images, labels = data.test.images[:40], data.test.labels[:40]
    paths = []
    for i, image in enumerate(images):
        paths.append(tmp_path / f"digit{i}.png")
        Image.fromarray(image[0].numpy(), mode="L").save(paths[-1])

    result = predict(exported.path, paths, k=3)
    assert result["labels"] == "metadata" and len(result["predictions"]) == 40
    onnx_top1 = [int(p["top"][0]["label"]) for p in result["predictions"]]
    # PyTorch on the same uint8 images, normalised exactly as the training loader does.
    mean = torch.tensor(data.mean).view(-1, 1, 1)
    std = torch.tensor(data.std).view(-1, 1, 1)
    with torch.no_grad():
        torch_top1 = exported.model(normalize(images, mean, std)).argmax(1).tolist()
    assert onnx_top1 == torch_top1
    assert sum(a == b for a, b in zip(onnx_top1, labels.tolist(), strict=True)) >= 30  # trained
    top = result["predictions"][0]["top"]
    assert len(top) == 3 and top[0]["probability"] >= top[1]["probability"] >= top[2]["probability"]
    assert top[0]["label"] == str(top[0]["index"])


def test_labels_file_and_bad_input(exported: Exported, tmp_path: Path) -> None:
    image = tmp_path / "big.png"
    Image.new("RGB", (64, 48), (255, 255, 255)).save(image)  # resized and made grey
    names = tmp_path / "names.txt"
    names.write_text("".join(f"digit {i}\n" for i in range(10)))
    result = predict(exported.path, [image], k=20, labels_file=names)
    top = result["predictions"][0]["top"]
    assert len(top) == 10 and all(t["label"] == f"digit {t['index']}" for t in top)
    assert sum(t["probability"] for t in top) == pytest.approx(1.0)

    names.write_text("a\nb\n")
    with pytest.raises(UserError, match="has 2 labels; the model has 10 classes"):
        predict(exported.path, [image], labels_file=names)
    with pytest.raises(UserError, match="no image file"):
        predict(exported.path, [tmp_path / "missing.png"])
    junk = tmp_path / "junk.png"
    junk.write_bytes(b"not an image")
    with pytest.raises(UserError, match="is not a readable image"):
        predict(exported.path, [junk])


def test_bench_rows_for_every_contender_and_batch(exported: Exported) -> None:
    contender = pytorch_contender(exported.path, None, lambda: exported.store)
    assert contender is not None  # rebuilt from the run the metadata names
    result = bench(exported.path, [1, 4], contender, threads=1, repeats=3, warmup=1)
    assert result["threads"] == 1 and torch.get_num_threads() == 1
    rows = result["rows"]
    assert [(r["batch"], r["contender"]) for r in rows] == [
        (b, c) for b in (1, 4) for c in ("onnxruntime", "torch eager", "torch channels_last")
    ]
    for r in rows:
        assert 0 < r["p50_ms"] <= r["p90_ms"] <= r["p99_ms"]
        assert r["throughput"] > 0 and r["ort_speedup"] > 0
        if r["contender"] == "onnxruntime":
            assert r["ort_speedup"] == 1.0


def test_bench_contender_from_registry_and_without_store(exported: Exported) -> None:
    def no_store() -> RunStore:
        raise UserError("no run store here")

    # --torch MODEL: a registry model sized from the ONNX file's input and output.
    model = pytorch_contender(exported.path, "smallcnn", no_store)
    assert model is not None and model(torch.zeros(1, 1, 8, 8)).shape == (1, 10)
    # No --torch and the run is out of reach: the metadata's registry model, random weights.
    messages: list[str] = []

    class Log:
        def task(self, description: str, total: int | None = None) -> None: ...
        def advance(self, n: int = 1, status: str = "") -> None: ...
        def log(self, message: str) -> None:
            messages.append(message)

    model = pytorch_contender(exported.path, None, no_store, Log())
    assert model is not None and "random weights" in messages[0]
    with pytest.raises(UserError, match="batch sizes must be positive"):
        bench(exported.path, [0], None, threads=1)
