"""dlperf.analytic.tables: analyze's tables, built from a hand-made analysis document of a
tiny model and variations of it (no counting runs)."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from dlperf.analytic.tables import (
    BACKWARD_COLUMNS,
    LAYER_COLUMNS,
    csv_columns,
    layer_table,
    not_run_table,
    si,
    tables,
    totals_table,
)


def layer(name: str, kind: str, role: str, shape: list[int], *counts: int) -> dict[str, Any]:
    keys = ("params", "macs", "flops", "activations", "activation_bytes", "backward_macs",
            "backward_flops")  # fmt: skip
    return {"name": name, "type": kind, "role": role, "output_shape": shape} | dict(
        zip(keys, counts, strict=True)
    )


@pytest.fixture
def doc() -> dict[str, Any]:
    """The analysis document of conv 1->2 3x3 on 1x4x4, ReLU, flatten, FC 8->3, batch 2, a
    training step, with the counts `analyze_module` gives it (the keys the tables read)."""
    return {
        "model": "model",
        "arguments": {},
        "input": [1, 4, 4],
        "batch": 2,
        "transfer": "scratch",
        "train": True,
        "precision": "fp32",
        "classes": None,
        "classes_source": "the module as it was built",
        "conventions": {
            "params": "with biases",
            "activations": "all",
            "macs": "dlperf",
            "macs_counts": "weight products only",
            "precision": "fp32",
        },
        "layers": [
            layer("0", "Conv2d", "conv", [2, 2, 2, 2], 20, 144, 304, 16, 64, 144, 304),
            layer("1", "ReLU", "activation", [2, 2, 2, 2], 0, 0, 16, 16, 64, 0, 16),
            layer("2", "Flatten", "other", [2, 8], 0, 0, 0, 16, 64, 0, 0),
            layer("3", "Linear", "fc", [2, 3], 27, 48, 102, 6, 24, 96, 198),
        ],
        "not_run": [],
        "totals": {
            "params": 47,
            "trainable_params": 47,
            "params_not_run": 0,
            "macs": 192,
            "flops": 422,
            "activations": 54,
            "activation_bytes": 216,
            "conv_flops_share": 304 / 422,
            "receptive_field": {
                "defined": False,
                "reason": "positions are mixed (global pooling, flatten or attention): "
                "aten.view in 2",
                "last_spatial_layer": "1",
                "size": [3, 3],
                "jump": [1, 1],
                "start": [1.5, 1.5],
            },
            "backward_macs": 240,
            "backward_flops": 518,
            "step_flops": 940,
            "training_memory": {
                "weights_bytes": 188,
                "buffers_bytes": 0,
                "gradients_bytes": 188,
                "optimizer_state_bytes": {"sgd_momentum": 188, "adam": 376},
                "saved_activations_bytes": 192,
                "total_bytes": {"sgd_momentum": 756, "adam": 944},
            },
        },
    }


def variant(doc: dict[str, Any], **over: Any) -> dict[str, Any]:
    return copy.deepcopy(doc) | over


def test_si_prefixes_and_precision() -> None:
    assert si(0) == "0"
    assert si(999) == "999"
    assert si(1234.5) == "1.23 K"
    assert si(1234567) == "1.23 M"
    assert si(2.5e9, "B") == "2.5 GB"
    assert si(7e12) == "7 T"
    assert si(-2e6) == "-2 M"
    assert si(12, "B") == "12 B"


def test_csv_columns_add_backward_for_a_training_step(doc: dict[str, Any]) -> None:
    assert csv_columns(doc) == LAYER_COLUMNS + BACKWARD_COLUMNS
    assert csv_columns(variant(doc, train=False)) == LAYER_COLUMNS


def test_layer_table_rows_are_the_hand_counted_layers(doc: dict[str, Any]) -> None:
    table = layer_table(doc)
    assert table.title == (
        "model: input 1x4x4, batch 2, fp32, training step, classes (the module as it was built)"
    )
    assert table.columns[3:5] == ["params", "MACs (dlperf)"]
    assert table.columns[-2:] == ["bwd MACs", "bwd FLOPs"]
    conv = table.rows[0]
    # by hand: 2 images x 4 positions x 2 filters x 9 taps = 144 MACs; + 16 bias adds;
    # 2x2x3x3 weights + 2 biases = 20 params; d-weight only (no d-input at the first layer)
    assert conv == ["0", "Conv2d", "2x2x2x2", "20", "144", "304", "16", "64 B", "144", "304"]
    fc = table.rows[3]
    # 2 x 8 x 3 = 48 MACs, 102 FLOPs with the 6 bias adds; backward d-input and d-weight
    assert fc[:6] == ["3", "Linear", "2x3", "27", "48", "102"]
    assert fc[8] == "96"


def test_layer_table_conventions_and_title_variants(doc: dict[str, Any]) -> None:
    conventions = doc["conventions"] | {"params": "without biases", "activations": "conv-pool-fc"}
    other = variant(
        doc,
        train=False,
        conventions=conventions,
        classes=10,
        classes_source="analyze.classes",
        arguments={"width": 2},
        transfer="feature-extract",
    )
    table = layer_table(other)
    assert table.title == (
        "model(width=2): input 1x4x4, batch 2, fp32, 10 classes (analyze.classes), "
        "backbone frozen (feature-extract)"
    )
    assert table.columns[3] == "params w/o bias"
    assert len(table.columns) == 8  # no backward columns
    relu = table.rows[1]
    assert relu[6:] == ["–", "–"]  # not an activation in the conv-pool-fc convention
    assert table.rows[0][6:] == ["16", "64 B"]  # a conv's output is
    none = variant(doc, classes=None, classes_source="the model takes no num_classes")
    assert layer_table(none).title.endswith(", no classes")  # type: ignore[union-attr]


def test_not_run_table(doc: dict[str, Any]) -> None:
    assert not_run_table(doc) is None
    idle = variant(doc, not_run=[{"name": "aux", "type": "Linear", "params": 12345}])
    table = not_run_table(idle)
    assert table is not None and table.rows == [["aux", "Linear", "12,345"]]
    assert [t.title for t in tables(idle)] == [layer_table(idle).title, "modules that never ran",
                                               "totals"]  # fmt: skip


def test_totals_table(doc: dict[str, Any]) -> None:
    rows = dict(totals_table(doc).rows)
    assert rows["params (with biases)"] == "47"  # 20 + 27
    assert rows["MACs (dlperf)"] == "192 (192)"  # 144 + 48
    assert rows["step FLOPs (fwd + bwd)"] == "940 (940)"  # 422 + 518
    assert rows["conv share of FLOPs"] == "72.0%"  # 304 / 422
    assert rows["training memory SGD momentum / Adam"] == "756 B / 944 B"
    assert rows["receptive field"].startswith("undefined (positions are mixed")
    assert rows["receptive field"].endswith("last spatial layer 1: 3x3 px, jump 1x1, start 1.5,1.5")
    assert "params of modules that never ran" not in rows
    forward = dict(totals_table(variant(doc, train=False)).rows)
    assert "backward MACs" not in forward and "weights" not in forward


def test_totals_table_a_defined_receptive_field_and_modules_not_run(doc: dict[str, Any]) -> None:
    other = variant(doc, not_run=[{"name": "aux", "type": "Linear", "params": 5}])
    other["totals"]["receptive_field"] = {
        "defined": True, "size": [7, 7], "jump": [2, 2], "start": [0.5, 0.5],
    }  # fmt: skip
    other["totals"]["params_not_run"] = 5
    rows = dict(totals_table(other).rows)
    assert rows["receptive field"] == "7x7 px, jump 2x2, start 0.5,0.5"
    assert rows["params of modules that never ran"] == "5"
