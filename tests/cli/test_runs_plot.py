"""`dlperf runs plot` on real stored runs (PNG, SVG and PDF files checked for what they hold),
its bad input, and the scale study's figures (error bars, title, single-host note)."""

from __future__ import annotations

import json
import shutil
import xml.etree.ElementTree as ET
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from matplotlib.container import ErrorbarContainer
from PIL import Image, ImageStat

from dlperf.config import Experiment
from dlperf.distributed.contracts import RankResult
from dlperf.distributed.planning import Point
from dlperf.distributed.summary import add_relative, summarize
from dlperf.experiment.run import run_experiment
from dlperf.report.runs import _x_values, default_keys, draw_runs, legend_labels
from dlperf.report.scaling import plot_study, shared_host, study_figures
from dlperf.store import RunStore
from dlperf.store.record import RunRecord
from tests.conftest import TrainedRun


@pytest.fixture(scope="module")
def stored(tmp_path_factory: pytest.TempPathFactory, trained_digits: TrainedRun) -> Path:
    """A store with two real runs: 1 = one epoch at a constant rate (conftest's trained_digits,
    copied), 2 = two epochs on a cosine schedule. Tests copy it, so each has its own."""
    root = tmp_path_factory.mktemp("runs")
    store, first, _ = trained_digits.copy_to(root)
    exp = Experiment.model_validate(
        {
            "model": {"name": "smallcnn"},
            "data": {"name": "digits"},
            "train": {"epochs": 2, "batch_size": 32, "lr": 0.05, "schedule": {"kind": "cosine"}},
            "run": {"name": "cosine", "threads": 1, "warmup_steps": 2, "out_dir": str(root)},
        }
    )
    second = run_experiment(exp, store)
    assert (first, second["run_id"]) == (1, 2)
    store.engine.dispose()
    return root / "dlperf.db"


@pytest.fixture
def runs_cli(stored: Path, cli: Callable, tmp_path: Path) -> Callable:
    """`cli` against a copy of the two-run store (the cwd is tmp_path)."""
    shutil.copy(stored, tmp_path / "dlperf.db")
    return cli


def _one_line(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    return lines[0]


def _png_not_blank(path: Path) -> None:
    with Image.open(path) as image:
        assert image.format == "PNG"
        assert image.width > 300 and image.height > 300
        (spread,) = ImageStat.Stat(image.convert("L")).stddev
    assert spread > 5  # axes, lines and text, not one flat colour


def test_one_run_with_the_default_keys(runs_cli: Callable, tmp_path: Path) -> None:
    r = runs_cli("runs", "plot", "2")
    assert r.code == 0, r.err
    assert r.err.strip() == "saved runs-2.png"  # the path, in the human output
    _png_not_blank(tmp_path / "runs-2.png")


def test_two_runs_overlaid_as_json(runs_cli: Callable, tmp_path: Path) -> None:
    """Overlaid, and the legends name the config keys that differ (one plot serves both)."""
    r = runs_cli("runs", "plot", "1", "2", "--json")
    assert r.code == 0, r.err
    doc = json.loads(r.out)
    assert doc["path"] == "runs-1-2.png" and doc["x"] == "step"
    assert doc["keys"] == ["train/loss", "val/acc1", "train/lr"]
    assert [(run["id"], run["name"]) for run in doc["runs"]] == [(1, "smallcnn"), (2, "cosine")]
    one, two = (run["points"] for run in doc["runs"])
    assert two["train/loss"] == two["train/lr"] == 2 * one["train/loss"] > 0  # 2 epochs vs 1
    assert (one["val/acc1"], two["val/acc1"]) == (1, 2)
    _png_not_blank(tmp_path / "runs-1-2.png")
    assert [run["label"] for run in doc["runs"]] == [
        "run 1: smallcnn (train.epochs=1, train.schedule.kind=constant)",
        "run 2: cosine (train.epochs=2, train.schedule.kind=cosine)",
    ]  # not run.name nor run.out_dir: the name is there already, the path says nothing


def test_one_run_alone_is_labelled_by_its_name(runs_cli: Callable) -> None:
    alone = runs_cli("runs", "plot", "2", "--json")
    assert [run["label"] for run in json.loads(alone.out)["runs"]] == ["run 2: cosine"]


def test_legends_shorten_values_never_keys() -> None:
    config = {"data": {"root": "/data/decathlon/aircraft/train"}, "model": {"name": "resnet20"}}
    other = {"data": {"root": "/data/c10"}, "model": {"name": "wide_resnet50_2_imagenet"}}
    other["train"] = {f"key_{i}": i for i in range(6)}
    first, second = legend_labels(
        [RunRecord(1, None, "a", "run", "finished", config, None, None),
         RunRecord(2, None, "b", "run", "finished", other, None, None)]
    )  # fmt: skip
    assert first == (
        "run 1: a (data.root=…/aircraft/train, model.name=resnet20,\n"
        "train.key_0=-, train.key_1=-, train.key_2=-, train.key_3=-, +2 more)"
    )  # a path's tail; a key whole; the keys past six counted
    assert "model.name=wide_resnet50_2…," in second  # the value's head, within 16 characters
    assert all(len(line) <= 72 for line in (first + "\n" + second).splitlines())


def test_a_chosen_key_against_wall_time_as_svg(runs_cli: Callable, tmp_path: Path) -> None:
    r = runs_cli("runs", "plot", "1", "2", "--key", "val/loss", "--x", "time", "--out", "t.svg")
    assert r.code == 0, r.err
    assert "saved t.svg" in r.err
    root = ET.parse(tmp_path / "t.svg").getroot()
    assert root.tag == "{http://www.w3.org/2000/svg}svg"
    assert len(root.findall(".//{http://www.w3.org/2000/svg}path")) > 10


def test_epoch_axis_as_pdf(runs_cli: Callable, tmp_path: Path) -> None:
    r = runs_cli("runs", "plot", "1", "2", "--x", "epoch", "--out", "e.pdf", "--json")
    assert r.code == 0, r.err
    doc = json.loads(r.out)
    assert doc["keys"] == ["epoch/train_loss", "val/acc1", "train/lr"]  # the loss per epoch
    assert (tmp_path / "e.pdf").read_bytes()[:5] == b"%PDF-"


def test_positions_on_each_axis() -> None:
    rows = [(20, 1.0, 105.0), (40, 0.5, 107.5)]  # (step, value, wall time)
    assert _x_values("train/loss", "epoch", rows, 100.0, 40) == [0.5, 1.0]
    assert _x_values("train/loss", "step", rows, 100.0, 40) == [20, 40]
    assert _x_values("train/loss", "time", rows, 100.0, 40) == [5.0, 7.5]  # from the 1st row
    assert _x_values("val/acc1", "step", [(2, 0.9, 0.0)], 0.0, 40) == [80]  # end of epoch 2
    assert _x_values("train/loss", "epoch", rows, 100.0, None) is None  # cannot place it
    assert default_keys("step", {"epoch/train_loss", "epoch/lr"}) == [
        "epoch/train_loss",
        "epoch/lr",
    ]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["1", "--key", "val/los"],
         "error: no metric 'val/los' in run(s) 1 (did you mean val/loss?)"),
        (["1", "99"], "error: no run 99 in the store (see `dlperf runs list`)"),
        (["1", "--out", "a.jpg"], "error: --out a.jpg: unknown figure format '.jpg' "
         "(end the name in .png, .svg or .pdf)"),
        (["1", "--x", "wall"], "error: --x 'wall': not an axis (choose one of step, epoch, time)"),
    ],
)  # fmt: skip
def test_bad_input_is_one_line_and_exit_2(
    runs_cli: Callable, tmp_path: Path, args: list[str], message: str
) -> None:
    r = runs_cli("runs", "plot", *args)
    assert r.code == 2
    assert _one_line(r.err) == message
    assert not list(tmp_path.glob("runs-*")) and not (tmp_path / "a.jpg").exists()


def _scale_rows(nodes: int = 1, hosts: tuple[str, str] = ("h", "h")) -> list[dict]:
    """Rows as a study leaves them: summarize() over the ranks, speedup against the base."""
    rows, base = [], None
    for workers, steps in ((1, [0.10, 0.12, 0.20]), (2, [0.15, 0.12, 0.30])):
        ranks = [
            RankResult.from_dict(
                {
                    "rank": r,
                    "host": hosts[r],
                    "pid": 100 + r,
                    "world_size": workers,
                    "main": {
                        "step_times_s": steps,
                        "wall_s": sum(steps),
                        "samples": 10 * len(steps),
                        "ddp": {
                            "times_ns": {"avg_backward_comm_time": 2_000_000},
                            "reduced_bytes": 4_000_000,
                        },
                        "replica_max_diff": 0.0,
                        "grad_bytes": 4_000_000,
                    },
                    "compute": {"step_times_s": [s * 0.6 for s in steps]},
                }
            )
            for r in range(workers)
        ]
        point = Point(workers, 10, 10 * workers, "allreduce", "ddp", None)
        row = summarize(point, ranks, nodes, 1, "gloo", 1000, price_per_hour=3.6)
        row = add_relative(row, base)
        base = base or row
        rows.append({"run_id": workers, "status": "finished", **row.to_dict()})
    return rows


def test_scale_figures_have_spread_title_and_host_note(tmp_path: Path) -> None:
    rows = _scale_rows()
    directory = tmp_path / "scale-7" / "plots"
    saved = plot_study(directory, rows, (7, "scale smallcnn"))
    assert [kind for kind, _ in saved] == [
        "plot/throughput", "plot/train_time", "plot/speedup", "plot/efficiency",
        "plot/step_split", "plot/cost",
    ]  # fmt: skip
    for _, path in saved:
        _png_not_blank(path)

    figures = dict(study_figures(rows, "scale study 7: scale smallcnn"))
    for kind, fig in figures.items():
        (ax,) = fig.axes
        assert ax.get_title() == "scale study 7: scale smallcnn", kind
        assert any(isinstance(c, ErrorbarContainer) for c in ax.containers), kind
        assert "single-host emulation" in " ".join(t.get_text() for t in fig.texts), kind
    # The throughput bars span the per-step rates: batch / slowest .. batch / fastest step.
    (ax,) = figures["plot/throughput"].axes
    bars = next(c for c in ax.containers if isinstance(c, ErrorbarContainer))
    (segments,) = bars.lines[2]
    low, high = segments.get_segments()[0][:, 1]
    assert (low, high) == pytest.approx((10 / 0.20, 10 / 0.10))


def test_scale_note_follows_the_hosts() -> None:
    # Two nodes on two hosts: no single-host note.
    assert shared_host(_scale_rows(nodes=2, hosts=("a", "b"))) is None
    assert shared_host(_scale_rows(nodes=1, hosts=("a", "a"))).startswith("single-host")


def _integer_ticks(ax: Any) -> list[float]:
    """The x ticks inside the drawn range; each must be a whole number."""
    low, high = ax.get_xlim()
    return [t for t in ax.get_xticks() if low <= t <= high]


def test_val_error_is_one_minus_accuracy_on_whole_epochs(
    runs_cli: Callable, tmp_path: Path
) -> None:
    r = runs_cli("runs", "plot", "2", "--key", "val/error", "--x", "epoch", "--json")
    assert r.code == 0, r.err
    doc = json.loads(r.out)
    assert doc["keys"] == ["val/error"] and doc["runs"][0]["points"] == {"val/error": 2}
    store = RunStore.open(f"sqlite:///{tmp_path / 'dlperf.db'}")
    fig, _ = draw_runs(store, [2], ["val/error"], "epoch")
    (ax,) = fig.axes
    accuracy = store.metrics(2, "val/acc1")
    assert list(ax.lines[0].get_ydata()) == pytest.approx([1 - a for _, a in accuracy])
    assert ax.get_ylabel() == "val/error (fraction, 1 - val/acc1)"
    ticks = _integer_ticks(ax)
    assert ticks and all(t == int(t) for t in ticks), ticks  # 2 epochs: no 1.25, 1.5, ...
