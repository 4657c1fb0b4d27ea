"""Break-it round 46, lead: a process under a file-size limit leaves no cut bytecode cache.

Found by the session's final `make test`: a test running dlperf under `ulimit -f` 64 KiB was the
first to import MLflow's store from an environment installed without compiling (`pip install
--no-compile`, as `make setup` and CI install): Python wrote each module's .pyc with one
unchecked write, cut at the limit, and renamed it into place, so every later import of those
modules (MLflow's, pygments', alembic's, in every process) failed with "EOFError: marshal data
too short". Under a file-size limit, importing dlperf now turns bytecode writing off.
"""

from __future__ import annotations

import resource
import subprocess
import sys
from pathlib import Path


def _limited() -> None:
    resource.setrlimit(resource.RLIMIT_FSIZE, (64 * 1024, resource.RLIM_INFINITY))


def test_a_module_first_imported_under_a_file_size_limit_imports_later(tmp_path: Path) -> None:
    big = tmp_path / "bigmod.py"  # its .pyc is well over the 64 KiB limit
    big.write_text(
        "".join(f"V{i} = [{', '.join(repr(f'{i}-{j}') for j in range(40))}]\n" for i in range(4000))
    )
    env = {"PYTHONPATH": str(tmp_path), "PATH": "/usr/bin:/bin"}
    first = subprocess.run(
        [sys.executable, "-c", "import dlperf, bigmod"],
        env=env,
        preexec_fn=_limited,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert first.returncode == 0, first.stderr
    later = subprocess.run(
        [sys.executable, "-c", "import bigmod; print(len(bigmod.V3999))"],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert later.returncode == 0, later.stderr  # before: EOFError: marshal data too short
    assert later.stdout.strip() == "40"
