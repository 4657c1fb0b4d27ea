"""The eighteenth break-it round, part H3: names a user's files and environment give.

- F3: a model file in a folder whose name is not UTF-8 (b\\xff) failed `analyze`, `predict`
  and `export` with a UnicodeEncodeError traceback (models/registry.py:_home). Each now says
  the one line `run --set model.name=...` says: "is not UTF-8 ... (rename the file or folder".
- F4: `run` of a config whose file name holds a newline failed with pydantic's traceback: the
  default run name (the file's stem) was refused for its control character. The default name
  now has it escaped, and the run works.
- F6: `export --out` naming a file that is not UTF-8 failed with one huge line blaming both
  ONNX exporters; it is refused before exporting.
- F8: a DLPERF_HOOKS entry naming an attribute that is not callable (os:sep), or a factory
  whose result is no hook (os:getcwd), failed with a TypeError or AttributeError traceback;
  both are one line, exit 2. An entry with blanks around it and a blank entry after a comma
  (' m:f , ') were refused as "not ' '"; they are read as 'm:f'.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest

from dlperf.engine.hooks import HOOKS_ENV, Hooks
from dlperf.errors import UserError
from dlperf.store import RunStore
from tests.conftest import CliResult

Cli = Callable[..., CliResult]

MODEL = (
    "import torch.nn as nn\n"
    "def net(num_classes=10):\n"
    "    return nn.Sequential(nn.Flatten(), nn.Linear(64, num_classes))\n"
)

BASE = """
[model]
name = "smallcnn"
[data]
name = "digits"
limit = 64
[train]
epochs = 1
batch_size = 32
[run]
threads = 1
warmup_steps = 1
"""

NOT_UTF8 = "(rename the file or folder so that its name is UTF-8)"


def not_utf8_folder(root: Path) -> Path:
    """A folder named b\\xff (a Latin-1 name) under `root`, as Python names it (a surrogate)."""
    folder = Path(os.fsdecode(os.fsencode(root) + b"/b\xff"))
    folder.mkdir()
    return folder


@pytest.mark.parametrize(
    "command",
    [
        ["analyze", "{model}", "--input", "1,8,8"],
        ["predict", "{model}", "--input", "1,8,8", "--device", "P100"],
        ["export", "{model}", "--input", "1,8,8", "--out", "{tmp}/m.onnx"],
    ],
)
def test_a_model_file_in_a_folder_not_named_in_utf8_is_one_line(
    cli: Cli, tmp_path: Path, command: list[str]
) -> None:
    model = not_utf8_folder(tmp_path) / "m.py"
    model.write_text(MODEL)
    spec = f"{model}:net"
    result = cli(*(part.format(model=spec, tmp=tmp_path) for part in command))
    assert result.code == 2, result.err
    assert "Traceback" not in result.err
    assert len(result.err.strip().splitlines()) == 1, result.err
    assert f"is not UTF-8: '{tmp_path}/b\\xff/m.py:net'" in result.err
    assert NOT_UTF8 in result.err


def test_a_model_file_reached_through_a_link_to_such_a_folder_still_imports(
    cli: Cli, tmp_path: Path
) -> None:
    folder = not_utf8_folder(tmp_path)
    (folder / "m.py").write_text(MODEL)
    (tmp_path / "link").symlink_to(folder)  # the name given is UTF-8; the folder's is not
    result = cli("analyze", f"{tmp_path}/link/m.py:net", "--input", "1,8,8", "--json")
    assert result.code == 0, result.err


def test_the_default_run_name_of_a_config_named_with_a_newline_escapes_it(
    cli: Cli, store: RunStore, tmp_path: Path
) -> None:
    config = tmp_path / "t\nnl.toml"
    config.write_text(BASE)
    result = cli("run", str(config), "--json")
    assert result.code == 0, result.err
    (run,) = store.list_runs()
    assert run.name == "t\\nnl"


def test_export_out_not_named_in_utf8_is_refused_before_exporting(cli: Cli, tmp_path: Path) -> None:
    out = Path(os.fsdecode(os.fsencode(tmp_path) + b"/e\xff.onnx"))
    result = cli("export", "smallcnn", "--input", "1,8,8", "--out", str(out))
    assert result.code == 2, result.err
    assert len(result.err.strip().splitlines()) == 1, result.err
    assert f"--out: is not UTF-8: '{tmp_path}/e\\xff.onnx' {NOT_UTF8}" in result.err
    assert not [name for name in os.listdir(os.fsencode(tmp_path)) if b"e\xff" in name]


class Half:
    """A hook without step_end."""

    def start(self, trainer: str, model: object) -> None:
        pass


def half() -> Half:
    return Half()


@pytest.mark.parametrize(
    ("spec", "wrong"),
    [
        ("os:sep", "os.sep is a str, not a callable"),
        ("os:getcwd", "os.getcwd() gave a str, which has no start and step_end"),
        (f"{__name__}:half", f"{__name__}.half() gave a Half, which has no step_end"),
    ],
)
def test_a_hooks_entry_naming_no_factory_of_hooks_is_one_line(
    monkeypatch: pytest.MonkeyPatch, spec: str, wrong: str
) -> None:
    monkeypatch.setenv(HOOKS_ENV, spec)
    with pytest.raises(UserError) as e:
        Hooks.from_env()
    assert str(e.value).startswith(f"{HOOKS_ENV} entry {spec!r}: {wrong}")
    assert "\n" not in str(e.value)


def test_a_run_with_a_hooks_entry_that_is_no_factory_exits_2(
    cli: Cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = tmp_path / "t.toml"
    config.write_text(BASE)
    monkeypatch.setenv(HOOKS_ENV, "os:sep")
    result = cli("run", str(config))
    assert result.code == 2, result.err
    assert "Traceback" not in result.err
    assert "os.sep is a str, not a callable" in result.err


def test_hooks_entries_are_stripped_before_blanks_are_dropped(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(HOOKS_ENV, " tests.engine.test_hooks:first , ")
    (hook,) = Hooks.from_env().hooks
    assert type(hook).__name__ == "Named"


def test_a_sweep_named_after_a_file_with_a_newline_escapes_it(
    tiny_exp: Callable[..., Path], tmp_path: Path
) -> None:
    """`dlperf sweep $'s\\nw.toml'` failed with pydantic's "must hold no control characters":
    the sweep's default name, its file's stem, reached run.name unescaped (round 18)."""
    from dlperf.sweep.spec import load_sweep

    path = tmp_path / "s\nw.toml"
    path.write_text(f'base = "{tiny_exp(epochs=1)}"\n[grid]\n"train.lr" = [0.1, 0.2]\n')
    sweep = load_sweep(path)
    names = [p.exp.run.name for p in sweep.points]
    assert names and all(n is not None and n.startswith("s\\nw") for n in names), names
