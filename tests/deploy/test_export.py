"""ONNX export: dynamo exporter, checker, parity with PyTorch, metadata beside the model."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
import torch

from dlperf.deploy import meta as meta_io
from dlperf.deploy.export import check_model, compare, export, from_registry, from_run
from dlperf.errors import UserError
from dlperf.store import RunStore
from tests.conftest import TrainedRun

KEYS = {"path", "opset", "check", "max_abs_diff", "max_rel_diff", "top1_agreement", "parity"}


@pytest.fixture(autouse=True)
def _one_thread() -> None:
    torch.set_num_threads(1)


@pytest.fixture(scope="module")
def smallcnn(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    """smallcnn exported once for the module: dynamic batch, weights inside the file."""
    torch.set_num_threads(1)
    out = tmp_path_factory.mktemp("smallcnn") / "smallcnn.onnx"
    source = from_registry("smallcnn", (1, 16, 16))
    return out, export(source, out, dynamic_batch=True, single_file=True)


@pytest.fixture(scope="module")
def resnet20(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    """resnet20 exported once for the module: a fixed batch, its weights in a file beside it
    (an export takes 5-15 s on a busy core; two tests read this one)."""
    torch.set_num_threads(1)
    out = tmp_path_factory.mktemp("resnet20") / "resnet20.onnx"
    return out, export(from_registry("resnet20", (3, 8, 8), num_classes=7), out)


def test_registry_model_dynamic_batch_single_file(smallcnn: tuple[Path, dict[str, Any]]) -> None:
    out, result = smallcnn
    assert set(result) >= KEYS
    assert result["exporter"] == "dynamo" and result["check"] == "passed"
    assert result["parity"] and result["top1_agreement"] == 1.0
    assert 0 <= result["max_abs_diff"] < 1e-4 and result["max_rel_diff"] < 1e-3
    assert [s["input"] for s in result["parity_sets"]] == ["random"]
    assert result["data_path"] is None and not out.with_name("smallcnn.onnx.data").exists()

    proto = onnx.load(str(out))
    batch_dim = proto.graph.input[0].type.tensor_type.shape.dim[0]
    assert batch_dim.dim_param and not batch_dim.dim_value  # symbolic, not fixed
    assert result["opset"] == next(o.version for o in proto.opset_import if o.domain == "")

    meta = meta_io.load(out)
    assert meta.model == "smallcnn" and meta.input_shape == (1, 16, 16)
    assert meta.preprocess.mean == (0.5,) and meta.preprocess.std == (0.5,)
    assert meta.preprocess.size == (16, 16) and meta.opset == result["opset"]
    # The sidecar holds the same document as the embedded copy.
    sidecar = json.loads(meta_io.sidecar(out).read_text())
    assert sidecar == json.loads(meta.to_json())


def test_second_registry_model_with_external_weights(
    resnet20: tuple[Path, dict[str, Any]],
) -> None:
    out, result = resnet20
    assert result["parity"] and result["top1_agreement"] == 1.0
    data = Path(result["data_path"])
    assert data == out.parent / "resnet20.onnx.data" and data.stat().st_size > out.stat().st_size
    proto = onnx.load(str(out))
    dims = [d.dim_value for d in proto.graph.output[0].type.tensor_type.shape.dim]
    assert dims == [1, 7]  # fixed batch of 1, seven classes


def test_stored_run_keeps_weights_preprocessing_and_labels(
    tmp_path: Path, trained_digits: TrainedRun
) -> None:
    """Exported inside the caller's torch.no_grad(), as a notebook may (the inference_mode
    case of test_a_stored_run_exports_inside_the_callers_no_grad_or_inference_mode is the
    other): a run's export, once, serves both."""
    store, run_id, _ = trained_digits.copy_to(tmp_path)  # read only: the checkpoint is shared
    out = tmp_path / "run.onnx"
    with torch.no_grad():
        source = from_run(store, run_id)
        result = export(source, out, dynamic_batch=True)
    assert torch.is_grad_enabled() and not torch.is_inference_mode_enabled()  # put back
    assert source.images is not None and source.images.shape == (64, 1, 8, 8)
    assert result["parity"] and result["run_id"] == run_id
    sets = {s["input"]: s for s in result["parity_sets"]}
    assert sets["test images"]["n"] == 64 and sets["test images"]["within_tolerance"]
    assert sets["test images"]["top1_agreement"] == 1.0

    meta = meta_io.load(out)
    assert meta.run_id == run_id and meta.labels == list("0123456789")
    assert meta.input_shape == (1, 8, 8) and meta.preprocess.channels == 1
    # The run's own normalisation, not a default: digits' mean is about 0.3.
    assert 0.2 < meta.preprocess.mean[0] < 0.4 and meta.preprocess.std[0] > 0.2

    # The trained weights went into the file: the run's model and the export agree on
    # images the random-weight model gets wrong.
    with torch.no_grad():
        trained = source.model(source.images).argmax(1)
        fresh = from_registry("smallcnn", (1, 8, 8)).model(source.images).argmax(1)
    assert (trained != fresh).any()


def test_a_stored_run_exports_inside_the_callers_no_grad_or_inference_mode(
    tmp_path: Path, trained_digits: TrainedRun
) -> None:
    """A notebook that exports inside torch.no_grad() or torch.inference_mode() was refused
    with training's lines ("gradients are off as training starts", "dlperf.run trains"):
    export trains nothing, and builds and exports the run as outside them. Inference mode
    here; no_grad in test_stored_run_keeps_weights_preprocessing_and_labels, whose export
    runs inside it."""
    store, run_id, _ = trained_digits.copy_to(tmp_path)
    with torch.inference_mode():
        source = from_run(store, run_id)
        result = export(source, tmp_path / "run.onnx")
    assert result["parity"] and result["run_id"] == run_id
    assert torch.is_grad_enabled() and not torch.is_inference_mode_enabled()  # put back


def test_run_without_checkpoint_is_bad_input(tmp_path: Path) -> None:
    store = RunStore.open(f"sqlite:///{tmp_path / 'dlperf.db'}")
    run_id = store.create_run(name="x", kind="run", config={}, config_hash="", system={})
    with pytest.raises(UserError, match=f"run {run_id} has no checkpoint"):
        from_run(store, run_id)
    with pytest.raises(UserError, match="no run 99"):
        from_run(store, 99)


def test_checker_rejects_corrupted_files(
    smallcnn: tuple[Path, dict[str, Any]], tmp_path: Path
) -> None:
    good, _ = smallcnn
    check_model(good)

    proto = onnx.load(str(good))
    proto.graph.node[0].input[0] = "no_such_tensor"  # a dangling edge
    broken = tmp_path / "broken.onnx"
    onnx.save(proto, str(broken))
    with pytest.raises(UserError, match=r"broken\.onnx fails the ONNX checker") as e:
        check_model(broken)
    assert "\n" not in str(e.value)

    garbage = tmp_path / "garbage.onnx"
    garbage.write_bytes(b"\x00not a protobuf\xff" * 10)
    with pytest.raises(UserError, match="fails the ONNX checker"):
        check_model(garbage)


def test_compare_applies_the_allclose_rule() -> None:
    reference = np.array([[1.0, -2.0, 0.0], [0.5, 0.25, 4.0]], dtype=np.float32)
    # Within atol + rtol*|ref| everywhere: 1e-3 * 2 + 1e-5 allows 0.00201 on the -2 entry.
    close = reference + np.array([[1e-3, -2e-3, 1e-5], [0, 0, 4e-3]], dtype=np.float32)
    result = compare(reference, close, rtol=1e-3, atol=1e-5)
    assert result["within_tolerance"] and result["top1_agreement"] == 1.0
    assert result["max_abs_diff"] == pytest.approx(4e-3, rel=1e-3)
    assert result["max_rel_diff"] == pytest.approx(1e-3, rel=1e-3)  # zero reference skipped

    # 3e-3 on the 1.0 entry is outside 1e-3 + 1e-5; the row's top-1 flips too.
    far = reference.copy()
    far[1] = [5.0, 0.25, 4.0]
    far[0, 0] += 3e-3
    result = compare(reference, far, rtol=1e-3, atol=1e-5)
    assert not result["within_tolerance"] and result["top1_agreement"] == 0.5
    assert result["max_abs_diff"] == pytest.approx(4.5)
    assert result["max_rel_diff"] == pytest.approx(9.0)


def test_an_interrupted_export_leaves_no_unchecked_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, resnet20: tuple[Path, dict[str, Any]]
) -> None:
    """Ctrl-C while ONNX Runtime is compared with PyTorch: the model, its weights and its
    metadata written by this export are removed (before: left behind, unchecked); an earlier
    export stays whole, as this one is written aside until it is checked. The earlier export
    is the module's, its files copied here: the same files an export here would write. The
    interrupted export is of smallcnn, to the same name (model, weights file and metadata
    too): it costs half a resnet20 export, and what it leaves behind is judged the same."""
    from dlperf.deploy import export as export_module

    exported, result = resnet20
    assert result["parity"]
    for path in exported.parent.iterdir():
        (tmp_path / path.name).write_bytes(path.read_bytes())
    out = tmp_path / exported.name
    source = from_registry("smallcnn", (1, 8, 8))
    earlier = {p: p.read_bytes() for p in tmp_path.iterdir()}
    assert len(earlier) == 3  # the model, its weights and its metadata

    def interrupt(*args: object, **kwargs: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(export_module, "_torch_export", interrupt)  # before anything is written
    with pytest.raises(KeyboardInterrupt):
        export(source, out)
    assert {p: p.read_bytes() for p in tmp_path.iterdir()} == earlier
    monkeypatch.undo()
    monkeypatch.setattr(export_module, "compare", interrupt)  # after all is written
    with pytest.raises(KeyboardInterrupt):
        export(source, out)
    assert {p: p.read_bytes() for p in tmp_path.iterdir()} == earlier
