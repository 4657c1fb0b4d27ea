"""dlperf.deploy.meta on its own: the metadata's two copies (embedded, sidecar), read back in
that order, and the one-line refusals of what is not an exported model."""

from __future__ import annotations

import os
from pathlib import Path

import onnx
import pytest

from dlperf.deploy import meta
from dlperf.errors import UserError
from tests.deploy.test_server import plain_model

PRE = meta.Preprocess((8, 6), 1, (0.5,), (0.25,))


def sample(model: str = "tiny", **changes: object) -> meta.ModelMeta:
    doc = meta.ModelMeta("classification", model, "x", (1, 8, 6), PRE, ["a", "b"], run_id=3)
    for key, value in changes.items():
        setattr(doc, key, value)
    return doc


def embedded(path: Path) -> list[str]:
    proto = onnx.load(str(path), load_external_data=False)
    return [p.value for p in proto.metadata_props if p.key == meta.KEY]


def test_json_round_trip_keeps_tuples_and_optional_fields() -> None:
    doc = sample(run_status="killed", epoch=2, epochs=5)
    back = meta.ModelMeta.from_json(doc.to_json(), "here")
    assert back == doc
    assert back.preprocess.size == (8, 6) and isinstance(back.input_shape, tuple)


def test_unreadable_json_is_one_line_naming_its_source() -> None:
    with pytest.raises(UserError, match=r"^m.onnx.json: unreadable dlperf metadata") as caught:
        meta.ModelMeta.from_json('{"task": "classification"}', "m.onnx.json")
    assert "\n" not in str(caught.value)


def test_sidecar_sits_beside_the_model() -> None:
    assert meta.sidecar(Path("/a/b/m.onnx")) == Path("/a/b/m.onnx.json")


def test_save_embeds_once_and_writes_the_sidecar(tmp_path: Path) -> None:
    path = plain_model(tmp_path / "m.onnx")
    meta.save(path, sample("first"))
    meta.save(path, sample("second"))  # replaces, never adds a second copy
    assert [meta.ModelMeta.from_json(v, "x").model for v in embedded(path)] == ["second"]
    assert meta.ModelMeta.from_json(meta.sidecar(path).read_text(), "x").model == "second"
    assert meta.load(path) == sample("second")


def test_the_embedded_copy_wins_over_the_sidecar(tmp_path: Path) -> None:
    path = plain_model(tmp_path / "m.onnx")
    meta.save(path, sample("inside"))
    meta.sidecar(path).write_text(sample("beside").to_json())
    assert meta.load(path).model == "inside"


def test_the_sidecar_serves_a_file_without_an_embedded_copy(tmp_path: Path) -> None:
    path = plain_model(tmp_path / "m.onnx")
    assert meta.find(path) is None  # plain ONNX: nothing either way
    with pytest.raises(
        UserError, match=r"carries no dlperf metadata .*export it with `dlperf export`"
    ):
        meta.load(path)
    meta.sidecar(path).write_text(sample("beside").to_json())
    assert meta.load(path).model == "beside"


def test_what_is_not_an_onnx_file_is_refused(tmp_path: Path) -> None:
    with pytest.raises(UserError, match=r"^no model file .*missing.onnx$"):
        meta.find(tmp_path / "missing.onnx")
    with pytest.raises(UserError, match=r"^no model file"):
        meta.find(tmp_path)  # a directory is left to "no ... file"
    junk = tmp_path / "junk.onnx"
    junk.write_bytes(b"\xff\x00 not protobuf")
    with pytest.raises(UserError, match=r"junk.onnx is not an ONNX model: "):
        meta.find(junk)


def test_a_fifo_is_refused_without_being_opened(tmp_path: Path) -> None:
    fifo = tmp_path / "pipe.onnx"
    os.mkfifo(fifo)  # opening it would block for ever: the refusal must come from stat
    with pytest.raises(UserError, match=r"pipe.onnx is not a regular file \(.*\) \(give an ONNX"):
        meta.find(fifo)


def test_a_run_id_given_for_the_file_is_told_to_export_it_first(tmp_path: Path) -> None:
    """`dlperf infer bench 1` said "no model file 1" alone: a bare number is a run id, and the
    line now names the export that writes its file (round 68)."""
    os.chdir(tmp_path)
    with pytest.raises(UserError) as refused:
        meta.find(Path("1"))
    assert str(refused.value) == (
        "no model file 1 (it takes an ONNX file, not a run id: "
        "`dlperf export 1 --out m.onnx` writes run 1's)"
    )
    with pytest.raises(UserError) as named:
        meta.find(Path("m1.onnx"))
    assert named.value.hint is None
