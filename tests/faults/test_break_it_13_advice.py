"""The thirteenth break-it round (issue 41), advice that cannot help.

C6. `dlperf serve MODEL.onnx --max-body-mb 0` started, and then answered every POST with 413
"request body over the 0-byte limit", where `--max-batch 0`, `--queue 0`, `--threads 0` and
`--max-connections 0` are refused up front; a positive limit under a byte (`1e-9`) rounded
down to the same 0 bytes, and 1e308 MiB was a traceback (OverflowError). A limit must now be
above 0 (one line, exit 2), and is counted in bytes exactly, rounded up.

C7. A run whose loss diverged was told to try `run.precision = "fp32"` when it already trained
in fp32, by the engine's failure line and by `dlperf doctor` (`... (now "fp32")`), and
`train.grad_clip = 1.0` when it already clipped at 1.0 or below. One function now builds the
advice for both, leaving out what is in force (a lower train.lr is always worth a try).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from dlperf.deploy import server
from dlperf.distributed.worker import Divergence, alone
from dlperf.engine.loop import Diverged
from tests.conftest import CliResult
from tests.deploy.test_server import tiny_classifier
from tests.engine.test_divergence import BEFORE_ANY_UPDATE, IN_EVAL_MODE
from tests.faults.test_break_it_7_scale import _steps as steps
from tests.faults.test_break_it_8_eval import NAN as EVAL_NAN
from tests.faults.test_break_it_8_eval import _experiment as eval_nan_experiment
from tests.faults.test_break_it_9_misc import _one_line as one_line
from tests.faults.test_break_it_10_models import _exp as exp

Cli = Callable[..., CliResult]

# --- C6: serve's body limit --------------------------------------------------------------------


@pytest.fixture
def model(tmp_path: Path) -> Path:
    """A tiny classifier with dlperf's metadata, as `dlperf export` writes one."""
    return tiny_classifier(tmp_path / "tiny.onnx")


@pytest.fixture
def started(monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """`dlperf serve` up to its listening: the app is built as the command builds it (its
    arguments kept here), and the server returns at once instead of serving, so that a
    command which should have been refused ends rather than serving forever."""
    built: dict[str, Any] = {}
    create_app = server.create_app

    def recorded(*args: Any, **kwargs: Any) -> Any:
        built.update(kwargs)
        return create_app(*args, **kwargs)

    monkeypatch.setattr(server, "create_app", recorded)
    monkeypatch.setattr(server, "serve_forever", lambda *args, **kwargs: None)
    return built


@pytest.mark.parametrize(
    "given",
    [("--max-body-mb", "0"), ("--max-body-mb", "-1"), ("--set", "serve.max_body_mb=0")],
)
def test_a_body_limit_of_0_is_refused_up_front(
    cli: Cli, model: Path, started: dict[str, Any], given: tuple[str, str]
) -> None:
    # before: serving, and every POST got 413 "request body over the 0-byte limit"
    said = one_line(cli("serve", str(model), "--port", "0", *given))
    assert "serve.max_body_mb: must be greater than 0 (got " in said, said
    assert started == {}  # no app built


def test_a_body_limit_in_a_config_file_of_0_is_refused_naming_the_key(
    cli: Cli, model: Path, started: dict[str, Any], tmp_path: Path
) -> None:
    config = tmp_path / "serve.toml"
    config.write_text("[serve]\nmax_body_mb = 0.0\n")
    said = one_line(cli("serve", str(model), "--port", "0", "--config", str(config)))
    assert "serve.max_body_mb: must be greater than 0 (got 0.0)" in said, said


def test_a_body_limit_under_a_byte_admits_a_byte_not_none(
    cli: Cli, model: Path, started: dict[str, Any]
) -> None:
    # before: int(1e-9 * 2**20) = a 0-byte limit, as with --max-body-mb 0
    assert cli("serve", str(model), "--port", "0", "--max-body-mb", "1e-9").code == 0
    assert started["max_body_bytes"] == 1


@pytest.mark.parametrize(
    ("mib", "limit"),
    [
        ("0.5", 2**19),
        # before: a traceback, OverflowError: 1e308 MiB is more bytes than a float holds
        ("1e308", int(1e308) * 2**20),
    ],
    ids=["0.5", "1e308"],
)
def test_a_body_limit_in_mib_is_its_bytes(
    cli: Cli, model: Path, started: dict[str, Any], mib: str, limit: int
) -> None:
    assert cli("serve", str(model), "--port", "0", "--max-body-mb", mib).code == 0
    assert started["max_body_bytes"] == limit


# --- C7: a diverged run's advice -----------------------------------------------------------------

LR = re.escape("try a lower train.lr (now 1e+12)")
FP32 = re.escape('run.precision = "fp32"')
# A model whose scores are NaN for a training batch (16 images), finite for the up-front checks'
# (DRY_BATCH, 2): a run of it diverges at step 1, before any update.
NAN_NET = """
from torch import nn

def nan_net(num_classes=10, in_channels=1):
    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.f = nn.Sequential(nn.Flatten(), nn.Linear(64 * in_channels, num_classes))

        def forward(self, x):
            return self.f(x) * (float("nan") if len(x) > 2 else 1.0)

    return Net()
"""


def _diverged(cli: Cli, experiment: Path, *settings: str) -> tuple[str, str]:
    """Run `experiment` with `settings` (--set each), which diverges; the engine's advice (its
    failure line's, after the loss and step) and the doctor's fix for the run."""
    sets = [arg for s in settings for arg in ("--set", s)]
    result = cli("run", str(experiment), *sets, "--json")
    assert result.code == 1, (result.out, result.err)
    run = json.loads(result.out)
    assert run["status"] == "failed", run
    engine = run["error"].split("; ", 1)[1]
    doctor = cli("doctor", str(run["run_id"]), "--json")
    assert doctor.code == 1, (doctor.out, doctor.err)
    (finding,) = [f for f in json.loads(doctor.out)["findings"] if f["rule"] == "diverged"]
    return engine, finding["fix"]


@pytest.mark.parametrize(
    ("settings", "advice"),
    [
        # before: ', or run.precision = "fp32"' (the doctor: '(now "fp32")') in an fp32 run
        (["run.precision=fp32"], f"{LR} or train.grad_clip = 1.0"),
        # the docs' wording (docs/run.md) where every setting could help
        (["run.precision=bf16"], f"{LR}, train.grad_clip = 1.0, or {FP32}"),
        (["run.precision=fp32", "train.grad_clip=1.0"], LR),
    ],
    ids=["fp32", "bf16", "fp32-clipped"],
)
def test_a_diverged_run_is_advised_only_what_is_not_in_force(
    cli: Cli, tmp_path: Path, settings: list[str], advice: str
) -> None:
    engine, doctor = _diverged(cli, exp(tmp_path, "smallcnn"), "train.lr=1e12", *settings)
    assert re.fullmatch(advice, engine), engine
    assert doctor == engine  # one function builds both


def test_a_run_diverged_before_any_update_in_fp32_is_not_told_to_train_in_fp32(
    cli: Cli, tmp_path: Path
) -> None:
    models = tmp_path / "nan_models.py"
    models.write_text(NAN_NET)
    engine, doctor = _diverged(cli, exp(tmp_path, f"{models}:nan_net"), "run.precision=fp32")
    assert engine == BEFORE_ANY_UPDATE, engine  # before: ', or try run.precision = "fp32"' too
    assert doctor == engine  # before: "lower train.lr ..." for a loss no learning rate made


def test_a_run_whose_evaluation_diverged_in_fp32_is_not_told_to_train_in_fp32(
    cli: Cli, tmp_path: Path
) -> None:
    engine, doctor = _diverged(cli, eval_nan_experiment(tmp_path, EVAL_NAN))
    assert engine == IN_EVAL_MODE, engine  # before: ', or try run.precision = "fp32"' too
    assert doctor == engine  # before: "lower train.lr ..., or run.precision ... (now "fp32")"


def test_a_scale_points_divergence_advises_by_the_runs_settings() -> None:
    with pytest.raises(Diverged) as fp32:
        steps(Divergence(alone, 1.0, "fp32"), [1.0, math.nan])
    assert str(fp32.value) == "loss became nan at step 2 (epoch 1); try a lower train.lr (now 0.1)"
    with pytest.raises(Diverged) as bf16:
        steps(Divergence(alone, None, "bf16"), [1.0, math.nan])
    assert str(bf16.value).endswith(', train.grad_clip = 1.0, or run.precision = "fp32"')
