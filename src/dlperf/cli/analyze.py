"""`dlperf analyze`, `dlperf predict`, `dlperf devices` and `dlperf calibrate`."""

from __future__ import annotations

import csv
import sys
from pathlib import Path
from typing import Any

import typer

from dlperf.analytic.tables import si
from dlperf.cli import console
from dlperf.cli.app import Json, app, config_option, open_store, set_option

MODEL = typer.Argument(..., help="Registry or torchvision name, or path/to/file.py:factory.")
INPUT = typer.Option(
    None,
    "--input",
    help="Input shape without the batch, e.g. 3,224,224 "
    "(default: 3,224,224 for torchvision, 3,32,32 otherwise).",
    show_default=False,
)
BATCH = typer.Option(None, "--batch", help="Batch size (default 1).", show_default=False)
PRECISION = typer.Option(None, "--precision", help="fp32 (default) | fp16 | bf16")
CLASSES = typer.Option(
    None,
    "--classes",
    help="Output classes (default: 1000 for torchvision, 10 for dlperf's models, a model "
    "file's factory's own num_classes default).",
    show_default=False,
)
MS = 1e3  # seconds to milliseconds


@app.command()
def analyze(
    model: str = MODEL,
    config: Path = config_option("[analyze] section"),
    set_: list[str] = set_option("analyze.batch=8"),
    input_: str = INPUT,
    batch: int = BATCH,
    train: bool = typer.Option(
        None, "--train", help="Count a training step: forward + backward and training memory."
    ),
    precision: str = PRECISION,
    classes: int = CLASSES,
    bias: bool = typer.Option(
        None,
        "--bias/--no-bias",
        help="--no-bias: count parameters without biases (parameters named *bias), as tables "
        "that ask for params 'without biases' do, e.g. dlperf analyze vgg19 --no-bias.",
        show_default=False,
    ),
    activations: str = typer.Option(
        None,
        "--activations",
        help="Whose outputs the activation totals count: all (default, every row) or "
        "conv-pool-fc (convolution, pooling and linear layers only, as course tables count "
        "them), e.g. dlperf analyze vgg19 --activations conv-pool-fc.",
    ),
    macs_convention: str = typer.Option(
        None,
        "--macs-convention",
        help="Whose MACs: dlperf (default: weight products only; bias adds, normalisation "
        "and pooling are FLOPs), torchinfo, ptflops or fvcore (to reproduce their tables), "
        "e.g. dlperf analyze resnet18 --macs-convention ptflops.",
        show_default=False,
    ),
    as_json: Json = False,
    as_csv: bool = typer.Option(False, "--csv", help="Print the per-layer rows as CSV."),
) -> None:
    """Count a network on paper, layer by layer: params, MACs, FLOPs (= 2 MACs + other
    arithmetic), activations, receptive field. Runs on meta tensors: nothing is computed.
    Totals are the sums of the rows; parameters of modules that never ran are listed apart.

    The options from --input to --macs-convention are short for --set analyze.KEY=VALUE (KEY:
    the option's name with _ for -, --no-bias is analyze.bias=false); `dlperf config keys`
    explains every key. [model] kwargs build the model (--set model.kwargs.n=3), and
    model.transfer = "feature-extract" counts the backbone frozen: only the head trains.

    Example: dlperf analyze vgg19 --no-bias --activations conv-pool-fc
    """
    from dlperf.analytic.counting import analyze as count
    from dlperf.analytic.tables import csv_columns, tables
    from dlperf.config import AnalyzeJob, load_job

    flags = {
        "input": input_, "batch": batch, "train": train, "precision": precision,
        "classes": classes, "bias": bias, "activations": activations,
        "macs_convention": macs_convention,
    }  # fmt: skip
    job = load_job(AnalyzeJob, config, set_, analyze=flags)
    exp, opts = job.experiment, job.analyze
    a = count(
        model, opts.input, opts.batch, opts.train, opts.precision, opts.classes, opts.bias,
        opts.activations, macs_convention=opts.macs_convention, transfer=exp.model.transfer,
        model_kwargs=exp.model.kwargs,
    )  # fmt: skip
    note = a.unsupported_note()
    if note:
        console.warn(note)
    result = a.to_dict()
    if as_json:
        console.print_json(result)
    elif as_csv:
        writer = csv.DictWriter(sys.stdout, csv_columns(result), extrasaction="ignore")
        writer.writeheader()
        writer.writerows(result["layers"])
    else:
        console.print_tables(tables(result))


@app.command()
def predict(
    model: str = MODEL,
    config: Path = config_option("[predict] and [analyze] sections"),
    set_: list[str] = set_option("predict.ppp=0.5"),
    device: str = typer.Option(
        None,
        "--device",
        help="Catalog device (see `dlperf devices`); with --measure the default is this "
        "machine, calibrated in the same rounds as the measurement.",
        show_default=False,
    ),
    input_: str = INPUT,
    batch: int = BATCH,
    train: bool = typer.Option(
        None, "--train", help="Predict a training step (forward + backward)."
    ),
    ppp: float = typer.Option(
        None,
        "--ppp",
        help="Platform percent of peak in (0, 1], e.g. 0.62, for every operator kind "
        "(default: the device's calibrated rates; a catalog GPU's peak, PPP = 1).",
        show_default=False,
    ),
    peak_tflops: str = typer.Option(
        None,
        "--peak-tflops",
        help="Peak in 10^12 FLOP/s at --precision instead of the device's, e.g. 8.73 for a "
        "whole K80 board (the catalog's K80 is one of its two GPUs); bandwidth stays the "
        "device's.",
        show_default=False,
    ),
    flops: str = typer.Option(
        None,
        "--flops",
        help="FLOPs of one image (forward; with --train forward + backward) for FLOPs / peak "
        "instead of the counted ones, e.g. 15.5G or 15.5e9.",
        show_default=False,
    ),
    precision: str = PRECISION,
    classes: int = CLASSES,
    measure: bool = typer.Option(
        None,
        "--measure",
        help="Also run the model here, interleaved with calibration kernels, and compare; "
        "the result is stored. Without --device, predicts this machine from those kernels.",
    ),
    reps: int = typer.Option(
        None, "--reps", help="--measure: rounds of calibration kernels + one timed model run."
    ),
    plot: Path = typer.Option(
        None,
        "--plot",
        help="Save the roofline (each layer's arithmetic intensity under the device's compute "
        "and memory roofs) beside PALEO's time per layer to this file (PNG, PDF, SVG).",
        callback=console.PLOT.callback,
    ),
    as_json: Json = False,
) -> None:
    """Predict a forward pass (or training step) with the PALEO model:
    time = sum over layers of FLOPs / (peak x PPP) + bytes / (bandwidth x PPP_mem),
    and beside it FLOPs / peak alone (no memory time), the count courses ask for.
    Every figure names its basis: "peak (PPP=1)" for a catalog GPU unless --ppp is given,
    "calibrated <when> on <what>" for a calibrated device; the peak says what it is the
    peak of (one GPU of a K80 board, or the --peak-tflops given).

    The options are short for --set predict.KEY=VALUE, and --input, --batch, --train,
    --precision and --classes for --set analyze.KEY=VALUE (KEY: the option's name with _
    for -); `dlperf config keys` explains every key.

    Example: dlperf predict vgg16 --device K80 --peak-tflops 8.73 --flops 15.5G --plot roofline.png
    """
    from dlperf.analytic.recorded import predict_model
    from dlperf.config import PredictJob, load_job

    counting = {
        "input": input_, "batch": batch, "train": train, "precision": precision,
        "classes": classes,
    }  # fmt: skip
    flags = {
        "device": device, "ppp": ppp, "peak_tflops": peak_tflops, "flops": flops,
        "measure": measure, "reps": reps,
    }  # fmt: skip
    job = load_job(PredictJob, config, set_, analyze=counting, predict=flags)
    count, opts = job.analyze, job.predict
    with console.reporter() as rep:
        result = predict_model(
            model, opts.device, open_store, input_shape=count.input, batch=count.batch,
            train=count.train, precision=count.precision, classes=count.classes, ppp=opts.ppp,
            peak_tflops=opts.peak_tflops, flops=opts.flops, measure=opts.measure,
            reps=opts.reps, reporter=rep,
        )  # fmt: skip
    if plot is not None:
        from dlperf.report.roofline import plot_roofline

        result["plot"] = str(plot_roofline(plot, result))
    if not console.printed_json(as_json, result):
        _print_prediction(result)
    console.tell([], plot)


def _ppp_text(kinds: dict[str, float]) -> str:
    """'0.62', or one value per operator kind when they differ."""
    if len(set(kinds.values())) == 1:
        return f"{next(iter(kinds.values())):.3g}"
    return "(" + ", ".join(f"{kind} {v:.3g}" for kind, v in kinds.items()) + ")"


def _figure(basis: dict[str, Any]) -> str:
    """What a row's figure is: the peak, or a prediction at a PPP from somewhere."""
    if basis["kind"] == "given ppp":
        return f"prediction at given PPP {basis['ppp']:g}, compute + memory"
    return {
        "catalog peak": "peak (PPP=1), compute + memory",
        "device ppp": "prediction at the device's PPP, compute + memory",
        "calibrated": "prediction from calibration, compute + memory + calls",
    }[basis["kind"]]


def _flops_text(f: dict[str, Any]) -> str:
    counted = f"{si(f['counted_flops_per_image'])} counted ({si(f['counted_macs_per_image'])} MACs)"
    if f["flops_source"] == "counted":
        return counted
    return f"{si(f['flops_per_image'])} given (--flops); {counted}"


def _print_prediction(r: dict[str, Any]) -> None:
    t = r["totals"]
    what = _figure(r["basis"])
    times = ("compute_s", "memory_s", "overhead_s", "time_s")
    console.print_table(
        f"{r['model']} on {r['device']}: {r['precision']}, batch {r['batch']}"
        f"{', training step' if r['train'] else ''}, "
        f"PPP {_ppp_text(r['ppp_by_kind'])}, PPP_mem {r['ppp_mem']:.3g}; {r['basis']['label']}",
        ["layer", "type", "FLOPs", "bytes", "calls", "compute ms", "memory ms", "calls ms",
         "time ms"],
        [
            [row["name"], row["type"], si(row["flops"]), si(row["bytes"], "B"), row["calls"],
             *(row[k] * MS for k in times)]
            for row in r["layers"]
        ],
    )  # fmt: skip
    rows: list[list[Any]] = [
        [f"{what}: time per batch (ms)", t["time_s"] * MS],
        ["  compute / memory / calls (ms)", " / ".join(f"{t[k] * MS:.4g}" for k in times[:3])],
        [f"{what}: images/s", t["images_per_s"]],
        ["  basis", r["basis"]["label"]],
        ["  peak", r["peak"]["label"]],
    ]
    if r["basis"]["kind"] != "catalog peak":  # there the figures above are these already
        rows += [
            ["peak (PPP=1), compute + memory: time per image (ms)",
             t["theoretical_time_per_image_s"] * MS],
            ["peak (PPP=1), compute + memory: images/s", t["theoretical_images_per_s"]],
        ]  # fmt: skip
    f = r["flops_over_peak"]
    rows += [
        ["FLOPs ÷ peak: time per image (ms)", f["time_per_image_s"] * MS],
        ["FLOPs ÷ peak: images/s", f["images_per_s"]],
        ["  FLOPs per image", _flops_text(f)],
    ]
    m = r.get("measured")
    if m:
        if m["layers"]:
            console.print_table(
                f"forward per layer: {what} vs measured (torch.profiler)",
                ["layer", "type", f"{what.split()[0]} ms", "measured ms", "error %"],
                [
                    [row["name"], row["type"], row["predicted_s"] * MS, row["measured_s"] * MS,
                     row["error_pct"]]
                    for row in m["layers"]
                ],
            )  # fmt: skip
        s, same = m["measured_s"], m["same_moment"]
        rows += [
            [
                f"measured on {m['local_device']}: median (min-max) ms",
                f"{s['median'] * MS:.4g} ({s['min'] * MS:.4g}-{s['max'] * MS:.4g})",
            ],
            ["measured images/s", m["measured_images_per_s"]],
            ["CPU wait (share of thread time)", m.get("cpu_wait_share")],
            *([["unreliable", m["reliability_note"]]] if m.get("reliable") is False else []),
            [f"error of the {what} (%)", m["error_pct"]],
            [f"same-moment prediction: time per batch (ms), median of {len(same['rounds'])} "
             "rounds", same["predicted_s"] * MS],
            ["  error (%), median of the rounds' errors", same["error_pct"]],
            ["  basis", same["basis"]["label"]],
            ["PPP that fits the measurement", m["fitted_ppp"]],
            ["stored as run", m["run_id"]],
        ]  # fmt: skip
    console.print_table("totals", ["", "value"], rows)
