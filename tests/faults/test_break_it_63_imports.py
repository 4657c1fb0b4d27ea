"""Break-it round 63, mended from earlier rounds' Left lists: a model file's missing import, and
a sweep's missing base.

Before: a model file whose factory imports a module that is not there was told as the model's
error, but its frames ended in dlperf's own `models/registry.py` (`_import`, the hook model
files' imports run through, raising "No module named ..."), as if dlperf had failed; and a
sweep whose absolute base is missing said "looked for /x/b.toml and /x/b.toml", one path twice.

Now the frames end at the model file's `import` line, as Python's own traceback of a missing
import does, and a path looked for once is named once.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from tests.conftest import TINY, CliResult

Cli = Callable[..., CliResult]

MODEL = """\
from torch import nn


def Net(num_classes=10):
    import nosuchmod_dlperf_63
    return nn.Linear(64, num_classes)
"""

SWEEP = """\
base = "base.toml"
[grid]
"train.lr" = [0.1, 0.03]
[set]
"data.limit" = 64
"model.name" = "m.py:Net"
"""

MISSING = "the model raised ModuleNotFoundError: No module named 'nosuchmod_dlperf_63'"


def _frames(err: str, model: Path) -> list[str]:
    """The lines between the error line and the --debug hint."""
    lines = err.splitlines()
    assert lines[-1] == "(the whole traceback: dlperf --debug ...)", err
    assert MISSING in lines[0], err
    assert lines[1:-1] == [
        f'  File "{model}", line 5, in Net',
        "    import nosuchmod_dlperf_63",
    ], err
    return lines


def test_a_runs_missing_import_ends_at_the_model_files_import_line(
    cli: Cli, tmp_path: Path
) -> None:
    (tmp_path / "m.py").write_text(MODEL)
    (tmp_path / "base.toml").write_text(TINY.format(epochs=1))
    done = cli("run", "base.toml", "--set", "model.name=m.py:Net")
    assert done.code == 1, done.err
    _frames(done.err, tmp_path / "m.py")
    assert "registry.py" not in done.err


def test_a_sweep_points_missing_import_ends_at_the_model_files_import_line(
    cli: Cli, tmp_path: Path
) -> None:
    (tmp_path / "m.py").write_text(MODEL)
    (tmp_path / "base.toml").write_text(TINY.format(epochs=1))
    (tmp_path / "sw.toml").write_text(SWEEP)
    done = cli("sweep", "sw.toml")
    assert done.code == 1, done.err
    lines = _frames(done.err, tmp_path / "m.py")
    assert lines[0].startswith("error: sw.toml point 1 (train.lr=0.1): "), done.err


def test_a_missing_absolute_base_is_named_once(cli: Cli, tmp_path: Path) -> None:
    base = tmp_path / "nowhere" / "b.toml"
    (tmp_path / "sw.toml").write_text(f'base = "{base}"\n[grid]\n"train.lr" = [0.1]\n')
    done = cli("sweep", "sw.toml")
    assert done.code == 2, done.err
    assert done.err.strip() == (
        f"error: sw.toml: base '{base}': no such experiment file (looked for {base})"
    )


def test_a_missing_relative_base_names_both_places_looked(cli: Cli, tmp_path: Path) -> None:
    """Relative to the sweep file's folder first, then the working folder."""
    (tmp_path / "sweeps").mkdir()
    (tmp_path / "sweeps" / "sw.toml").write_text('base = "b.toml"\n[grid]\n"train.lr" = [0.1]\n')
    done = cli("sweep", "sweeps/sw.toml")
    assert done.code == 2, done.err
    assert done.err.strip() == (
        "error: sweeps/sw.toml: base 'b.toml': no such experiment file "
        f"(looked for {tmp_path / 'sweeps' / 'b.toml'} and {tmp_path / 'b.toml'})"
    )
