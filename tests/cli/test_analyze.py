"""`dlperf analyze | predict | devices | calibrate` through the real entry point."""

from __future__ import annotations

import json
import math
import os
from collections.abc import Callable
from pathlib import Path

import pytest

from dlperf.analytic.devices import KINDS
from dlperf.store import RunStore
from dlperf.system import usable_cores
from tests.conftest import CliResult
from tests.test_contention import needs_schedstat

Cli = Callable[..., CliResult]


@pytest.fixture(autouse=True)
def user_devices(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "devices.toml"
    path.touch()  # an empty user file: a missing one that DLPERF_DEVICES names is an error
    monkeypatch.setenv("DLPERF_DEVICES", str(path))
    return path


def one_line_error(result: CliResult, text: str) -> None:
    assert result.code == 2, (result.out, result.err)
    lines = result.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.err
    assert text in lines[0]


def test_analyze_json_has_the_documented_keys(cli: Cli) -> None:
    result = cli("analyze", "resnet20", "--json")
    assert result.code == 0, result.err
    doc = json.loads(result.out)
    assert {"model", "input", "batch", "totals", "layers", "unsupported_ops"} <= set(doc)
    assert (doc["model"], doc["input"], doc["batch"]) == ("resnet20", [3, 32, 32], 1)
    totals = doc["totals"]
    assert totals["params"] == totals["trainable_params"] == 269722
    assert totals["macs"] == 40551040
    assert {"flops", "activations", "activation_bytes", "conv_flops_share"} <= set(totals)
    assert totals["receptive_field"]["last_spatial_layer"] == "layers.8"
    assert set(doc["layers"][0]) >= {
        "name",
        "type",
        "output_shape",
        "params",
        "macs",
        "flops",
        "activations",
    }
    assert doc["layers"][0]["name"] == "conv1" and doc["unsupported_ops"] == {}


def test_analyze_train_json_has_backward_and_memory(cli: Cli) -> None:
    doc = json.loads(cli("analyze", "smallcnn", "--input", "1,8,8", "--train", "--json").out)
    totals = doc["totals"]
    assert totals["step_flops"] == totals["flops"] + totals["backward_flops"]
    assert totals["training_memory"]["weights_bytes"] == 4 * totals["params"]


def test_analyze_csv_and_table(cli: Cli) -> None:
    csv_out = cli("analyze", "smallcnn", "--input", "1,8,8", "--csv").out.splitlines()
    assert csv_out[0] == "name,type,output_shape,params,macs,flops,activations,activation_bytes"
    assert csv_out[1].startswith("0,Conv2d,")
    assert len(csv_out) == 1 + 11  # every leaf is a row, the dropouts (no work in eval) too
    table = cli("analyze", "resnet20").out
    assert "MACs" in table and "40,551,040" in table and "81x81 px" in table


@pytest.mark.parametrize(
    ("args", "text"),
    [
        (["analyze", "resnet2O"], "unknown model 'resnet2O' (did you mean resnet32, resnet20"),
        (["analyze", "resnet20", "--input", "3,x"], "analyze.input.1: Input should be a valid int"),
        (["analyze", "resnet20", "--batch", "0"], "analyze.batch: must be at least 1 (got 0)"),
        (["analyze", "resnet20", "--precision", "fp8"], "analyze.precision: Input should be"),
        (["predict", "resnet20", "--device", "V10"], "unknown device 'V10' (did you mean V100"),
        (["predict", "resnet20"], "give predict.device"),
        (["predict", "resnet20", "--device", "V100", "--ppp", "2"], "predict.ppp: must be at most"),
        (["predict", "resnet20", "--device", "K80", "--precision", "fp16"], "no fp16 peak"),
    ],
)
def test_bad_input_is_one_line(cli: Cli, args: list[str], text: str) -> None:
    one_line_error(cli(*args), text)


def test_bad_user_models_are_one_line_and_their_own_errors_theirs(cli: Cli, tmp_path: Path) -> None:
    path = tmp_path / "nets.py"
    path.write_text(
        "from torch import nn\n"
        "def broken():\n    raise ValueError('no such width')\n"
        "def number():\n    return 3\n"
        "def mlp():\n    return nn.Linear(4, 2)\n"
    )
    # the factory's own exception is the model's (break-it round 9): its line and its frames
    raised = cli("analyze", f"{path}:broken")
    assert raised.code == 1 and raised.err.startswith("error: the model raised ValueError: no such")
    assert f'File "{path}", line 3, in broken' in raised.err
    one_line_error(cli("analyze", f"{path}:number"), "returned int, not a torch.nn.Module")
    one_line_error(cli("analyze", f"{path}:mlp", "--input", "5"), "the model rejects input [1, 5]")
    assert (
        json.loads(cli("analyze", f"{path}:mlp", "--input", "4", "--json").out)["totals"]["macs"]
        == 8
    )


def test_devices_lists_the_catalog_with_sources(cli: Cli, user_devices: Path) -> None:
    user_devices.write_text("[V100]\nprice_per_hour_usd = 2.48\n")
    doc = json.loads(cli("devices", "--json").out)
    assert doc["V100"]["price_per_hour_usd"] == 2.48 and doc["V100"]["source"]
    table = cli("devices").out
    assert "H100-SXM" in table and "gpu, 1 of 2/board" in table  # the K80's figures
    assert doc["K80"]["gpus_per_board"] == 2 and doc["K80"]["peak_tflops"]["fp32"] == 4.365


def test_predict_json(cli: Cli) -> None:
    result = cli(
        "predict", "resnet50", "--device", "V100", "--batch", "8", "--ppp", "0.5", "--json"
    )
    doc = json.loads(result.out)
    t = doc["totals"]
    assert (doc["device"], doc["ppp"], doc["peak_flops"]) == ("V100", 0.5, 15.7e12)
    assert t["compute_s"] == pytest.approx(t["flops"] / (15.7e12 * 0.5))
    assert t["images_per_s"] == pytest.approx(8 / t["time_s"])
    assert len(doc["layers"]) > 100


def test_calibrate_then_predict_measure_is_stored(
    cli: Cli, store: RunStore, user_devices: Path
) -> None:
    calibrated = cli("calibrate", "--name", "here", "--json")
    assert calibrated.code == 0, calibrated.err
    device = json.loads(calibrated.out)
    assert device["peak_tflops"]["fp32"] > 0 and device["memory_bandwidth_gbs"] > 0
    # a positive PPP for every kind; not capped at 1: a kernel can outrun the square-matmul
    # peak (oneDNN's convolutions on this CPU), and on a busy host a kernel measured at
    # another moment than the peak can land either side of it (issue 16's drift)
    # (a kind whose kernel ran faster than its other terms, on a busy host, is left out)
    kinds = device["ppp_by_kind"]
    assert list(kinds) == [k for k in KINDS if k not in device["unsolved"]]
    assert kinds["other"] == 1.0
    assert all(0 < v < math.inf for v in kinds.values())
    assert device["ppp_mem"] not in (0, 1.0)
    assert device["op_overhead_us"] > 0 and device["threads"] == usable_cores()
    assert "[here]" in user_devices.read_text()
    assert store.get_run(device["run_id"]).kind == "calibrate"
    # how long the rounds waited for a CPU, and the mark, in --json and in the run
    assert isinstance(device["cpu_wait_share"], float) and 0 <= device["cpu_wait_share"] <= 1
    assert device["contention"]["cpu_wait_share"] == device["cpu_wait_share"]
    assert (device["reliability_note"] is None) is device["reliable"]
    assert store.get_run(device["run_id"]).summary["cpu_wait_share"] == device["cpu_wait_share"]
    assert "cpu_wait_share" not in user_devices.read_text()  # the catalog keeps rates only

    result = cli(
        "predict",
        "smallcnn",
        "--device",
        "here",
        "--input",
        "1,12,12",
        "--batch",
        "4",
        "--measure",
        "--reps",
        "3",
        "--json",
    )
    assert result.code == 0, result.err
    doc = json.loads(result.out)
    measured = doc["measured"]
    assert measured["measured_s"]["min"] > 0
    # No PPP explains a step that memory and overhead alone already outlast: calibrated on
    # a busy machine (the suite shares its cores) the overhead can come out that large.
    fixed_s = doc["totals"]["memory_s"] + doc["totals"]["overhead_s"]
    if measured["measured_s"]["median"] > fixed_s:
        assert measured["fitted_ppp"] > 0
    else:
        assert measured["fitted_ppp"] is None
    assert {row["name"] for row in measured["layers"]} >= {"0", "2", "7", "10"}
    run = store.get_run(measured["run_id"])
    assert (run.kind, run.status) == ("predict", "finished")
    assert run.summary["error_pct"] == pytest.approx(measured["error_pct"])
    assert len(store.metrics(measured["run_id"], "measured_s")) == 3
    # The prediction for the stored calibration names it; the one calibrated in the same
    # rounds as the measurement says so, and both carry their error.
    assert doc["basis"]["kind"] == "calibrated" and doc["basis"]["calibrated_at"] == device["date"]
    same = measured["same_moment"]
    assert same["basis"]["interleaved"] and len(same["rounds"]) == 3
    assert same["error_pct"] == pytest.approx(sorted(r["error_pct"] for r in same["rounds"])[1])
    assert run.summary["same_moment_error_pct"] == pytest.approx(same["error_pct"])
    assert isinstance(measured["cpu_wait_share"], float) and 0 <= measured["cpu_wait_share"] <= 1
    assert measured["contention"]["source"] in ("schedstat", "loadavg")
    assert (measured["reliability_note"] is None) is measured["reliable"]
    assert run.summary["reliable"] is measured["reliable"]


@needs_schedstat
def test_predict_measure_on_a_busy_core_is_marked(
    busy_core: int, tmp_path: Path, cli: Cli, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`predict --measure` sharing its only core with a busy process: the rounds' CPU wait
    and the mark as rows of its table and in the stored run (read from the same store: the
    `cli` fixture's). It measures in this process's thread, pinned to that core while it
    runs (a process of its own spent most of its time importing torch on half a core)."""
    monkeypatch.setenv("DLPERF_DEVICES", str(tmp_path / "devices.toml"))
    assert os.environ["DLPERF_DB"] == f"sqlite:///{tmp_path / 'dlperf.db'}"
    tiny = ["smallcnn", "--input", "1,8,8", "--batch", "2"]
    allowed = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {busy_core})
    try:
        done = cli("predict", *tiny, "--measure", "--reps", "4")
    finally:
        os.sched_setaffinity(0, allowed)
    assert done.code == 0, done.err
    rows = totals_rows(done.out)
    assert float(rows["CPU wait (share of thread time)"]) > 0.25, rows
    assert rows["unreliable"].startswith("contended: its threads waited for a CPU"), rows
    shown = cli("runs", "show", rows["stored as run"], "--json")
    assert shown.code == 0, shown.err
    summary = json.loads(shown.out)["summary"]
    assert summary["cpu_wait_share"] > 0.25 and summary["reliable"] is False, summary
    assert summary["contention"]["source"] == "schedstat"


# --- issue 22: numbers a student can hand in --------------------------------------------------


def test_googlenet_totals_are_the_rows_and_unused_aux_heads_are_named(cli: Cli) -> None:
    doc = json.loads(cli("analyze", "googlenet", "--json").out)
    totals = doc["totals"]
    # the auxiliary classifiers run only in training: in eval they have no row
    assert totals["params"] == sum(row["params"] for row in doc["layers"]) == 6624904
    assert [(m["name"], m["type"]) for m in doc["not_run"]] == [
        ("aux1", "InceptionAux"),
        ("aux2", "InceptionAux"),
    ]
    assert totals["params_not_run"] == sum(m["params"] for m in doc["not_run"])
    assert totals["params"] + totals["params_not_run"] == 13004888
    table = cli("analyze", "googlenet").out
    assert "6,624,904" in table and "13,004,888" not in table.split("not run")[0]
    assert "modules that never ran" in table and "InceptionAux" in table


TIED = """
import torch
from torch import nn


class Tied(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Linear(4, 4)
        self.head = nn.Linear(4, 3)  # never called: its weight is used directly below

    def forward(self, x):
        return torch.nn.functional.linear(self.body(x), self.head.weight)


def tied():
    return Tied()
"""


def test_a_module_used_only_through_its_weight_counts_where_it_is_used(
    cli: Cli, tmp_path: Path
) -> None:
    path = tmp_path / "tied.py"
    path.write_text(TIED)
    doc = json.loads(cli("analyze", f"{path}:tied", "--input", "4", "--json").out)
    rows = {row["name"]: row["params"] for row in doc["layers"]}
    assert rows == {"body": 20, "(model)": 12}  # head's weight, not its unused bias
    assert doc["totals"]["params"] == 32 and doc["totals"]["params_not_run"] == 3
    assert doc["not_run"] == [{"name": "head", "type": "Linear", "params": 3, "bias_params": 3}]


ALEXNET_PAPER = '''
from torch import nn


def alexnet_paper(num_classes=1000):
    """Krizhevsky et al. 2012, the two-GPU grouping included: 60,965,224 parameters."""
    return nn.Sequential(
        nn.Conv2d(3, 96, 11, stride=4), nn.ReLU(), nn.MaxPool2d(3, 2),
        nn.Conv2d(96, 256, 5, padding=2, groups=2), nn.ReLU(), nn.MaxPool2d(3, 2),
        nn.Conv2d(256, 384, 3, padding=1), nn.ReLU(),
        nn.Conv2d(384, 384, 3, padding=1, groups=2), nn.ReLU(),
        nn.Conv2d(384, 256, 3, padding=1, groups=2), nn.ReLU(), nn.MaxPool2d(3, 2),
        nn.Flatten(),
        nn.Linear(9216, 4096), nn.ReLU(), nn.Linear(4096, 4096), nn.ReLU(),
        nn.Linear(4096, num_classes),
    )


def no_classes():
    return nn.Linear(4, 3)
'''


def test_a_model_files_factory_keeps_its_own_number_of_classes(cli: Cli, tmp_path: Path) -> None:
    path = tmp_path / "mynet.py"
    path.write_text(ALEXNET_PAPER)
    spec = f"{path}:alexnet_paper"
    doc = json.loads(cli("analyze", spec, "--input", "3,227,227", "--json").out)
    assert doc["totals"]["params"] == 60965224
    assert (doc["classes"], doc["classes_source"]) == (1000, "the factory's default")
    given = json.loads(
        cli("analyze", spec, "--input", "3,227,227", "--classes", "10", "--json").out
    )
    assert given["totals"]["params"] == 56909194
    assert (given["classes"], given["classes_source"]) == (10, "--classes")
    # the title and --json name the arguments the factory was called with, not num_classes;
    # one it lacks is refused, as for dlperf's own models (it was dropped without a word)
    assert doc["arguments"] == {}
    one_line_error(
        cli("analyze", spec, "--input", "3,227,227", "--set", "model.kwargs.width=2"),
        f"model '{spec}' does not accept width (accepted: num_classes)",
    )
    table = cli("analyze", spec, "--input", "3,227,227").out
    assert "1000 classes (the factory's default)" in table
    none = json.loads(cli("analyze", f"{path}:no_classes", "--input", "4", "--json").out)
    assert none["classes"] is None
    one_line_error(
        cli("analyze", f"{path}:no_classes", "--input", "4", "--classes", "5"),
        "analyze.classes 5: the factory no_classes takes no num_classes",
    )


def test_torchvision_and_dlperf_models_say_which_classes_they_count(cli: Cli) -> None:
    doc = json.loads(cli("analyze", "resnet20", "--json").out)
    assert (doc["classes"], doc["classes_source"]) == (10, "default for dlperf's models")
    assert "10 classes (default for dlperf's models)" in cli("analyze", "resnet20").out


def test_vgg19_activations_and_params_as_the_course_tables_count_them(cli: Cli) -> None:
    every = json.loads(cli("analyze", "vgg19", "--json").out)
    assert every["conventions"] | {"macs_counts": ""} == {
        "params": "with biases",
        "activations": "all",
        "macs": "dlperf",
        "macs_counts": "",
        "precision": "fp32",
    }
    doc = json.loads(
        cli("analyze", "vgg19", "--activations", "conv-pool-fc", "--no-bias", "--json").out
    )
    t = doc["totals"]
    conv = 2 * 224 * 224 * 64 + 2 * 112 * 112 * 128 + 4 * 56 * 56 * 256 + 4 * 28 * 28 * 512
    conv += 4 * 14 * 14 * 512
    pool = 112 * 112 * 64 + 56 * 56 * 128 + 28 * 28 * 256 + 14 * 14 * 512 + 7 * 7 * 512
    fc = 4096 + 4096 + 1000
    # the paper's Table 1: torchvision's adaptive average pooling, 7x7 to 7x7 at 224 px, is
    # an identity that the paper's network does not have (it would add 25,088)
    assert t["activations"] == conv + pool + fc == 16_391_656
    avgpool = next(row for row in doc["layers"] if row["name"] == "avgpool")
    assert (avgpool["role"], avgpool["activations"]) == ("identity", 0)
    assert t["activations"] < every["totals"]["activations"]
    assert t["activation_bytes"] == 4 * t["activations"]
    assert t["activations"] == sum(row["activations"] for row in doc["layers"])
    assert {row["role"] for row in doc["layers"] if row["activations"]} == {"conv", "pool", "fc"}
    # biases: 5,504 in the convolutions, 9,192 in the fully connected layers
    assert t["params"] == 143667240 - 14696 == sum(row["params"] for row in doc["layers"])
    assert doc["conventions"]["params"] == "without biases"
    assert doc["conventions"]["activations"] == "conv-pool-fc"
    table = cli("analyze", "vgg19", "--activations", "conv-pool-fc", "--no-bias").out
    assert "params (without biases)" in table
    assert "activations (elements; outputs of conv, pool and fc layers (not of a pool that" in table


K80 = ["predict", "resnet20", "--device", "K80"]


@pytest.mark.parametrize(
    ("args", "text"),
    [
        (["analyze", "resnet20", "--activations", "relu"], "analyze.activations: Input should"),
        ([*K80, "--peak-tflops", "0"], "predict.peak_tflops: must be at least 1e-06"),
        ([*K80, "--peak-tflops", "8T"], "predict.peak_tflops: Input should be a valid number"),
        ([*K80, "--peak-tflops", "inf"], "predict.peak_tflops: must be a finite number"),
        (["predict", "resnet20", "--peak-tflops", "8.7", "--measure"], "needs predict.device"),
        ([*K80, "--flops", "lots"], "predict.flops: Input should be a valid number"),
        ([*K80, "--flops", "-3G"], "predict.flops: must be at least 1"),
        ([*K80, "--flops", "3X"], "predict.flops: Input should be a valid number (got '3X')"),
    ],
)
def test_bad_values_of_the_new_options_are_one_line(cli: Cli, args: list[str], text: str) -> None:
    one_line_error(cli(*args), text)


def test_predict_k80_says_which_peak_and_shows_flops_over_peak(cli: Cli) -> None:
    doc = json.loads(cli("predict", "vgg16", "--device", "K80", "--json").out)
    peak = doc["peak"]
    assert peak["flops_per_s"] == doc["peak_flops"] == 4.365e12
    assert peak["label"] == (
        "4.365 TFLOPS fp32: one of the 2 GPUs of a K80 board (the board: 8.73 TFLOPS)"
    )
    fop = doc["flops_over_peak"]
    counted = doc["totals"]["flops"]  # batch 1: one image's forward
    assert fop["flops_per_image"] == counted and fop["flops_source"] == "counted"
    assert fop["time_per_image_s"] == pytest.approx(counted / 4.365e12)
    assert fop["images_per_s"] == pytest.approx(4.365e12 / counted)
    # PALEO at the peak adds the memory time: slower than FLOPs / peak
    assert doc["totals"]["time_s"] > fop["time_per_image_s"]
    rows = totals_rows(cli("predict", "vgg16", "--device", "K80").out)
    assert "peak (PPP=1), compute + memory: images/s" in rows
    assert "FLOPs ÷ peak: images/s" in rows
    assert rows["peak"].startswith("4.365 TFLOPS fp32: one of the 2 GPUs")


def test_predict_with_the_peak_and_flops_given(cli: Cli) -> None:
    doc = json.loads(
        cli(
            "predict", "vgg16", "--device", "K80", "--peak-tflops", "8.73",
            "--flops", "15.5G", "--batch", "2", "--json",
        ).out
    )  # fmt: skip
    assert doc["peak"]["flops_per_s"] == doc["peak_flops"] == 8.73e12
    assert doc["peak"]["label"] == "8.73 TFLOPS fp32, given (--peak-tflops)"
    fop = doc["flops_over_peak"]
    assert (fop["flops_per_image"], fop["flops_source"]) == (15.5e9, "given (--flops)")
    assert fop["time_per_image_s"] == pytest.approx(15.5e9 / 8.73e12)
    assert fop["time_s"] == pytest.approx(2 * 15.5e9 / 8.73e12)
    assert fop["counted_flops_per_image"] == doc["totals"]["flops"] / 2
    assert doc["basis"]["label"].endswith("; peak given: 8.73 TFLOPS fp32")


def totals_rows(out: str) -> dict[str, str]:
    """The `totals` table's rows: first column -> value."""
    rows = {}
    for line in out.split("totals", 1)[1].splitlines():
        if "│" in line:
            key, value = (cell.strip() for cell in line.split("│", 1))
            rows[key] = value
    return rows


def test_analyze_and_predict_read_their_sections(cli: Cli, tmp_path: Path) -> None:
    """--config's [analyze] and [predict], --set over the file, and the flags over both."""
    path = tmp_path / "count.toml"
    path.write_text(
        "[analyze]\ninput = [1, 8, 8]\nbatch = 4\nbias = false\n"
        '[predict]\ndevice = "V100"\nppp = 0.5\nflops = "2M"\n'
    )
    doc = json.loads(cli("analyze", "smallcnn", "--config", str(path), "--json").out)
    assert (doc["input"], doc["batch"]) == ([1, 8, 8], 4)
    assert doc["conventions"]["params"] == "without biases"
    doc = json.loads(
        cli("analyze", "smallcnn", "--config", str(path), "--set", "analyze.batch=6",
            "--bias", "--json").out
    )  # fmt: skip
    assert (doc["batch"], doc["conventions"]["params"]) == (6, "with biases")
    doc = json.loads(
        cli("predict", "smallcnn", "--config", str(path), "--batch", "2", "--json").out
    )
    assert (doc["device"], doc["ppp"], doc["batch"]) == ("V100", 0.5, 2)
    assert doc["flops_over_peak"]["flops_per_image"] == 2e6
    one_line_error(
        cli("analyze", "smallcnn", "--config", str(path), "--set", "analyze.batchh=2"),
        "unknown key 'analyze.batchh'",
    )


# --- issue 30: the course's networks, transfer learning's Table 1 -----------------------------


def test_the_papers_alexnet_just_works(cli: Cli) -> None:
    doc = json.loads(cli("analyze", "alexnet_paper", "--json").out)
    assert (doc["input"], doc["classes"]) == ([3, 227, 227], 1000)
    assert doc["totals"]["params"] == 60_965_224
    field = doc["totals"]["receptive_field"]  # local response normalisation is followed
    assert (field["last_spatial_layer"], field["size"]) == ("14", [195, 195])


def test_inception_modules_say_the_filter_counts_they_used(cli: Cli) -> None:
    doc = json.loads(cli("analyze", "inception_naive", "--input", "256,32,32", "--json").out)
    assert doc["arguments"] == {"c1x1": 64, "c3x3": 128, "c5x5": 32}
    assert doc["classes"] is None
    # every convolution keeps 32x32: 1024 positions x filters x 256 channels x kernel
    assert doc["totals"]["macs"] == 1024 * 256 * (64 + 128 * 9 + 32 * 25) == 528_482_304
    table = cli("analyze", "inception_naive", "--input", "256,32,32").out
    assert "inception_naive(c1x1=64, c3x3=128, c5x5=32): input 256x32x32" in table
    reduced = json.loads(cli("analyze", "inception_reduced", "--json").out)
    assert reduced["input"] == [256, 32, 32]
    # 1x1 64; 96 then 3x3 128; 16 then 5x5 32; pool then 1x1 32
    macs = 1024 * (256 * 64 + 256 * 96 + 96 * 128 * 9 + 256 * 16 + 16 * 32 * 25 + 256 * 32)
    assert reduced["totals"]["macs"] == macs == 180_879_360
    given = cli("analyze", "inception_reduced", "--set", "model.kwargs.c3x3=64", "--json")
    assert json.loads(given.out)["arguments"]["c3x3"] == 64
    one_line_error(
        cli("analyze", "inception_naive", "--classes", "10"),
        "analyze.classes 10: the factory inception_naive takes no num_classes",
    )


def test_conv_stack_has_the_receptive_field_the_course_derives(cli: Cli) -> None:
    args = ["analyze", "conv_stack", "--set", "model.kwargs.n=3", "--set", "model.kwargs.f=5"]
    doc = json.loads(cli(*args, "--json").out)
    assert doc["totals"]["receptive_field"]["size"] == [3 * 5 - 3 + 1] * 2
    assert "conv_stack(n=3, f=5, channels=64)" in cli(*args).out
    one_line_error(
        cli("analyze", "conv_stack", "--set", "model.kwargs.f=0"), "n and f must be at least 1"
    )


def test_feature_extract_counts_the_trainable_head_without_weights(
    cli: Cli, tmp_path: Path
) -> None:
    """The student report's Table 1: an ImageNet backbone frozen under a new 10-class head.
    The run's config names the weights; analyze never loads them (nothing is downloaded)."""
    path = tmp_path / "transfer.toml"
    path.write_text(
        '[model]\nname = "resnet18"\nweights = "IMAGENET1K_V1"\ntransfer = "feature-extract"\n'
    )
    doc = json.loads(cli("analyze", "resnet18", "--config", str(path), "--classes", "10",
                         "--json").out)  # fmt: skip
    t = doc["totals"]
    assert doc["transfer"] == "feature-extract"
    assert t["params"] == 11_689_512 - 513_000 + 5_130  # the 1000-class fc swapped for 10
    assert t["trainable_params"] == 512 * 10 + 10
    table = cli("analyze", "resnet18", "--config", str(path), "--classes", "10").out
    assert "backbone frozen (feature-extract)" in table
    # no weights named: counting the architecture needs none, training still refuses it
    bare = ["--set", "model.transfer=feature-extract"]
    alone = json.loads(cli("analyze", "resnet18", "--classes", "10", *bare, "--json").out)
    assert alone["totals"]["trainable_params"] == t["trainable_params"]
    one_line_error(cli("config", "show", *bare), "feature-extract needs model.weights")
    finetune = cli("analyze", "resnet18", "--config", str(path), "--classes", "10",
                   "--set", "model.transfer=finetune", "--json")  # fmt: skip
    assert json.loads(finetune.out)["totals"]["trainable_params"] == t["params"]


def test_a_reduced_precision_count_says_it_cast_the_model(cli: Cli) -> None:
    """A bf16 count casts every tensor; a bf16 run trains under autocast: the output says
    which program it counted (issue 42, finding 7)."""
    doc = json.loads(cli("analyze", "smallcnn", "--precision", "bf16", "--json").out)
    assert doc["precision"] == "bf16"
    assert doc["conventions"]["precision"].startswith("the model cast to bf16")
    assert "autocast" in doc["conventions"]["precision"]
    assert "the model cast to bf16" in cli("analyze", "smallcnn", "--precision", "bf16").out
