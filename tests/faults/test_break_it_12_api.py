"""The twelfth break-it round (the Python API): a Ctrl-C during `dlperf.run` in a notebook.

The first run of a process loads much of torch lazily as it builds its optimizer
(torch.optim reaches torch._dynamo, and with it torch.fx, sympy, torch._inductor, ...). A
Ctrl-C landing inside that import left torch half-imported (its operator registrations made,
its modules gone), and every later `dlperf.run` in the same process failed with a traceback
ending in `partially initialized module 'torch._dynamo' has no attribute 'utils'` (or `sympy
has no attribute 'logic'`, `duplicate registrations for aten.linspace`, ...). The interrupt
now waits for the import to end and is raised right after it: the run was stored killed and
the next run in the process trains. Since round 56 the import is made before the run is
recorded (engine.optim.load_optimizers), so the interrupted run stores nothing.

The interrupt is made to land inside that import deterministically: a meta-path finder of the
child process sends SIGINT to it when a module deep in the chain is looked up (no timer). In
a child, so that this process's own torch stays whole.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from dlperf import stopping

# A module torch._dynamo's import loads halfway through (torch 2.14): an interrupt here left
# torch._dynamo partially initialized.
DEEP = "torch._inductor.cpp_builder"
# One `import torch` loads halfway through: an interrupt here left torch itself partially
# initialized (`cannot import name 'nn' from partially initialized module 'torch'`).
TORCH_DEEP = "torch.functional"

CHILD = textwrap.dedent(
    """
    import json, os, signal, sys
    # Python's own Ctrl-C, as a notebook's kernel has it: a child of a background job (`make
    # test-faults &`) starts with SIGINT ignored and would never see the interrupt it sends.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    if sys.argv[3] == "torch first":  # as a notebook that has trained before
        import torch
    import dlperf

    tripped = []

    class Trip:  # Ctrl-C as the module named is looked up, inside the optimizer's imports
        def find_spec(self, name, path=None, target=None):
            if name == sys.argv[1] and not tripped:
                tripped.append(name)
                os.kill(os.getpid(), signal.SIGINT)
            return None

    sys.meta_path.insert(0, Trip())
    exp = {
        "model": {"name": "smallcnn"},
        "data": {"name": "digits", "limit": 64},
        "train": {"epochs": 1, "batch_size": 64},
        "run": {"threads": 1, "out_dir": sys.argv[2]},
    }
    try:
        dlperf.run(exp)
        first = "finished"
    except KeyboardInterrupt:
        first = "interrupted"
    second = dlperf.run(exp).status
    store = dlperf.Store()
    runs = sorted((r.id, r.status) for r in store.runs())
    print(json.dumps({"tripped": tripped, "first": first, "second": second, "runs": runs}))
    """
)


def _interrupted_then_run(tmp_path: Path, deep: str, torch_first: bool) -> dict[str, Any]:
    """The child's account: the module its Ctrl-C landed in, how its first `dlperf.run` ended
    and its second, and the runs stored."""
    env = os.environ | {"DLPERF_DB": str(tmp_path / "runs.db")}
    child = [CHILD, deep, str(tmp_path / "out"), "torch first" if torch_first else "-"]
    done = subprocess.run(
        [sys.executable, "-c", *child],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "Traceback" not in done.stderr
    told: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    assert told["tripped"] == [deep], "the interrupt never landed in that import"
    assert told["first"] == "interrupted"
    assert told["second"] == "finished"
    return told


@pytest.mark.faults
def test_a_ctrl_c_inside_the_optimizers_import_stores_nothing_and_the_next_trains(
    tmp_path: Path,
) -> None:
    # made before the run is recorded (round 56): the interrupt comes before it, as torch's
    told = _interrupted_then_run(tmp_path, DEEP, torch_first=True)
    assert [status for _, status in told["runs"]] == ["finished"]


@pytest.mark.faults
def test_a_ctrl_c_inside_torchs_first_import_leaves_the_next_run_training(
    tmp_path: Path,
) -> None:
    # torch imported by dlperf.run itself: the interrupt comes before the run is recorded.
    told = _interrupted_then_run(tmp_path, TORCH_DEEP, torch_first=False)
    assert [status for _, status in told["runs"]] == ["finished"]


def test_deferred_holds_a_ctrl_c_to_the_blocks_end_then_gives_it_to_the_handler_there() -> None:
    signal.signal(signal.SIGINT, signal.default_int_handler)  # a notebook's, as Python sets it
    went_on = []
    with pytest.raises(KeyboardInterrupt), stopping.deferred():
        signal.raise_signal(signal.SIGINT)
        went_on.append("the block ran to its end")
    assert went_on == ["the block ran to its end"]
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_deferred_raises_one_interrupt_when_the_block_is_interrupted_itself() -> None:
    signal.signal(signal.SIGINT, signal.default_int_handler)
    with pytest.raises(KeyboardInterrupt) as raised, stopping.deferred():
        signal.raise_signal(signal.SIGINT)
        raise KeyboardInterrupt("the block's own")
    assert str(raised.value) == "the block's own"
    assert raised.value.__context__ is None


def test_deferred_leaves_an_ignored_ctrl_c_ignored() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    with stopping.deferred():
        signal.raise_signal(signal.SIGINT)
    assert signal.getsignal(signal.SIGINT) == signal.SIG_IGN
