"""Break-it round 56, fixer G6: staleness sums past the float range, and a devices file that
overrides part of a built-in GPU's peaks.

- T2 C2 (wrong number): `staleness` checked each completion time and latency on its own, but
  a time plus a latency past the float range became inf: two such arrivals tied and were
  applied in the order the learners were given, not the order they arrive (`inf` in the
  table, `null` in --json, exit 0). Now a simulation whose clock would pass what a float
  holds is refused in one line (exit 2) before anything is simulated.
- T2 C4 (message): `[V100] peak_tflops = { fp32 = 1.0 }` in the user's file replaced the
  built-in peaks whole: `--precision fp16` said "no fp16 peak in the catalog" (the catalog
  has 125), and the basis credited the datasheet with the user's 1 TFLOPS. Now tables inside
  an entry are merged key by key too (a calibration's measured peaks still replace the
  vendor's whole), and the basis names the user's file for a figure the prediction took
  from it.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path

import pytest

from dlperf.analytic.devices import load_catalog
from dlperf.analytic.paleo import CALIBRATED_BY, basis
from dlperf.converge import staleness
from dlperf.errors import UserError
from tests.conftest import CliResult

PAST_FLOAT = "completion times plus latencies pass what a float holds"


@pytest.mark.parametrize(
    ("learners", "push", "pull"),
    [
        ({"L1": [1.7e308], "L2": [1e308]}, 1e308, 0.0),  # two arrivals at inf, tied
        ({"L1": [1.0, 1e308]}, 0.0, 1.7e308),  # the second gradient's start
        ({"L1": [1.0, 1.7e308]}, 0.0, 0.0),  # fine: the times alone
    ],
)
def test_a_clock_past_the_float_range_is_refused(
    learners: dict[str, list[float]], push: float, pull: float
) -> None:
    if push == pull == 0.0:
        assert staleness.simulate(learners)[-1].time == 1.7e308
        return
    with pytest.raises(UserError, match=PAST_FLOAT):
        staleness.simulate(learners, push, pull)


def test_the_cli_refuses_it_in_one_line(cli: Callable[..., CliResult]) -> None:
    r = cli(
        "staleness", "--learner", "L1=1.7e308", "--learner", "L2=1e308", "--push-latency", "1e308"
    )
    assert r.code == 2, r.out
    assert PAST_FLOAT in r.err and len(r.err.strip().splitlines()) == 1, r.err
    assert "inf" not in r.out
    r = cli("staleness", "--learner", "L1=1,1e308", "--pull-latency", "1.7e308", "--json")
    assert r.code == 2 and PAST_FLOAT in r.err, r.out + r.err


def test_a_large_finite_schedule_keeps_its_order(cli: Callable[..., CliResult]) -> None:
    # the tester's schedule at a scale a float holds: L2 arrives first (2e307 before 2.7e307)
    r = cli(
        "staleness", "--learner", "L1=1.7e307", "--learner", "L2=1e307", "--push-latency", "1e307",
        "--json",
    )  # fmt: skip
    assert r.code == 0, r.err
    order = [(g["learner"], g["time"], g["staleness"]) for g in json.loads(r.out)["gradients"]]
    assert order == [("L2", 2e307, 0), ("L1", pytest.approx(2.7e307), 1)]


@pytest.fixture
def v100_fp32(tmp_path: Path) -> Path:
    path = tmp_path / "v100.toml"
    path.write_text("[V100]\npeak_tflops = { fp32 = 1.0 }\n")
    return path


def test_a_partial_peak_table_keeps_the_other_precisions(v100_fp32: Path) -> None:
    built_in = load_catalog(v100_fp32.parent / "none.toml")["V100"]
    mine = load_catalog(v100_fp32)["V100"]
    assert mine.peak_tflops == {**built_in.peak_tflops, "fp32": 1.0}
    assert mine.peak_flops("fp16") == built_in.peak_flops("fp16")


def test_the_basis_names_the_file_of_a_figure_from_it(v100_fp32: Path) -> None:
    v100 = load_catalog(v100_fp32)["V100"]
    datasheet = f"{v100.source}, {v100.date}"
    assert basis(v100, None, precision="fp32").label == (
        f"peak (PPP=1) of V100 ({datasheet}; peak_tflops.fp32 from {v100_fp32})"
    )
    assert basis(v100, 0.5, precision="fp32").label.endswith(
        f"; peak_tflops.fp32 from {v100_fp32})"
    )
    # at fp16 every figure the prediction uses is the datasheet's
    assert basis(v100, None, precision="fp16").label == f"peak (PPP=1) of V100 ({datasheet})"


def test_predict_at_another_precision_and_its_basis(
    cli: Callable[..., CliResult], v100_fp32: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DLPERF_DEVICES", str(v100_fp32))
    r = cli("predict", "smallcnn", "--device", "V100", "--precision", "fp16", "--json")
    assert r.code == 0, r.err
    assert "from" not in json.loads(r.out)["basis"]["label"]
    r = cli("predict", "smallcnn", "--device", "V100", "--json")
    assert r.code == 0, r.err
    assert json.loads(r.out)["basis"]["label"].endswith(f"; peak_tflops.fp32 from {v100_fp32})")


def test_a_calibration_keeps_its_measured_peaks_whole(tmp_path: Path) -> None:
    path = tmp_path / "devices.toml"
    path.write_text(
        f"[A100-40GB]\npeak_tflops = {{ fp32 = 9.0 }}\nmemory_bandwidth_gbs = 800\n"
        f'source = "{CALIBRATED_BY}: a test"\ndate = "2026-11-30"\n'
    )
    a100 = load_catalog(path)["A100-40GB"]
    assert a100.peak_tflops == {"fp32": 9.0}  # no datasheet tf32 beside a measured fp32
    with pytest.raises(UserError, match=f"no fp16 peak in {re.escape(str(path))}"):
        a100.peak_flops("fp16")


def test_a_missing_precision_of_the_users_own_device_names_the_file(tmp_path: Path) -> None:
    path = tmp_path / "devices.toml"
    path.write_text(
        '[lab]\npeak_tflops = { fp32 = 9.0 }\nmemory_bandwidth_gbs = 800\nsource = "me"\n'
        'date = "2026"\n'
    )
    with pytest.raises(UserError, match=f"device lab has no fp16 peak in {re.escape(str(path))}"):
        load_catalog(path)["lab"].peak_flops("fp16")
    # a built-in device's missing precision is the catalog's
    with pytest.raises(UserError, match=r"device K80 has no bf16 peak in the catalog"):
        load_catalog(path)["K80"].peak_flops("bf16")
