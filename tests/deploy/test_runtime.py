"""The exported-model metadata and the shared image preprocessing."""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper
from PIL import Image

from dlperf.deploy import meta, runtime
from dlperf.errors import UserError


def _identity_model(path: Path) -> None:
    x = helper.make_tensor_value_info("input", TensorProto.FLOAT, ["N", 3])
    y = helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["N", 3])
    graph = helper.make_graph([helper.make_node("Identity", ["input"], ["logits"])], "g", [x], [y])
    onnx.save(
        helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=10),
        str(path),
    )


def _meta() -> meta.ModelMeta:
    pre = meta.Preprocess(size=(4, 6), channels=3, mean=(0.5, 0.5, 0.5), std=(0.25, 0.5, 1.0))
    return meta.ModelMeta(
        task="classification",
        model="tiny",
        input_name="input",
        input_shape=(3, 4, 6),
        preprocess=pre,
        labels=["a", "b", "c"],
        run_id=7,
    )


def test_metadata_round_trip_embedded_and_sidecar(tmp_path: Path) -> None:
    path = tmp_path / "m.onnx"
    _identity_model(path)
    meta.save(path, _meta())
    assert meta.load(path) == _meta()
    # Saving twice replaces the embedded copy instead of adding a second one.
    meta.save(path, _meta())
    keys = [p.key for p in onnx.load(str(path)).metadata_props]
    assert keys == ["dlperf"]
    # The sidecar alone is enough when the embedded copy is missing.
    _identity_model(path)
    assert meta.load(path).labels == ["a", "b", "c"]


def test_metadata_errors_are_one_line(tmp_path: Path) -> None:
    with pytest.raises(UserError, match="no model file"):
        meta.load(tmp_path / "missing.onnx")
    garbage = tmp_path / "garbage.onnx"
    garbage.write_bytes(b"\x00not a protobuf\xff" * 10)
    with pytest.raises(UserError, match="not an ONNX model"):
        meta.load(garbage)
    bare = tmp_path / "bare.onnx"
    _identity_model(bare)
    with pytest.raises(UserError, match="carries no dlperf metadata"):
        meta.load(bare)


def test_to_array_resizes_scales_and_normalises() -> None:
    image = Image.new("RGB", (12, 8), (255, 128, 0))
    x = runtime.to_array(image, _meta().preprocess)
    assert x.shape == (3, 4, 6) and x.dtype == np.float32
    np.testing.assert_allclose(x[0], (1.0 - 0.5) / 0.25, rtol=1e-6)
    np.testing.assert_allclose(x[1], (128 / 255 - 0.5) / 0.5, atol=1e-6)
    np.testing.assert_allclose(x[2], (0.0 - 0.5) / 1.0, rtol=1e-6)


def test_a_wide_image_is_centre_cropped_not_squashed() -> None:
    pre = meta.Preprocess(size=(2, 2), channels=1, mean=(0.0,), std=(1.0,))
    image = Image.new("L", (6, 2), 0)
    image.paste(255, (2, 0, 4, 2))  # a white middle third between black sides
    np.testing.assert_allclose(runtime.to_array(image, pre), 1.0)


def test_grayscale_preprocess_and_decode_errors(tmp_path: Path) -> None:
    pre = meta.Preprocess(size=(2, 2), channels=1, mean=(0.0,), std=(1.0,))
    buf = io.BytesIO()
    Image.new("RGB", (2, 2), (255, 255, 255)).save(buf, format="PNG")
    x = runtime.to_array(runtime.decode(buf.getvalue()), pre)
    assert x.shape == (1, 2, 2)
    np.testing.assert_allclose(x, 1.0)
    with pytest.raises(UserError, match="not a readable image"):
        runtime.decode(b"definitely not an image")
    huge = io.BytesIO()
    Image.new("L", (8000, 6000)).save(huge, format="PNG")  # 48 MP in ~50 KB
    with pytest.raises(UserError, match="more than the 40,000,000 accepted"):  # serve's cap
        runtime.decode(huge.getvalue(), max_pixels=runtime.MAX_PIXELS)
    assert runtime.decode(huge.getvalue()).size == (8000, 6000)  # a file: training's cap
    with pytest.raises(UserError, match="no image file"):
        runtime.load_images([tmp_path / "nope.png"], pre)


def test_session_runs_and_topk_orders_by_probability(tmp_path: Path) -> None:
    path = tmp_path / "m.onnx"
    _identity_model(path)
    sess = runtime.session(path, threads=1)
    logits = sess.run(None, {"input": np.array([[0.0, 2.0, 1.0]], dtype=np.float32)})[0]
    best = runtime.topk(logits, 2, ["a", "b", "c"])[0]
    assert [b["label"] for b in best] == ["b", "c"]
    expected = np.exp(2.0) / (1 + np.exp(2.0) + np.exp(1.0))
    assert best[0]["probability"] == pytest.approx(expected)


def test_session_rejects_a_broken_model(tmp_path: Path) -> None:
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"nonsense")
    with pytest.raises(UserError, match="ONNX Runtime cannot load"):
        runtime.session(bad)


def test_cuda_sessions_keep_fp32_without_tf32() -> None:
    """onnxruntime-gpu runs fp32 matmuls in TF32 by default on Ampere and later, which
    misses PyTorch's answers by more than export's parity tolerance; the CPU stays last."""
    assert runtime.providers(["CPUExecutionProvider"]) == ["CPUExecutionProvider"]
    assert runtime.providers(["CUDAExecutionProvider", "CPUExecutionProvider"]) == [
        ("CUDAExecutionProvider", {"use_tf32": "0"}),
        "CPUExecutionProvider",
    ]


def test_a_cpu_session_stays_on_the_cpu_where_cuda_is_offered(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`infer bench` races ONNX Runtime against PyTorch on the CPU: its session must not take
    onnxruntime-gpu's CUDA provider."""
    import onnxruntime as ort

    path = tmp_path / "m.onnx"
    _identity_model(path)
    offered: list[object] = []
    real = ort.InferenceSession

    def session(path: str, options: object, providers: list[object]) -> object:
        offered.append(providers)
        return real(path, options, providers=["CPUExecutionProvider"])

    monkeypatch.setattr(
        ort, "get_available_providers", lambda: ["CUDAExecutionProvider", "CPUExecutionProvider"]
    )
    monkeypatch.setattr(ort, "InferenceSession", session)
    runtime.session(path, threads=1, cpu=True)
    runtime.session(path, threads=1)
    assert offered == [
        ["CPUExecutionProvider"],
        [("CUDAExecutionProvider", {"use_tf32": "0"}), "CPUExecutionProvider"],
    ]
