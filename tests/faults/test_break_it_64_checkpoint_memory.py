"""Break-it round 64, X3 cause 1: out of memory inside a checkpoint's serialisation.

Before: `save_atomically` serialises a checkpoint into memory first; when that buffer could
not grow (an address-space cap, `ulimit -v`, reached at the checkpoint), torch's zip writer,
closing, raised "RuntimeError: [enforce fail at inline_container.cc:672] . unexpected pos N vs
M" over the MemoryError, and `run` and `detect finetune` ended in that traceback instead of the
one out-of-memory line. Now the MemoryError is raised as it is, which every command tells in
one line ("out of memory: MemoryError (ask for less ...)").

The cap is set in a child process just before the save, a few MiB above what it has mapped,
as a `ulimit -v` reached at that moment would be (one cannot time a real one to it).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

CHILD = """\
import os, resource, sys
from pathlib import Path

import torch

from dlperf.engine import checkpoint

state = {"w": torch.ones(4_000_000)}  # 16 MB, past the cap's room
mapped = int(open("/proc/self/statm").read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
resource.setrlimit(resource.RLIMIT_AS, (mapped + int(sys.argv[1]) * 2**20, resource.RLIM_INFINITY))
try:
    checkpoint.save_atomically(state, Path(sys.argv[2]))
except BaseException as e:
    print(type(e).__name__, e.__context__ is None)
else:
    print("saved")
"""


@pytest.mark.skipif(not Path("/proc/self/statm").exists(), reason="Linux /proc")
@pytest.mark.parametrize("room_mib", [0, 8])
def test_a_checkpoint_refused_memory_raises_the_memory_error(tmp_path: Path, room_mib: int) -> None:
    path = tmp_path / "c.pt"
    done = subprocess.run(
        [sys.executable, "-c", CHILD, str(room_mib), str(path)],
        capture_output=True, text=True, timeout=300, env={**os.environ, "OMP_NUM_THREADS": "1"},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["MemoryError", "True"], done.stdout + done.stderr
    assert not path.exists() and list(tmp_path.iterdir()) == []  # no partial file either
