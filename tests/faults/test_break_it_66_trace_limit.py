"""`run --profile` under a file size limit (round 66, tester Z3's cause 2).

Before: torch's profiler (Kineto) writes the raw trace in C++ and only logs a write it cannot
make ("Failed to write to log file!"), leaving its temporary file empty; torch then gzipped
that empty file into place. Under `ulimit -f 150` the run was stored finished, exit 0, with a
58-byte trace that `runs trace` called one that "decompresses to nothing". Now the raw trace
is checked whole before it is gzipped: the run fails in one line naming the trace and the
limit or a full disk, exit 1, the line stored as its error, and no trace is left.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from torch.profiler import profile

from dlperf.engine.profiler import trace_name
from dlperf.store import RunStore
from tests.conftest import CliResult, file_size_limit
from tests.faults.test_store_faults import one_line

Cli = Callable[..., CliResult]


def test_a_trace_a_file_size_limit_cuts_fails_the_run_in_one_line(
    cli: Cli,
    store: RunStore,
    tmp_path: Path,
    tiny_exp: Callable[..., Path],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    exported = profile.export_chrome_trace

    def under_a_limit(self: profile, path: str, *args: Any, **kwargs: Any) -> None:
        # The limit is the process's own, set for the export alone: the store and the run's
        # other files are written as they would be under a limit they fit in.
        with file_size_limit(16 * 1024):
            exported(self, path, *args, **kwargs)

    monkeypatch.setattr(profile, "export_chrome_trace", under_a_limit)
    exp = tiny_exp(epochs=1, extra=f'out_dir = "{tmp_path / "out"}"\ncheckpoint = false\n')
    exp.write_text(exp.read_text().replace('name = "digits"', 'name = "digits"\nlimit = 192'))
    result = cli("run", str(exp), "--profile", "--set", "run.profile.active=1")
    (trace_dir,) = (tmp_path / "out").rglob("trace")
    said = (
        f"cannot use {trace_dir / trace_name('rank0')}: torch's profiler could not write it "
        "(a full disk, or a file size limit: ulimit -f)"
    )
    one_line(result, 1, said)
    failed = store.get_run(1)
    assert failed.status == "failed" and failed.error == said
    assert list(trace_dir.iterdir()) == []
