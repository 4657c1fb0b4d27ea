"""dlperf.analytic.devices: the built-in catalog, the user file merged over it key by key,
the checks on a machine's figures, lookups, and saving a calibrated device."""

from __future__ import annotations

import os
import tomllib
from pathlib import Path
from typing import Any

import pytest

from dlperf.analytic.devices import (
    KINDS,
    Device,
    get_device,
    load_catalog,
    save_device,
    user_file,
)
from dlperf.config.base import FIGURE_MAX
from dlperf.errors import UserError


@pytest.fixture
def no_user_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A home whose user file does not exist, and no DLPERF_DEVICES."""
    monkeypatch.delenv("DLPERF_DEVICES", raising=False)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    return tmp_path / "config" / "dlperf" / "devices.toml"


def one_line(call: Any, *args: Any) -> str:
    with pytest.raises(UserError) as e:
        call(*args)
    assert "\n" not in str(e.value)
    return str(e.value)


def device(**over: Any) -> Device:
    fields: dict[str, Any] = {
        "name": "Mine",
        "peak_tflops": {"fp32": 2.0},
        "memory_bandwidth_gbs": 100.0,
        "source": "measured",
        "date": "2026-11",
    }
    return Device(**(fields | over))


def test_user_file_from_env_then_xdg(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("DLPERF_DEVICES", str(tmp_path / "d.toml"))
    assert user_file() == tmp_path / "d.toml"
    monkeypatch.setenv("DLPERF_DEVICES", "")
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    assert user_file() == tmp_path / "dlperf" / "devices.toml"
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("XDG_CONFIG_HOME", "relconf")  # relative: ignored, as the spec says
    assert user_file() == tmp_path / "home" / ".config" / "dlperf" / "devices.toml"


def test_the_builtin_catalog_holds_the_vendor_figures(no_user_file: Path) -> None:
    catalog = load_catalog()
    assert {"K80", "V100", "T4", "A100-40GB", "H100-SXM"} <= set(catalog)
    v100 = catalog["V100"]
    assert v100.peak_flops("fp32") == pytest.approx(15.7e12)
    assert v100.memory_bandwidth_gbs == 900
    assert all(d.source and d.date for d in catalog.values())  # every entry says its source


def test_peak_label_says_one_gpu_of_a_board(no_user_file: Path) -> None:
    k80 = get_device("K80")
    assert k80.peak_label("fp32") == (
        "4.365 TFLOPS fp32: one of the 2 GPUs of a K80 board (the board: 8.73 TFLOPS)"
    )
    assert get_device("V100").peak_label("fp16") == "125 TFLOPS fp16 of V100"
    assert one_line(k80.peak_flops, "bf16") == (
        "device K80 has no bf16 peak in the catalog (it lists fp32)"
    )


def test_kind_ppp_calibrated_else_ppp_else_one() -> None:
    assert device().kind_ppp() == dict.fromkeys(KINDS, 1.0)
    mixed = device(ppp=0.5, ppp_by_kind={"conv": 0.8})
    assert mixed.kind_ppp() == {kind: 0.8 if kind == "conv" else 0.5 for kind in KINDS}


def test_a_figure_is_positive_finite_and_at_most_figure_max() -> None:
    for bad in (0.0, -1.0, FIGURE_MAX * 2, float("inf")):
        with pytest.raises(ValueError):
            device(memory_bandwidth_gbs=bad)
    assert device(price_per_hour_usd=0.0).price_per_hour_usd == 0.0  # a free machine is fine
    with pytest.raises(ValueError):
        device(peak_tflops={"fp32": "10"})  # strict: text is no number


def test_the_user_file_overrides_key_by_key_and_adds(tmp_path: Path) -> None:
    mine = tmp_path / "devices.toml"
    mine.write_text(
        "[T4]\nprice_per_hour_usd = 0.29\n\n[Box]\npeak_tflops = { fp32 = 1 }\n"
        'memory_bandwidth_gbs = 50\nkind = "cpu"\nsource = "me"\ndate = "2026"\n'
    )
    catalog = load_catalog(mine)
    assert catalog["T4"].price_per_hour_usd == 0.29
    assert catalog["T4"].peak_tflops == load_catalog(tmp_path / "none.toml")["T4"].peak_tflops
    assert catalog["Box"].kind == "cpu" and catalog["Box"].peak_flops("fp32") == 1e12


def test_bad_user_files_are_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text("[T4\n")
    assert one_line(load_catalog, bad).startswith(f"{bad}: malformed TOML: ")
    bad.write_text("T4 = 3\n")
    assert (
        one_line(load_catalog, bad) == f"{bad}: 'T4' is not a device table (write [NAME] then keys)"
    )
    bad.write_text("[T4]\nmemory_bandwidth_gbs = 0\n")
    assert one_line(load_catalog, bad) == (
        f"device T4: memory_bandwidth_gbs: Input should be greater than or equal to 0.000001 "
        f"(see {bad})"
    )
    bad.write_text("[New]\nmemory_bandwidth_gbs = 1\n")
    assert one_line(load_catalog, bad).startswith("device New: peak_tflops: Field required")
    bad.write_bytes(b'[T4]\nsource = "caf\xe9"\n')
    assert one_line(load_catalog, bad) == f"{bad}: not UTF-8 text (byte 0xe9) (save it as UTF-8)"
    assert one_line(load_catalog, tmp_path) == (
        f"device file {tmp_path} is a directory (point DLPERF_DEVICES at a file)"
    )
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    assert one_line(load_catalog, fifo).startswith(f"device file {fifo} is not a regular file")
    monkeypatch.setenv("DLPERF_DEVICES", str(tmp_path / "gone.toml"))
    assert one_line(load_catalog) == (
        f"DLPERF_DEVICES={tmp_path / 'gone.toml'}: no such file "
        "(create it, or unset DLPERF_DEVICES)"
    )


def test_get_device_ignores_case_and_suggests_close_names(no_user_file: Path) -> None:
    assert get_device("v100").name == "V100"
    text = one_line(get_device, "V10")
    assert text.startswith("unknown device 'V10' (did you mean ") and "V100" in text
    assert one_line(get_device, "zzzzzz") == "unknown device 'zzzzzz' (see `dlperf devices`)"


def test_save_device_keeps_the_other_entries_and_round_trips(tmp_path: Path) -> None:
    path = tmp_path / "sub" / "devices.toml"
    assert save_device(device(name="A"), path) == path
    save_device(device(name="B", ppp=0.3, ppp_by_kind={"matmul": 0.7}, threads=2), path)
    save_device(device(name="A", memory_bandwidth_gbs=7.0), path)  # replaced, not added
    raw = tomllib.loads(path.read_text())
    assert sorted(raw) == ["A", "B"]
    assert "name" not in raw["A"] and "ppp" not in raw["A"]  # no name key, no None
    catalog = load_catalog(path)
    assert catalog["A"].memory_bandwidth_gbs == 7.0
    assert catalog["B"] == device(name="B", ppp=0.3, ppp_by_kind={"matmul": 0.7}, threads=2)
