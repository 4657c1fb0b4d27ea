"""The eighth break-it round (issue 41), analyze and predict --measure: a model's own exception
told as the model's, not the input's, and the torch profiler's log lines kept off stderr.

A model whose forward raised its own exception was told `error: the model rejects input [1, 3,
32, 32]: Melted: core 3 melted (check analyze.input ...)`, exit 2, by `analyze` and by `predict
--measure`, which had already stored its run failed with that line, while the same model
raising in its backward was told as the model's (exit 1, its frames). And every profiler window
(`predict --measure`'s layer profile, `run --profile`) printed Kineto's own lines on stderr of
a command that succeeded: `USDT: ... profiler_start`, `... profiler_stop` and, on a machine
with no GPU, `ERROR: ... gpuGetDeviceCount failed with code 35`.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from dlperf.store import RunStore
from tests.conftest import TINY, CliResult

Cli = Callable[..., CliResult]

MODEL = """
import torch
from torch import nn


class Melted(Exception):
    pass


class Net(nn.Module):
    def __init__(self, num_classes=10, in_channels=3):
        super().__init__()
        self.c = nn.Conv2d(3, 4, 3, padding=1)  # 3 channels, whatever the input
        self.l = nn.Linear(4, num_classes)
        self.calls = 0

    def forward(self, x):
        if x.device.type != "meta":
            self.calls += 1
        {body}
        return self.l(self.c(x).mean((2, 3)))
"""

# Each forward raises; the fourth real one only, mid-measurement (calibration has run).
RAISES = 'raise Melted("core 3 melted")'
RAISES_LATE = 'if self.calls > 3:\n            raise Melted("core 3 melted")'
# An exception of a builtin class raised by the model's own code is still the model's.
RAISES_BUILTIN = 'raise RuntimeError("core 3 melted")'
# A torch operation called directly in the model's forward that the input's shape breaks: the
# input's fault, as when the operation is inside one of torch's modules.
VIEW = "x = x.view(len(x), 3, 16, 16)"


def _model(tmp_path: Path, body: str) -> str:
    path = tmp_path / "melt.py"
    path.write_text(MODEL.format(body=body))
    return f"{path}:Net"


def _told_as_the_models(result: CliResult, said: str) -> None:
    assert result.code == 1, (result.code, result.out, result.err)
    assert "rejects input" not in result.err, result.err
    assert "Traceback" not in result.err, result.err
    lines = result.err.splitlines()
    assert f"error: the model raised {said}" in lines, result.err
    assert any(line.strip().startswith('File "') and "melt.py" in line for line in lines), (
        result.err
    )


@pytest.mark.parametrize(
    ("body", "said"),
    [(RAISES, "Melted: core 3 melted"), (RAISES_BUILTIN, "RuntimeError: core 3 melted")],
)
def test_analyze_tells_the_models_own_exception(
    cli: Cli, tmp_path: Path, body: str, said: str
) -> None:
    _told_as_the_models(cli("analyze", _model(tmp_path, body)), said)


def test_analyze_still_tells_a_wrong_input_in_one_line(cli: Cli, tmp_path: Path) -> None:
    # The input given does not fit the model: torch's error, the user's input, exit 2.
    inside_torch = cli("analyze", _model(tmp_path, "pass"), "--input", "5,32,32")
    assert inside_torch.code == 2, (inside_torch.code, inside_torch.err)
    assert inside_torch.err.startswith("error: the model rejects input [1, 5, 32, 32]: "), (
        inside_torch.err
    )
    in_the_model = cli("analyze", _model(tmp_path, VIEW), "--input", "3,8,8")
    assert in_the_model.code == 2, (in_the_model.code, in_the_model.err)
    assert in_the_model.err.startswith("error: the model rejects input [1, 3, 8, 8]: "), (
        in_the_model.err
    )
    assert len(in_the_model.err.splitlines()) == 1, in_the_model.err


@pytest.mark.faults  # over 10 s under load: make test-faults
def test_predict_measure_tells_the_models_exception_mid_measurement(
    cli: Cli, tmp_path: Path, store: RunStore
) -> None:
    model = _model(tmp_path, RAISES_LATE)
    result = cli("predict", model, "--measure", "--reps", "3", "--input", "3,16,16")
    _told_as_the_models(result, "Melted: core 3 melted")
    [run] = store.list_runs()
    assert (run.kind, run.status, run.error) == ("predict", "failed", "Melted: core 3 melted")


# Kineto's log line: `LEVEL:date time pid:tid File.cpp:line] text` (USDT, INFO, WARNING, ERROR).
KINETO = re.compile(r"^[A-Z]+:\d{4}-\d\d-\d\d .*\.cpp:\d+\]")


def _dlperf(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "KINETO_LOG_LEVEL"}
    return subprocess.run(
        [str(Path(sys.executable).parent / "dlperf"), "--db", str(tmp_path / "k.db"), *args],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )


def _no_profiler_lines(done: subprocess.CompletedProcess[str]) -> None:
    assert done.returncode == 0, (done.returncode, done.stderr)
    assert not [line for line in done.stderr.splitlines() if KINETO.match(line)], done.stderr
    assert "gpuGetDeviceCount" not in done.stderr
    assert "profiler_start" not in done.stderr


@pytest.mark.faults  # over 10 s under load: make test-faults
def test_predict_measure_keeps_the_profilers_lines_off_stderr(tmp_path: Path) -> None:
    done = _dlperf(tmp_path, "predict", "smallcnn", "--measure", "--reps", "1", "--input", "1,8,8")
    _no_profiler_lines(done)
    assert "profiling layers ..." in done.stderr.splitlines()  # dlperf's own lines stay


@pytest.mark.faults  # over 10 s under load: make test-faults
def test_run_profile_keeps_the_profilers_lines_off_stderr(tmp_path: Path) -> None:
    exp = tmp_path / "exp.toml"
    exp.write_text(TINY.format(epochs=1))
    # 320 images, 8 steps: room for the warm-up and the profiler's window, which is all the
    # test needs (the whole digits, 45 steps, took about 1 CPU-s more)
    done = _dlperf(tmp_path, "run", str(exp), "--profile", "--set", "data.limit=320")
    _no_profiler_lines(done)
    assert (tmp_path / "k.db").exists()


def test_the_profilers_quiet_keeps_every_other_line_and_error(
    capfd: pytest.CaptureFixture[str],
) -> None:
    from dlperf.system import profiler_quiet

    kineto = b"ERROR:2026-11-26 12:19:21 25184:25184 DeviceProperties.cpp:56] gpuGetDeviceCount\n"
    with pytest.raises(ZeroDivisionError), profiler_quiet():
        os.write(2, kineto)
        os.write(2, b"a warning of torch's own\n")
        print("and Python's", file=sys.stderr)
        _ = 1 / 0
    os.write(2, b"after\n")  # fd 2 is stderr again
    # (capfd's sys.stderr is not fd 2, so Python's line may come first)
    err = capfd.readouterr().err
    assert sorted(err.splitlines()) == ["a warning of torch's own", "after", "and Python's"], err
