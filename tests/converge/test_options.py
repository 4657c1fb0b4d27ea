"""dlperf.converge.options: the curve options fit, predict and regress share, read from
[converge] < --set < flags."""

from __future__ import annotations

import ast
from dataclasses import fields
from pathlib import Path

import pytest

from dlperf.config import ConvergeConfig
from dlperf.converge.options import CurveOptions, load
from dlperf.errors import UserError


def test_defaults_match_the_config_sections() -> None:
    opts, section = load(None, [], {})
    assert opts == CurveOptions()
    assert section == ConvergeConfig()
    for f in fields(CurveOptions):  # every option is a key of [converge], with its default
        assert ConvergeConfig.model_fields[f.name].default == f.default, f.name


def test_file_then_set_then_flags(tmp_path: Path) -> None:
    path = tmp_path / "c.toml"
    path.write_text('[converge]\ny = "val_loss"\nmetric = "loss"\nupto = 0.5\ntarget = 0.2\n')
    opts, section = load(path, ["converge.upto=0.8", "converge.x=step"], {"y": None, "key": "k"})
    assert opts == CurveOptions(x="step", y="val_loss", metric="loss", key="k", upto=0.8)
    assert section.target == 0.2  # the rest of the section comes along
    opts, _ = load(path, [], {"metric": "accuracy", "upto_step": "300"})
    assert (opts.metric, opts.upto, opts.upto_step) == ("accuracy", 0.5, 300)


def test_a_bad_flag_is_one_line_naming_it() -> None:
    with pytest.raises(UserError) as e:
        load(None, [], {"upto": "1.5"})
    assert str(e.value) == "--upto: converge.upto: must be at most 1 (got 1.5)"
    with pytest.raises(UserError) as e:
        load(None, [], {"upto_step": "0"})
    assert str(e.value) == "--upto-step: converge.upto_step: must be greater than 0 (got 0)"


def test_it_imports_neither_pydantic_nor_numpy_at_module_level() -> None:
    """The command line imports it at start-up: its heavy imports wait for a command."""
    import dlperf.converge.options as module

    tree = ast.parse(Path(module.__file__ or "").read_text())
    top: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.Import):
            top |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            top.add(node.module)
    assert not {m for m in top if m.split(".")[0] in ("pydantic", "numpy", "torch")}
    assert "dlperf.config" not in top  # only under TYPE_CHECKING and inside load()
