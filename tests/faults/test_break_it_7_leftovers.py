"""What the fifth and sixth break-it rounds left (issue 41, docs/faults.md "Left as they
are"), each seen failing before its fix."""

from __future__ import annotations

from pathlib import Path

import pytest

from dlperf.errors import UserError
from dlperf.sweep.spec import load_sweep

BASE = Path(__file__).resolve().parents[2] / "examples" / "digits_smallcnn.toml"


def test_a_quoted_set_key_stays_one_key_in_every_sweep_point(tmp_path: Path) -> None:
    """`dlperf sweep --set 'model.kwargs."a.b"=1'`: one key "a.b", as `dlperf run --set`
    and a TOML file read it (before: the sweep flattened it to dots and split it again, and
    every point got {"a": {"b": 1}})."""
    sweep = tmp_path / "s.toml"
    sweep.write_text(f'base = "{BASE}"\n[grid]\n"train.lr" = [0.1, 0.01]\n')
    points = load_sweep(sweep, ['model.kwargs."a.b"=1', "model.kwargs.'x.y'.z=true"]).points
    assert [p.exp.model.kwargs for p in points] == [{"a.b": 1, "x.y": {"z": True}}] * 2
    # a sweep file's own axes are dotted strings, and may quote a part the same way
    sweep.write_text(f'base = "{BASE}"\n[grid]\n\'model.kwargs."a.b"\' = [1, 2]\n')
    points = load_sweep(sweep).points
    assert [p.exp.model.kwargs for p in points] == [{"a.b": 1}, {"a.b": 2}]
    sweep.write_text(f'base = "{BASE}"\n[grid]\n\'model.kwargs."a.b\' = [1, 2]\n')
    with pytest.raises(UserError, match="not a TOML key"):
        load_sweep(sweep)


@pytest.mark.parametrize("named", ["/dev/null", "fifo"])
def test_a_device_file_that_is_not_a_regular_file_is_one_line(
    named: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """DLPERF_DEVICES=/dev/null read as an empty file, so `--device MINE` said only
    "unknown device"; a FIFO would have blocked the read for ever."""
    import os

    from dlperf.analytic.devices import load_catalog

    path = Path(named) if named.startswith("/") else tmp_path / named
    if not path.exists():
        os.mkfifo(path)
    monkeypatch.setenv("DLPERF_DEVICES", str(path))
    with pytest.raises(UserError, match=f"device file {path} is not a regular file"):
        load_catalog()
