"""Round 46's Left list: the MNIST unpack's own part-file names.

`data/sources.py` unpacked an idx .gz to `.NAME.PID.part`, a name of its own that nothing
swept: each unpack killed midway (SIGKILL, an OOM kill) left a hidden file of the idx file's
size in the data folder for good. It now writes through `paths.part_name`, as every other
write does, and sweeps a dead writer's part first (`paths.sweep_parts`).
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from tests.conftest import CliResult
from tests.faults.test_break_it_21_data import TRAIN_LABELS
from tests.faults.test_break_it_23_data_a import describe
from tests.faults.test_break_it_24_data import gz_only

PART_NAME = "from pathlib import Path; from dlperf.paths import part_name"


def test_a_killed_unpacks_part_goes_with_the_next_unpack(
    cli: Callable[..., CliResult], tmp_path: Path
) -> None:
    raw = gz_only(tmp_path / "m")
    target = raw / TRAIN_LABELS
    # The name a writer that has since ended gave its part (this host's, its pid gone)
    said = subprocess.run(
        [
            sys.executable,
            "-c",
            f"{PART_NAME}; print(part_name(Path({str(target)!r})))",
        ],
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )
    left = Path(said.stdout.strip())
    left.write_bytes(b"half an unpack")
    r = describe(cli, "mnist", tmp_path / "m")
    assert r.code == 0, r.err
    assert target.exists()
    assert not [p.name for p in raw.iterdir() if ".part" in p.name]  # before: nothing swept it
