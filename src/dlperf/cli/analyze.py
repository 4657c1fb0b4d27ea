"""`dlperf analyze` and `dlperf predict`."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import typer

from dlperf.cli import console, outputs
from dlperf.cli.app import Json, app, config_option, open_store, set_option
from dlperf.cli.shortcuts import Flag, with_flags
from dlperf.errors import UserError
from dlperf.formatting import spreadsheet_safe

MODEL = typer.Argument(..., help="Registry or torchvision name, or path/to/file.py:factory.")
# The flags short for the keys of [analyze], which predict shares (but for --train's help).
COUNTING = {
    "input": Flag(
        str,
        "Input shape without the batch, e.g. 3,224,224 "
        "(default: 3,224,224 for torchvision, 3,32,32 otherwise).",
    ),
    "batch": Flag(int, "Batch size (default 1)."),
    "train": Flag(bool, "Count a training step: forward + backward and training memory."),
    "precision": Flag(str, "fp32 (default) | fp16 | bf16"),
    "classes": Flag(
        int,
        "Output classes (default: 1000 for torchvision, 10 for dlperf's models, a model "
        "file's factory's own num_classes default).",
    ),
    "bias": Flag(
        bool,
        "--no-bias: count parameters without biases (parameters named *bias), as tables "
        "that ask for params 'without biases' do, e.g. dlperf analyze vgg19 --no-bias.",
        negatable=True,
    ),
    "activations": Flag(
        str,
        "Whose outputs the activation totals count: all (default, every row) or "
        "conv-pool-fc (convolution, pooling and linear layers only, as course tables count "
        "them), e.g. dlperf analyze vgg19 --activations conv-pool-fc.",
    ),
    "macs_convention": Flag(
        str,
        "Whose MACs: dlperf (default: weight products only; bias adds, normalisation "
        "and pooling are FLOPs), torchinfo, ptflops or fvcore (to reproduce their tables), "
        "e.g. dlperf analyze resnet18 --macs-convention ptflops.",
    ),
}
# The flags of [predict], and of [analyze] where predict counts the model.
PREDICTING = {
    "device": Flag(
        str,
        "Catalog device (see `dlperf devices`); with --measure the default is this "
        "machine, calibrated in the same rounds as the measurement.",
    ),
    **{k: COUNTING[k] for k in ("input", "batch")},
    "train": Flag(bool, "Predict a training step (forward + backward)."),
    "ppp": Flag(
        float,
        "Platform percent of peak in [1e-6, 1], e.g. 0.62, for every operator kind "
        "(default: the device's calibrated rates; a catalog GPU's peak, PPP = 1).",
    ),
    "peak_tflops": Flag(
        str,
        "Peak in 10^12 FLOP/s at --precision instead of the device's, e.g. 8.73 for a "
        "whole K80 board (the catalog's K80 is one of its two GPUs); bandwidth stays the "
        "device's.",
    ),
    "flops": Flag(
        str,
        "FLOPs of one image (forward; with --train forward + backward) for FLOPs / peak "
        "instead of the counted ones, e.g. 15.5G or 15.5e9 (1 to 1e18).",
    ),
    **{k: COUNTING[k] for k in ("precision", "classes")},
    "measure": Flag(
        bool,
        "Also run the model here, interleaved with calibration kernels, and compare; "
        "the result is stored. Without --device, predicts this machine from those kernels.",
    ),
    "reps": Flag(int, "--measure: rounds of calibration kernels + a timed model run (default 10)."),
}


@app.command()
@with_flags(COUNTING, COUNTING)
def analyze(
    model: str = MODEL,
    config: Path = config_option("[analyze] section"),
    set_: list[str] = set_option("analyze.batch=8"),
    as_json: Json = False,
    as_csv: bool = typer.Option(False, "--csv", help="Print the per-layer rows as CSV."),
    **flags: Any,
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
    from dlperf.config.experiment import ModelConfig, refused_model_keys

    if as_json and as_csv:
        raise UserError("give --json (the whole result) or --csv (the per-layer rows), not both")
    job = load_job(AnalyzeJob, config, set_, analyze=flags)
    exp, opts = job.experiment, job.analyze
    # Every [model] key but a name other than MODEL's bears on the count or not at all.
    refused = refused_model_keys(exp.model, model, tuple(ModelConfig.model_fields))
    if refused is not None:
        raise UserError(refused, "leave it out")
    a = count(
        model, opts.input, opts.batch, opts.train, opts.precision, opts.classes, opts.bias,
        opts.activations, macs_convention=opts.macs_convention, transfer=exp.model.transfer,
        model_kwargs=exp.model.kwargs, tell=console.warn,
    )  # fmt: skip
    for note in (a.unsupported_note(), a.activations_note()):  # the model's told as built
        if note:
            console.warn(note)
    result = a.to_dict()
    if as_json:
        console.print_json(result)
    elif as_csv:
        columns = csv_columns(result)
        layers = result["layers"]
        console.print_csv(
            [columns, *([spreadsheet_safe(r.get(c, "")) for c in columns] for r in layers)]
        )
    else:
        console.print_tables(tables(result))


@app.command()
@with_flags(PREDICTING, PREDICTING)
def predict(
    model: str = MODEL,
    config: Path = config_option("[predict] and [analyze] sections"),
    set_: list[str] = set_option("predict.ppp=0.5"),
    plot: Path = typer.Option(
        None,
        "--plot",
        help="Save the roofline (each layer's arithmetic intensity under the device's compute "
        "and memory roofs) beside PALEO's time per layer to this file (PNG, PDF, SVG).",
        callback=outputs.PLOT.callback,
        click_type=outputs.PLOT.click_type,
    ),
    as_json: Json = False,
    **flags: Any,
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
    from dlperf.analytic.views import prediction_tables
    from dlperf.config import PredictJob, load_job
    from dlperf.config.experiment import refused_model_keys

    counting = {k: v for k, v in flags.items() if k in COUNTING}
    predicting = {k: v for k, v in flags.items() if k not in COUNTING}
    job = load_job(PredictJob, config, set_, analyze=counting, predict=predicting)
    count, opts = job.analyze, job.predict
    # model.kwargs build the model as analyze builds it; the rest of [model] is refused, not
    # dropped (transfer: the --measure run trains no frozen backbone to compare with)
    refused = refused_model_keys(job.experiment.model, model, ("kwargs",))
    if refused is not None:
        raise UserError(refused, "leave it out")
    with console.reporter() as rep:
        result = predict_model(
            model, opts.device, open_store, input_shape=count.input, batch=count.batch,
            train=count.train, precision=count.precision, classes=count.classes, ppp=opts.ppp,
            peak_tflops=opts.peak_tflops, flops=opts.flops, measure=opts.measure,
            reps=opts.reps, reporter=rep, model_kwargs=job.experiment.model.kwargs,
        )  # fmt: skip
    if plot is not None:
        from dlperf.report.roofline import plot_roofline

        # report.roofline reads a prediction as its JSON document
        result = replace(result, plot=str(plot_roofline(plot, result.to_dict())))
    if as_json:
        console.print_json(result.to_dict())
    else:
        console.print_tables(prediction_tables(result))
    console.tell([], plot)
