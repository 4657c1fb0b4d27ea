"""Break-it round 16 (part C, cause C): a devices-file entry the user wrote with
`op_overhead_us` or `ppp_by_kind` was labelled "calibrated" ("prediction from calibration",
"calibrated 2026-01 on odd1"): nothing was calibrated, and the entry's own `ppp` was named
nowhere. An entry is calibrated when `dlperf calibrate` wrote it (its `source` says so); any
other entry with figures of its own is the `device ppp` basis, its label naming the PPPs the
arithmetic used (per kind where the entry gives them), and the row says "+ calls" when the
entry's call overhead is in the time."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from dlperf.analytic.devices import KINDS
from dlperf.analytic.paleo import CALIBRATED_BY
from tests.analytic.test_interleaved import totals_rows
from tests.conftest import CliResult

Cli = Callable[..., CliResult]

# The tester's two entries (/tmp/bk16/C/report.md, C), as written.
DEVICES = """
[odd1]
peak_tflops = { fp32 = 10.0, fp16 = 40.0 }
memory_bandwidth_gbs = 500
ppp = 0.5
ppp_mem = 0.8
op_overhead_us = 10
source = "test"
date = "2026-01"

[odd2]
peak_tflops = { fp32 = 2.0 }
memory_bandwidth_gbs = 100
ppp_by_kind = { conv = 0.7, matmul = 1.3, pool = 0.2 }
ppp = 0.9
source = "test"
date = "2026-01"
"""


@pytest.fixture(autouse=True)
def devices(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "devices.toml"
    path.write_text(DEVICES)
    monkeypatch.setenv("DLPERF_DEVICES", str(path))
    return path


def predict(cli: Cli, device: str, *json: str) -> CliResult:
    done = cli("predict", "smallcnn", "--device", device, "--batch", "3", *json)
    assert done.code == 0, done.err
    return done


def test_an_entry_with_a_call_overhead_is_its_own_ppp_not_a_calibration(cli: Cli) -> None:
    doc = json.loads(predict(cli, "odd1", "--json").out)
    assert doc["basis"] == {
        "kind": "device ppp",
        "device": "odd1",
        "ppp": None,
        "calibrated_at": None,
        "on": None,
        "interleaved": False,
        "label": "PPP 0.5 of the odd1 entry",
    }
    t = doc["totals"]
    assert t["overhead_s"] == pytest.approx(t["calls"] * 10e-6)  # the entry's 10 µs a call
    rows = totals_rows(predict(cli, "odd1").out)
    assert "prediction at the device's PPP, compute + memory + calls: time per batch (ms)" in rows
    assert rows["basis"] == "PPP 0.5 of the odd1 entry"


def test_an_entry_with_ppp_by_kind_names_its_own_figures_and_uses_them(cli: Cli) -> None:
    doc = json.loads(predict(cli, "odd2", "--json").out)
    label = "PPP conv 0.7, matmul 1.3, pool 0.2, else 0.9 of the odd2 entry"
    assert (doc["basis"]["kind"], doc["basis"]["label"]) == ("device ppp", label)
    assert doc["basis"]["calibrated_at"] is None and doc["basis"]["on"] is None
    own = {"conv": 0.7, "matmul": 1.3, "pool": 0.2}
    t = doc["totals"]
    compute = sum(t["flops_by_kind"][k] / (2e12 * own.get(k, 0.9)) for k in KINDS)
    assert t["flops_by_kind"]["conv"] and t["flops_by_kind"]["matmul"]  # both kinds weigh in
    assert t["compute_s"] == pytest.approx(compute)
    rows = totals_rows(predict(cli, "odd2").out)
    assert "prediction at the device's PPP, compute + memory: time per batch (ms)" in rows
    assert rows["basis"] == label


def test_an_entry_dlperf_calibrate_wrote_is_still_calibrated(cli: Cli, devices: Path) -> None:
    devices.write_text(
        '[box]\ndescription = "a 2-core CPU, 2 threads"\nkind = "cpu"\n'
        "peak_tflops = { fp32 = 0.1 }\nmemory_bandwidth_gbs = 10\nppp_mem = 0.5\n"
        "op_overhead_us = 5.0\nppp_by_kind = { conv = 0.8 }\nthreads = 2\n"
        f'source = "{CALIBRATED_BY}: medians of 5 interleaved rounds"\n'
        'date = "2026-11-23T09:00:00+00:00"\n'
    )
    doc = json.loads(predict(cli, "box", "--json").out)
    assert doc["basis"]["kind"] == "calibrated"
    assert (
        doc["basis"]["label"] == "calibrated 2026-11-23T09:00:00+00:00 on a 2-core CPU, 2 threads"
    )
    rows = totals_rows(predict(cli, "box").out)
    assert "prediction from calibration, compute + memory + calls: time per batch (ms)" in rows


def test_an_entry_with_only_a_call_overhead_is_its_own_figures_at_ppp_1(
    cli: Cli, devices: Path
) -> None:
    devices.write_text(
        "[slow]\npeak_tflops = { fp32 = 1.0 }\nmemory_bandwidth_gbs = 50\nop_overhead_us = 20\n"
        'source = "me"\ndate = "2026-02"\n'
    )
    doc = json.loads(predict(cli, "slow", "--json").out)
    assert (doc["basis"]["kind"], doc["basis"]["label"]) == (
        "device ppp",
        "PPP 1 of the slow entry",
    )
    rows = totals_rows(predict(cli, "slow").out)
    assert "prediction at the device's PPP, compute + memory + calls: images/s" in rows
    # its time has the calls in it, so the peak's own figures are shown beside it
    assert "peak (PPP=1), compute + memory: images/s" in rows
