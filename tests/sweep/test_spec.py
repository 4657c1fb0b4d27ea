"""dlperf.sweep.spec: the sweep file, its checks, and the points it makes (nothing runs)."""

from __future__ import annotations

from pathlib import Path

import pytest

from dlperf.errors import UserError
from dlperf.sweep import spec
from dlperf.sweep.spec import Point, load_sweep

BASE = '[model]\nname = "smallcnn"\n[train]\nepochs = 1\n'


class Heard:
    """A reporter that keeps what it hears."""

    def __init__(self) -> None:
        self.logs: list[str] = []
        self.tasks: list[tuple[str, int | None]] = []
        self.advanced = 0

    def task(self, description: str, total: int | None = None) -> None:
        self.tasks.append((description, total))

    def advance(self, n: int = 1, status: str = "") -> None:
        self.advanced += n

    def log(self, message: str) -> None:
        self.logs.append(message)


def sweep_file(tmp_path: Path, body: str, name: str = "lr.toml") -> Path:
    (tmp_path / "base.toml").write_text(BASE)
    path = tmp_path / name
    path.write_text('base = "base.toml"\n' + body)
    return path


def refusal(path: Path, overrides: list[str] | None = None) -> str:
    with pytest.raises(UserError) as e:
        load_sweep(path, overrides)
    assert "\n" not in str(e.value)
    return str(e.value)


def test_grid_times_zip_times_repeats_in_order(tmp_path: Path) -> None:
    path = sweep_file(
        tmp_path,
        'repeats = 2\n[grid]\n"train.lr" = [0.1, 0.01]\n'
        '[zip]\n"train.epochs" = [1, 2]\n"train.batch_size" = [32, 64]\n'
        '[set]\n"data.limit" = 256\n',
    )
    heard = Heard()
    sweep = load_sweep(path, reporter=heard)
    assert sweep.name == "lr" and sweep.base == tmp_path / "base.toml"
    assert sweep.axes == {
        "train.lr": [0.1, 0.01],
        "train.epochs": [1, 2],
        "train.batch_size": [32, 64],
    }
    assert len(sweep.points) == 2 * 2 * 2  # grid 2 x zip rows 2 x repeats 2
    first, last = sweep.points[0], sweep.points[-1]
    assert first.params == {"train.lr": 0.1, "train.epochs": 1, "train.batch_size": 32}
    assert first.seed == 0 and sweep.points[1].seed == 1
    assert last.params == {"train.lr": 0.01, "train.epochs": 2, "train.batch_size": 64}
    assert [p.index for p in sweep.points] == list(range(8))
    e = last.exp
    assert (e.train.lr, e.train.epochs, e.train.batch_size, e.data.limit, e.run.seed) == (
        0.01, 2, 64, 256, 1,
    )  # fmt: skip
    assert e.run.name == "lr train.lr=0.01 train.epochs=2 train.batch_size=64 seed=1"
    assert heard.tasks == [("sweep 'lr': checking its points", 8)]
    assert heard.advanced == 8 and heard.logs == []
    assert not sweep.threads_set


def test_nested_tables_are_dotted_keys_and_name_and_set_override(tmp_path: Path) -> None:
    path = sweep_file(tmp_path, 'name = "study"\n[grid.train]\nlr = [0.1, 0.2]\n')
    sweep = load_sweep(path, ["run.threads=1"])
    assert sweep.name == "study"
    assert sweep.axes == {"train.lr": [0.1, 0.2]}
    assert all(p.exp.run.threads == 1 for p in sweep.points)
    assert sweep.threads_set
    assert sweep.points[0].exp.run.name == "study train.lr=0.1"


def test_point_label() -> None:
    from dlperf.config import Experiment

    assert Point(0, {"a.b": 1, "c": "x"}, None, Experiment()).label() == "a.b=1 c=x"
    assert Point(0, {"a": 1}, 3, Experiment()).label() == "a=1 seed=3"


def test_the_file_itself_is_checked(tmp_path: Path) -> None:
    assert refusal(tmp_path / "no.toml") == (
        f"{tmp_path / 'no.toml'}: no such sweep file (give the path of a sweep TOML file)"
    )
    assert refusal(tmp_path) == (
        f"{tmp_path}: is a directory, not a sweep file (give the path of a sweep TOML file)"
    )
    path = sweep_file(tmp_path, "[grid]\n")
    assert refusal(path) == (f'{path}: no axes to sweep (add e.g. [grid] "train.lr" = [0.1, 0.01])')
    path = sweep_file(tmp_path, 'repeat = 2\n[grid]\n"train.lr" = [0.1]\n')
    assert refusal(path) == f"{path}: unknown key 'repeat' (did you mean 'repeats'?)"
    path = sweep_file(tmp_path, 'repeats = "2"\n[grid]\n"train.lr" = [0.1]\n')
    assert refusal(path).startswith(f"{path}: repeats: ")


def test_the_axes_are_checked(tmp_path: Path) -> None:
    path = sweep_file(tmp_path, '[grid]\n"train.lr" = []\n')
    assert refusal(path) == f"{path}: [grid] 'train.lr' has no values"
    path = sweep_file(tmp_path, '[zip]\n"train.lr" = [0.1, 0.2]\n"train.epochs" = [1]\n')
    assert refusal(path) == (
        f"{path}: [zip] axes must be of equal length: train.lr has 2, train.epochs has 1"
    )
    path = sweep_file(tmp_path, '[grid]\n"train.lr" = [0.1]\n[zip]\n"train.lr" = [0.2]\n')
    assert refusal(path) == f"{path}: 'train.lr' is in both [grid] and [zip]"
    path = sweep_file(tmp_path, 'repeats = 2\n[grid]\n"run.seed" = [1, 2]\n')
    assert refusal(path) == f"{path}: run.seed is set by repeats (drop it, or set repeats = 1)"


def test_the_count_is_checked_before_any_point_is_made(tmp_path: Path) -> None:
    # 10^3 x 10^3 x 10^3 x 10^3 = 10^12 points: refused from the lengths alone, in no time
    axis = "[" + ", ".join(str(i + 1) for i in range(1000)) + "]"
    keys = ("train.epochs", "train.batch_size", "data.limit", "data.size")
    body = "repeats = 3\n[grid]\n" + "".join(f'"{k}" = {axis}\n' for k in keys)
    path = sweep_file(tmp_path, body)
    assert refusal(path) == (
        f"{path}: 3,000,000,000,000 points (1,000 x 1,000 x 1,000 x 1,000 x 3 repeats) is more "
        "than max_points = 10,000 (give the axes fewer values, or raise max_points in the "
        "sweep file if every point is meant to run)"
    )
    path = sweep_file(tmp_path, 'max_points = 3\n[grid]\n"train.lr" = [0.1, 0.2]\n'
                      '[zip]\n"train.epochs" = [1, 2]\n')  # fmt: skip
    assert "4 points (2 x 2 zip rows) is more than max_points = 3" in refusal(path)


def test_the_base_is_found_beside_the_sweep_file_then_in_the_cwd(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "s.toml"
    path.write_text('base = "elsewhere.toml"\n[grid]\n"train.lr" = [0.1]\n')
    text = refusal(path)
    assert text.startswith(f"{path}: base 'elsewhere.toml': no such experiment file (looked for ")
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    (cwd / "elsewhere.toml").write_text(BASE)
    monkeypatch.chdir(cwd)
    assert load_sweep(path).base == Path("elsewhere.toml")
    (tmp_path / "elsewhere.toml").write_text(BASE)  # beside the sweep file: it comes first
    assert load_sweep(path).base == tmp_path / "elsewhere.toml"


def test_points_are_validated_and_duplicates_refused(tmp_path: Path) -> None:
    path = sweep_file(tmp_path, '[grid]\n"train.lr" = [0.1, -1.0]\n')
    assert refusal(path) == (
        f"{path} point 2 (train.lr=-1.0): train.lr: must be greater than 0 (got -1.0)"
    )
    path = sweep_file(tmp_path, '[grid]\n"train.epochs" = [1, 1]\n')
    assert refusal(path) == (
        f"{path} point 2 (train.epochs=1): the same config as point 1 (an axis repeats a "
        "value, or sets what [set] or the base already does)"
    )


def test_set_cannot_fix_what_the_sweep_varies(tmp_path: Path) -> None:
    path = sweep_file(tmp_path, '[grid]\n"train.lr" = [0.1, 0.2]\n')
    assert refusal(path, ["train.lr=0.3"]) == (
        f"--set train.lr: {path} varies it (drop --set, or edit the sweep file)"
    )


def test_a_name_too_long_for_the_store_is_refused_before_anything_runs(tmp_path: Path) -> None:
    path = sweep_file(tmp_path, f'name = "{"n" * 300}"\n[grid]\n"train.lr" = [0.1]\n')
    text = refusal(path)
    assert "sweep name of 300 characters + point label 'train.lr=0.1' makes run names" in text
    assert text.endswith("(give a sweep name of at most 187 characters)")


def test_a_large_sweep_says_what_the_wait_is_for(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert spec.ANNOUNCE_POINTS == 1_000
    monkeypatch.setattr(spec, "ANNOUNCE_POINTS", 3)  # three points stand for a thousand
    heard = Heard()
    load_sweep(sweep_file(tmp_path, '[grid]\n"data.limit" = [1, 2]\n'), reporter=heard)
    assert heard.logs == []
    path = sweep_file(tmp_path, '[grid]\n"data.limit" = [1, 2, 3]\n')
    sweep = load_sweep(path, reporter=heard)
    assert len(sweep.points) == 3
    assert heard.logs == ["sweep 'lr': checking 3 points before the first one runs"]
