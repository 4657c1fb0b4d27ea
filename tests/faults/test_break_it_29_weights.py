"""Break-it round 29 (P1), the weights users bring: causes C1, C2, C4, C5 and C7.

C1. State dicts whose every key carries one prefix (`module.` of DDP, `_orig_mod.` of
torch.compile, `model.` of Lightning) were refused with the wrong fix ("use the model.name ...
the weights were trained with"). Now the common prefix is read off when that makes every key
fit (a model's own prefix put on, for a compiled or wrapped model), and the notes say so.
C2. A file holding a pickled whole model, an empty file or text said "not a state-dict file
(UnpicklingError)", no fix. Now one line says which, and to save model.state_dict().
C4. Weights holding NaN or inf loaded after the dry checks: the run was recorded and failed
at step 1 blaming the model's forward. Now refused before the record, naming the tensors.
C5. A [model] kwargs value that made the factory raise a ValueError (width = 3.5) got torch's
line alone; only a TypeError named the kwargs given. Now any exception does.
C7. `model.weights` was stored as typed (relative) and the file not hashed: distill reused
a teacher trained from other weights. Now a file that is there is stored absolute, and its
sha256 is part of the config hash and recorded with the run (`weights_file_sha256`).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from torch import nn

from dlperf.config import Experiment
from dlperf.models.transfer import load_weights
from dlperf.store import RunStore
from tests.conftest import CliResult
from tests.faults.test_store_faults import one_line

Cli = Callable[..., CliResult]

# The tester's network (bk29 P1, net.py), for the digits' 1x8x8 images.
NET = """
import torch, torch.nn as nn
class Net(nn.Module):
    def __init__(self, num_classes=10, in_channels=1):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, 4, 3, padding=1)
        self.fc = nn.Linear(4*8*8, num_classes)
    def forward(self, x):
        return self.fc(torch.relu(self.conv(x)).flatten(1))
def net(num_classes=10, in_channels=1): return Net(num_classes, in_channels)
def typed(num_classes: int = 10, in_channels: int = 1, width: int = 4):
    m = Net(num_classes, in_channels)
    m.conv = nn.Conv2d(in_channels, width, 3, padding=1)
    return m
"""

EXP = """
[model]
name = "{net}:net"
head = "keep"
[data]
name = "digits"
limit = 32
[train]
epochs = 1
batch_size = 16
lr = 0.05
[run]
threads = 1
warmup_steps = 1
out_dir = "{out}"
"""


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(1, 4, 3, padding=1)
        self.fc = nn.Linear(4 * 8 * 8, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(torch.relu(self.conv(x)).flatten(1))


def experiment(root: Path) -> Path:
    (root / "net.py").write_text(NET)
    path = root / "exp.toml"
    path.write_text(EXP.format(net=root / "net.py", out=root / "runs"))
    return path


# --- C1: one prefix on every key ---------------------------------------------------------


@pytest.mark.parametrize(
    ("prefix", "wrapped", "said"),
    [
        (
            "module.",
            False,
            "every key of the weights starts with 'module.' (DistributedDataParallel",
        ),
        ("_orig_mod.", False, "'_orig_mod.' (torch.compile)"),
        ("model.", False, "'model.' (a Lightning module)"),
        ("", True, "every key of the model starts with 'module.'"),
    ],
)
def test_c1_weights_under_one_prefix_load(prefix: str, wrapped: bool, said: str) -> None:
    torch.manual_seed(0)
    saved = Net().state_dict()
    weights = {prefix + key: value for key, value in saved.items()}
    model: nn.Module = nn.DataParallel(Net()) if wrapped else Net()  # keys under module.
    notes = load_weights(model, weights, "w.pt", keep_head=True)
    loaded = model.state_dict()
    for key, value in saved.items():
        assert torch.equal(loaded[("module." if wrapped else "") + key], value)
    assert any(said in note for note in notes), notes


# --- C2: files that hold no state dict ---------------------------------------------------


@pytest.mark.parametrize(
    ("content", "said"),
    [
        ("whole", "holds a pickled nn.Module (Net), not a state dict"),
        ("empty", "is empty (0 bytes)"),
        ("text", "is text, not a state-dict file"),
    ],
)
def test_c2_file_of_no_state_dict_says_the_fix(
    cli: Cli, tmp_path: Path, content: str, said: str
) -> None:
    path = tmp_path / "w.pt"
    if content == "whole":
        torch.save(Net(), path)
    else:
        path.write_text("" if content == "empty" else "hello\n")
    result = cli("run", str(experiment(tmp_path)), "--set", f"model.weights={path}")
    one_line(result, 2, f"model.weights {path} {said}", "torch.save(model.state_dict(), ")


# --- C4: NaN in the weights --------------------------------------------------------------


def test_c4_weights_holding_nan_are_refused_before_the_run_is_recorded(
    cli: Cli, store: RunStore, tmp_path: Path
) -> None:
    state = Net().state_dict()
    state["conv.weight"].fill_(float("nan"))
    state["fc.bias"][3] = float("inf")
    torch.save(state, path := tmp_path / "w_nan.pt")
    result = cli("run", str(experiment(tmp_path)), "--set", f"model.weights={path}")
    one_line(result, 2, f"model.weights {path}: conv.weight holds NaN, fc.bias holds inf")
    assert store.list_runs() == []


# --- C5: a kwarg the factory raises a ValueError on -------------------------------------


def test_c5_any_factory_error_with_kwargs_names_them(cli: Cli, tmp_path: Path) -> None:
    (tmp_path / "net.py").write_text(NET)
    result = cli(
        "analyze", f"{tmp_path / 'net.py'}:typed", "--input", "1,8,8",
        "--set", "model.kwargs.width=3.5",
    )  # fmt: skip
    one_line(result, 2, "ValueError: ", "(check the values given in [model] kwargs: width=3.5)")


# --- C7: the weights file, where and what ------------------------------------------------


def test_c7_weights_stored_absolute_and_hashed(
    cli: Cli, store: RunStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    exp = experiment(tmp_path)
    for folder, seed in (("A", 1), ("B", 2)):
        (tmp_path / folder).mkdir()
        torch.manual_seed(seed)
        torch.save(Net().state_dict(), tmp_path / folder / "w.pt")
    monkeypatch.chdir(tmp_path / "A")
    assert cli("run", str(exp), "--set", "model.weights=w.pt").code == 0
    run = store.get_run(1)
    weights = tmp_path / "A" / "w.pt"
    assert run.config["model"]["weights"] == str(weights)
    assert run.system["weights_file_sha256"] == hashlib.sha256(weights.read_bytes()).hexdigest()

    # What distill's reuse of a stage compares: the stored run's config hash, and that of the
    # config as given now
    def now(weights: str) -> str:
        given = {**run.config, "model": {**run.config["model"], "weights": weights}}
        return Experiment.model_validate(given).config_hash()

    assert now("w.pt") == run.config_hash
    monkeypatch.chdir(tmp_path / "B")
    assert now("w.pt") != run.config_hash  # other weights, of the same relative name
    weights.write_bytes((tmp_path / "B" / "w.pt").read_bytes())
    assert now(str(weights)) != run.config_hash  # the same file, changed
