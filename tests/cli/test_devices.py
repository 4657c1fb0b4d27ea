"""dlperf.cli.devices: `dlperf devices` (the catalog) and `dlperf calibrate`'s input checks."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
from typer.testing import CliRunner

from dlperf.analytic.devices import load_catalog
from dlperf.cli import app
from tests.cli.test_app import one_line_error
from tests.conftest import CliResult


@pytest.mark.parametrize("command", ["devices", "calibrate"])
def test_help_ends_with_an_example(command: str) -> None:
    done = CliRunner().invoke(app, [command, "--help"])
    assert done.exit_code == 0 and f"Example: dlperf {command}" in done.output


@pytest.fixture
def user_catalog(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "devices.toml"
    path.write_text("")  # no devices of the user's: the shipped catalog alone
    monkeypatch.setenv("DLPERF_DEVICES", str(path))
    return path


def test_devices_json_is_the_catalog_without_the_name(
    cli: Callable[..., CliResult], user_catalog: Path
) -> None:
    result = cli("devices", "--json")
    assert result.code == 0, result.err
    listed = json.loads(result.out)
    catalog = load_catalog()
    assert list(listed) == list(catalog)
    name, first = next(iter(catalog.items()))
    assert "name" not in listed[name]
    assert listed[name]["peak_tflops"] == first.peak_tflops


def test_devices_table_names_the_user_file(
    cli: Callable[..., CliResult], user_catalog: Path
) -> None:
    out = cli("devices").out
    assert out.splitlines()[0] == f"devices (user file: {user_catalog})"
    assert all(name in out for name in load_catalog())


def test_a_missing_user_catalog_is_one_line_and_exit_2(
    cli: Callable[..., CliResult], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DLPERF_DEVICES", str(tmp_path / "none.toml"))
    one_line_error(cli("devices"), "none.toml: no such file (create it, or unset DLPERF_DEVICES)")


@pytest.mark.parametrize("name", [" ", "a\x1b[2Jb"])
def test_calibrate_refuses_a_blank_or_control_name_before_measuring(
    cli: Callable[..., CliResult], name: str
) -> None:
    one_line_error(cli("calibrate", "--name", name), "--name: a device name is printable text")
