"""Break-it round 21 (signals and caps): running out of memory where no check expects it, and
the synthetic set's memory check.

- C1: a data set that does not fit the address space (`ulimit -v`) ended `dlperf run` in a
  58-line traceback from torch's allocator: one line, with the limit named.
- C2: the synthetic set's check counted one byte a pixel and left out its int64 labels, so a
  set of tiny images that needs 25 GiB passed `config show` on a 23.5 GiB machine.
"""

from __future__ import annotations

import resource
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from dlperf.distributed.launch import error_lines
from tests.conftest import CliResult

LIMIT_BYTES = 5_000_000 * 1024  # ulimit -v 5000000: torch loads, 3 GB of images does not fit


def _limited() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (LIMIT_BYTES, LIMIT_BYTES))


def test_a_data_set_over_the_memory_limit_is_one_line_naming_it(tmp_path: Path) -> None:
    exp = tmp_path / "syn.toml"
    exp.write_text(
        '[model]\nname = "smallcnn"\n[data]\nname = "synthetic"\nshape = [3, 64, 64]\n'
        f'size = 250000\n[run]\nthreads = 1\nout_dir = "{tmp_path / "runs"}"\n'
    )
    done = subprocess.run(
        [sys.executable, "-m", "dlperf", "--db", str(tmp_path / "s.db"), "run", str(exp)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        preexec_fn=_limited,
        timeout=600,
    )
    assert done.returncode == 1, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in done.stderr, done.stderr
    assert lines[0].startswith("error: out of memory: "), lines[0]
    assert "can't allocate memory" in lines[0] and "ulimit -v 5000000 may be too low" in lines[0]


def test_the_synthetic_sets_memory_counts_its_labels(
    cli: Callable[..., CliResult], monkeypatch: pytest.MonkeyPatch
) -> None:
    """1-byte images, 8-byte labels: 125,000,000 of them need 1.05 GiB, not the 0.12 GiB of
    their pixels, which fitted the (pretended) 1 GiB machine."""
    from dlperf.config import experiment

    monkeypatch.setattr(experiment, "machine_memory", lambda: 2**30)
    size = ["--set", "data.name=synthetic", "--set", "data.shape=[1,1,1]"]
    r = cli("config", "show", *size, "--set", "data.size=100000000")
    assert r.code == 2 and r.err.count("\n") == 1, r.err
    assert "125000000 images (data.size 100000000, 12500000 validation, 12500000 test) and " \
        "their labels take 1.0 GiB, more than this machine's 1.0 GiB" in r.err  # fmt: skip
    assert cli("config", "show", *size, "--set", "data.size=10000000").code == 0


TORCHRUN_EMFILE = """Traceback (most recent call last):
  File "/usr/lib/python3/subprocess.py", line 1849, in _execute_child
    errpipe_read, errpipe_write = os.pipe()
                                  ^^^^^^^^^
OSError: [Errno 24] Too many open files
"""


def test_torchrun_failing_itself_names_its_exception_and_the_open_file_limit(
    tmp_path: Path,
) -> None:
    """C3: under `ulimit -n 24` torchrun could not start a worker, and the point's first line
    said only "torchrun failed (exit code 1)", its exception ten lines below."""
    log = tmp_path / "torchrun.log"
    log.write_text(TORCHRUN_EMFILE)
    soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    head, *tail = error_lines(tmp_path, log, 1).splitlines()
    assert head == (
        f"torchrun failed: OSError: [Errno 24] Too many open files (ulimit -n {soft} is too "
        "low: raise it)"
    )
    assert tail[-1] == "OSError: [Errno 24] Too many open files"  # its log's end, as before
    log.write_text("torchrun: some message of its own\n")  # no traceback: how it ended
    assert error_lines(tmp_path, log, 1).splitlines()[0] == "torchrun failed (exit code 1)"
