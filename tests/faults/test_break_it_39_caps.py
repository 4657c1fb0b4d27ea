"""Break-it round 39, fixer F9: T3's cause C7 (`predict --flops 1e-300`) and F7's note (count
ranges with no upper cap).

C7. `dlperf predict smallcnn --device K80 --flops 1e-300` printed `FLOPs ÷ peak: images/s │
inf` in text and `"images_per_s": null` in JSON: predict.flops was only checked > 0, and a
FLOPs count under one per image is no count; its reciprocal overflows. The other figures had
the same hole at their small end: --peak-tflops and --ppp were only > 0, so `--peak-tflops
1e-300 --ppp 1e-300` (or a devices file's entry with such figures) made peak × PPP 0 and
ended in a ZeroDivisionError traceback, and `--peak-tflops 1e-300 --flops 1e300` printed
`inf` again. Now predict.flops is within [1, 1e18] (`config.predict.FLOPS_MAX`), a machine's
figure (--peak-tflops, a devices file's peaks and bandwidths) at least
`config.base.FIGURE_MIN` = 1e-6 and a PPP (--ppp, a devices file's) at least `PPP_MIN` =
1e-6, each refused in one line naming its bound, exit 2; within them every figure is finite
in text and JSON alike, at either end.
F7's note. `parsing.parse_range` (`converge plan --ps/--workers`) had no upper cap: `--workers
1-1000000000` built a billion-entry list (tens of GB) before anything else was checked, and
`--ps 1-2000 --workers 1-2000` planned four million allocations (7.6 GB, minutes), without a
word. Now a range of more than `parsing.MAX_COUNTS` = 10,000 counts (the sweep's default
max_points) is refused in one line naming the cap, before any list is built, and a plan of
more allocations (ps × workers) than that is refused before any is planned.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from dlperf import parsing
from dlperf.config.base import FIGURE_MIN, PPP_MIN
from dlperf.config.predict import FLOPS_MAX
from dlperf.converge.plan import plan, speed_from_params
from dlperf.errors import UserError
from dlperf.parsing import MAX_COUNTS, parse_range
from tests.conftest import CliResult
from tests.faults.test_store_faults import one_line

Cli = Callable[..., CliResult]

PREDICT = ("predict", "smallcnn", "--device", "K80")

# --- C7: predict's figures at their ends ------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "text"),
    [
        (["--flops", "1e-300"], "--flops: predict.flops: must be at least 1 (got 1e-300)"),
        (["--flops", "0.5"], "--flops: predict.flops: must be at least 1 (got 0.5)"),
        (["--flops", "1e300"], "--flops: predict.flops: must be at most 1e+18 (got 1e+300)"),
        (["--flops", "2000000P"], "--flops: predict.flops: must be at most 1e+18 (got 2e+21)"),
        (
            ["--peak-tflops", "1e-300"],
            "--peak-tflops: predict.peak_tflops: must be at least 1e-06 (got 1e-300)",
        ),
        (["--ppp", "1e-300"], "--ppp: predict.ppp: must be at least 1e-06 (got 1e-300)"),
        # was a ZeroDivisionError traceback: 1e-300 TFLOPS x 1e-300 is 0
        (["--peak-tflops", "1e-300", "--ppp", "1e-300"], "must be at least 1e-06 (got 1e-300)"),
        (["--peak-tflops", "1e-300", "--flops", "1e300"], "must be at least 1e-06 (got 1e-300)"),
    ],
)
def test_predict_refuses_a_figure_past_its_end_in_one_line(
    cli: Cli, args: list[str], text: str
) -> None:
    one_line(cli(*PREDICT, *args), 2, f"error: {text}" if text.startswith("--") else text)


# The figures of a `predict --json` document: (section, key).
FIGURES = [
    ("totals", "time_s"),
    ("totals", "images_per_s"),
    ("totals", "compute_s"),
    ("totals", "memory_s"),
    ("totals", "theoretical_time_per_image_s"),
    ("totals", "theoretical_images_per_s"),
    ("flops_over_peak", "time_per_image_s"),
    ("flops_over_peak", "time_s"),
    ("flops_over_peak", "images_per_s"),
]


def _finite(document: dict[str, Any]) -> None:
    """Every figure of a `predict --json` document a positive finite number (null: not)."""
    figures = {f"{part}.{key}": document[part][key] for part, key in FIGURES}
    assert all(isinstance(v, float | int) and 0 < v < math.inf for v in figures.values()), figures


@pytest.mark.parametrize(
    "args",
    [
        # the fastest end: one FLOP an image on the highest peak a figure may be
        ["--flops", "1", "--peak-tflops", "1e9"],
        # the slowest: the most FLOPs on the lowest peak, at the lowest PPP
        ["--flops", f"{FLOPS_MAX:g}", "--peak-tflops", f"{FIGURE_MIN:g}", "--ppp", f"{PPP_MIN:g}"],
    ],
)
def test_predict_at_the_ends_is_finite_in_text_and_json(cli: Cli, args: list[str]) -> None:
    text = cli(*PREDICT, *args)
    assert text.code == 0, text.err
    shown = [line.split("│") for line in text.out.splitlines() if "images/s" in line]
    shown += [line.split("│") for line in text.out.splitlines() if "time per" in line]
    assert len(shown) >= 4 and all(len(row) == 2 for row in shown), text.out
    assert not [row for row in shown if row[1].strip() in ("inf", "nan", "0")], shown
    given = cli(*PREDICT, *args, "--json")
    assert given.code == 0, given.err
    _finite(json.loads(given.out))


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"flops": 1e-300}, "predict.flops must lie in [1, 1e+18], got 1e-300"),
        ({"flops": 1e300}, "predict.flops must lie in [1, 1e+18], got 1e+300"),
        ({"peak_tflops": 1e-300}, "predict.peak_tflops must lie in [1e-06, 1e+09], got 1e-300"),
        ({"peak_tflops": 2e9}, "predict.peak_tflops must lie in [1e-06, 1e+09], got 2e+09"),
        ({"ppp": 1e-300}, "predict.ppp must lie in [1e-06, 1], got 1e-300"),
    ],
)
def test_predict_model_from_a_notebook_holds_to_the_same_ends(
    options: dict[str, float], message: str
) -> None:
    """`predict_model`, the notebook's way in, checks its own arguments: with the same ends."""
    from dlperf.analytic.recorded import predict_model

    def no_store() -> Any:
        raise AssertionError("refused before the store is opened")

    with pytest.raises(UserError) as caught:
        predict_model("smallcnn", "K80", no_store, **options)  # type: ignore[arg-type]
    assert str(caught.value).startswith(message), str(caught.value)


def _devices(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, figures: str) -> None:
    path = tmp_path / "devices.toml"
    path.write_text(f'[Tiny]\nsource = "mine"\ndate = "2024"\n{figures}\n')
    monkeypatch.setenv("DLPERF_DEVICES", str(path))


@pytest.mark.parametrize(
    ("figures", "text"),
    [
        (
            "peak_tflops = { fp32 = 1e-300 }\nmemory_bandwidth_gbs = 1\nppp = 1e-300",
            "peak_tflops.fp32: Input should be greater than or equal to 0.000001",
        ),
        ("peak_tflops = { fp32 = 1 }\nmemory_bandwidth_gbs = 1e-300", "memory_bandwidth_gbs"),
        ("peak_tflops = { fp32 = 1 }\nmemory_bandwidth_gbs = 1\nppp = 1e-300", "ppp"),
        (
            "peak_tflops = { fp32 = 1 }\nmemory_bandwidth_gbs = 1\nppp_by_kind = { conv = 1e-300 }",
            "ppp_by_kind",
        ),
    ],
)
def test_a_devices_file_figure_near_zero_is_one_line_not_a_division_by_zero(
    cli: Cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, figures: str, text: str
) -> None:
    _devices(tmp_path, monkeypatch, figures)
    one_line(cli("predict", "smallcnn", "--device", "Tiny"), 2, "device Tiny", text)


def test_a_devices_file_at_the_lowest_figures_predicts_finite_numbers(
    cli: Cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    low = f"{FIGURE_MIN!r}"
    _devices(
        tmp_path,
        monkeypatch,
        f"peak_tflops = {{ fp32 = {low} }}\nmemory_bandwidth_gbs = {low}\nppp = {PPP_MIN!r}\n"
        f"ppp_mem = {PPP_MIN!r}",
    )
    result = cli("predict", "smallcnn", "--device", "Tiny", "--json")
    assert result.code == 0, result.err
    _finite(json.loads(result.out))


# --- F7's note: count ranges with a cap -------------------------------------------------------


@pytest.fixture
def no_huge_range(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """`range` in dlperf.parsing refusing to make a million numbers or more: were the cap
    lost again, these tests fail at once instead of building a billion-entry list."""

    def guarded(*args: int) -> range:
        made = range(*args)
        assert len(made) < 10**6, f"parse_range built {len(made):,} numbers"
        return made

    monkeypatch.setattr(parsing, "range", guarded, raising=False)
    yield


# A list of 10,001 counts, 48,899 characters, and as the error shows it: cut short.
LONG = ",".join(map(str, range(1, 10_002)))
LONG_SHOWN = (
    "'1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19...2,9993,9994,9995,9996,9997,9998,9999,"
    "10000,10001'"
)


@pytest.mark.usefixtures("no_huge_range")
@pytest.mark.parametrize(
    ("text", "counts"),
    [
        ("1-1000000000", "1,000,000,000"),
        ("1-10001", "10,001"),
        ("1-5000,5001-10001", "10,001"),
        ("2,4,1-10000", "10,000"),  # within: 2 and 4 are in the range
        ("1-10000,1-10000", "10,000"),  # within: a count listed twice is one
        ("1000000-1999999,5", "1,000,001"),
        (LONG, "10,001"),
    ],
)
def test_parse_range_refuses_more_counts_than_the_cap(text: str, counts: str) -> None:
    if counts == f"{MAX_COUNTS:,}":
        assert len(parse_range(text, "workers")) == MAX_COUNTS
        return
    with pytest.raises(UserError) as caught:
        parse_range(text, "workers")
    shown = LONG_SHOWN if text == LONG else repr(text)
    assert str(caught.value) == (
        f"--workers {shown} lists {counts} counts, more than the {MAX_COUNTS:,} one list may "
        "hold (give a shorter range, or a list such as 1,2,4,8,16)"
    )


def test_the_cap_is_the_sweeps_default_point_limit() -> None:
    from dlperf.sweep.spec import SweepFile

    assert MAX_COUNTS == SweepFile.model_fields["max_points"].default == 10_000


SPEED_PARAMS = "theta0=0.01,theta1=0.1,theta2=0.2,theta3=0.01,theta4=0.01"


def test_plan_refuses_more_allocations_than_the_cap_before_planning_any() -> None:
    fit = speed_from_params(SPEED_PARAMS)
    with pytest.raises(UserError) as caught:
        plan(100.0, fit, list(range(1, 102)), list(range(1, 101)), 256)
    assert str(caught.value) == (
        "--ps and --workers make 10,100 allocations (101 × 100), more than the 10,000 a plan "
        "makes (give fewer counts, e.g. --ps 1,2,4 --workers 1-16)"
    )
    assert len(plan(100.0, fit, [1, 2], list(range(1, 101)), 256)) == 200  # within: planned


@pytest.mark.usefixtures("no_huge_range")
@pytest.mark.parametrize(
    ("args", "text"),
    [
        (["--workers", "1-1000000000"], "--workers '1-1000000000' lists 1,000,000,000 counts"),
        (["--ps", "1-200", "--workers", "1-100"], "make 20,000 allocations (200 × 100)"),
    ],
)
def test_converge_plan_says_so_in_one_line(
    cli: Cli, tmp_path: Path, args: list[str], text: str
) -> None:
    curve = tmp_path / "curve.json"
    curve.write_text(json.dumps({"metric": "loss", "beta0": 0.01, "beta1": 1.0, "beta2": 0.1}))
    result = cli("converge", "plan", "--curve", str(curve), "--speed-params", SPEED_PARAMS,
                 "--batch", "256", "--target", "0.5", *args)  # fmt: skip
    one_line(result, 2, text)
