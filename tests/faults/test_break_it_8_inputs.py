"""What the eighth break-it round found in the inputs (issue 41, half A), each seen failing
before its fix: device figures, the device file's types, calibrate's name, a FIFO given as
the experiment file and a tracked config nested past Python's recursion limit."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import dlperf
from dlperf.errors import UserError
from tests.conftest import CliResult
from tests.faults.test_break_it_7 import device_refused


@pytest.mark.parametrize(
    ("override", "said"),
    [
        # 1e312 FLOP/s is inf: "inf TFLOPS", 0 ms and inf images/s, exit 0
        ("peak_tflops = { fp32 = 1e300 }", "peak_tflops.fp32"),
        # with the bandwidth inf too, a ZeroDivisionError traceback
        ("peak_tflops = { fp32 = 1e300 }\nmemory_bandwidth_gbs = 1e300", "peak_tflops.fp32"),
        ("memory_bandwidth_gbs = 1e300", "memory_bandwidth_gbs"),
        # strings and bools the file took as numbers, as experiment files refuse them
        ('peak_tflops = { fp32 = "10" }', "peak_tflops.fp32"),
        ("ppp = true", "ppp"),
        ('memory_bandwidth_gbs = "900"', "memory_bandwidth_gbs"),
    ],
)
def test_a_device_figure_too_large_or_not_a_number_is_one_line(
    override: str,
    said: str,
    cli: Callable[..., CliResult],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    device_refused(cli, tmp_path, monkeypatch, override, said)


def test_whole_numbers_in_a_device_file_still_read_as_figures(
    cli: Callable[..., CliResult], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Strict types must not refuse `fp32 = 10` for a float: TOML writes 10 as an integer."""
    devices = tmp_path / "devices.toml"
    devices.write_text(
        '[MINE]\nsource = "test"\ndate = "2026-11"\npeak_tflops = { fp32 = 10 }\n'
        "memory_bandwidth_gbs = 900\nppp = 1\nthreads = 4\n"
    )
    monkeypatch.setenv("DLPERF_DEVICES", str(devices))
    r = cli("predict", "smallcnn", "--device", "MINE", "--batch", "8", "--json")
    assert r.code == 0, r.err
    assert '"peak_flops": 10000000000000.0' in r.out


@pytest.mark.parametrize("name", [" ", "", "a\tb", "gpu\x1b[31m"])
def test_calibrate_refuses_a_blank_or_control_character_name(
    name: str, cli: Callable[..., CliResult], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`--name ' '` saved a device named " ", a blank row in `dlperf devices`."""
    devices = tmp_path / "devices.toml"
    monkeypatch.setenv("DLPERF_DEVICES", str(devices))
    r = cli("calibrate", "--name", name)
    assert r.code == 2, r.err
    assert r.err.startswith("error: --name: a device name is printable text, got "), r.err
    assert r.err.count("\n") == 1
    assert not devices.exists()


@pytest.mark.parametrize("command", ["config show", "run"])
def test_a_fifo_as_the_experiment_file_is_not_called_missing(
    command: str, cli: Callable[..., CliResult], tmp_path: Path
) -> None:
    fifo = tmp_path / "fifo.toml"
    os.mkfifo(fifo)
    r = cli(*command.split(), str(fifo))
    assert r.code == 2
    assert r.err.startswith(f"error: experiment file {fifo} is not a regular file"), r.err
    assert r.err.count("\n") == 1


def _nested(kind: str, levels: int) -> Any:
    value: Any = 1.0
    for _ in range(levels):
        value = [value] if kind == "list" else {"k": value}
    return value


@pytest.mark.parametrize(("kind", "levels"), [("list", 5000), ("dict", 2000), ("dict", 40)])
def test_a_tracked_config_nested_too_deeply_is_a_user_error(
    kind: str, levels: int, tmp_path: Path
) -> None:
    """Past Python's recursion limit, a RecursionError traceback from the config's check."""
    too_deep = r"^config is nested too deeply \(dlperf reads at most"
    config, db = {"deep": _nested(kind, levels)}, tmp_path / "t.db"
    with pytest.raises(UserError, match=too_deep), dlperf.track("t", config, store=db):
        pass


def test_a_tracked_config_nested_within_the_limit_is_stored(tmp_path: Path) -> None:
    with dlperf.track("t", config={"deep": _nested("dict", 30)}, store=tmp_path / "t.db") as r:
        r.log(1, x=1.0)


def test_a_peak_flag_no_machine_has_is_one_line(cli: Callable[..., CliResult]) -> None:
    """`predict --peak-tflops 1e300` printed inf images/s, exit 0: the flag holds to the
    device file's ceiling."""
    r = cli("predict", "smallcnn", "--device", "V100", "--peak-tflops", "1e300")
    assert r.code == 2 and "peak_tflops" in r.err and r.err.count("\n") == 1, r.err
    assert cli("predict", "smallcnn", "--device", "V100", "--peak-tflops", "8.73").code == 0
