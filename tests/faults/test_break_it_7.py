"""What the seventh break-it round found (issue 41), each seen failing before its fix."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from tests.conftest import CliResult


@pytest.mark.parametrize(
    ("override", "said"),
    [
        ("peak_tflops = { fp32 = 0.0 }", "peak_tflops.fp32"),  # was a ZeroDivisionError
        ("peak_tflops = { fp32 = -14.0 }", "peak_tflops.fp32"),  # was a negative peak listed
        ("peak_tflops = { fp32 = nan }", "peak_tflops.fp32"),  # was a time of null
        ("memory_bandwidth_gbs = -900.0", "memory_bandwidth_gbs"),  # was a negative time
        ("price_per_hour_usd = -3.0", "price_per_hour_usd"),  # was a negative bill
        ("ppp = inf", "ppp"),
    ],
)
def test_a_device_figure_that_cannot_be_a_machines_is_one_line(
    override: str,
    said: str,
    cli: Callable[..., CliResult],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    devices = tmp_path / "devices.toml"
    devices.write_text(f"[V100]\n{override}\n")
    monkeypatch.setenv("DLPERF_DEVICES", str(devices))
    for args in (["devices", "--json"], ["predict", "smallcnn", "--device", "V100", "--json"]):
        r = cli(*args)
        assert r.code == 2, (args, r.out[:200], r.err)
        assert r.err.startswith(f"error: device V100: {said}: "), r.err
        assert r.err.count("\n") == 1 and str(devices) in r.err


@pytest.mark.parametrize("value", [float("nan"), float("inf"), -float("inf")])
def test_a_tracked_config_holding_nan_or_infinity_is_refused_on_every_backend(
    value: float, tmp_path: Path
) -> None:
    """SQLite kept {"lr": NaN} (Python's JSON writes it), PostgreSQL's JSON type refused it
    with a raw psycopg DataError: one UserError before the run is recorded, on both."""
    import dlperf
    from dlperf.errors import UserError

    store = tmp_path / "t.db"
    said = r"config\['opt'\]\['lr'\] is .*JSON has no NaN"
    with (
        pytest.raises(UserError, match=said),
        dlperf.track("t", config={"opt": {"lr": value}}, store=str(store)),
    ):
        pass
    assert not store.exists() or "t" not in [r.name for r in dlperf.Store(str(store)).runs()]


def test_a_model_name_in_another_case_is_suggested(cli: Callable[..., CliResult]) -> None:
    """'SmallCNN' got only "see `dlperf models`": difflib is case-sensitive."""
    r = cli("analyze", "SmallCNN")
    assert r.code == 2 and r.err == "error: unknown model 'SmallCNN' (did you mean smallcnn?)\n"
