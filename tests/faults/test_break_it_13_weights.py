"""Issue 41, thirteenth break-it round: stored weights the model as built does not load, and
a model with a scripted submodule at export.

1. A model whose state_dict() does not match its load_state_dict() (an override of
   state_dict() adding "net." to every key, load_state_dict left stock) trained with
   run.checkpoint = true, exit 0; `dlperf export 1` then ended in load_state_dict's traceback
   ("Missing key(s) ... Unexpected key(s)"), exit 1, and `model.weights = "run:1"` the same.
   The weights had the keys of the model's own state_dict(), so the check of a model file
   edited since (checkpoint.fit_weights) found nothing to say. Now a run that checkpoints
   such a model is refused before anything is stored, and weights stored before (or by a
   model file edited since) are one line naming the keys each side has, exit 2, wherever
   they are loaded (export, model.weights, --resume and a distill teacher, which share
   checkpoint.fit_weights).
2. `self.body = torch.jit.script(Body())`: both ONNX exporters fail, and the export said only
   the TorchScript exporter's "Tried to trace <__torch__...Body object at 0x...> but it is
   not part of the active trace", no fix. Now one line names the scripted submodule and the
   fix, exit 2, no file written.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from torch import nn

from dlperf.deploy import export as export_module
from dlperf.engine import checkpoint
from dlperf.errors import UserError
from dlperf.store import RunStore
from tests.conftest import CliResult
from tests.faults.test_break_it_9_deploy import no_files
from tests.faults.test_store_faults import one_line

Cli = Callable[..., CliResult]

# The tester's experiment (bk13 A, base.toml), smaller: 32 images, two steps.
EXP = """
[model]
name = "smallcnn"
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
checkpoint = false
out_dir = "{out}"
"""

# The tester's model (bk13 A, sdo.py): keys renamed on save, load_state_dict left stock.
DISAGREES = """
import torch.nn as nn
class Net(nn.Module):
    def __init__(self, num_classes=10, in_channels=1):
        super().__init__(); self.fc = nn.Linear(in_channels * 64, num_classes)
    def state_dict(self, *a, **k):   # keys renamed on save; load_state_dict left stock
        sd = super().state_dict(*a, **k)
        return type(sd)(("net." + key, v) for key, v in sd.items())
    def forward(self, x):
        return self.fc(x.flatten(1))
"""

# The same model with the load_state_dict that undoes the renaming: its two methods agree,
# and its checkpoints load. Edited into DISAGREES after training, its stored weights have
# the keys of the model's state_dict() still, which load_state_dict no longer takes.
AGREES = (
    DISAGREES
    + """
    def load_state_dict(self, state, *a, **k):
        plain = {key.removeprefix("net."): v for key, v in state.items()}
        return super().load_state_dict(plain, *a, **k)
"""
)

SAID = (
    "its state_dict() and load_state_dict() disagree: load_state_dict() takes fc.weight, "
    "fc.bias, which state_dict() does not give; state_dict() gives net.fc.weight, "
    "net.fc.bias, which load_state_dict() does not take"
)
AGREE = (
    "make the model's state_dict() and load_state_dict() agree (an override of one needs its "
    "counterpart)"
)


def _exp(tmp_path: Path) -> str:
    path = tmp_path / "base.toml"
    path.write_text(EXP.format(out=tmp_path / "out"))
    return str(path)


def test_a_run_checkpointing_a_model_whose_state_dict_and_load_state_dict_disagree_is_refused(
    cli: Cli, tmp_path: Path, store: RunStore
) -> None:
    (tmp_path / "sdo.py").write_text(DISAGREES)
    r = cli("run", _exp(tmp_path), "--set", "model.name=sdo.py:Net", "--set", "run.checkpoint=true")
    one_line(
        r,
        2,
        f"error: model '{tmp_path}/sdo.py:Net' could never load its checkpoints (--resume, "
        f"export, model.weights run:ID): {SAID}",
        f"({AGREE}, or train without checkpoints: run.checkpoint = false)",
    )
    assert store.list_runs() == []  # refused before anything was stored
    # without checkpoints it has nothing to load back: it trains
    r = cli("run", _exp(tmp_path), "--set", "model.name=sdo.py:Net")
    assert r.code == 0, r.err
    assert [run.status for run in store.list_runs()] == ["finished"]


# A load_state_dict of the model's own that raises: the model's own error, with its frames.
OWN_REFUSAL = """
import torch.nn as nn
class Net(nn.Module):
    def __init__(self, num_classes=10, in_channels=1):
        super().__init__(); self.fc = nn.Linear(in_channels * 64, num_classes)
    def load_state_dict(self, *a, **k):
        raise RuntimeError("this model loads no state")
    def forward(self, x):
        return self.fc(x.flatten(1))
"""


def test_a_load_state_dict_that_raises_itself_is_told_as_the_models_own_error(
    cli: Cli, tmp_path: Path, store: RunStore
) -> None:
    (tmp_path / "own.py").write_text(OWN_REFUSAL)
    r = cli("run", _exp(tmp_path), "--set", "model.name=own.py:Net", "--set", "run.checkpoint=true")
    assert r.code == 1, r.err
    assert r.err.splitlines() == [
        "error: the model raised RuntimeError: this model loads no state",
        f'  File "{tmp_path}/own.py", line 7, in load_state_dict',  # model.name is absolute
        '    raise RuntimeError("this model loads no state")',
        "(the whole traceback: dlperf --debug ...)",
    ]
    assert store.list_runs() == []


def test_stored_weights_the_model_as_built_does_not_load_are_one_line_wherever_loaded(
    cli: Cli, tmp_path: Path, store: RunStore
) -> None:
    file = tmp_path / "sdo.py"
    file.write_text(AGREES)
    exp = _exp(tmp_path)
    trained = cli("run", exp, "--set", "model.name=sdo.py:Net", "--set", "run.checkpoint=true")
    assert trained.code == 0, trained.err
    # the run's weights load while the model's methods agree
    assert cli("export", "1", "--out", str(tmp_path / "ok.onnx")).code == 0
    file.write_text(DISAGREES)

    out = tmp_path / "sdo.onnx"
    r = cli("export", "1", "--out", str(out))
    one_line(
        r,
        2,
        f"error: run 1's weights do not load into model file {file}:Net as built: {SAID}",
        f"({AGREE})",
    )
    no_files(out)

    r = cli("run", exp, "--set", "model.name=sdo.py:Net", "--set", "model.weights=run:1")
    one_line(
        r,
        2,
        f"error: model.weights run 1 do not load into the model as built: {SAID}",
        f"({AGREE})",
    )
    assert [run.id for run in store.list_runs()] == [1]  # nothing stored as failed


class Renamed(nn.Module):
    """DISAGREES as a class: what --resume and a distill teacher load through fit_weights."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 2)

    def state_dict(self, *args: object, **kwargs: object) -> dict[str, torch.Tensor]:  # type: ignore[override]
        state = super().state_dict(*args, **kwargs)  # type: ignore[arg-type]
        return {"net." + key: value for key, value in state.items()}


def test_fit_weights_says_the_models_methods_disagree_for_resume_and_a_teacher() -> None:
    model = Renamed()
    with pytest.raises(UserError) as caught:
        checkpoint.fit_weights(model, model.state_dict(), 7, "renamed")
    assert caught.value.message == (
        f"run 7's weights do not load into model 'renamed' as built: {SAID}"
    )
    assert caught.value.hint == AGREE


# The tester's model (bk13 A, jit.py): a submodule scripted in __init__.
SCRIPTED = """
import torch, torch.nn as nn
class Body(nn.Module):
    def __init__(self): super().__init__(); self.l = nn.Linear(64, 32)
    def forward(self, x): return torch.relu(self.l(x))
class Net(nn.Module):
    def __init__(self, num_classes=10):
        super().__init__(); self.body = torch.jit.script(Body())
        self.head = nn.Linear(32, num_classes)
    def forward(self, x): return self.head(self.body(x.flatten(1)))
"""


def test_a_scripted_submodule_is_named_at_export_with_the_fix(cli: Cli, tmp_path: Path) -> None:
    (tmp_path / "jit.py").write_text(SCRIPTED)
    out = tmp_path / "jit.onnx"
    r = cli("export", "jit.py:Net", "--input", "1,8,8", "--out", str(out))
    one_line(
        r,
        2,
        "error: cannot export model 'jit.py:Net' to ONNX: its submodule body is a "
        "TorchScript ScriptModule (torch.jit.script), which neither ONNX exporter traces into",
        "(keep the module unscripted for export: build it without torch.jit.script)",
    )
    no_files(out)


def test_without_a_scripted_submodule_both_exporters_reasons_are_said() -> None:
    """The dynamo exporter's reason was dropped: only the fallback's was said."""
    error = export_module._unexportable(
        nn.Sequential(nn.Linear(2, 2)), "m.py:Net", TypeError("forward() takes 2"), ValueError("x")
    )
    assert str(error) == (
        "cannot export model 'm.py:Net' to ONNX: the dynamo exporter failed "
        "(TypeError: forward() takes 2), and the TorchScript exporter too (ValueError: x)"
    )
