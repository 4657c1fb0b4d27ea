"""Break-it round 38 (T2), a device file and the doctor (docs/faults.md, the thirty-eighth round).

C2: a device file entry holding a `name` key (`[MINE] name = "OTHER"`) ended in a traceback,
TypeError: Device() got multiple values for keyword argument 'name', under `devices` and any
--device, since every entry is built. The table's [NAME] is its name: the key is refused in one
line naming the entry and the file, exit 2, as other keys a device does not have are.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

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
