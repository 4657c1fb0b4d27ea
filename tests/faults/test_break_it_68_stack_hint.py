"""Break-it round 68, cause 2 (case 43): under a hard `ulimit -s 1024` `dlperf analyze` of a model
nested 1,202 deep refused it, rightly, but said "raise the limit in the model file: import sys;
sys.setrecursionlimit(9000)", and doing so crashed the process (SIGSEGV, exit 139, nothing
said): the stack the hard limit holds (about 1,587 of Python's frames, as dlperf.stack counts
them) is what stops the depth, and dlperf.stack fitted the recursion limit to it only where
the fit fell under 1,000. Now the line names the stack limit in KiB, that `ulimit -s` caps
it and what to raise it to, before the recursion limit; and a model file that raises the
recursion limit past what the stack holds has it lowered back to that, in one warning line,
so that the model's depth is the same one-line refusal instead of a crash."""

from __future__ import annotations

import os
import resource
import subprocess
import sys
from pathlib import Path

import dlperf

SOURCE = str(Path(dlperf.__file__).parents[1])  # the dlperf under test, in the subprocess too
STACK = 1024 * 1024  # `ulimit -s 1024`: soft and hard, as bash sets them

DEEP = """\
import torch.nn as nn

def make(num_classes=10, **kw):
    m = nn.Linear(16, 16)
    for _ in range(1200):
        m = nn.Sequential(m, nn.ReLU())
    return nn.Sequential(nn.Flatten(), nn.Linear(64, 16), m, nn.Linear(16, num_classes))
"""

REFUSED = (
    "error: the model nests its modules 1202 deep, too deep for Python's recursion limit "
    "({limit}), through which torch walks and calls them (flatten the nesting: one "
    "nn.Sequential of the layers, not each inside the last; or raise the stack limit first: "
    "ulimit -s 1024 (KiB) holds about 1587 of Python's frames, and a recursion limit above "
    "that crashes the process; ulimit -s 8192 or more (in a new shell: ulimit -s sets the "
    "hard limit too, which caps it), then in the model file: import sys; "
    "sys.setrecursionlimit(9000))"
)


def _small_stack() -> None:
    resource.setrlimit(resource.RLIMIT_STACK, (STACK, STACK))


def _analyze(tmp_path: Path, source: str) -> tuple[int, list[str]]:
    """`dlperf analyze deep.py:make` under the small stack: its exit code and stderr's lines,
    less torch's own note of a missing triton (not dlperf's to say)."""
    (tmp_path / "deep.py").write_text(source)
    env = {**os.environ, "DLPERF_DB": f"sqlite:///{tmp_path / 'dlperf.db'}",
           "OMP_NUM_THREADS": "1", "PYTHONPATH": SOURCE}  # fmt: skip
    command = [sys.executable, "-m", "dlperf", "analyze", "deep.py:make", "--input", "1,8,8"]
    done = subprocess.run(
        command, cwd=tmp_path, env=env, capture_output=True, text=True,
        preexec_fn=_small_stack, timeout=120,
    )  # fmt: skip
    said = [line for line in done.stderr.splitlines() if "triton not found" not in line]
    return done.returncode, said


def test_the_too_deep_line_names_the_stack_limit_that_stops_it(tmp_path: Path) -> None:
    """Before: "... or raise the limit in the model file: import sys;
    sys.setrecursionlimit(9000)", advice that crashed the process under this stack."""
    rc, said = _analyze(tmp_path, DEEP)
    assert (rc, said) == (2, [REFUSED.format(limit=1000)])


def test_a_recursion_limit_the_stack_cannot_hold_is_lowered_to_it_not_a_crash(
    tmp_path: Path,
) -> None:
    """Before: the model file's sys.setrecursionlimit(9000) was kept, and the model's forward
    crashed the process: exit -11 (SIGSEGV; 139 in a shell), nothing on stderr."""
    rc, said = _analyze(tmp_path, "import sys\nsys.setrecursionlimit(9000)\n" + DEEP)
    assert (rc, said) == (
        2,
        [
            "warning: model file deep.py raised Python's recursion limit to 9000 as it was "
            "imported, more than the stack limit, ulimit -s 1024 (KiB), holds; lowered to 1587, "
            "where a deeper recursion is a RecursionError, not a crash (raise ulimit -s to keep "
            "it)",
            REFUSED.format(limit=1587),
        ],
    )


def test_the_walk_for_unregistered_layers_does_not_recurse() -> None:
    """Before: `unregistered` (export's and run's check for layers kept in a plain list) took
    the model's own tensors from model.parameters(), torch's recursive walk: `dlperf export` of
    this model, under the default stack, ended in its RecursionError traceback (exit 1)."""
    from torch import nn

    from dlperf.models.registry import unregistered

    class Deep(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            body: nn.Module = nn.Linear(16, 16)
            for _ in range(1200):
                body = nn.Sequential(body, nn.ReLU())
            self.body = body
            self.kept = [nn.Linear(2, 2)]  # a layer in a plain list: the walk's finding

    assert [f.where for f in unregistered(Deep())] == ["kept"]
