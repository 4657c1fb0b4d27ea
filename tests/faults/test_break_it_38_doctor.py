"""Break-it round 38 (T2), a device file and the doctor (docs/faults.md, the thirty-eighth round).

C2: a device file entry holding a `name` key (`[MINE] name = "OTHER"`) ended in a traceback,
TypeError: Device() got multiple values for keyword argument 'name', under `devices` and any
--device, since every entry is built. The table's [NAME] is its name: the key is refused in one
line naming the entry and the file, exit 2, as other keys a device does not have are.

C3: doctor's `diverged` said a dlperf.track run's val/loss was NaN "at epoch 200" (--json:
"epoch": 200) where 200 is the step the user's loop logged it at; `lr-too-high` said the same of
a tracked run's epoch/train_loss ("rose from 2.0000 (epoch 100)"). A tracked run's keys are all
at the steps its loop gave, as chance-accuracy already said: both say "step" of one now.

C9: `--device "MY GPU"` with a device file holding both [My GPU] and [my gpu] silently predicted
with the last of the two (the case-insensitive lookup kept one key per lower-case name). A name
that matches two entries only when case is ignored is refused naming them, exit 2; a name
spelled as one of them still picks it.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

import dlperf
from dlperf.analytic.devices import get_device
from dlperf.errors import UserError
from tests.cli.test_app import one_line_error
from tests.conftest import CliResult

Cli = Callable[..., CliResult]

# The tester's device file (/tmp/bk38/T2/dev_name.toml).
NAMED = """
[MINE]
name = "OTHER"
peak_tflops = { fp32 = 10.0 }
memory_bandwidth_gbs = 100
source = "me"
date = "2026"
"""


@pytest.mark.parametrize("command", [["devices"], ["predict", "smallcnn", "--device", "MINE"]])
def test_a_name_key_in_a_device_entry_is_one_line(
    cli: Cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, command: list[str]
) -> None:
    """Before: TypeError: Device() got multiple values for keyword argument 'name'."""
    path = tmp_path / "devices.toml"
    path.write_text(NAMED)
    monkeypatch.setenv("DLPERF_DEVICES", str(path))
    one_line_error(
        cli(*command),
        f"device MINE: 'name' is not a key of a device entry (the table's [MINE] is its name) "
        f"(see {path})",
    )


def _doctor(cli: Cli, *args: str) -> list[str]:
    """The doctor's one finding of run 1: its evidence line and its fix."""
    result = cli("doctor", "1", *args)
    assert result.code in (0, 1), (result.out, result.err)
    return [line.strip() for line in result.out.splitlines()][1:2]


def test_a_tracked_runs_nan_val_loss_is_at_a_step(cli: Cli, db: str) -> None:
    """The tester's c3.py. Before: "val/loss is nan at epoch 200", figures {"epoch": 200}."""
    with dlperf.track("t", store=db) as r:
        for step in (100, 200, 300):
            val = float("nan") if step == 200 else 0.5
            r.log(step=step, **{"train/loss": 1.0, "val/loss": val})
    said = "diverged: val/loss is nan at step 200 (1 non-finite value(s))"
    assert _doctor(cli) == [f"error    {said}"]
    [finding] = json.loads(cli("doctor", "1", "--json").out)["findings"]
    assert finding["figures"] == {"key": "val/loss", "step": 200, "nonfinite": 1}


def test_a_tracked_runs_rising_epoch_train_loss_is_at_steps(cli: Cli, db: str) -> None:
    """The tester's d2.py. Before: "rose from 2.0000 (epoch 100) to 4.0000 (epoch 300)"."""
    with dlperf.track("rose", config={"train": {"lr": 5.0}}, store=db) as r:
        for step in (100, 200, 300):
            r.log(step=step, **{"epoch/train_loss": 1.0 + step / 100})
    assert _doctor(cli) == [
        "warning  lr-too-high: epoch/train_loss rose from 2.0000 (step 100) to 4.0000 "
        "(step 300) (x2.00 > x1.1) at train.lr 5.0"
    ]


# The tester's dev_sp.toml: two entries whose names differ only in case.
TWINS = """
["My GPU"]
peak_tflops = { fp32 = 10.0 }
memory_bandwidth_gbs = 100
source = "me"
date = "2026"
["my gpu"]
peak_tflops = { fp32 = 20.0 }
memory_bandwidth_gbs = 100
source = "me2"
date = "2026"
"""


def test_a_device_name_matching_case_twins_is_refused(tmp_path: Path) -> None:
    """Before: --device "MY GPU" predicted with [my gpu], the last twin, and said nothing."""
    path = tmp_path / "devices.toml"
    path.write_text(TWINS)
    with pytest.raises(UserError) as e:
        get_device("MY GPU", path)
    assert str(e.value) == (
        "device 'MY GPU' is ambiguous: 'My GPU' or 'my gpu' (give it as spelled)"
    )
    assert get_device("My GPU", path).source == "me"
    assert get_device("my gpu", path).source == "me2"
