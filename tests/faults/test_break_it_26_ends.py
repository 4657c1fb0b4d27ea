"""The twenty-sixth break-it round's loose ends (fixer L).

- `converge fit --to-csv FILE` truncated FILE and then wrote it: a write that failed partway
  (a file size limit, a full disk) or a stop left a cut-off CSV where the earlier one was.
  The table is written beside FILE and renamed over it once whole.
- fit_weights learnt to tell a factory that builds another network on each call from a model
  file edited since the run (`same_file`), but distill's teacher and `train`'s second load on
  resume still said "restore the file the run was trained with" of a file whose sha256 is the
  stored one.
- The report's phase bars left NaN out of the stack, but an infinite value still went into a
  bar (an infinitely tall one, every phase above it stacked on infinity).
"""

from __future__ import annotations

import errno
import math
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from matplotlib.figure import Figure

from dlperf.config import build_experiment
from dlperf.converge import fitting
from dlperf.distill import teacher
from dlperf.engine import checkpoint, pretrained
from dlperf.engine.build import build_model, load_run_data
from dlperf.engine.loop import Rows
from dlperf.engine.train import train
from dlperf.errors import UserError
from dlperf.report.site import figures
from dlperf.store import RunStore
from tests.conftest import CliResult, file_size_limit
from tests.faults.test_break_it_26_models import RUN, WIDTH  # its width is $FXI_WIDTH
from tests.report.test_figures import drawn  # noqa: F401 (a fixture: the figures, as PNG URIs)

CPU = torch.device("cpu")

# --- a CSV table cut off by a failed write -------------------------------------------------------


def test_to_csv_keeps_the_earlier_table_whole_when_the_write_fails(tmp_path: Path) -> None:
    path = tmp_path / "betas.csv"
    rows = [{"source": f"run {i}", "beta0": 0.001 * i, "note": "x" * 100} for i in range(200)]
    fitting.write_table(path, rows[:3])
    earlier = path.read_bytes()
    # A file size limit (ulimit -f) well under the new table (about 23 kB) and over the
    # earlier one: the write fails partway with EFBIG, as a full disk fails with ENOSPC.
    with file_size_limit(4096), pytest.raises(OSError) as raised:
        fitting.write_table(path, rows)
    # told as every refused write is (round 47): exit 1 with the limit's hint, not a mistake
    assert (raised.value.errno, raised.value.filename) == (errno.EFBIG, str(path))
    assert path.read_bytes() == earlier  # before: its first 4096 bytes of the new table
    assert sorted(p.name for p in tmp_path.iterdir()) == ["betas.csv"]  # no partial file left
    fitting.write_table(path, rows)  # and a write that succeeds replaces it whole
    assert path.read_text().count("\n") == 201
    # Through a link: the file it names is replaced and the link stays; a link to a device
    # (/dev/stdout, here /dev/null) is written through, not renamed over.
    (tmp_path / "tables").mkdir()
    (tmp_path / "tables" / "betas.csv").symlink_to(path)
    (tmp_path / "null.csv").symlink_to("/dev/null")
    fitting.write_table(tmp_path / "tables" / "betas.csv", rows[:3])
    fitting.write_table(tmp_path / "null.csv", rows[:3])
    assert (tmp_path / "tables" / "betas.csv").is_symlink()
    assert (tmp_path / "null.csv").is_symlink()
    assert path.read_bytes() == earlier


# --- a factory that builds another network on each call ------------------------------------------


def _says_factory(e: pytest.ExceptionInfo[UserError]) -> None:
    said = str(e.value)
    assert "restore the file" not in said, said
    assert "different network on each call" in said, said
    assert "1.weight is [16, 64] in the checkpoint, [24, 64] in the model" in said, said


def test_teacher_and_resumed_training_say_the_factory_builds_another_network(
    cli: Callable[..., CliResult], db: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    model = tmp_path / "model.py"
    model.write_text(WIDTH)
    (tmp_path / "exp.toml").write_text(RUN.format(name=model))
    done = cli("run", "exp.toml")
    assert done.code == 0, done.err
    store = RunStore.open(db)
    (run,) = store.list_runs()
    monkeypatch.setenv("FXI_WIDTH", "24")  # the same file (its sha256 the stored one)
    # distill's teacher, rebuilt to score the pool
    given = teacher.stored(store, run.id)
    images = torch.randint(0, 256, (4, 1, 8, 8), dtype=torch.uint8)
    with pytest.raises(UserError) as raised:
        teacher.score(given, store, images, CPU, 4)
    _says_factory(raised)
    # `train`'s own load of the checkpoint on resume, as resume_run hands it the slot
    record = store.get_run(run.id)
    exp = build_experiment(record.config, f"run {run.id}")
    data, _ = load_run_data(exp, pretrained.resolve(exp.model, store))
    built = build_model(exp, data, CPU, fresh=False)
    path = checkpoint.run_checkpoint(store, run.id, "to resume from", "")
    owner = checkpoint.Owner(store.id, run.id, record.config_hash)
    state = checkpoint.load(path, owner)
    slot = checkpoint.Slot(path, owner, same_file=True)
    with pytest.raises(UserError) as raised:
        train(exp, built, data, CPU, Rows(), slot, state)
    _says_factory(raised)


# --- infinite phase values in the report's bars --------------------------------------------------


def test_phase_bars_leave_infinite_values_out_and_count_them(
    store: RunStore,
    drawn: list[Figure],  # noqa: F811 (the fixture imported above)
) -> None:
    run_id = store.create_run("r", "run", {})
    store.log_metrics(run_id, [
        ("phase/data_s", 1, 0.001, 100.0), ("phase/forward_s", 1, math.inf, 100.0),
        ("phase/backward_s", 1, 0.003, 100.0), ("phase/optimizer_s", 1, -math.inf, 100.0),
        ("phase/data_s", 2, 0.001, 101.0), ("phase/forward_s", 2, math.nan, 101.0),
        ("phase/backward_s", 2, 0.002, 101.0),
    ])  # fmt: skip
    store.finish_run(run_id, summary={})
    [(caption, _)] = figures.phases(store, store.get_run(run_id))
    heights = [p.get_height() for p in drawn[0].axes[0].patches]
    assert all(math.isfinite(h) for h in heights), heights
    tops = [p.get_y() + p.get_height() for p in drawn[0].axes[0].patches]
    assert max(tops) == pytest.approx(4.0)  # data 1 ms, backward 3 ms on it
    assert "3 phase values are not finite (1 NaN, 2 infinite), left out" in caption, caption
    # The summary's phases (no phase/* metrics stored): one bar, alike; the store keeps its
    # infinity as null (which drew a bar of None * 1e3: a TypeError).
    summary_id = store.create_run("s", "run", {})
    phases = {"data": 0.001, "forward": math.inf, "backward": 0.002}
    store.finish_run(summary_id, summary={"phases": phases})
    [(caption, _)] = figures.phases(store, store.get_run(summary_id))
    heights = [p.get_height() for p in drawn[1].axes[0].patches]
    assert all(math.isfinite(h) for h in heights), heights
    assert "1 phase value is not finite, left out" in caption, caption
