"""`dlperf analyze`'s tables, built once from the analysis document (`Analysis.to_dict()`):
the command prints them through its console, `dlperf.analyze(...)` prints them as plain text.
Counts read '1.23 M' here; the document keeps the exact numbers. Light to import (no torch):
the command line takes `si` from here at start-up."""

from __future__ import annotations

from typing import Any

from dlperf.table import Table

LAYER_COLUMNS = ["name", "type", "output_shape", "params", "macs", "flops", "activations",
                 "activation_bytes"]  # fmt: skip
BACKWARD_COLUMNS = ["backward_macs", "backward_flops"]
COUNTED = ("conv", "pool", "fc")
"""The roles whose outputs the conv-pool-fc convention counts as activations."""


def si(value: float, unit: str = "") -> str:
    """1234567 -> '1.23 M': counts in tables, exact numbers in --json."""
    for factor, prefix in ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "K")):
        if abs(value) >= factor:
            return f"{value / factor:.3g} {prefix}{unit}"
    return f"{value:.4g} {unit}".rstrip()


def csv_columns(result: dict[str, Any]) -> list[str]:
    """The per-layer keys `analyze --csv` writes, backward counts for a training step."""
    return LAYER_COLUMNS + (BACKWARD_COLUMNS if result["train"] else [])


def _cell(row: dict[str, Any], column: str, every_output: bool) -> str:
    if column.startswith("activation") and not every_output and row["role"] not in COUNTED:
        return "–"  # not an activation in this convention
    return si(row[column], "B" if column.endswith("bytes") else "")


def layer_table(result: dict[str, Any]) -> Table:
    """One row per layer: output shape, params, MACs, FLOPs, activations (and backward)."""
    train = result["train"]
    counts = csv_columns(result)[3:]
    every_output = result["conventions"]["activations"] == "all"
    rows = [
        [row["name"], row["type"], "x".join(map(str, row["output_shape"] or [])),
         *(_cell(row, c, every_output) for c in counts)]
        for row in result["layers"]
    ]  # fmt: skip
    shape = "x".join(map(str, result["input"]))
    step = ", training step" if train else ""
    n = result["classes"]
    classes = f"{n} classes ({result['classes_source']})" if n is not None else "no classes"
    if n is None and result["classes_source"] != "the model takes no num_classes":
        classes = f"classes ({result['classes_source']})"
    arguments = ", ".join(f"{k}={v}" for k, v in result["arguments"].items())
    frozen = (
        ", backbone frozen (feature-extract)" if result["transfer"] == "feature-extract" else ""
    )
    return Table(
        f"{result['model']}{f'({arguments})' if arguments else ''}: input {shape}, "
        f"batch {result['batch']}, {result['precision']}{step}, {classes}{frozen}",
        [
            "layer",
            "type",
            "output",
            "params" if result["conventions"]["params"] == "with biases" else "params w/o bias",
            f"MACs ({result['conventions']['macs']})",
            "FLOPs",
            "activations",
            "act. bytes",
        ]
        + (["bwd MACs", "bwd FLOPs"] if train else []),
        rows,
    )


def _not_run_words(result: dict[str, Any]) -> tuple[str, str]:
    """The not-run table's title and the totals' label of its parameters, saying what they
    count: modules that never ran, or also (functional_call) modules that ran on other
    tensors in place of their own parameters, whose own are then unused."""
    ran = [bool(m.get("ran")) for m in result["not_run"]]
    if not any(ran):
        return "modules that never ran", "params of modules that never ran"
    if all(ran):
        return (
            "modules that ran on other parameters",
            "unused params of modules that ran on other parameters",
        )
    return (
        "modules that never ran, or ran on other parameters",
        "unused params (modules that never ran, or ran on other parameters)",
    )


def not_run_table(result: dict[str, Any]) -> Table | None:
    """The modules that never ran, whose parameters are in no row and no total; and those
    that ran on other tensors in place of their own parameters (functional_call)."""
    if not result["not_run"]:
        return None
    ran = " (ran on other parameters: its own unused)"
    return Table(
        _not_run_words(result)[0],
        ["module", "type", "params (in no row or total)"],
        [
            [m["name"], m["type"] + ran * bool(m.get("ran")), f"{m['params']:,}"]
            for m in result["not_run"]
        ],
    )


def _field(rf: dict[str, Any]) -> str:
    def text(d: dict[str, Any]) -> str:
        size, jump, start = d["size"], d["jump"], d["start"]
        return f"{size[0]}x{size[1]} px, jump {jump[0]}x{jump[1]}, start {start[0]},{start[1]}"

    if rf["defined"]:
        return text(rf)
    last = f"; last spatial layer {rf['last_spatial_layer']}: {text(rf)}" if "size" in rf else ""
    return f"undefined ({rf['reason']}){last}"


def totals_table(result: dict[str, Any]) -> Table:
    """The totals: params, MACs, FLOPs, activations, receptive field, training memory."""
    from dlperf.analytic.counting import ACTIVATIONS  # torch: imported once there is a result

    t = result["totals"]
    biases = result["conventions"]["params"]
    outputs = ACTIVATIONS[result["conventions"]["activations"]]
    summary = [
        [f"params ({biases})", f"{t['params']:,}"],
        [f"trainable params ({biases})", f"{t['trainable_params']:,}"],
    ]
    if "params_counted" in result["conventions"]:  # Parameters sharing one storage
        summary += [["  params counted", result["conventions"]["params_counted"]]]
    if result["not_run"]:
        summary += [[_not_run_words(result)[1], f"{t['params_not_run']:,}"]]
    summary += [
        [f"MACs ({result['conventions']['macs']})", f"{t['macs']:,} ({si(t['macs'])})"],
        ["  MACs count", result["conventions"]["macs_counts"]],
        ["  precision", result["conventions"]["precision"]],
        *(
            [["  complex", result["conventions"]["complex"]]]
            if "complex" in result["conventions"]
            else []
        ),
        ["FLOPs", f"{t['flops']:,} ({si(t['flops'])})"],
        [f"activations (elements; {outputs})", f"{t['activations']:,}"],
        ["activation memory (the same)", si(t["activation_bytes"], "B")],
        *(
            [
                [
                    "  not counted (functional)",
                    result["conventions"]["activations_not_counted"],
                ]
            ]
            if "activations_not_counted" in result["conventions"]
            else []
        ),
        ["conv share of FLOPs", f"{t['conv_flops_share']:.1%}"],
        ["receptive field", _field(t["receptive_field"])],
    ]
    if result["train"]:
        m = t["training_memory"]

        def sgd_adam(sizes: dict[str, int]) -> str:
            return f"{si(sizes['sgd_momentum'], 'B')} / {si(sizes['adam'], 'B')}"

        summary += [
            ["backward MACs", f"{t['backward_macs']:,}"],
            ["backward FLOPs", f"{t['backward_flops']:,}"],
            ["step FLOPs (fwd + bwd)", f"{t['step_flops']:,} ({si(t['step_flops'])})"],
            ["weights", si(m["weights_bytes"], "B")],
            ["buffers", si(m["buffers_bytes"], "B")],
            ["gradients", si(m["gradients_bytes"], "B")],
            ["optimizer state SGD momentum / Adam", sgd_adam(m["optimizer_state_bytes"])],
            ["activations saved for backward", si(m["saved_activations_bytes"], "B")],
            ["training memory SGD momentum / Adam", sgd_adam(m["total_bytes"])],
        ]
    return Table("totals", ["", "value"], summary)


def tables(result: dict[str, Any]) -> list[Table]:
    """Every table of the analysis, in the order the command prints them."""
    extra = not_run_table(result)
    return [layer_table(result), *([extra] if extra else []), totals_table(result)]
