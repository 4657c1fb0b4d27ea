"""Break-it round 43, fixer F2: a --json document cut by a stop signal, and a 309-digit count.

T3 C2 (wrong output). `console.print_json` wrote the document in one write; with a reader
slower than the command (a pipe whose 64 KiB buffer is full) the write blocked, a SIGTERM's
KeyboardInterrupt landed inside it, and 65,536 bytes of invalid JSON stayed on stdout, exit 143.
Now the write is a `stopping.spared` block: a stop signal that lands once it has begun waits
for the whole document, then ends the command with 128 + the signal; a second signal still
ends it at once (a reader that never reads would otherwise hold the command for good), and
only then is part of the document left.

T2 C3 (cosmetic). `dlperf staleness --speeds L1=1 --horizon 1e308` said "ask for
100,000,...,336 gradients", a count of 309 digits in a 480-character line. Now a count past
15 digits is said in short form ("about 1e+308 gradients"); an ordinary one stays exact.
"""

from __future__ import annotations

import array
import fcntl
import json
import signal
import subprocess
import sys
import termios
import time
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

import pytest

from dlperf.converge import staleness
from dlperf.errors import UserError

# --- T3 C2: a stop signal while the --json document is written --------------------------------

# The command line's own stdout (`_name_stdout`, `documents_only`) and exit (`stopping.run`),
# a document of about 1.4 MB: many times a pipe's buffer.
_WRITER = """
from dlperf import stopping
from dlperf.cli import _name_stdout, console

def command() -> int:
    stream = _name_stdout(True)
    with console.documents_only(True, stream):
        console.print_json({"rows": [{"index": i, "label": "x" * 20} for i in range(20000)]})
    return 0

stopping.run(command, process=True)
"""


def _queued(pipe: IO[bytes]) -> int:
    """The bytes waiting in `pipe`, unread."""
    count = array.array("i", [0])
    fcntl.ioctl(pipe.fileno(), termios.FIONREAD, count)
    return count[0]


def _blocked_writer(tmp_path: Path, source: str = "") -> subprocess.Popen[bytes]:
    """A process running `source` (by default `_WRITER`, a JSON document's) that writes into a
    pipe nobody reads, once the pipe is full: its write has begun and waits for room."""
    script = tmp_path / "writer.py"
    script.write_text(source or _WRITER)
    child = subprocess.Popen(
        [sys.executable, str(script)], stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    assert child.stdout is not None
    room = fcntl.fcntl(child.stdout.fileno(), fcntl.F_GETPIPE_SZ)
    deadline = time.monotonic() + 120  # the interpreter's start on a busy machine
    while _queued(child.stdout) < room and child.poll() is None:
        assert time.monotonic() < deadline, "the document's write never filled the pipe"
        time.sleep(0.01)
    return child


def test_a_stop_signal_waits_for_the_json_document_to_be_whole(tmp_path: Path) -> None:
    """SIGTERM with 64 KiB of the document in the pipe and the rest waiting: all of it
    comes, and the exit code is SIGTERM's."""
    child = _blocked_writer(tmp_path)
    child.send_signal(signal.SIGTERM)
    out, err = child.communicate(timeout=120)
    assert child.returncode == 143, err
    assert len(json.loads(out)["rows"]) == 20000
    assert err == b""


def test_a_second_stop_signal_ends_a_document_nobody_reads(tmp_path: Path) -> None:
    """The document's write does not make the command unkillable: its reader never reads,
    and a second stop signal ends it (only then is part of the document left)."""
    child = _blocked_writer(tmp_path)
    child.send_signal(signal.SIGTERM)
    child.send_signal(signal.SIGINT)  # a different signal: not merged with the first
    try:
        code = child.wait(timeout=120)  # nobody has read the pipe
    finally:
        child.kill()
        child.communicate()
    assert code in (130, 143)  # the first of the two that Python's handler took


# --- T2 C3: the staleness cap's count ----------------------------------------------------------


@pytest.mark.parametrize(
    "speeds, horizon, said",
    [
        ("L1=1", "1e308", "ask for about 1e+308 gradients"),
        # two counts that add up past what a float holds
        ("L1=1e300,L2=1e300", "1e8", "ask for about 2e+308 gradients"),
        ("L1=1e9", "123456789", "ask for about 1.23e+17 gradients"),
        ("L1=5000000,L2=5000001", "1", "ask for 10,000,001 gradients"),  # ordinary: exact
    ],
    ids=["1e308", "past-a-float", "rounded", "exact"],
)
def test_staleness_says_a_huge_count_in_short(
    cli: Callable[..., Any], speeds: str, horizon: str, said: str
) -> None:
    r = cli("staleness", "--speeds", speeds, "--horizon", horizon)
    assert r.code == 2
    assert said in r.err
    assert len(r.err.strip().splitlines()) == 1
    assert len(r.err) < 200


def test_from_speeds_short_count_is_the_library_s() -> None:
    """The library says it, not only the command line."""
    with pytest.raises(UserError, match=r"about 1e\+308 gradients; at most 1,000,000"):
        staleness.from_speeds({"L1": 1.0}, 1e308)
