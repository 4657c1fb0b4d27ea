"""`dlperf sweep`: expanding a sweep file, bad input, running points in-process and in two
worker processes, skipping finished points, and sweeps stopped by a real SIGINT (parked at
an exact step through DLPERF_TEST_PAUSE_AT_STEP) or SIGKILL, then resumed."""

from __future__ import annotations

import itertools
import json
import os
import re
import signal
import time
from collections.abc import Callable
from multiprocessing.process import BaseProcess
from pathlib import Path

import pytest

from dlperf.engine.hooks import HOOKS_ENV
from dlperf.errors import UserError
from dlperf.procs import alive
from dlperf.store import RunStore
from dlperf.sweep import load_sweep
from dlperf.system import usable_cores
from tests.conftest import CliResult
from tests.hooks import SIGNAL_ENV, hook_env, install

EVENT_S = 300  # how long a busy machine may take to get somewhere: a deadline, not a wait
# 128 training images in batches of 32: 4 steps per epoch.
BASE = """
[model]
name = "smallcnn"
[data]
name = "digits"
limit = 128
[train]
epochs = 1
batch_size = 32
lr = 0.05
[target]
accuracy = 0.2
[run]
warmup_steps = 1
checkpoint = false
out_dir = "{out}"
"""
JSON_KEYS = {"run_id", "status", "params", "seed", "skipped", "test_accuracy",
             "best_val_accuracy", "epochs_to_target", "time_to_target_s", "throughput"}  # fmt: skip


def write_sweep(root: Path, body: str, name: str = "lr.toml", base: str = BASE) -> Path:
    """The base experiment and a sweep of it in `root`; its runs' files under root too."""
    (root / "base.toml").write_text(base.format(out=root / "dlperf_runs"))
    path = root / name
    path.write_text(f'base = "base.toml"\n{body}')
    return path


def wait_for(predicate: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + EVENT_S
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def start_sweep(root: Path, db: str, *args: str, pause_at: int) -> BaseProcess:
    """`dlperf sweep ARGS` as a real process, parking every run at step `pause_at`, its
    stderr to root/stderr.txt: forked from this one (forked_dlperf: torch comes imported;
    its workers are `python -m` processes of their own, as always). dlperf's entry point
    takes SIGINT there as a terminal's Ctrl-C delivers it."""
    from tests.faults.test_store_faults import forked_dlperf  # which imports this module

    env = {"DLPERF_DB": db, **hook_env("pause_at_step", f"{pause_at}:{root / 'parked'}")}
    return forked_dlperf(root, ["sweep", *args], root / "stderr.txt", env)


def processes_under(root: Path) -> dict[int, str]:
    """pid -> command line of every running process whose command line names `root`: the
    sweep workers name their point files there."""
    found = {}
    for entry in Path("/proc").iterdir():
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:  # not a process, or gone meanwhile
            continue
        if str(root) in cmdline and alive(int(entry.name)):
            found[int(entry.name)] = cmdline
    return found


def worker_pids(text: str) -> list[int]:
    return [int(pid) for pid in re.findall(r"started \(pid (\d+)\)", text)]


def sweep_json(cli: Callable[..., CliResult], *args: str, code: int = 0) -> dict:
    result = cli("sweep", *args, "--json")
    assert result.code == code, result.err
    return json.loads(result.out)


# --- the sweep file -----------------------------------------------------------------------


def test_grid_times_zip_times_repeats(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = write_sweep(
        tmp_path,
        "repeats = 2\n[grid]\ntrain.lr = [0.1, 0.01]\n"
        '[zip]\n"train.epochs" = [1, 2]\n"train.batch_size" = [16, 64]\n'
        '[set]\n"data.limit" = 64\n',
    )
    monkeypatch.chdir("/")  # the base is found next to the sweep file
    sweep = load_sweep(path)
    assert sweep.name == "lr" and len(sweep.points) == 8
    got = [(p.params, p.seed) for p in sweep.points]
    want = [
        ({"train.lr": lr, "train.epochs": e, "train.batch_size": b}, seed)
        for lr in (0.1, 0.01)
        for e, b in ((1, 16), (2, 64))
        for seed in (0, 1)
    ]
    assert got == want
    for p in sweep.points:
        assert p.exp.train.lr == p.params["train.lr"] and p.exp.run.seed == p.seed
        assert p.exp.train.epochs == p.params["train.epochs"] and p.exp.data.limit == 64
    assert len({p.exp.config_hash() for p in sweep.points}) == 8
    # --set fixes a key in every point, over the file's [set]
    fixed = load_sweep(path, ["data.limit=32", "augment.flip=true"])
    assert [p.params for p in fixed.points] == [p.params for p in sweep.points]
    assert all(p.exp.data.limit == 32 and p.exp.augment.flip for p in fixed.points)


def test_find_study_is_the_newest_of_that_name_and_kind(store: RunStore) -> None:
    assert store.find_study("lr", "sweep") is None
    first = store.create_study("lr", "sweep")
    store.create_study("lr", "scale")
    assert store.find_study("lr", "sweep") == first
    second = store.create_study("lr", "sweep")
    assert store.find_study("lr", "sweep") == second


BAD = {
    "unknown key": ('[grid]\n"train.lrr" = [0.1]\n', [],
                    "unknown key 'train.lrr' (did you mean 'train.lr'?)"),
    "no axes": ("repeats = 2\n", [], "no axes to sweep"),
    "wrong type": ('[grid]\n"train.lr" = [0.1, "fast"]\n', [],
                   "point 2 (train.lr=fast): train.lr: Input should be a valid number"),
    "zip lengths": ('[zip]\n"train.lr" = [0.1, 0.2]\n"train.epochs" = [1]\n', [],
                    "[zip] axes must be of equal length: train.lr has 2, train.epochs has 1"),
    "empty axis": ('[grid]\n"train.lr" = []\n', [], "[grid] 'train.lr' has no values"),
    "jobs 0": ('[grid]\n"train.lr" = [0.1]\n', ["--jobs", "0"], "--jobs must be at least 1"),
    "repeats 0": ('repeats = 0\n[grid]\n"train.lr" = [0.1]\n', [],
                  "repeats: must be at least 1"),
    "unknown top key": ('[grids]\n"train.lr" = [0.1]\n', [], "unknown key 'grids'"),
    "no such study": ('[grid]\n"train.lr" = [0.1]\n', ["--resume", "7"], "no study 7"),
    "on-failure": ('[grid]\n"train.lr" = [0.1]\n', ["--on-failure", "maybe"],
                   "--on-failure 'maybe'"),
    "sort": ('[grid]\n"train.lr" = [0.1]\n', ["--sort", "lr"],
             "--sort 'lr': not a swept key or result column (choose one of train.lr, rank, "
             "test_accuracy, best_val_accuracy, epochs_to_target, time_to_target_s, "
             "throughput)"),
    "set a swept key": ('[grid]\n"train.lr" = [0.1]\n', ["--set", "train.lr=0.5"],
                        "--set train.lr: "),
    "set seed over repeats": ('repeats = 2\n[grid]\n"train.lr" = [0.1]\n',
                              ["--set", "run.seed=3"], "--set run.seed: "),
    "set no value": ('[grid]\n"train.lr" = [0.1]\n', ["--set", "train.epochs"],
                     "--set 'train.epochs': expected KEY=VALUE"),
    "set out of range": ('[grid]\n"train.lr" = [0.1]\n', ["--set", "train.epochs=0"],
                         "train.epochs: must be at least 1"),
}  # fmt: skip


@pytest.mark.parametrize("case", BAD, ids=list(BAD))
def test_bad_input_is_one_line_and_stores_nothing(
    case: str, cli: Callable[..., CliResult], tmp_path: Path, store: RunStore
) -> None:
    body, args, message = BAD[case]
    result = cli("sweep", str(write_sweep(tmp_path, body)), *args)
    assert result.code == 2, result.err
    assert len(result.err.strip().splitlines()) == 1 and message in result.err, result.err
    assert store.list_runs() == [] and store.find_study("lr", "sweep") is None


def test_missing_files_and_a_study_that_is_no_sweep(
    cli: Callable[..., CliResult], tmp_path: Path, store: RunStore
) -> None:
    result = cli("sweep", "nowhere.toml")
    assert result.code == 2 and "nowhere.toml: no such sweep file" in result.err
    path = tmp_path / "nobase.toml"
    path.write_text('base = "gone.toml"\n[grid]\n"train.lr" = [0.1]\n')
    result = cli("sweep", str(path))
    assert result.code == 2 and "base 'gone.toml': no such experiment file" in result.err
    scale = store.create_study("x", "scale")
    result = cli("sweep", str(write_sweep(tmp_path, '[grid]\n"train.lr" = [0.1]\n')),
                 "--resume", str(scale))  # fmt: skip
    assert result.code == 2 and f"study {scale} is a scale study, not a sweep" in result.err
    assert store.list_runs() == []


# --- running ------------------------------------------------------------------------------


def test_sweep_runs_every_point_then_skips_them(
    cli: Callable[..., CliResult], tmp_path: Path, store: RunStore
) -> None:
    path = write_sweep(tmp_path, '[grid]\n"train.lr" = [0.1, 0.02]\n"augment.flip" = [false]\n')
    first = sweep_json(cli, str(path))
    points = first["points"]
    assert [p["params"] for p in points] == [
        {"train.lr": 0.1, "augment.flip": False}, {"train.lr": 0.02, "augment.flip": False}
    ]  # fmt: skip
    for p in points:
        assert p.keys() >= JSON_KEYS and p["status"] == "finished" and not p["skipped"]
        assert store.get_run(p["run_id"]).config["train"]["lr"] == p["params"]["train.lr"]
        assert store.get_run(p["run_id"]).study_id == first["study_id"]
    assert first["winner"] in [p["run_id"] for p in points]
    assert set(first["axis_winners"]) == {"train.lr", "augment.flip"}
    names = {Path(p).name for p in first["plots"]}
    assert names == {"val_error.png", "accuracy_vs_train_lr.png", "time_to_target.png"}
    for plot in first["plots"]:
        assert Path(plot).parent.name == f"study-{first['study_id']}"
        assert Path(plot).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"

    listed = cli("runs", "list")
    assert listed.code == 0 and "lr train.lr=0.02 augment.flip=false" in listed.out

    again = sweep_json(cli, str(path))
    assert again["study_id"] == first["study_id"]
    assert [p["skipped"] for p in again["points"]] == [True, True]
    assert [p["run_id"] for p in again["points"]] == [p["run_id"] for p in points]
    assert [p["test_accuracy"] for p in again["points"]] == [p["test_accuracy"] for p in points]
    assert len(store.list_runs()) == 2

    # A sweep with other points starts its own study, and each resumes its own.
    result = cli("sweep", str(path), "--set", "train.epochs=2", "--json")
    assert result.code == 0, result.err
    other = json.loads(result.out)
    assert other["study_id"] != first["study_id"]
    assert not any(p["skipped"] for p in other["points"])
    assert f"its points differ from those of study {first['study_id']}" in result.err
    assert {r.config["train"]["epochs"] for r in store.list_runs(study_id=other["study_id"])} == {2}
    assert Path(other["directory"]).name == f"study-{other['study_id']}"

    # Each set of points finds its own study again, the newest or not.
    result = cli("sweep", str(path), "--json")
    assert result.code == 0, result.err
    again = json.loads(result.out)
    assert again["study_id"] == first["study_id"] and all(p["skipped"] for p in again["points"])
    assert f"resuming study {first['study_id']}" in result.err
    again = sweep_json(cli, str(path), "--set", "train.epochs=2")
    assert again["study_id"] == other["study_id"] and all(p["skipped"] for p in again["points"])
    assert len(store.list_runs()) == 4

    fresh = sweep_json(cli, str(path), "--new")
    assert fresh["study_id"] not in (first["study_id"], other["study_id"])
    assert len(store.list_runs()) == 6


def table_column(out: str, header: str) -> list[str]:
    """The cells of the first table's column `header`, top to bottom."""
    lines = out.splitlines()
    head = next(i for i, line in enumerate(lines) if line.startswith("rank"))
    at = [c.strip() for c in lines[head].split("┃")].index(header)
    body = itertools.takewhile(lambda line: "│" in line, lines[head + 2 :])
    return [line.split("│")[at].strip() for line in body]


def test_a_sweep_without_a_target_draws_no_time_to_target_and_sorts_by_an_axis(
    cli: Callable[..., CliResult], tmp_path: Path
) -> None:
    untargeted = BASE.replace("[target]\naccuracy = 0.2\n", "")
    path = write_sweep(tmp_path, '[grid]\n"train.lr" = [0.1, 0.01, 0.05]\n', base=untargeted)
    result = cli("sweep", str(path), "--sort", "train.lr")
    assert result.code == 0, result.err
    assert table_column(result.out, "point") == [
        "train.lr=0.01", "train.lr=0.05", "train.lr=0.1"
    ]  # fmt: skip
    assert "points ranked by test accuracy, shown by train.lr" in result.out
    assert "to target" not in result.out  # no column that could only say "-"
    saved = sorted(Path(line[6:]).name for line in result.err.splitlines() if line[:6] == "saved ")
    assert saved == ["accuracy_vs_train_lr.png", "val_error.png"]
    directory = next(tmp_path.glob("dlperf_runs/*/study-1"))
    assert not (directory / "time_to_target.png").exists()

    again = sweep_json(cli, str(path), "--sort", "throughput")  # every point skipped
    throughput = [g["throughput"] for g in again["groups"]]
    assert throughput == sorted(throughput, reverse=True)  # best first
    assert sorted(g["rank"] for g in again["groups"]) == [1, 2, 3]  # the ranks kept
    assert again["target"] is None and "time_to_target.png" not in str(again["plots"])


@pytest.mark.parametrize("on_failure", ["continue", "stop"])
def test_a_failed_point_is_recorded_and_the_sweep_goes_on_or_stops(
    on_failure: str, cli: Callable[..., CliResult], tmp_path: Path, store: RunStore
) -> None:
    # A learning rate of 1e12 makes the loss NaN as the first point trains: it fails. (A
    # mistake the checks before a run catch refuses the whole sweep: test_break_it_4.py.)
    body = '[set]\n"train.momentum" = 0.0\n[grid]\n"train.lr" = [1e12, 0.05]\n'
    path = write_sweep(tmp_path, body)
    result = sweep_json(cli, str(path), "--on-failure", on_failure, code=1)
    statuses = [p["status"] for p in result["points"]]
    assert statuses == (["failed", "finished"] if on_failure == "continue" else ["failed"])
    failed = store.get_run(result["points"][0]["run_id"])
    assert failed.status == "failed" and "loss became" in failed.error
    assert failed.study_id == result["study_id"]


@pytest.mark.parametrize("jobs", ["1", "2"])
def test_sigint_stops_the_sweep_and_a_rerun_resumes_it(
    jobs: str,
    cli: Callable[..., CliResult],
    tmp_path: Path,
    db: str,
    store: RunStore,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Points 1 and 2 train 4 steps and never reach step 6; point 3 trains 8 and is stopped
    there. Under --jobs 2 point 3 starts only once point 1 or 2 has ended and freed its
    worker's place; the signal finds the other finished or training. The points that 2
    workers of 1 thread each ran are found again by a rerun in this process (--jobs 1).
    --jobs 1 trains its points in dlperf's own process: that sweep runs in this process and
    SIGINTs itself at step 6 (the signal_in_exec hook), through the CLI's own stop handling,
    as test_break_it_27_resume.py stops a run; --jobs 2's real process and its workers
    take a real SIGINT from outside, parked at step 6."""
    body = '[zip]\n"train.epochs" = [1, 1, 2]\n"train.lr" = [0.1, 0.05, 0.05]\n'
    path = write_sweep(tmp_path, body)
    if jobs == "1":
        install(monkeypatch, "signal_in_exec", "6:INT")
        interrupted = cli("sweep", str(path), "--jobs", jobs)
        for name in (HOOKS_ENV, SIGNAL_ENV):
            monkeypatch.delenv(name)
        assert interrupted.code == 130, interrupted.err
        err = interrupted.err
    else:
        proc = start_sweep(tmp_path, db, str(path), "--jobs", jobs, pause_at=6)
        try:
            wait_for(lambda: (tmp_path / "parked").exists(), "point 3 to park at step 6")
            wait_for(lambda: len(worker_pids((tmp_path / "stderr.txt").read_text())) == 3,
                     "the third worker")  # fmt: skip
            assert proc.pid is not None
            os.kill(proc.pid, signal.SIGINT)
            proc.join(timeout=EVENT_S)
            assert proc.exitcode == 130, (tmp_path / "stderr.txt").read_text()
        finally:
            proc.kill()
            proc.join()
        err = (tmp_path / "stderr.txt").read_text()
    params = [(1, 0.1), (1, 0.05), (2, 0.05)]
    runs = {(r.config["train"]["epochs"], r.config["train"]["lr"]): r for r in store.list_runs()}
    stopped = [runs[p] for p in params]
    assert stopped[2].status == "killed"
    if jobs == "1":  # one after the other: the first two ended before point 3 began
        assert [r.status for r in stopped[:2]] == ["finished", "finished"]
    else:  # each worker's config: the 2 cores split between the 2 jobs
        assert {r.config["run"]["threads"] for r in stopped} == {max(1, usable_cores() // 2)}
    pids = worker_pids(err)
    assert len(pids) == (0 if jobs == "1" else 3)
    assert not any(alive(pid) for pid in pids) and processes_under(tmp_path) == {}

    result = sweep_json(cli, str(path))
    rows = result["points"]
    assert [(p["params"]["train.epochs"], p["params"]["train.lr"]) for p in rows] == params
    for row, run in zip(rows[:2], stopped[:2], strict=True):
        assert row["skipped"] == (run.status == "finished")
        assert row["status"] == "finished"
    assert not rows[2]["skipped"] and rows[2]["status"] == "finished"
    assert rows[2]["run_id"] != stopped[2].id
    assert store.get_run(stopped[2].id).status == "killed"
    assert {r.study_id for r in store.list_runs()} == {result["study_id"]}


def test_workers_die_with_a_sigkilled_sweep(tmp_path: Path, db: str) -> None:
    # One point: its one worker started by the supervisor, as under --jobs 2 every worker is.
    path = write_sweep(tmp_path, '[grid]\n"train.lr" = [0.1]\n')
    proc = start_sweep(tmp_path, db, str(path), "--jobs", "2", pause_at=2)
    try:
        wait_for(lambda: (tmp_path / "parked").exists(), "the worker to park")
        pids = worker_pids((tmp_path / "stderr.txt").read_text())
        assert pids
        proc.kill()  # SIGKILL
        proc.join(timeout=EVENT_S)
        wait_for(
            lambda: not processes_under(tmp_path) and not any(alive(pid) for pid in pids),
            "the worker to die with dlperf",
        )
    finally:
        proc.kill()
        proc.join()


def test_load_sweep_names_the_closest_key(tmp_path: Path) -> None:
    path = write_sweep(tmp_path, '[grid]\n"trian.lr" = [0.1]\n')
    with pytest.raises(UserError, match=r"unknown key 'trian' \(did you mean 'train'\?\)"):
        load_sweep(path)


# --- the summary and its figures ----------------------------------------------------------


def test_validation_curves_are_one_line_per_point_with_a_band_over_its_seeds() -> None:
    from dlperf.report.sweep import draw_val_error
    from dlperf.sweep.summary import mean_curves

    curves = [
        ({"m": 1}, [(1, 0.5), (2, 0.7)]),
        ({"m": 2}, [(1, 0.4), (2, 0.8), (3, 0.85)]),
        ({"m": 1}, [(1, 0.6), (2, 0.9)]),
    ]
    mean = mean_curves(curves)
    assert [(c["params"], c["runs"], c["epochs"]) for c in mean] == [
        ({"m": 1}, 2, [1, 2]), ({"m": 2}, 1, [1, 2, 3])
    ]  # fmt: skip
    assert mean[0]["mean"] == pytest.approx([0.55, 0.8])
    assert (mean[0]["min"], mean[0]["max"]) == ([0.5, 0.7], [0.6, 0.9])

    (ax,) = draw_val_error(mean).axes
    assert [line.get_label() for line in ax.lines] == ["m=1 (mean of 2 seeds)", "m=2"]
    assert list(ax.lines[0].get_ydata()) == pytest.approx([0.45, 0.2])  # error = 1 - accuracy
    assert len(ax.collections) == 1  # a band where there are seeds to spread
    low, high = ax.get_xlim()
    ticks = [t for t in ax.get_xticks() if low <= t <= high]
    assert ticks and all(t == int(t) for t in ticks), ticks


def test_repeats_give_mean_and_spread_and_an_unreached_target_draws_no_bars(
    cli: Callable[..., CliResult], tmp_path: Path
) -> None:
    unreachable = BASE.replace("accuracy = 0.2", "accuracy = 0.999")
    path = write_sweep(
        tmp_path, 'repeats = 2\n[grid]\n"train.lr" = [0.1, 0.05]\n', base=unreachable
    )
    result = cli("sweep", str(path))
    assert result.code == 0, result.err
    assert "no point reached the target (validation accuracy 0.999)" in result.out
    assert table_column(result.out, "epochs to target") == ["not reached (0/2)"] * 2
    for cell in table_column(result.out, "wall s for 1 epoch (train+eval)"):  # HW3 P4.3
        # a spread of two nearly equal walls prints as the table prints small numbers: 1e-05
        assert re.fullmatch(r"[\d.]+ ± [\d.]+(e-\d+)?", cell), cell
    saved = sorted(Path(line[6:]).name for line in result.err.splitlines() if line[:6] == "saved ")
    assert saved == ["accuracy_vs_train_lr.png", "val_error.png"]
    assert not next(tmp_path.glob("dlperf_runs/*/study-1/time_to_target.png"), None)

    again = sweep_json(cli, str(path))
    for group in again["groups"]:
        elapsed = [p["elapsed_s"] for p in again["points"] if p["params"] == group["params"]]
        assert group["elapsed_s"] == pytest.approx(sum(elapsed) / 2)
        assert group["elapsed_s_std"] == pytest.approx(abs(elapsed[0] - elapsed[1]) / 2**0.5)
        assert group["epochs"] == 1 and group["reached_target"] == 0
