"""Break-it round 30, P3 cause F9 (the rules commit 22b9d10 left) and S4's note on F10.

C1 (F9). `doctor` told a `dlperf.track` run (the user's own loop) to change dlperf's config and
commands: unfinished "run it again: it stopped before its first epoch's checkpoint" (or
`dlperf run --resume ID`), oversubscribed "set run.threads", data-bound "data.in_memory",
chance-accuracy "(train.lr None)", and cpu-not-gpu "set run.device" for the device that
`dlperf.track` records (cpu unless told), not where the loop put its model. Now each says it
in the loop's terms, or (cpu-not-gpu's torch-visible GPUs) nothing.
C2 (F10, the test set). A run whose training loss blew up and that had no validation split
(data.val_fraction = 0) failed at the final test-set evaluation with "the model's scores in eval
mode were not finite". Now it is judged by fit's losses (loop.judged), as each epoch's is.
"""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Callable
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

import dlperf
import dlperf.system
from dlperf.store import RunStore
from tests.conftest import CliResult

Cli = Callable[..., CliResult]


def _host(monkeypatch: pytest.MonkeyPatch, **figures: Any) -> None:
    """The host `dlperf.track` records from now on, with `figures` in place of the real ones."""
    real = dlperf.system.system_info
    monkeypatch.setattr(dlperf.system, "system_info", lambda *args: real(*args) | figures)


def _killed(db: str, monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(KeyboardInterrupt), dlperf.track("loop", store=db) as r:
        r.log(1, loss=1.0)
        r.log(7, loss=0.9)
        raise KeyboardInterrupt


def _gpus_beside(db: str, monkeypatch: pytest.MonkeyPatch) -> None:
    _host(monkeypatch, gpus=["NVIDIA H200"])  # track records cpu: it was not given a device
    with dlperf.track("loop", store=db) as r:
        r.log(1, loss=1.0)


def _threads(db: str, monkeypatch: pytest.MonkeyPatch) -> None:
    _host(monkeypatch, usable_cores=1, threads=2)
    with dlperf.track("loop", store=db) as r:
        r.log(1, loss=1.0)


def _at_once(db: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Two one-thread loops on a one-core host, their times overlapping by a minute."""
    _host(monkeypatch, usable_cores=1, threads=1)
    for _ in range(2):
        with dlperf.track("loop", store=db) as r:
            r.log(1, loss=1.0)
    start, store = datetime(2026, 1, 1, 12), RunStore.open(db)
    store.update_run(1, started=start + timedelta(minutes=1), ended=start + timedelta(minutes=3))
    store.update_run(2, started=start, ended=start + timedelta(minutes=2))


def _data_wait(db: str, monkeypatch: pytest.MonkeyPatch) -> None:
    with dlperf.track("loop", store=db) as r:
        with r.phase("data"):
            time.sleep(0.01)  # the phase's own length, not a wait for anything
        with r.phase("forward"):
            pass


def _chance(db: str, monkeypatch: pytest.MonkeyPatch) -> None:
    with dlperf.track("loop", config={"data": {"name": "cifar10"}}, store=db) as r:
        r.log(30, **{"val/acc1": 0.1})


CASES: dict[str, tuple[Callable[[str, pytest.MonkeyPatch], None], list[str]]] = {
    # Before: "after 0 epoch(s)", "fix: run it again: it stopped before its first epoch's
    # checkpoint" (a loop that logged epoch/train_loss: `dlperf run --resume ID`).
    "unfinished": (
        _killed,
        [
            "warning  unfinished: the run was killed after step 7 (the last it logged): its "
            "figures are a partial run's",
            "fix: run your loop again (from its own checkpoint, where it saves one): "
            "dlperf.track keeps none to resume",
        ],
    ),
    # Before: 'trained on cpu while 1 GPU(s) were visible to torch', 'set run.device = "auto"'.
    "cpu-not-gpu": (_gpus_beside, []),
    # Before: "run.threads 2 on 1 usable cores", "set run.threads to at most 1, or leave it unset".
    "oversubscribed": (
        _threads,
        [
            "warning  oversubscribed: 2 intra-op threads (torch.get_num_threads()) on 1 usable "
            "cores",
            "fix: call torch.set_num_threads(1) (at most the usable cores) before your loop",
        ],
    ),
    # Before: "... or give each run.threads = cores / runs at once".
    "oversubscribed-at-once": (
        _at_once,
        [
            "warning  oversubscribed: run(s) 1 ran at the same time on host "
            f"{socket.gethostname()}: 2 threads at once on 1 usable cores",
            "fix: run fewer at once, or have each call torch.set_num_threads(usable cores / "
            "runs at once)",
        ],
    ),
    # Before: "keep the data in memory (data.in_memory = true), ...".
    "data-bound": (
        _data_wait,
        [
            "warning  data-bound: data wait",
            "fix: load batches ahead of the step (a torch DataLoader with num_workers > 0 and "
            "pin_memory=True), keep the data in memory, lighten augmentation, or use a larger "
            "batch so the step outweighs the batch's preparation",
        ],
    ),
    # Before: "validation accuracy (epoch 30)", "... and the learning rate (train.lr None)".
    "chance-accuracy": (
        _chance,
        [
            "error    chance-accuracy: validation accuracy (step 30) 0.100 is within 0.050 of "
            "chance, 1/10 = 0.100 (cifar10, 10 classes)",
            "fix: the network learned nothing: check that labels match images, that the input "
            "is normalised, and the learning rate; train longer",
        ],
    ),
}


@pytest.mark.parametrize("rule", CASES)
def test_a_tracked_loop_is_advised_in_its_own_terms(
    cli: Cli, db: str, monkeypatch: pytest.MonkeyPatch, rule: str
) -> None:
    """The newest tracked run's one finding (evidence, fix), or none: in the loop's terms."""
    record, finding = CASES[rule]
    record(db, monkeypatch)
    result = cli("doctor", "--json")
    found = [
        (f["rule"], f"{f['severity']:<8} {f['rule']}: {f['evidence']}", f"fix: {f['fix']}")
        for f in json.loads(result.out)["findings"]
    ]
    if not finding:
        assert (result.code, found) == (0, []), result.out
        return
    assert result.code == finding[0].startswith("error"), (result.out, result.err)
    [(name, evidence, fix)] = found
    assert name == rule.removesuffix("-at-once") and fix == finding[1]
    # data-bound's evidence goes on to quote the phases' times
    assert evidence == finding[0] or (rule == "data-bound" and evidence.startswith(finding[0]))


def test_a_test_set_loss_after_training_blew_up_is_divergence(
    cli: Cli, tmp_path: Path, store: RunStore
) -> None:
    """No validation split, so no epoch's evaluation reads the weights training broke: the final
    test-set evaluation does. Before: "evaluation loss became nan: the model's scores in eval
    mode were not finite; look at what its forward does when not training (model.eval())"."""
    (tmp_path / "f10.toml").write_text(
        '[model]\nname = "smallcnn"\n[data]\nname = "digits"\nlimit = 64\nval_fraction = 0\n'
        "[train]\nepochs = 1\nbatch_size = 32\nlr = 1e9\n[run]\nthreads = 1\ncheckpoint = false\n"
    )
    result = cli("run", "f10.toml")
    assert result.code == 1, (result.out, result.err)
    [run] = store.list_runs()
    assert run.status == "failed"
    assert (run.error or "").startswith("training diverged: its loss rose from "), run.error
    assert (run.error or "").endswith(
        ", and the evaluation loss became nan; try a lower train.lr (now 1e+09) or "
        "train.grad_clip = 1.0"
    ), run.error
