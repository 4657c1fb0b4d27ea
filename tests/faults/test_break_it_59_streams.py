"""Break-it round 59, fixer G6: the standard streams under odd environments (T1's causes).

C1: every `--json` command left the stream it made for the document (over a copy of descriptor
1) to the collector at exit: "Exception ignored ... ResourceWarning: unclosed file <stdout>", a
traceback on stderr under PYTHONWARNINGS=error, a warning under -X dev. The stream is closed
when the command ends; so is the warning of the stand-in for a stream closed at start
(`dlperf ... >&-`), which is now held over a descriptor it does not close.
C5: on a stdout that can only hold ASCII (PYTHONIOENCODING=ascii, a C locale with UTF-8 mode
off), `config show` wrote `name = "caf\\xe9"` (stdout's backslashreplace), TOML that no run
reads back, and `analyze --csv` wrote `faltung_\\xe4` for the layer `faltung_ä`, exit 0 both.
`config show` now writes TOML's own escapes (`\\u00e9`) in any encoding but UTF-8, and a CSV
stdout's encoding cannot hold is written whole as UTF-8.
C7: `doctor` under COLUMNS=20 and an ASCII stdout printed a run's heading 47 columns wide: rich
folded the name before stdout's escapes widened it. Its lines are escaped first, as the tables'
cells are, and fold at the width.

C1 runs dlperf in a child process (the warning is the interpreter's, at exit); the others run
in this process, stdout replaced by an ASCII stream that escapes as `settle_std_streams` makes
it.
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import tomllib
from collections.abc import Callable
from pathlib import Path

import pytest
from rich.console import Console

from dlperf.cli import console
from dlperf.store import RunStore
from tests.conftest import CliResult

Cli = Callable[..., CliResult]

NAME = "café-ünïcode-日本-İı-😀"


def _ascii_stdout(monkeypatch: pytest.MonkeyPatch) -> io.BytesIO:
    """sys.stdout as a command finds it under PYTHONIOENCODING=ascii once `settle_std_streams`
    made it escape what ASCII lacks; the bytes written to it."""
    written = io.BytesIO()
    stream = io.TextIOWrapper(written, encoding="ascii", errors="backslashreplace")
    monkeypatch.setattr(sys, "stdout", stream)
    return written


@pytest.mark.parametrize(
    ("options", "env"),
    [([], {"PYTHONWARNINGS": "error"}), (["-X", "dev"], {})],
    ids=["PYTHONWARNINGS=error", "-X dev"],
)
@pytest.mark.parametrize("closed", [False, True], ids=["stdout", "stdout closed"])
def test_a_json_command_leaves_no_unclosed_stream(
    tmp_path: Path, options: list[str], env: dict[str, str], closed: bool
) -> None:
    """C1. Before: "ResourceWarning: unclosed file <_io.TextIOWrapper name='<stdout>' ...",
    after valid JSON and exit 0 (and of name='/dev/null' with stdout closed at start)."""
    command = [sys.executable, *options, "-m", "dlperf", "--db", f"sqlite:///{tmp_path / 'r.db'}"]
    command += ["runs", "list", "--json"]
    if closed:  # `dlperf ... >&-`
        command = ["sh", "-c", 'exec "$@" >&-', "sh", *command]
    done = subprocess.run(
        command,
        env={**os.environ, "OMP_NUM_THREADS": "1", **env},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""
    if not closed:
        assert json.loads(done.stdout) == []


def test_config_show_on_an_ascii_stdout_is_toml_that_reads_back(
    cli: Cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """C5, TOML. Before: `name = "caf\\xe9-..."`, then `config show` of it: "malformed TOML:
    Unescaped '\\' in a string"."""
    named = tmp_path / "named.toml"
    named.write_text(f'[model]\nname = "smallcnn"\n[run]\nname = "{NAME}"\n', encoding="utf-8")
    with monkeypatch.context() as ascii_only:
        written = _ascii_stdout(ascii_only)
        result = cli("config", "show", str(named))
        sys.stdout.flush()
        shown = written.getvalue().decode("ascii")  # before the stream is dropped, closing it
    assert result.code == 0, result.err
    assert 'name = "caf\\u00e9-\\u00fcn\\u00efcode-\\u65e5\\u672c-' in shown
    assert "\\U0001f600" in shown  # beyond the BMP: TOML's 8-digit escape
    assert tomllib.loads(shown)["run"]["name"] == NAME
    again = tmp_path / "shown.toml"
    again.write_text(shown, encoding="ascii")
    reread = cli("config", "show", str(again))
    assert reread.code == 0, reread.err
    assert tomllib.loads(reread.out)["run"]["name"] == NAME


def test_a_csv_stdout_cannot_hold_is_written_as_utf8(monkeypatch: pytest.MonkeyPatch) -> None:
    """C5, CSV (what `analyze --csv` prints through). Before: `faltung_\\xe4,Conv2d,...`, the
    layer names altered, exit 0."""
    written = _ascii_stdout(monkeypatch)
    console.print_csv([["name", "type"], ["faltung_ä", "Conv2d"], ["kopf_日本", "Linear"]])
    assert written.getvalue().decode("utf-8") == (
        "name,type\r\nfaltung_ä,Conv2d\r\nkopf_日本,Linear\r\n"
    )


def test_an_ascii_csv_stays_in_stdouts_encoding(monkeypatch: pytest.MonkeyPatch) -> None:
    """A CSV the encoding holds is written through the stream as before."""
    written = _ascii_stdout(monkeypatch)
    console.print_csv([["name"], ["conv1"]], lineterminator="\n")
    assert written.getvalue() == b"name\nconv1\n"


def test_doctor_folds_an_escaped_run_name_at_the_width(
    cli: Cli, db: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """C7. Before: `run 1 caf\\xe9-\\xfcn\\xefcode-\\u65e5...` on one line 50 columns wide
    under COLUMNS=20 (the stdout console as COLUMNS=20 makes it at start)."""
    store = RunStore.open(db)
    run_id = store.create_run(NAME, "run", {"model": {"name": "smallcnn"}})
    store.finish_run(run_id, summary={"test_accuracy": 0.9})
    store.engine.dispose()
    monkeypatch.setattr(console, "out", Console(highlight=False, markup=False, width=20))
    written = _ascii_stdout(monkeypatch)
    result = cli("doctor", str(run_id))
    sys.stdout.flush()
    assert result.code == 0, result.err
    lines = written.getvalue().decode("ascii").splitlines()
    assert "caf\\xe9" in "".join(lines)
    assert max(len(line) for line in lines) <= 20, lines
