"""Break-it round 41, T2's C1 (cases 44, 45): off a terminal, dlperf's consoles lay lines
out at 160 columns, and `config show` printed its TOML through them: a `key = "value"` line
over 160 characters (a 170-character `run.out_dir`) was cut in two, so `dlperf config show
e.toml > resolved.toml` then `dlperf run resolved.toml` failed with "malformed TOML". A
`warning:` line past 160 characters (the busy-cores one) was two lines in a log. Now the TOML
and every warning are printed unwrapped (`soft_wrap`), as an error's line already was.
(C3, the size cap, is below.)
Both run as subprocesses with stdout and stderr on pipes and no COLUMNS: as a user's
redirect or a log sees them.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tomllib
from collections.abc import Callable
from pathlib import Path

from dlperf.store import RunStore
from tests.conftest import CliResult
from tests.faults.test_store_faults import one_line

Cli = Callable[..., CliResult]

LONG = "/tmp/x/" + "/".join(f"part-{i:02d}-of-a-deep-output-folder" for i in range(6))


def _env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}


def test_config_show_of_a_long_value_is_toml_that_loads(tmp_path: Path) -> None:
    exp = tmp_path / "e.toml"
    head = '[model]\nname = "smallcnn"\n[data]\nname = "digits"\n'
    exp.write_text(f'{head}[run]\nout_dir = "{LONG}"\n')
    done = subprocess.run(
        [sys.executable, "-m", "dlperf", "config", "show", str(exp)],
        capture_output=True, text=True, env=_env(), timeout=300, check=True,
    )  # fmt: skip
    assert len(f'out_dir = "{LONG}"') > 160
    assert tomllib.loads(done.stdout)["run"]["out_dir"] == LONG  # was "malformed TOML"


def test_a_long_warning_is_one_line_in_a_log() -> None:
    said = "only 0.0 of 2 usable cores are free " + "and so on " * 30
    done = subprocess.run(
        [sys.executable, "-c", f"from dlperf.cli import console; console.warn({said!r})"],
        capture_output=True, text=True, env=_env(), timeout=300, check=True,
    )  # fmt: skip
    lines = [line.rstrip() for line in done.stderr.splitlines()]
    assert lines == [f"warning: {said}".rstrip()], done.stderr  # was two lines


def test_an_experiment_file_past_its_cap_is_refused_in_one_line(
    cli: Cli, tmp_path: Path, db: str
) -> None:
    """T2's C3: no cap on an experiment file's size: a 6 MB one (a 3,000,000-item list) took
    25 s and 1.1 GB before `run` refused a key in it, `config show` minutes. Now a file past
    1 MiB (loading.FILE_MAX_BYTES) is refused before it is parsed, a sweep file alike."""
    big = tmp_path / "big.toml"
    head = '[model]\nname = "smallcnn"\n[data]\nname = "digits"\n[model.kwargs]\n'
    big.write_text(head + "x = [" + ",".join(["1"] * 600_000) + "]\n")
    for args in (["config", "show", str(big)], ["run", str(big)]):
        one_line(cli(*args), 2, "MiB; an experiment or sweep file holds at most 1 MiB")
    sweep = tmp_path / "sw.toml"
    sweep.write_text('base = "big.toml"\n' + "# a comment\n" * 100_000)
    one_line(cli("sweep", str(sweep)), 2, "sw.toml is 1.1 MiB")
    assert RunStore.open(db).list_runs() == []
