"""Break-it round 42, T2's C2: `dlperf calibrate --name T4` on a CPU host saved a cpu entry
named T4, and the user file's entries are merged over the built-in catalog key by key: the
keys a calibration has no value for (price, interconnect, price source) came from the real
T4, so `dlperf devices` showed a "T4" of kind cpu at this host's 0.3 TFLOP/s priced at T4's
$0.35/GPU-h from Google's GPU pricing, exit 0, and the catalog's T4 could not be reached.
Now a name of a built-in device of another kind is refused in one line before any measuring
(`devices.check_calibrated_name`), exit 2, nothing stored or written; another name works as
before (only checked here up to the refusal: a calibration takes minutes).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from dlperf.analytic.devices import check_calibrated_name
from dlperf.errors import UserError
from dlperf.store import RunStore
from tests.conftest import CliResult
from tests.faults.test_store_faults import one_line

Cli = Callable[..., CliResult]


@pytest.mark.parametrize("name", ["T4", "K80"])
def test_a_catalog_gpus_name_for_this_cpu_is_refused_before_measuring(
    cli: Cli, db: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str
) -> None:
    devices = tmp_path / "devices.toml"
    monkeypatch.setenv("DLPERF_DEVICES", str(devices))
    result = cli("calibrate", "--name", name)
    one_line(result, 2, f"--name {name} is the catalog's gpu {name}", "choose another --name")
    assert RunStore.open(db).list_runs() == []  # refused before the run was recorded
    assert not devices.exists() or name not in devices.read_text()


def test_the_check_lets_a_same_kind_or_a_new_name_through() -> None:
    check_calibrated_name("T4", "gpu")  # a real T4 calibrated as T4 refines its entry
    check_calibrated_name("my-laptop", "cpu")
    with pytest.raises(UserError):
        check_calibrated_name("V100", "cpu")
