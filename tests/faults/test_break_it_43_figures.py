"""Break-it round 43, fixer F1: figures saved whole or not at all, an output FIFO refused, a
run given twice to `runs plot` refused.

T3 C1 (data loss). Every figure was saved by matplotlib straight onto the user's path: a stop
signal (SIGINT, SIGTERM) during the save left 0 or 124 bytes there, over a good figure of an
earlier command (`runs plot --out`, `converge fit --plot`, `predict --plot`). Now every figure
writer goes through `paths.save_figure`, which draws the figure into memory and renames a
whole file over the path: a stop during the save leaves the earlier figure as it was, and no
part file beside it.
T2 C1 and C2. An output path that is a FIFO hung `runs plot --out` and `export --out` for
ever, before any work and without a word (`paths.check_writable` opened it to test it, and
opening a FIFO waits for a reader); with a reader it ended "cannot use fifo.png: [Errno None]
None", exit 1. Now it is refused as input paths are, stat'ed and never opened: "fifo.png is
not a regular file (a FIFO)", one line, exit 2. `converge fit --to-csv`, which writes a pipe
(/dev/stdout) straight through as documented, is still let through, without the open.
T2 C4. `runs plot 1 1 1` drew run 1 once, in a file named runs-1-1-1.png, exit 0. Now a run
given more than once is refused in one line, exit 2, as `runs compare 1 1` refuses it.
"""

from __future__ import annotations

import io
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from matplotlib.figure import Figure

from dlperf import paths
from dlperf.converge.plan import Allocation
from dlperf.distill.summary import BaselineRow, DistillResult, StudentRow, TeacherRow
from dlperf.errors import UserError
from dlperf.report import curves, data, distill, runs, scaling, staleness, sweep
from dlperf.store import RunStore
from tests.conftest import CliResult
from tests.faults.test_store_faults import one_line

Cli = Callable[..., CliResult]
EARLIER = b"an earlier figure, whole"

# --- T3 C1: a stop during the save ---------------------------------------------------------------


def _stopped_midway(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """Figure.savefig made to write part of a PNG to where it was told, then stop as a signal
    stops it (KeyboardInterrupt); the places it was told, in order."""
    told: list[Any] = []

    def savefig(fig: Figure, fname: Any, **kwargs: Any) -> None:
        told.append(fname)
        if hasattr(fname, "write"):
            fname.write(b"\x89PNG cut")
        else:
            Path(fname).write_bytes(b"\x89PNG cut")
        raise KeyboardInterrupt

    monkeypatch.setattr(Figure, "savefig", savefig)
    return told


@pytest.mark.parametrize(
    ("name", "start"), [("f.png", b"\x89PNG"), ("f.SVG", b"<?xml"), ("f.pdf", b"%PDF")]
)
def test_save_figure_writes_the_format_of_the_name_and_a_stop_keeps_the_earlier_one(
    name: str, start: bytes, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / name
    fig = Figure(figsize=(2, 2))
    fig.subplots().plot([0, 1], [1, 0])
    assert paths.save_figure(fig, path) == path
    earlier = path.read_bytes()
    assert earlier.startswith(start)  # the suffix's format, whatever the name written first
    _stopped_midway(monkeypatch)
    with pytest.raises(KeyboardInterrupt):
        paths.save_figure(fig, path)
    assert path.read_bytes() == earlier  # before: b"\x89PNG cut"
    assert [p.name for p in tmp_path.iterdir()] == [name]  # no part file beside it


def test_save_figure_through_a_link_replaces_the_file_and_keeps_the_link(tmp_path: Path) -> None:
    (tmp_path / "figures").mkdir()
    real = tmp_path / "figures" / "f.png"
    real.write_bytes(EARLIER)
    link = tmp_path / "latest.png"
    link.symlink_to(real)
    paths.save_figure(Figure(figsize=(1, 1)), link)
    assert link.is_symlink() and real.read_bytes().startswith(b"\x89PNG")


def _run_with_loss(store: RunStore) -> int:
    run_id = store.create_run("digits", "run", {})
    store.log_metrics(run_id, [("train/loss", 1, 2.0), ("train/loss", 2, 1.0)])
    store.finish_run(run_id, summary={"steps_per_epoch": 2})
    return run_id


def _distilled(directory: Path) -> DistillResult:
    row = StudentRow(2, 1, 3, [2, 1], 0.5, [0.5, None], 900.0, 3, False, pretrain_run_id=4,
                     finetune_run_id=5, test_accuracy=0.8, status="finished")  # fmt: skip
    return DistillResult(7, "dist", TeacherRow(1, "smallcnn", 0.9, None, False),
                         BaselineRow(6, "smallcnn", 0.7), [row], 3, ["a", "b"], "digits",
                         str(directory))  # fmt: skip


SCALE_ROW = {
    "status": "finished", "workers": 1, "nodes": 1, "mode": "weak", "per_worker_batch": 32,
    "global_batch": 32, "comm": "allreduce", "strategy": "ddp", "bucket_mb": None,
    "throughput": 100.0, "epoch_time_s": 10.0, "step_time_s": 0.32, "step_time_min_s": None,
    "step_time_max_s": None, "compute_s": 0.05, "comm_exposed_s": 0.01, "speedup": None,
    "efficiency": None, "cost_per_epoch": None, "ranks": [],
}  # fmt: skip
SWEEP_GROUP = {"rank": 1, "params": {"train.lr": 0.1}, "test_accuracy": 0.9,
               "test_accuracy_std": None, "time_to_target_s": None}  # fmt: skip
PLAN = [Allocation(1, 2, 7200.0, 4.0, cheapest=True), Allocation(1, 4, 3600.0, 5.0, fastest=True)]
IMAGES = [torch.zeros((1, 1, 4, 4), dtype=torch.uint8)]
CURVES = {"sync": [0.5], "async": [0.4]}


def _runs_plot(root: Path, store: RunStore) -> object:
    return runs.plot_runs(store, [_run_with_loss(store)], [], "step", root / "f.png")


# Each public figure writer: the name of the (first) file it writes in `root`, and the call.
WRITERS: dict[str, tuple[str, Callable[[Path, RunStore], object]]] = {
    "runs plot": ("f.png", _runs_plot),
    "staleness": ("f.png", lambda root, _: staleness.plot_staleness(root / "f.png", CURVES, {})),
    "data counts": ("f.png", lambda root, _: data.plot_counts(root / "f.png", "d", ["0"], [1])),
    "data samples": (
        "f.png",
        lambda root, _: data.plot_samples(root / "f.png", "d", ["0"], IMAGES),
    ),
    "converge plan": ("f.png", lambda root, _: curves.plot_plan(root / "f.png", PLAN)),
    "scale": ("throughput.png", lambda root, _: scaling.plot_study(root, [SCALE_ROW], (3, "s"))),
    "sweep": (
        "val_error.png",
        lambda root, _: sweep.plot_sweep(
            root, [({"train.lr": 0.1}, [(1, 0.5)])], [SWEEP_GROUP], {"train.lr": [0.1]}, None
        ),
    ),
    "distill": (
        distill.figure_name(_distilled(Path("."))),
        lambda root, _: distill.distill_figure(_distilled(root)),
    ),
}


@pytest.mark.parametrize("writer", list(WRITERS))
def test_a_stop_during_any_figure_save_keeps_the_earlier_figure_whole(
    writer: str, store: RunStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = tmp_path / "figures"
    root.mkdir()
    name, write = WRITERS[writer]
    path = root / name
    path.write_bytes(EARLIER)
    told = _stopped_midway(monkeypatch)
    with pytest.raises(KeyboardInterrupt):
        write(root, store)
    assert told, "the writer never saved"
    assert path.read_bytes() == EARLIER  # before: b"\x89PNG cut", the earlier figure gone
    assert [p.name for p in root.iterdir()] == [path.name]  # and no part file


# --- T2 C1, C2: an output FIFO -----------------------------------------------------------------


# A regression waits for a reader for ever: the timeout fails it instead of hanging the suite.
FIFO_TIMEOUT = pytest.mark.timeout(120)


@pytest.fixture
def fifo(tmp_path: Path) -> Path:
    path = tmp_path / "fifo.png"
    os.mkfifo(path)
    return path


@FIFO_TIMEOUT
def test_check_writable_refuses_a_fifo_without_opening_it(fifo: Path) -> None:
    with pytest.raises(UserError) as refused:
        paths.check_writable(fifo)
    assert str(refused.value) == (
        f"{fifo} is not a regular file (a FIFO) (give the path of a regular file)"
    )
    # a pipe written straight through (converge fit --to-csv /dev/stdout), not opened here
    assert paths.check_writable(fifo, streams=True) == fifo
    assert paths.not_regular(fifo) == "a FIFO"


@FIFO_TIMEOUT
@pytest.mark.parametrize(
    "args",
    [
        ("runs", "plot", "1", "--out", "{fifo}"),
        ("predict", "smallcnn", "--device", "K80", "--plot", "{fifo}"),
        ("detect", "export", "--out", "{onnx}"),
    ],
)
def test_an_output_fifo_is_refused_in_one_line(
    args: tuple[str, ...], cli: Cli, tmp_path: Path
) -> None:
    """Before: no output, blocked until killed."""
    onnx = tmp_path / "fifo.onnx"
    os.mkfifo(onnx)
    fifo = tmp_path / "fifo.png"
    os.mkfifo(fifo)
    named = [a.format(fifo=fifo, onnx=onnx) for a in args]
    target = next(a for a in named if "fifo." in a)
    one_line(cli(*named), 2, f"{target} is not a regular file (a FIFO)")


@FIFO_TIMEOUT
def test_an_output_fifo_with_a_reader_is_refused_as_a_fifo(cli: Cli, fifo: Path) -> None:
    """Before: "cannot use fifo.png: [Errno None] None", exit 1."""
    reader = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
    try:
        r = cli("runs", "plot", "1", "--out", str(fifo))
        one_line(r, 2, f"{fifo} is not a regular file (a FIFO)")
        assert os.read(reader, 10) == b""  # nothing was written into it
    finally:
        os.close(reader)


# --- T2 C4: a run given more than once ----------------------------------------------------------


def test_runs_plot_refuses_a_run_given_more_than_once(cli: Cli, store: RunStore) -> None:
    run_id = _run_with_loss(store)
    r = cli("runs", "plot", str(run_id), str(run_id), str(run_id))
    one_line(r, 2, f"runs plot draws each run once, got run {run_id} 3 times")
    assert not Path(f"runs-{run_id}-{run_id}-{run_id}.png").exists()
    other = _run_with_loss(store)
    with pytest.raises(UserError, match=rf"got run {run_id} twice"):
        runs.draw_runs(store, [run_id, other, run_id], [], "step")
    assert cli("runs", "plot", str(run_id), str(other), "--out", "two.png").code == 0
    assert Path("two.png").read_bytes().startswith(b"\x89PNG")


def test_a_figure_in_memory_is_a_whole_png(tmp_path: Path) -> None:
    """The bytes save_figure renames into place are matplotlib's own, as a direct save gives."""
    fig = Figure(figsize=(1, 1))
    direct = io.BytesIO()
    fig.savefig(direct, format="png", dpi=50)
    paths.save_figure(fig, tmp_path / "a.png", dpi=50)
    assert (tmp_path / "a.png").read_bytes() == direct.getvalue()
