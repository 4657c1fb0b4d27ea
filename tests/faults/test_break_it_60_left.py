"""Round 59's Left items mended before round 60.

A non-ASCII `--where` KEY (a config key TOML allows, `runs list --where 'model.größe=3'`)
typed under a C locale reached the store as surrogate escapes and was refused as a key no run
holds; the value had the locale hint since round 59, and now the key has it too.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path

from PIL import Image

from dlperf.config.base import LOCALE_FIX
from dlperf.store.runstore import RunStore
from tests.conftest import CliResult
from tests.faults.test_break_it_59_locale import _classifier, as_ascii_reads
from tests.faults.test_store_faults import one_line

Cli = Callable[..., CliResult]


def test_where_key_read_as_ascii_is_told_to_change_the_locale(cli: Cli, store: RunStore) -> None:
    run_id = store.create_run("r", "run", {"model": {"größe": 3}})
    listed = cli("runs", "list", "--where", "model.größe=3", "--json")  # read as UTF-8
    assert [run["id"] for run in json.loads(listed.out)] == [run_id]
    done = cli("runs", "list", "--where", f"{as_ascii_reads('model.größe')}=3", "--json")
    one_line(done, 2, "--where: the key is UTF-8, but Python read it as ASCII: 'model.größe'")
    assert LOCALE_FIX in done.err
    assert done.out == ""


def test_where_key_not_utf8_is_refused_not_unknown(cli: Cli, store: RunStore) -> None:
    store.create_run("r", "run", {})
    done = cli("runs", "list", "--where", "caf\udce9=1", "--json")  # latin-1's é
    one_line(done, 2, "--where 'caf\\udce9=1': the key holds a byte that is not UTF-8")
    assert done.out == ""


def test_infer_json_names_an_image_read_as_ascii_by_its_text(cli: Cli, tmp_path: Path) -> None:
    """`infer --json` of ä.png under a C locale named it "\\udcc3\\udca4.png"; a byte that is
    not UTF-8 at all (latin-1's é) is U+FFFD, which a strict JSON reader takes."""
    model = _classifier(tmp_path / "m.onnx")
    Image.new("L", (8, 8)).save(tmp_path / "ä.png")
    Image.new("L", (8, 8)).save(os.fsencode(tmp_path) + b"/caf\xe9.png")
    done = cli("infer", str(model), as_ascii_reads("ä.png"), "caf\udce9.png", "--json")
    assert done.code == 0, done.err
    assert "\\udc" not in done.out
    names = json.dumps(json.loads(done.out), ensure_ascii=False)
    assert "ä.png" in names and "caf\ufffd.png" in names, names


NESTED_AT_FIVE = """\
import torch
from torch import nn


class Net(nn.Module):
    def __init__(self, num_classes=10, in_channels=1):
        super().__init__()
        self.f = nn.Sequential(nn.Flatten(), nn.Linear(in_channels * 64, num_classes))

    def forward(self, x):
        y = self.f(x)
        return torch.nested.nested_tensor(list(y)) if x.shape[0] == 5 else y
"""


def test_scores_nested_at_the_runs_batch_size_only_are_one_line(
    cli: Cli, store: RunStore, tmp_path: Path
) -> None:
    """The dry forwards (2 and 3 images) saw dense scores; the batch-size check read the
    nested tensor's shape: "NestedTensorImpl doesn't support sizes", a traceback."""
    (tmp_path / "net.py").write_text(NESTED_AT_FIVE)
    (tmp_path / "exp.toml").write_text(
        '[model]\nname = "net.py:Net"\n[data]\nname = "digits"\nlimit = 64\n'
        "[train]\nepochs = 1\nbatch_size = 5\n"
    )
    done = cli("run", "exp.toml")
    one_line(
        done,
        2,
        "for a batch of 5 images (train.batch_size 5) returns a nested tensor (torch.nested); "
        "expected one row of scores per image, [5, classes]",
    )
    assert store.list_runs() == []
