"""Caps on what a sweep file may ask for (issue 41): the points are counted before any is
made, a sweep of more than `max_points` is refused in one line, and a large sweep that is
allowed reports its checking and stops at once on Ctrl-C."""

from __future__ import annotations

import os
import resource
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from dlperf.errors import UserError
from dlperf.sweep import load_sweep

EVENT_S = 300  # how long a busy machine may take to get somewhere: a deadline, not a wait
BASE = """
[model]
name = "smallcnn"
[data]
name = "digits"
[run]
threads = 1
out_dir = "{out}"
"""
# 300 x 300 x 300: 27 million points from under 6 KB of TOML.
HUGE_GRID = "\n".join(
    f'"{key}" = [{", ".join(str(v) for v in values)}]'
    for key, values in {
        "train.lr": [round(0.001 * (i + 1), 3) for i in range(300)],
        "train.batch_size": range(1, 301),
        "train.epochs": range(1, 301),
    }.items()
)


def write_sweep(root: Path, body: str) -> Path:
    (root / "base.toml").write_text(BASE.format(out=root / "runs"))
    path = root / "big.toml"
    path.write_text(f'base = "base.toml"\n{body}')
    return path


def dlperf(root: Path, *args: str) -> subprocess.Popen[bytes]:
    """`dlperf ARGS` as a real process with its own store, its address space capped at 2 GiB
    (what it needs is a fraction of that: were it to expand the points, it would fail here
    rather than take the machine's memory), taking SIGINT as a terminal's Ctrl-C delivers it."""

    def cap_memory() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (2 * 2**30, 2 * 2**30))

    env = {**os.environ, "DLPERF_DB": f"sqlite:///{root / 'dlperf.db'}", "OMP_NUM_THREADS": "1"}
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with open(root / "stderr.txt", "wb") as err:
            return subprocess.Popen(
                [sys.executable, "-m", "dlperf", *args],
                cwd=root, env=env, stdout=subprocess.DEVNULL, stderr=err, preexec_fn=cap_memory,
            )  # fmt: skip
    finally:
        signal.signal(signal.SIGINT, previous)


def finish(proc: subprocess.Popen[bytes], timeout: float = EVENT_S) -> int:
    try:
        return proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        raise


def test_a_huge_grid_is_refused_in_one_line_before_any_point_is_made(tmp_path: Path) -> None:
    sweep = write_sweep(tmp_path, f"[grid]\n{HUGE_GRID}\n")
    assert sweep.stat().st_size < 6_000
    code = finish(dlperf(tmp_path, "sweep", sweep.name), timeout=120)
    err = (tmp_path / "stderr.txt").read_text()
    assert err == (
        "error: big.toml: 27,000,000 points (300 x 300 x 300) is more than max_points = "
        "10,000 (give the axes fewer values, or raise max_points in the sweep file if every "
        "point is meant to run)\n"
    )
    assert code == 2
    assert not (tmp_path / "dlperf.db").exists()  # refused before the store was opened


def test_the_count_multiplies_grid_zip_rows_and_repeats(tmp_path: Path) -> None:
    axes = """repeats = 2
[grid]
"train.lr" = [0.1, 0.05, 0.01]
"train.batch_size" = [16, 32]
[zip]
"train.epochs" = [1, 2]
"train.momentum" = [0.0, 0.9]
"""
    sweep = write_sweep(tmp_path, f"max_points = 23\n{axes}")
    with pytest.raises(UserError) as refused:
        load_sweep(sweep)
    assert refused.value.message == (
        f"{sweep}: 24 points (3 x 2 x 2 zip rows x 2 repeats) is more than max_points = 23"
    )
    sweep.write_text(sweep.read_text().replace("max_points = 23", "max_points = 24"))
    points = load_sweep(sweep).points
    assert len(points) == 24
    # Made one at a time, in the documented order: the grid's first axis slowest, then the
    # zip's rows, then seeds.
    assert [p.label() for p in points[:5]] == [
        "train.lr=0.1 train.batch_size=16 train.epochs=1 train.momentum=0.0 seed=0",
        "train.lr=0.1 train.batch_size=16 train.epochs=1 train.momentum=0.0 seed=1",
        "train.lr=0.1 train.batch_size=16 train.epochs=2 train.momentum=0.9 seed=0",
        "train.lr=0.1 train.batch_size=16 train.epochs=2 train.momentum=0.9 seed=1",
        "train.lr=0.1 train.batch_size=32 train.epochs=1 train.momentum=0.0 seed=0",
    ]


@pytest.mark.parametrize("value", ["0", "-5", "2147483648", '"many"'])
def test_max_points_must_be_a_count(tmp_path: Path, value: str) -> None:
    sweep = write_sweep(tmp_path, f'max_points = {value}\n[grid]\n"train.lr" = [0.1]\n')
    with pytest.raises(UserError, match="max_points"):
        load_sweep(sweep)


def test_ctrl_c_while_a_large_sweep_is_checked_stops_it_at_once(tmp_path: Path) -> None:
    """A million points are allowed here, and checking them would take about 20 minutes:
    the check says so before it starts, and Ctrl-C ends it with 130, nothing stored."""
    values = ", ".join(str(i) for i in range(1, 1001))
    body = f'max_points = 1000000\n[grid]\n"train.epochs" = [{values}]\n"data.limit" = [{values}]\n'
    proc = dlperf(tmp_path, "sweep", write_sweep(tmp_path, body).name)
    stderr = tmp_path / "stderr.txt"
    announced = "sweep 'big': checking 1,000,000 points before the first one runs"
    deadline = time.monotonic() + EVENT_S
    try:
        while announced not in stderr.read_text():
            assert proc.poll() is None, stderr.read_text()
            assert time.monotonic() < deadline, "the sweep never said it was checking points"
            time.sleep(0.05)
        proc.send_signal(signal.SIGINT)
        sent = time.monotonic()
        code = finish(proc, timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    print(f"exited {time.monotonic() - sent:.2f} s after SIGINT")
    assert code == 130, stderr.read_text()
    assert "Traceback" not in stderr.read_text()
    assert not (tmp_path / "dlperf.db").exists()
