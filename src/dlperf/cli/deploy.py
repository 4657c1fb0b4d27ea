"""`dlperf export`, `dlperf infer` (= `dlperf infer predict`) and `dlperf infer bench`."""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

import typer

from dlperf.cli import console, outputs
from dlperf.cli.app import Json, app, config_option, default_command_group, open_store, set_option
from dlperf.errors import CheckFailed, UserError

# The store as the commands that only read it open it: never made or written.
reader = functools.partial(open_store, create=False)

infer_app = typer.Typer(
    cls=default_command_group("predict"),
    subcommand_metavar="[predict] MODEL.onnx IMAGE... | bench MODEL.onnx",
    help="Run an exported model with ONNX Runtime.\n\n"
    "dlperf infer MODEL.onnx IMAGE... classifies images (short for `dlperf infer predict`); "
    "dlperf infer bench MODEL.onnx races ONNX Runtime against PyTorch.\n\n"
    "Example: dlperf infer model.onnx cat.png dog.jpg --topk 3",
    no_args_is_help=True,
)
app.add_typer(infer_app, name="infer")

INFER_CONFIG = config_option("[infer] section")
INFER_SET = set_option("infer.topk=3")
ONNX_FILE = typer.Argument(..., help="An ONNX file from `dlperf export`.", show_default=False)
# The columns of the parity and bench tables, as the result's keys.
PARITY_KEYS = ("input", "n", "max_abs_diff", "max_rel_diff", "top1_agreement", "within_tolerance")
BENCH_KEYS = ("batch", "contender", "p50_ms", "p90_ms", "p99_ms", "throughput", "ort_speedup")
THREADS = typer.Option(
    None, "--threads", help="Intra-op threads (default: all cores).", show_default=False
)


@app.command("export")
def export_cmd(
    source: str = typer.Argument(
        ...,
        help="A stored run ID (its trained weights) or a registry model name (random).",
        show_default=False,
    ),
    out: Path = outputs.out_file(..., "The ONNX file to write."),
    config: Path = config_option("[export] section"),
    set_: list[str] = set_option("export.rtol=0.01"),
    opset: int = typer.Option(None, "--opset", help="ONNX opset (default: the exporter's)."),
    dynamic_batch: bool = typer.Option(
        None, "--dynamic-batch", help="Any batch size (default: a fixed batch of 1)."
    ),
    single_file: bool = typer.Option(
        None, "--single-file", help="Weights inside the .onnx file, no MODEL.onnx.data beside it."
    ),
    input_shape: str = typer.Option(
        None,
        "--input",
        help="C,H,W of a registry model's input; its normalisation is then mean 0.5, std 0.5 "
        "(default: 3,224,224 with ImageNet's mean and std).",
    ),
    num_classes: int = typer.Option(
        None,
        "--num-classes",
        help="Classes of a registry model, at least 2 (default: the model's, 10).",
    ),
    rtol: float = typer.Option(None, "--rtol", help="Parity: relative tolerance (1e-3)."),
    atol: float = typer.Option(None, "--atol", help="Parity: absolute tolerance (1e-5)."),
    as_json: Json = False,
) -> None:
    """Export a stored run or a registry model to ONNX, check the file, and prove that ONNX
    Runtime gives PyTorch's answers (exit 1 when it does not).

    Parity: on a random batch (and the run's test images) every logit must satisfy
    |onnx - torch| <= atol + rtol * |torch|. The preprocessing and labels are saved inside
    the file and in MODEL.onnx.json, for `dlperf infer` and `dlperf serve`.

    The options from --opset to --atol are short for --set export.KEY=VALUE (KEY: the
    option's name with _ for -; --input is export.input); `dlperf config keys` explains them.

    Example: dlperf export resnet20 --input 3,32,32 --out resnet20.onnx --dynamic-batch
    """
    from dlperf.deploy import check_out

    check_out(out)  # before torch is imported and the model loaded (seconds)
    from dlperf.config import ExportJob, load_job
    from dlperf.config.experiment import refused_model_keys
    from dlperf.deploy.export import export, resolve

    flags = {
        "input": input_shape, "opset": opset, "dynamic_batch": dynamic_batch,
        "single_file": single_file, "num_classes": num_classes, "rtol": rtol, "atol": atol,
    }  # fmt: skip
    job = load_job(ExportJob, config, set_, export=flags)
    opts, model = job.export, job.experiment.model
    # [model] is honoured (kwargs) or refused, never dropped: a run's model is its own
    if source.isdigit() and model.model_fields_set:
        keys = ", ".join(f"model.{key}" for key in sorted(model.model_fields_set))
        raise UserError(f"{keys}: a stored run is exported as it was trained", "leave it out")
    refused = refused_model_keys(model, source, ("kwargs",))
    if refused is not None:
        raise UserError(refused, "leave it out")
    shape = tuple(opts.input) if opts.input is not None else None
    with console.reporter() as rep:
        src = resolve(source, reader, shape, opts.num_classes, model.kwargs, rep)
        result = export(
            src, out, opts.opset, opts.dynamic_batch, opts.single_file, opts.rtol, opts.atol,
            reporter=rep,
        )  # fmt: skip
    if not console.printed_json(as_json, result):
        _print_export(result)
    if not result["parity"]:
        raise CheckFailed(
            f"ONNX Runtime differs from PyTorch by up to {result['max_abs_diff']:.3g} "
            f"(rtol {opts.rtol:g}, atol {opts.atol:g})"
        )


def _print_export(result: dict[str, Any]) -> None:
    rows = [
        ["file", result["path"] + (f" + {result['data_path']}" if result["data_path"] else "")],
        ["model", result["model"] + (f" (run {result['run_id']})" if result["run_id"] else "")],
        ["input", "x".join(map(str, result["input_shape"]))],
        ["batch", "dynamic" if result["dynamic_batch"] else "1"],
        ["exporter", result["exporter"]],
        ["opset", result["opset"]],
        ["checker", result["check"]],
        ["seconds", result["seconds"]],
    ]
    console.print_table(None, ["", "value"], rows)
    tol = result["tolerance"]
    console.print_table(
        f"parity, PyTorch vs ONNX Runtime (rtol {tol['rtol']:g}, atol {tol['atol']:g})",
        ["input", "n", "max abs diff", "max rel diff", "top-1 agreement", "within tolerance"],
        [[s[k] for k in PARITY_KEYS] for s in result["parity_sets"]],
    )


@infer_app.command("predict")
def predict_cmd(
    model: Path = ONNX_FILE,
    images: list[Path] = typer.Argument(..., help="Image files.", show_default=False),
    config: Path = INFER_CONFIG,
    set_: list[str] = INFER_SET,
    topk: int = typer.Option(None, "--topk", help="Classes per image (default 5)."),
    threads: int = THREADS,
    labels: Path = typer.Option(None, "--labels", help="Class names, one per line."),
    as_json: Json = False,
) -> None:
    """Classify images with the preprocessing saved at export.

    --topk and --threads are short for --set infer.KEY=VALUE; `dlperf config keys` explains
    every key.

    Example: dlperf infer model.onnx cat.png dog.jpg --topk 3
    """
    from dlperf.config import InferJob, load_job
    from dlperf.deploy.infer import predict

    opts = load_job(InferJob, config, set_, infer={"topk": topk, "threads": threads}).infer
    result = predict(model, images, opts.topk, labels, opts.threads)
    if console.printed_json(as_json, result):
        return
    if "note" in result:
        console.err_line(f"note: {result['note']}")
    rows = [
        [p["image"] if i == 0 else "", i + 1, t["label"], t["probability"]]
        for p in result["predictions"]
        for i, t in enumerate(p["top"])
    ]
    console.print_table(None, ["image", "rank", "label", "probability"], rows)


@infer_app.command("bench")
def bench_cmd(
    model: Path = ONNX_FILE,
    config: Path = INFER_CONFIG,
    set_: list[str] = INFER_SET,
    torch: str = typer.Option(
        None,
        "--torch",
        help="PyTorch contender: RUN_ID or registry name (default: the model the metadata names).",
    ),
    batch: str = typer.Option(
        None,
        "--batch",
        help="Batch sizes, comma-separated (default 1,8,32; a file exported without "
        "--dynamic-batch: its one batch).",
    ),
    threads: int = THREADS,
    repeats: int = typer.Option(None, "--repeats", help="Timed calls per contender and batch."),
    as_json: Json = False,
) -> None:
    """Latency p50/p90/p99 and throughput of ONNX Runtime against PyTorch eager (NCHW and
    channels_last), same input, same thread count, warm-up excluded, interleaved calls.

    The options from --torch to --repeats are short for --set infer.KEY=VALUE (a comma list
    for infer.batch); `dlperf config keys` explains every key.

    Example: dlperf infer bench model.onnx --batch 1,8,32 --threads 2
    """
    from dlperf.config import InferJob, load_job
    from dlperf.deploy.bench import bench, pytorch_contender

    flags = {"torch": torch, "batch": batch, "threads": threads, "repeats": repeats}
    opts = load_job(InferJob, config, set_, infer=flags).infer
    # Sizes given by --batch, --set or a config file; infer.batch's defaults are not asked for,
    # and a file exported with a fixed batch is measured at that batch instead.
    asked = "batch" in opts.model_fields_set
    with console.reporter() as rep:
        contender = pytorch_contender(model, opts.torch, reader, rep, opts.batch, asked)
        result = bench(
            model, opts.batch, contender, opts.threads, opts.repeats, reporter=rep, asked=asked
        )
    if console.printed_json(as_json, result):
        return
    console.print_table(
        f"{model}: {result['threads']} threads, {result['repeats']} timed calls each",
        ["batch", "contender", "p50 ms", "p90 ms", "p99 ms", "images/s", "× ORT p50"],
        [[r[k] for k in BENCH_KEYS] for r in result["rows"]],
    )
