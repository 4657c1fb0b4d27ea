"""Break-it round 38 (T1): serve's names.

C1: a model named "stats" (stats.onnx) was served without a word, and its metadata was lost:
GET /v2/models/stats is Triton's statistics of every model, so tritonclient's
get_model_metadata('stats') got {"model_stats": [...]} (no inputs, no outputs).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from dlperf.deploy.served_model import ServedModel
from dlperf.errors import UserError
from tests.deploy.test_server import tiny_classifier


def test_a_model_named_stats_is_refused_as_it_starts(tmp_path: Path) -> None:
    path = tiny_classifier(tmp_path / "stats.onnx")
    with pytest.raises(UserError) as e:
        ServedModel(path, threads=1)
    assert e.value.message == (
        f"{path}: a model named 'stats' cannot be served: GET /v2/models/stats is the "
        "statistics of every model (Triton's statistics extension), not this model's metadata"
    )
    assert (
        e.value.hint == "rename the file: the model's name is the file's name without its extension"
    )
