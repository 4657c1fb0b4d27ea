"""docs/course.md runs: every course problem's command, on the bundled data, prints what the
page says it prints.

Each ```bash block of the page is a problem's deliverable. Its lines run in order, for real,
in one `tmp_path` per block that has the repository's `examples/` and `tests/fixtures/` copied in,
a fresh run store (`DLPERF_DB`) and `dlperf` meaning dlperf's own entry point. A line may end in
`#=> TEXT` (or `#=> TEXT #=> MORE`, one command checked for two figures instead of run twice):
each TEXT must then be in what the line printed (stdout and stderr), and every line must
exit 0. `export NAME=VALUE` lines set NAME for the lines after them. Nothing is rewritten:
the page shows exactly what runs.

A line that is one plain `dlperf ARGS` command, which bash would hand on word for word, runs
in this process through the real entry point, `dlperf.cli.main()` (as tests/conftest.py's
`cli` fixture does): a `python -m dlperf` process imports torch and torch._dynamo, 6-8 CPU-s,
before it does anything, and the page has about 35 lines. A line with shell syntax (a pipe, a
redirection, a glob that matches files, `$`, quotes) runs under `bash -c`, with `dlperf`
meaning `python -m dlperf`; the README's quick start keeps a plain line in a process of its
own too (tests/scenarios/test_quickstart.py).
"""

from __future__ import annotations

import glob
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from tests.conftest import run_cli

pytestmark = pytest.mark.scenario

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "course.md"
TIMEOUT_S = 600  # per line: generous, the machine may be shared and busy
BASH_FENCE = re.compile(r"^```bash\n(.*?)^```", re.S | re.M)
HEADING = re.compile(r"^## (.+)$", re.M)
EXPECT = " #=> "
# bash's comment: a `#` that starts a word, and the rest of the line.
COMMENT = re.compile(r"(?:^|\s)#.*", re.S)
# Characters bash gives no meaning to in a word (no quotes, `$`, `~`, `{`, `*`, `?`, `;`, `&`,
# `|`, `<`, `>`, `(`, `\`), and `[`: bash leaves a word with a bracket expression as it is
# written where it matches no file (`--set train.schedule.milestones=[2,3]`), checked below.
PLAIN = re.compile(r"[A-Za-z0-9_.,:/=@+%\[\] -]+")


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


def plain_dlperf(line: str, cwd: Path) -> list[str] | None:
    """The arguments of a line that is one plain `dlperf ARGS` command, as bash would pass
    them; None for a line that needs bash."""
    command = COMMENT.sub("", line)
    if not PLAIN.fullmatch(command):
        return None
    argv = shlex.split(command)
    if argv[:1] != ["dlperf"]:
        return None
    if any("[" in word and glob.glob(word, root_dir=cwd) for word in argv):
        return None  # bash would put the files it matches in its place
    return argv[1:]


def test_the_page_has_a_block_per_problem() -> None:
    found = blocks()
    assert len(found) >= 10
    assert all(lines for _, lines in found)
    assert sum(EXPECT in line for _, lines in found for line in lines) >= len(found)


def test_plain_lines_are_told_from_shell_syntax(tmp_path: Path) -> None:
    """What runs in this process is exactly what bash would have run as `dlperf ARGS`."""
    assert plain_dlperf("dlperf analyze vgg16  #=> avgpool: 212x212 px", tmp_path) == [
        "analyze",
        "vgg16",
    ]
    assert plain_dlperf("dlperf sweep s.toml --set m=[2,3]  #=> x", tmp_path) == [
        "sweep",
        "s.toml",
        "--set",
        "m=[2,3]",
    ]
    (tmp_path / "m=2").touch()  # now bash would replace the word by that file's name
    for line in (
        "dlperf sweep s.toml --set m=[2,3]",
        "dlperf infer digits.onnx samples/*.png --topk 1",
        "dlperf converge regress a.csv --json > curve.json",
        "dlperf runs list | head -1",
        "dlperf runs show $RUN",
        "dlperf run 'my exp.toml'",
        "dlperf run a.toml && dlperf runs list",
        "python -m dlperf runs list",
    ):
        assert plain_dlperf(line, tmp_path) is None, line


@pytest.mark.parametrize(("heading", "lines"), blocks(), ids=[h for h, _ in blocks()])
def test_a_problem_runs_as_the_page_says(
    heading: str,
    lines: list[str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capfd: pytest.CaptureFixture[str],
) -> None:
    for folder in ("examples", "tests/fixtures"):
        shutil.copytree(ROOT / folder, tmp_path / folder)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("DLPERF_DB", str(tmp_path / "dlperf.db"))
    monkeypatch.setenv("COLUMNS", "200")
    monkeypatch.delenv("DLPERF_DEVICES", raising=False)
    prelude = f'dlperf() {{ {shlex.quote(sys.executable)} -m dlperf "$@"; }}; '
    for line in lines:
        if line.startswith("export "):
            name, _, value = line.removeprefix("export ").split(" #")[0].strip().partition("=")
            monkeypatch.setenv(name, value)
            continue
        args = plain_dlperf(line, tmp_path)
        if args is not None:
            # Each command starts on one torch thread, as each test does (tests/conftest.py's
            # _one_torch_thread), not on what the line before it set (run.threads, --threads)
            torch.set_num_threads(1)
            ran = run_cli(args, capfd, monkeypatch)  # capfd: the scale study's workers' output too
            code, said = ran.code, ran.out + ran.err
        else:
            done = subprocess.run(
                ["bash", "-c", prelude + line],
                cwd=tmp_path,
                env=os.environ.copy(),
                capture_output=True,
                text=True,
                timeout=TIMEOUT_S,
            )
            code, said = done.returncode, done.stdout + done.stderr
        assert code == 0, f"{line}\n{said}"
        for expected in line.split(EXPECT)[1:]:
            assert expected.strip() in said, f"{line}\n{said}"
