"""docs/course.md runs: every course problem's command, on the bundled data, prints what the
page says it prints.

Each ```bash block of the page is a problem's deliverable. Its lines run in order, for real,
in one `tmp_path` per block that has the repository's `examples/` and `tests/fixtures/` copied in,
a fresh run store (`DLPERF_DB`) and `dlperf` meaning `python -m dlperf`. A line may end in
`#=> TEXT` (or `#=> TEXT #=> MORE`, one command checked for two figures instead of run twice):
each TEXT must then be in what the line printed (stdout and stderr), and every line must
exit 0. `export NAME=VALUE` lines set NAME for the lines after them. Nothing is rewritten:
the page shows exactly what runs.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.scenario

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "course.md"
TIMEOUT_S = 600  # per line: generous, the machine may be shared and busy
BASH_FENCE = re.compile(r"^```bash\n(.*?)^```", re.S | re.M)
HEADING = re.compile(r"^## (.+)$", re.M)
EXPECT = " #=> "


def blocks() -> list[tuple[str, list[str]]]:
    """(the problem's heading, its command lines) for every bash block, in page order."""
    text = PAGE.read_text(encoding="utf-8")
    found = []
    for match in BASH_FENCE.finditer(text):
        headings = HEADING.findall(text[: match.start()])
        lines = [
            line.strip()
            for line in match.group(1).replace("\\\n", " ").splitlines()
            if line.strip() and not line.strip().startswith("#")
        ]
        found.append((headings[-1] if headings else "", lines))
    return found


def test_the_page_has_a_block_per_problem() -> None:
    found = blocks()
    assert len(found) >= 10
    assert all(lines for _, lines in found)
    assert sum(EXPECT in line for _, lines in found for line in lines) >= len(found)


@pytest.mark.parametrize(("heading", "lines"), blocks(), ids=[h for h, _ in blocks()])
def test_a_problem_runs_as_the_page_says(heading: str, lines: list[str], tmp_path: Path) -> None:
    for folder in ("examples", "tests/fixtures"):
        shutil.copytree(ROOT / folder, tmp_path / folder)
    env = {**os.environ, "DLPERF_DB": str(tmp_path / "dlperf.db"), "COLUMNS": "200"}
    env.pop("DLPERF_DEVICES", None)
    prelude = f'dlperf() {{ {shlex.quote(sys.executable)} -m dlperf "$@"; }}; '
    for line in lines:
        if line.startswith("export "):
            name, _, value = line.removeprefix("export ").split(" #")[0].strip().partition("=")
            env[name] = value
            continue
        done = subprocess.run(
            ["bash", "-c", prelude + line],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=TIMEOUT_S,
        )
        said = done.stdout + done.stderr
        assert done.returncode == 0, f"{line}\n{said}"
        for expected in line.split(EXPECT)[1:]:
            assert expected.strip() in said, f"{line}\n{said}"
