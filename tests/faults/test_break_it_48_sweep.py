"""Break-it round 48, fixer G1: a sweep's table axis and its leaf's axis, and its summary tables.

T2 C4 (wrong-number): a sweep with a table axis and an axis of one of its leaves
(`"model.kwargs.t" = [{x = 1}]`, `"model.kwargs.t.x" = [2, 3]`) put the axis's own table
object into every point's config, and the leaf's axis then wrote `x` into that one shared
dict: point 1 trained point 2's `{x = 3}` under a name saying `{x = 2}`, point 2 was
"finished meanwhile" (point 1's config hash) and never trained, and both rows ranked run 1
(under --jobs 2 both trained the same config); with a typed section (train.schedule) the
labels lied the same way. Now every point gets its own copy of every value it is given
(`config.loading._assign_parts`): point 1 trains {x = 2}, point 2 {x = 3}, each stored
and named with the values its sweep file gives (`t={x = 1} t.x=2`).

T2 C3 (cosmetic): the sweep's ranking, its best-per-axis table and its "still run by" line
wrote point values as Python (`augment.flip=False`, `{'x': 1}`, `"s p"=a b`, `e=`) and the
value column `no`; now as --set takes them (`store.query.setting`), as the run names do.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from dlperf.store import RunStore
from dlperf.sweep import load_sweep, run_sweep, runner
from dlperf.sweep.summary import SweepPointResult

BASE = """
[model]
name = "mf.py:make"
[data]
name = "digits"
limit = 64
[train]
epochs = 1
[run]
checkpoint = false
threads = 1
"""

FACTORY = """
import torch.nn as nn
def make(num_classes=10, in_channels=3, **kw):
    return nn.Sequential(nn.Flatten(), nn.LazyLinear(num_classes))
"""


TABLE_AND_LEAF = '[grid]\n"model.kwargs.t" = [{x = 1}]\n"model.kwargs.t.x" = [2, 3]\n'


def _sweep_file(root: Path, axes: str) -> Path:
    (root / "base.toml").write_text(BASE)
    (root / "mf.py").write_text(FACTORY)
    path = root / "sw.toml"
    path.write_text(f'base = "base.toml"\n{axes}')
    return path


# --- C4: every point its own copy of an axis's table ----------------------------------------


def test_a_table_axis_and_its_leafs_axis_give_each_point_its_own_table(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    path = _sweep_file(tmp_path, TABLE_AND_LEAF)
    sweep = load_sweep(path)
    one, two = sweep.points
    # What --jobs 2 writes to each worker's point.json, and what one job trains.
    assert one.exp.to_dict()["model"]["kwargs"] == {"t": {"x": 2}}  # before: {x = 3}
    assert two.exp.to_dict()["model"]["kwargs"] == {"t": {"x": 3}}
    assert one.exp.config_hash() != two.exp.config_hash()
    # The label and run name say the sweep file's values (before: point 1's {x = 2}, or 3).
    assert one.label() == "model.kwargs.t={x = 1} model.kwargs.t.x=2"
    assert two.label() == "model.kwargs.t={x = 1} model.kwargs.t.x=3"
    assert one.exp.run.name == f"sw {one.label()}"
    assert sweep.axes["model.kwargs.t"] == [{"x": 1}]  # the sweep file's value, untouched


def test_a_nested_table_axis_of_two_values_gives_each_point_its_own_copy(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    axes = '[grid]\n"model.kwargs.t" = [{x = 1, y = {z = 0}}, {x = 9, y = {z = 0}}]\n'
    path = _sweep_file(tmp_path, axes + '"model.kwargs.t.y.z" = [5, 6]\n')
    points = load_sweep(path).points
    assert [p.exp.to_dict()["model"]["kwargs"]["t"] for p in points] == [
        {"x": 1, "y": {"z": 5}},
        {"x": 1, "y": {"z": 6}},
        {"x": 9, "y": {"z": 5}},
        {"x": 9, "y": {"z": 6}},
    ]
    assert points[0].label() == "model.kwargs.t={x = 1, y = {z = 0}} model.kwargs.t.y.z=5"


def test_a_typed_tables_label_is_the_sweep_files_value(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    path = _sweep_file(
        tmp_path,
        '[grid]\n"train.schedule" = [{kind = "multistep", milestones = [1]}]\n'
        '"train.schedule.gamma" = [0.1, 0.5]\n',
    )
    one, two = load_sweep(path).points
    assert [one.exp.train.schedule.gamma, two.exp.train.schedule.gamma] == [0.1, 0.5]
    # before: train.schedule={kind = "multistep", milestones = [1], gamma = 0.5} ...gamma=0.1
    assert one.label() == (
        'train.schedule={kind = "multistep", milestones = [1]} train.schedule.gamma=0.1'
    )


def test_each_point_of_a_table_axis_trains_and_stores_its_own_config(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The sweep itself (in-process, its training faked): before, point 1 stored {x = 3}
    and point 2 was skipped as "finished meanwhile", both rows run 1."""
    monkeypatch.chdir(tmp_path)
    trained: list[dict[str, Any]] = []

    def fake(exp: Any, store: RunStore, study_id: int, since: int, reporter: Any) -> Any:
        trained.append(exp.to_dict()["model"]["kwargs"])
        run = store.create_run(exp.run.name, "run", exp.to_dict(), exp.config_hash(), None,
                               study_id)  # fmt: skip
        store.finish_run(run, "finished", {"test_accuracy": 0.5})
        return SweepPointResult.of_run(run, "finished", {"test_accuracy": 0.5})

    monkeypatch.setattr(runner, "run_point", fake)
    path = _sweep_file(tmp_path, TABLE_AND_LEAF)
    store = RunStore.open(str(tmp_path / "s.db"))
    result = run_sweep(load_sweep(path), store)
    assert trained == [{"t": {"x": 2}}, {"t": {"x": 3}}]
    assert [p.skipped for p in result.points] == [False, False]
    runs = [store.get_run(p.run_id) for p in result.points]
    assert [r.config["model"]["kwargs"]["t"]["x"] for r in runs] == [2, 3]
    assert [r.name for r in runs] == [
        "sw model.kwargs.t={x = 1} model.kwargs.t.x=2",
        "sw model.kwargs.t={x = 1} model.kwargs.t.x=3",
    ]


# --- C3: the summary's values as --set takes them -------------------------------------------


def test_the_sweeps_tables_write_values_as_set_takes_them(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from dlperf.cli.sweep import _print_summary
    from dlperf.sweep.runner import SweepResult
    from dlperf.sweep.summary import SweepRow, axis_winners, group_rows

    params = {"augment.flip": False, "model.kwargs.t": {"x": "a b"},
              'model.kwargs."s p"': "a b", "model.kwargs.e": ""}  # fmt: skip
    row = SweepRow.of(SweepPointResult.of_run(3, "finished", {"test_accuracy": 0.9}), params)
    groups = group_rows([row])
    axes: dict[str, list[Any]] = {k: [v] for k, v in params.items()}
    held = {"point": 2, "params": {"augment.flip": True}, "seed": None, "run_id": 4,
            "holder": {"pid": 4321, "host": "h1"}}  # fmt: skip
    result = SweepResult(1, "odd", axes, None, [row], groups, 3, axis_winners(groups, axes),
                         "d", [held])  # fmt: skip
    _print_summary(result, None)
    out = capsys.readouterr().out
    label = (
        'augment.flip=false model.kwargs.t={x = "a b"} model.kwargs."s p"="a b" model.kwargs.e=""'
    )
    lines = [" ".join(line.replace("│", " ").split()) for line in out.splitlines()]
    # the ranking's row, and each axis's row of the best-per-axis table: before,
    # augment.flip=False model.kwargs.t={'x': 'a b'} model.kwargs."s p"=a b model.kwargs.e=
    assert any(line.startswith(f"1 {label} 3 ") for line in lines), out
    assert f"augment.flip false 0.9 {label} winner" in lines, out  # before: no
    assert f'model.kwargs.t {{x = "a b"}} 0.9 {label} winner' in lines, out
    assert f'model.kwargs."s p" "a b" 0.9 {label} winner' in lines, out
    assert f'model.kwargs.e "" 0.9 {label} winner' in lines, out
    assert "point 2 (augment.flip=true) is still run by pid 4321 on h1 (run 4)" in out
