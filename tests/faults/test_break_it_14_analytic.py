"""The fourteenth break-it round (issue 41, part C), the analytic side: a device file's PPP,
and the receptive field through circular padding.

C5. A devices file's `ppp = 2` was taken: `dlperf predict smallcnn --device mydev` said
"PPP 2 of the mydev entry" and predicted twice as fast as the peak, exit 0, while
`--ppp 1.5` is refused ("must be at most 1"). A device's `ppp` is plain PALEO's fraction of
the peak, as `--ppp` is: the file check refuses it outside (0, 1] in one line naming the
file, the entry and the key, exit 2, as it did for 0, under `predict`, `devices` and
`calibrate` (before it measures: the file it would add to is checked first). `ppp_by_kind`
and `ppp_mem` stay open above 1: they are what `dlperf calibrate` measured, kept as measured
(docs/analyze.md: a convolution that beats the square-matmul peak has a kind PPP above 1),
and a file refusing them would refuse the calibration dlperf wrote.

C8. `Sequential(Conv2d(3,4,3), Conv2d(4,4,3,padding=1,padding_mode='circular'), ReLU)`
said "undefined (... aten.new_empty in 1); last spatial layer 1: 3x3 px": 3x3 is layer 0's
field, named as layer 1's. Circular padding wraps a border unit's field around to the
opposite edge, which no window (size, jump, start) describes: the field ends there, the
reason says so in words, and the last spatial layer is the one whose map went into the
padding, with its own field.
"""

from __future__ import annotations

import json
import tomllib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch

from dlperf.analytic import recorded
from dlperf.analytic.interleaved import SameMoment
from dlperf.store import RunStore
from tests.analytic.test_recorded import fitted_device
from tests.cli.test_app import one_line_error
from tests.conftest import CliResult

Cli = Callable[..., CliResult]

# The tester's device (/tmp/bk14/C/in/dev_ppp2.toml) with its PPP left to each test.
MYDEV = """
[mydev]
peak_tflops = { fp32 = 10 }
memory_bandwidth_gbs = 1000
source = "me"
date = "2026-01"
"""


def devices_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, extra: str) -> Path:
    path = tmp_path / "devices.toml"
    path.write_text(MYDEV + extra)
    monkeypatch.setenv("DLPERF_DEVICES", str(path))
    return path


# --- C5: a device's PPP is a fraction of the peak ---------------------------------------------


@pytest.mark.parametrize("ppp", ["2", "1.0000001", "1e308"])
@pytest.mark.parametrize("command", [["predict", "smallcnn", "--device", "mydev"], ["devices"]])
def test_a_device_ppp_above_1_is_one_line_naming_file_entry_and_key(
    cli: Cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, ppp: str, command: list[str]
) -> None:
    path = devices_file(tmp_path, monkeypatch, f"ppp = {ppp}\n")
    one_line_error(
        cli(*command), f"device mydev: ppp: Input should be less than or equal to 1 (see {path})"
    )


def test_a_device_ppp_of_0_is_still_refused(
    cli: Cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = devices_file(tmp_path, monkeypatch, "ppp = 0\n")
    one_line_error(
        cli("devices"),
        f"device mydev: ppp: Input should be greater than or equal to 0.000001 (see {path})",
    )


def test_a_device_ppp_of_1_is_the_peak_and_taken(
    cli: Cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    devices_file(tmp_path, monkeypatch, "ppp = 1\n")
    done = cli("devices", "--json")
    assert done.code == 0, done.err
    assert json.loads(done.out)["mydev"]["ppp"] == 1.0


def test_calibrated_kind_ppps_and_ppp_mem_above_1_are_kept_as_measured(
    cli: Cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # What `dlperf calibrate` wrote on this VM (docs/benchmarks.md): conv 1.20, matmul 1.36.
    devices_file(
        tmp_path, monkeypatch, "ppp_mem = 1.5\nppp_by_kind = { conv = 1.2, matmul = 1.36 }\n"
    )
    done = cli("devices", "--json")
    assert done.code == 0, done.err
    mydev = json.loads(done.out)["mydev"]
    assert (mydev["ppp_by_kind"], mydev["ppp_mem"]) == ({"conv": 1.2, "matmul": 1.36}, 1.5)


def test_calibrate_checks_the_devices_file_before_it_measures(
    cli: Cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, store: RunStore
) -> None:
    path = devices_file(tmp_path, monkeypatch, "ppp = 2\n")

    def never(*args: Any) -> Any:
        raise AssertionError("measured before the devices file was checked")

    for name in ("calibrate", "pick_device", "set_threads"):
        monkeypatch.setattr(recorded, name, never)
    one_line_error(
        cli("calibrate", "--name", "box"),
        f"device mydev: ppp: Input should be less than or equal to 1 (see {path})",
    )
    assert store.list_runs() == []  # a mistake caught up front: no run stored as failed
    assert path.read_text() == MYDEV + "ppp = 2\n"


def test_calibrate_still_makes_a_devices_file_that_is_not_there_yet(
    cli: Cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, store: RunStore
) -> None:
    path = tmp_path / "new" / "devices.toml"
    monkeypatch.setenv("DLPERF_DEVICES", str(path))
    times = {"matmul_fp32": [1.0, 1.0, 1.0], "copy": [2.0, 2.0, 2.0]}
    monkeypatch.setattr(
        recorded, "calibrate", lambda *a: SameMoment(fitted_device(), [], {}, None, times)
    )
    monkeypatch.setattr(recorded, "pick_device", lambda spec: torch.device("cpu"))
    monkeypatch.setattr(recorded, "set_threads", lambda threads: 2)
    done = cli("calibrate", "--name", "box", "--json")
    assert done.code == 0, done.err
    assert json.loads(done.out)["path"] == str(path)
    assert tomllib.loads(path.read_text())["box"]["ppp_by_kind"] == {"conv": 0.6}
    assert [run.status for run in store.list_runs()] == ["finished"]


# --- C8: the receptive field through circular padding -----------------------------------------

# The tester's rf2.py, with the other padding modes and zero padding beside it.
PADDED = """
import torch.nn as nn


def padded(mode):
    return nn.Sequential(nn.Conv2d(3, 4, 3), nn.Conv2d(4, 4, 3, padding=1, padding_mode=mode),
                         nn.ReLU())


def net(num_classes=10): return padded("circular")
def reflect(num_classes=10): return padded("reflect")
def replicate(num_classes=10): return padded("replicate")
def zeros(num_classes=10): return padded("zeros")


def pad_layer(num_classes=10):
    return nn.Sequential(nn.Conv2d(3, 4, 3), nn.CircularPad2d(1), nn.Conv2d(4, 4, 3))
"""


def field(cli: Cli, tmp_path: Path, factory: str) -> dict[str, Any]:
    (tmp_path / "rf2.py").write_text(PADDED)
    done = cli("analyze", f"rf2.py:{factory}", "--input", "3,16,16", "--json")
    assert done.code == 0, done.err
    rf: dict[str, Any] = json.loads(done.out)["totals"]["receptive_field"]
    return rf


@pytest.mark.parametrize("factory", ["net", "pad_layer"])
def test_circular_padding_ends_the_field_at_the_layer_before_it(
    cli: Cli, tmp_path: Path, factory: str
) -> None:
    rf = field(cli, tmp_path, factory)
    assert rf == {
        "defined": False,
        "reason": "circular padding in 1 wraps the field around the edges",
        "last_spatial_layer": "0",  # layer 0's own 3x3 field, under its own name
        "size": [3, 3],
        "jump": [1, 1],
        "start": [1.5, 1.5],
    }


def test_the_table_says_it_in_words(cli: Cli, tmp_path: Path) -> None:
    (tmp_path / "rf2.py").write_text(PADDED)
    done = cli("analyze", "rf2.py:net", "--input", "3,16,16")
    assert done.code == 0, done.err
    [row] = [line for line in done.out.splitlines() if "receptive field" in line]
    assert "undefined (circular padding in 1 wraps the field around the edges); " in row
    assert "last spatial layer 0: 3x3 px, jump 1x1, start 1.5,1.5" in row
    assert "aten." not in row


@pytest.mark.parametrize(
    ("factory", "padding"), [("reflect", "reflection"), ("replicate", "replication")]
)
def test_reflect_and_replicate_padding_end_the_field_in_words(
    cli: Cli, tmp_path: Path, factory: str, padding: str
) -> None:
    rf = field(cli, tmp_path, factory)
    assert not rf["defined"]
    assert rf["reason"] == f"{padding} padding in 1 is not followed"
    assert (rf["last_spatial_layer"], rf["size"]) == ("0", [3, 3])


def test_zero_padding_is_followed(cli: Cli, tmp_path: Path) -> None:
    rf = field(cli, tmp_path, "zeros")
    assert rf == {"defined": True, "size": [5, 5], "jump": [1, 1], "start": [1.5, 1.5]}
