"""Break-it round 41, T1's C1 (cases 53-56): a model file's factory was handed the run
config's own lists and tables from `model.kwargs`, not copies. A factory that changed what it
was given (`widths.append(...)`, `cfg.pop(...)`: an ordinary slip) changed the config dlperf
then stored, hashed and rebuilt from: run 1 trained width 4 and stored `widths: [4, 8]`, so
`dlperf export 1` rebuilt width 8 and blamed a "nondeterministic factory"; a sweep showed its
point `[4]` as `[4, 8]` (`[4, 8, 16]` in --json), trained width 8 for it, and a rerun of the
same sweep started a new study.

Now `create_model` and `build_from_factory` give the factory its own copy of every list,
tuple, set and dict in its keywords (`registry.fresh`): the stored config, the sweep's axis
values and every rebuild see `model.kwargs` as the user wrote it.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from torch import nn

from dlperf.models import create_model
from dlperf.store import RunStore
from tests.conftest import CliResult

Cli = Callable[..., CliResult]

# The tester's net.py: the factory appends to the list it is given, and pops from the table.
NET = """
import torch.nn as nn
def net(num_classes=10, in_channels=1, widths=None, cfg=None):
    w = widths[-1]
    widths.append(w * 2)
    if cfg is not None:
        cfg.pop("drop", None)
    return nn.Sequential(nn.Conv2d(in_channels, w, 3, padding=1), nn.ReLU(),
                         nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(w, num_classes))
"""

EXP = """
[model]
name = "net.py:net"
kwargs = { widths = [4], cfg = { drop = 0.5 } }
[data]
name = "digits"
limit = 128
[train]
epochs = 1
batch_size = 32
[run]
threads = 1
warmup_steps = 1
checkpoint = false
"""


def _width(model: nn.Module) -> int:
    conv = model[0]
    assert isinstance(conv, nn.Conv2d)
    return conv.out_channels


def test_c1_the_factory_gets_its_own_copy_of_every_keyword(tmp_path: Path) -> None:
    (tmp_path / "net.py").write_text(NET)
    spec = f"{tmp_path / 'net.py'}:net"
    kwargs = {"widths": [4], "cfg": {"drop": 0.5}}
    first = create_model(spec, 10, 1, **kwargs)
    again = create_model(spec, 10, 1, **kwargs)  # a rebuild (export, --resume) from the same
    assert kwargs == {"widths": [4], "cfg": {"drop": 0.5}}  # was widths [4, 8], cfg {}
    assert _width(first) == _width(again) == 4  # was 4, then 8


def test_c1_a_run_stores_the_keywords_as_written(cli: Cli, tmp_path: Path, db: str) -> None:
    (tmp_path / "net.py").write_text(NET)
    (tmp_path / "exp.toml").write_text(EXP)
    result = cli("run", str(tmp_path / "exp.toml"))
    assert result.code == 0, result.err
    [run] = RunStore.open(db).list_runs()
    kwargs = run.config["model"]["kwargs"]
    assert kwargs == {"widths": [4], "cfg": {"drop": 0.5}}, kwargs  # was [4, 8] and {}


def test_c1_a_sweeps_points_are_shown_and_trained_as_written(
    cli: Cli, tmp_path: Path, db: str
) -> None:
    (tmp_path / "net.py").write_text(NET)
    (tmp_path / "exp.toml").write_text(EXP)
    (tmp_path / "sw.toml").write_text(
        'base = "exp.toml"\n[grid]\n"model.kwargs.widths" = [[4], [6]]\n'
    )
    result = cli("sweep", str(tmp_path / "sw.toml"), "--json")
    assert result.code == 0, result.err
    points = json.loads(result.out)["points"]
    assert [p["params"]["model.kwargs.widths"] for p in points] == [[4], [6]]  # was [4, 8, 16]
    stored = [r.config["model"]["kwargs"]["widths"] for r in RunStore.open(db).list_runs()]
    assert sorted(stored) == [[4], [6]], stored
