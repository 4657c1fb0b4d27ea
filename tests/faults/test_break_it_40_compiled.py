"""Break-it round 40, Left list, fixer F4: models whose factory returns `torch.compile(module)`.

Round 39's Left, item 1: `dlperf.analyze(torch.compile(module))` named the model
`OptimizedModule` (the table's title, `to_dict()["model"]`), where it counts the module inside
and the same module uncompiled is named by its class; it is now named as the module inside
(`Sequential`), its table the uncompiled one's to the character.
Round 39's Left, item 2: `dlperf export N` of a run whose factory returns torch.compile(module)
printed inductor's log line (`W... torch/utils/cpp_extension.py:183] [0/1] No CUDA runtime is
found, ...`) before dlperf's own on a CPU machine: the export's rebuild of the run's model made
its dry checks through the compiled wrapper, so torch compiled it (inductor's C++ build) only
for export to take the module inside afterwards. The rebuild (export's and `infer bench`'s) now
runs every torch.compile wrapper as the module it wraps: nothing is compiled, and stderr holds
dlperf's lines only, with either batch.
Found fixing: a module holding itself as `_orig_mod` would have hung the API, which now
unwraps before its cycle check: `uncompiled` stops at a module it has passed, and the cycle
is refused in one line as before.
Code review: `models/transfer.py` unwrapped torch.compile's `_orig_mod` with a loop of its own
beside `analytic.counting.uncompiled`; it now calls that helper, since moved to
`models.transfer` out of an import cycle (no behaviour change: the head's name under any
nesting of compile and DataParallel is as before).

The model file compiles with a backend that writes a line each time it is called, then hands
the graph to inductor (torch.compile's default): one run trains it (inductor's first build on
a CPU takes tens of seconds), module-scoped, and the exports must not call it again.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import torch
from torch import nn

import dlperf
from dlperf.models.transfer import head_name

MODEL = """
import torch
from torch import nn


def recorded(graph, inputs):  # each compile, for the tests to count
    with open({compiles!r}, "a") as f:
        f.write("compiled\\n")
    from torch._dynamo import lookup_backend

    return lookup_backend("inductor")(graph, inputs)


def make(num_classes=10, in_channels=1):
    plain = nn.Sequential(nn.Flatten(), nn.Linear(64 * in_channels, num_classes))
    return torch.compile(plain, backend=recorded)
"""

EXPERIMENT = """[model]
name = "compiled.py:make"
[data]
name = "synthetic"
shape = [1, 8, 8]
num_classes = 10
size = 64
[train]
epochs = 1
batch_size = 32
lr = 0.05
[run]
threads = 1
warmup_steps = 1
"""

# A line of torch's C++ or Python logging (glog's form): `W1129 21:55:59.383000 15011 torch/...`
TORCH_LOG = re.compile(r"^[IWEF]\d{4} \d\d:\d\d:\d\d", re.M)


def _dlperf(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """`python -m dlperf ARGS` in a process of its own: torch logs its line once a process."""
    env = {**os.environ, "DLPERF_DB": f"sqlite:///{root / 'dlperf.db'}", "COLUMNS": "200"}
    return subprocess.run(
        [sys.executable, "-m", "dlperf", *args],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, Path]]:
    """A folder whose store holds run 1, trained from compiled.py:make; and the file each
    compile appends a line to, emptied after the run's own compiles."""
    root = tmp_path_factory.mktemp("compiled")
    compiles = root / "compiles.txt"
    (root / "compiled.py").write_text(MODEL.format(compiles=str(compiles)))
    (root / "exp.toml").write_text(EXPERIMENT)
    done = _dlperf(root, "run", "exp.toml")
    assert done.returncode == 0, done.stderr
    assert compiles.exists()  # the premise: the run trained the compiled module
    compiles.unlink()
    yield root, compiles


@pytest.mark.faults  # inductor's first build, then a process an export: a minute when busy
@pytest.mark.parametrize("dynamic", [False, True], ids=["fixed-batch", "dynamic-batch"])
def test_item2_export_of_a_compiled_run_compiles_nothing_and_prints_dlperfs_lines_only(
    trained: tuple[Path, Path], dynamic: bool
) -> None:
    root, compiles = trained
    out = f"m-{'dyn' if dynamic else 'fixed'}.onnx"
    done = _dlperf(root, "export", "1", "--out", out, *(["--dynamic-batch"] if dynamic else []))
    assert done.returncode == 0, done.stderr
    assert not compiles.exists(), compiles.read_text()  # the wrapper was never compiled
    assert TORCH_LOG.search(done.stderr) is None, done.stderr
    assert "No CUDA runtime" not in done.stderr, done.stderr
    assert (root / out).exists()


def test_item1_the_api_names_a_compiled_module_as_the_module_inside() -> None:
    net = nn.Sequential(nn.Flatten(), nn.Linear(64, 10))
    plain = dlperf.analyze(net, input_size=(1, 8, 8))
    counted = dlperf.analyze(torch.compile(net), input_size=(1, 8, 8))
    assert counted.to_dict()["model"] == "Sequential"
    assert str(counted) == str(plain)
    assert "OptimizedModule" not in str(counted)


def test_item1_a_refusal_of_the_api_names_the_module_inside() -> None:
    """A refusal names the model as the table would, its paths as the module inside's: before,
    "model OptimizedModule contains itself: _orig_mod.1.owner is its ancestor _orig_mod"."""
    net = nn.Sequential(nn.Flatten(), nn.Linear(64, 10))
    net[1].owner = net  # a head keeping its parent: a cycle, refused before any count
    said = []
    for model in (torch.compile(net), net):
        with pytest.raises(dlperf.UserError) as refused:
            dlperf.analyze(model, input_size=(1, 8, 8))
        said.append(str(refused.value))
    assert said[0] == said[1]
    assert said[1].startswith("model Sequential contains itself: 1.owner is the model itself")


def test_item1_a_module_that_is_its_own_orig_mod_is_refused_not_walked_for_ever() -> None:
    """Found fixing: the API now unwraps before its cycle check, and `uncompiled` followed
    `_orig_mod` for as long as there was one: a module holding itself there would hang."""
    net = nn.Sequential(nn.Flatten(), nn.Linear(64, 10))
    net._orig_mod = net
    with pytest.raises(dlperf.UserError, match="contains itself: _orig_mod is the model itself"):
        dlperf.analyze(net, input_size=(1, 8, 8))


@pytest.mark.parametrize(
    ("wrap", "prefix"),
    [
        (lambda m: m, ""),
        (lambda m: torch.compile(m), "_orig_mod."),
        (lambda m: nn.DataParallel(torch.compile(m)), "module._orig_mod."),
        (lambda m: torch.compile(nn.DataParallel(torch.compile(m))), "_orig_mod.module._orig_mod."),
    ],
    ids=["plain", "compiled", "dp-of-compiled", "compiled-dp-compiled"],
)
def test_item3_transfer_names_the_head_under_every_wrapper_as_before(
    wrap: Callable[[nn.Module], nn.Module], prefix: str
) -> None:
    """transfer's unwrapping (now through counting's `uncompiled`) names the head with every
    wrapper's prefix, as its state dict's keys name it."""
    model = wrap(nn.Sequential(nn.Flatten(), nn.Linear(64, 10)))
    assert head_name(model) == f"{prefix}1"
    assert f"{prefix}1.weight" in model.state_dict()
