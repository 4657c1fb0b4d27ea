"""Break-it round 65, Y3 cause 4: an export's library that is there but cannot load.

Before: `runs export --to tensorboard` under `ulimit -v` between about 400 MB and 3 GB said
"exporting to TensorBoard needs torch, which is not installed: pip install 'dlperf[tensorboard]'",
exit 2: torch's import failed to map its shared objects ("failed to map segment"), an
ImportError that the export took for a missing package. Now only a module that is not there
(ModuleNotFoundError) is "not installed"; one that fails to load is told by the CLI with its
cause (here the address-space limit).
"""

from __future__ import annotations

import os
import resource
import subprocess
import sys
from pathlib import Path

import pytest

import dlperf

pytest.importorskip("tensorboard", reason="the tensorboard extra")
LIMIT = 2_000_000 * 1024  # ulimit -v 2000000: dlperf starts, torch cannot load


def _capped() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (LIMIT, LIMIT))


def test_a_tensorboard_export_that_cannot_load_torch_is_not_told_missing(tmp_path: Path) -> None:
    db = str(tmp_path / "s.db")
    with dlperf.track("tb", config={"x": 1}, store=db) as run:
        run.log(1, loss=1.0)
    done = subprocess.run(
        [sys.executable, "-m", "dlperf", "--db", db, "runs", "export", "1", "--to",
         "tensorboard", "--out", str(tmp_path / "tb")],
        capture_output=True, text=True, timeout=300, preexec_fn=_capped,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )  # fmt: skip
    assert done.returncode == 1, done.stderr
    assert "not installed" not in done.stderr
    assert done.stderr.startswith("error: cannot load torch: "), done.stderr
    assert done.stderr.count("\n") == 1, done.stderr
