"""Break-it round 26, the signals and caps tester (P4), causes C1, C4 and C7.

- C1: a stop signal that landed inside torch's lazy import of torch._dynamo came back as an
  AttributeError, was taken as "the dynamo exporter failed", and `dlperf export` fell back to
  TorchScript, replaced the earlier export and only then exited 130.
- C4: `runs export --to tensorboard` stopped (or failed) partway deleted the earlier export's
  event files of every run: the old files went before the new ones were written.
- C7: a stopped `sweep`, `distill` or `scale` exited 130 with nothing said, where `run` says
  how to continue its run.

Each stop is the project's own signal handler called where the stop is to land (the code
path a real signal takes), so nothing races a timer.
"""

from __future__ import annotations

import contextlib
import shlex
import signal
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch

from dlperf import exporters, stopping
from dlperf.store import RunStore
from tests.conftest import CliResult, write_distill_exp

Cli = Callable[..., CliResult]


def _stop() -> None:
    """Ctrl-C as it arrives: the handler notes the signal and raises KeyboardInterrupt."""
    stopping._handler(signal.SIGINT, None)


def _files(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in root.rglob("*") if p.is_file()}


# --- C1: a stop inside the dynamo exporter is the stop, not the exporter's failure ----------

NET = """\
from torch import nn


def build(num_classes=10, in_channels=3):
    return nn.Sequential(nn.Flatten(), nn.Linear(in_channels * 8 * 8, num_classes))
"""


def test_a_stop_inside_the_dynamo_exporter_ends_the_export_and_keeps_the_earlier_one(
    cli: Cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before: 'warning: the dynamo exporter failed (AttributeError: module 'torch._dynamo'
    has no attribute 'exc')', the TorchScript export checked, compared and published over
    the earlier one, then exit 130."""
    (tmp_path / "net.py").write_text(NET)
    earlier = tmp_path / "earlier"
    earlier.mkdir()
    for name in ("e1.onnx", "e1.onnx.data", "e1.onnx.json"):  # an earlier export's files
        (earlier / name).write_bytes(f"the earlier {name}\n".encode())
    before = _files(earlier)
    real = torch.onnx.export
    exporters_run: list[bool] = []

    def export(*args: Any, **kwargs: Any) -> Any:
        exporters_run.append(bool(kwargs.get("dynamo")))
        if kwargs.get("dynamo"):
            with contextlib.suppress(KeyboardInterrupt):  # swallowed by the import it landed
                _stop()  # in, as torch's lazy imports do: nothing chains the error to it
            raise AttributeError("module 'torch._dynamo' has no attribute 'exc'")
        return real(*args, **kwargs)

    monkeypatch.setattr(torch.onnx, "export", export)
    out = earlier / "e1.onnx"
    result = cli("export", "net.py:build", "--input", "3,8,8", "--out", str(out))
    assert result.code == 130, (result.out, result.err)
    assert exporters_run == [True], "the TorchScript exporter ran after the stop"
    assert "dynamo exporter failed" not in result.err, result.err
    assert _files(earlier) == before  # byte for byte, and no staging directory left


# --- C4: a tensorboard export that fails partway leaves the earlier one whole ---------------


def test_a_tensorboard_export_stopped_partway_keeps_the_earlier_export_of_every_run(
    cli: Cli, store: RunStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before: run 1's new events were written over its deleted old ones, then the stop's
    cleanup deleted the new ones: runs 1 and 2 were left with no event file."""
    pytest.importorskip("tensorboard", reason="the tensorboard extra is not installed")
    ids = []
    for name in ("a", "b"):
        run_id = store.create_run(name, "run", {})
        store.log_metrics(run_id, [("train/loss", s, 1.0 / s) for s in range(1, 21)])
        store.finish_run(run_id, "finished")
        ids.append(run_id)
    out = tmp_path / "tb"
    first = cli("runs", "export", *map(str, ids), "--to", "tensorboard", "--out", str(out))
    assert first.code == 0, first.err
    before = _files(out)
    assert len(before) == 2
    series = exporters.metric_series

    def stopped_at_the_second(store: RunStore, run_id: int) -> Any:
        if run_id == ids[1]:  # the first run's new events are written by now
            _stop()
        return series(store, run_id)

    monkeypatch.setattr(exporters, "metric_series", stopped_at_the_second)
    again = cli("runs", "export", *map(str, ids), "--to", "tensorboard", "--out", str(out))
    assert again.code == 130, (again.out, again.err)
    assert _files(out) == before  # the same files, byte for byte, and nothing staged left
    assert sorted(p.name for p in out.iterdir()) == sorted(Path(p).parent.name for p in before)

    monkeypatch.setattr(exporters, "metric_series", series)  # an export that ends replaces it
    third = cli("runs", "export", *map(str, ids), "--to", "tensorboard", "--out", str(out))
    assert third.code == 0, third.err
    after = _files(out)
    assert len(after) == 2 and set(after) != set(before)
    assert sorted(p.name for p in out.iterdir()) == sorted(Path(p).parent.name for p in after)


# --- C7: a stopped study says how to go on -----------------------------------------------

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
checkpoint = false
"""

SWEEP = """
base = "base.toml"
[grid]
"train.lr" = [0.1, 0.05]
"""


def _sweep(tmp_path: Path) -> list[str]:
    (tmp_path / "base.toml").write_text(BASE)
    (tmp_path / "sw.toml").write_text(SWEEP)
    return ["sweep", "sw.toml", "--new", "--set", "train.batch_size=16"]


def _distill(tmp_path: Path) -> list[str]:
    exp = write_distill_exp(tmp_path)
    return ["distill", exp.name, "--unlabeled", "digits:holdout=0.5", "--top-k", "3", "--new"]


def _scale(tmp_path: Path) -> list[str]:
    (tmp_path / "base.toml").write_text(BASE)
    study = ["--workers", "1", "--mode", "weak", "--per-worker-batch", "8", "--steps", "2"]
    return ["scale", "base.toml", *study, "--warmup-steps", "1", "--repeat", "1", "--no-plots"]


STUDIES = {
    # command: (its arguments, where the stop lands once its study is stored, continued)
    "sweep": (_sweep, "dlperf.sweep.runner.SweepRun.run_here", True),
    "distill": (_distill, "dlperf.distill.runner._Study.stage", True),
    "scale": (_scale, "dlperf.distributed.study.Study.run_point", False),
}


@pytest.mark.parametrize("command", list(STUDIES))
def test_a_stopped_study_says_how_to_go_on(
    cli: Cli, store: RunStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, command: str
) -> None:
    """Before: exit 130 and nothing said. Now one line names the study and, for a sweep or a
    distill study, the command that continues it, which continues that very study."""
    args, where, continued = STUDIES[command]
    studies: list[int] = []

    def stopped(self: Any, *rest: Any, **kwargs: Any) -> Any:
        studies.append(self.study_id)
        _stop()

    monkeypatch.setattr(where, stopped)
    result = cli(*args(tmp_path))
    assert result.code == 130, (result.out, result.err)
    (study,) = studies
    line = result.err.splitlines()[-1]
    assert line.startswith(f"{command} study {study} stopped"), result.err
    if not continued:  # a scaling study is measured anew, never continued
        assert "--resume" not in line and "run the command again" in line, line
        return
    again = line.split("continue it", 1)[1].split(": ", 1)[1]
    words = shlex.split(again)
    assert words[:2] == ["dlperf", command] and "--new" not in words, line
    assert words[-2:] == ["--resume", str(study)], line
    resumed = cli(*words[1:])  # the same study, its finished work skipped
    assert resumed.code == 130, resumed.err
    assert studies == [study, study]
    assert resumed.err.splitlines()[-1] == line
