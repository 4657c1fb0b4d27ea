"""Review of round 34's serve, signal and locale fixes (task R3).

C4's family: under a C locale with UTF-8 mode off (PYTHONUTF8=0, -X utf8=0) Python's stdout is
ASCII with the surrogateescape handler, which raises on a character ASCII lacks as "strict"
does: every table holding one (a run named café, runs compare's Δ) ended in a
UnicodeEncodeError traceback. Only "strict" was made to escape (round 18's PYTHONIOENCODING=ascii).
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest


@pytest.mark.parametrize(
    ("mode", "text", "written"),
    [
        ("utf8=0", "caf\\xe9 \\u0394", b"caf\\xe9 \\u0394\n"),  # escaped, as on stderr
        ("utf8=1", "\\udcff", b"\xff\n"),  # a file name's byte that is not UTF-8: as it was
    ],
    ids=["ascii", "utf-8 mode"],
)
def test_stdout_in_a_c_locale_escapes_only_what_its_encoding_lacks(
    mode: str, text: str, written: bytes
) -> None:
    """What dlperf's console module sets up at import, in a fresh interpreter (the encoding and
    its handler are set at start), without the rest of the CLI: a fraction of a second."""
    done = subprocess.run(
        [sys.executable, "-X", mode, "-c", f"import dlperf.cli.console; print('{text}')"],
        env={**os.environ, "LC_ALL": "C", "PYTHONIOENCODING": ""},
        capture_output=True,
        timeout=60,
        check=False,
    )
    assert (done.returncode, done.stdout, done.stderr) == (0, written, b"")
