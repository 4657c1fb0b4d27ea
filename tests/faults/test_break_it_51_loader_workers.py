"""Break-it round 51, fixer H3: DataLoader workers under limits and deaths.

T3 C2: `run` with data.num_workers=2 under `ulimit -v 3400000` printed torch's 14-line
"Exception ignored in: <function _MultiProcessingDataLoaderIter.__del__ ...> ... RuntimeError:
can't start new thread" before dlperf's right line ("the DataLoader could not start its
workers' processes or threads (a memory limit, ...)"): the iterator whose start failed was
freed, and its finaliser, shutting the workers down, could not start a queue's feeder thread
either. `_let_go` kept only the finaliser's AttributeError quiet. Now, once the start's error
is dlperf's line, the finaliser's error (the same failure again) is not printed; where the
error is not dlperf's, the finaliser's is passed on as before.

T3 C3: a DataLoader worker that died of SIGSEGV or SIGBUS printed torch's "ERROR: Unexpected
segmentation fault encountered in worker." (or "bus error ... (shm).") and a NUL byte before
dlperf's line, and the SIGBUS line gave no cause or fix. Workers now take those signals'
default action (no torch line, no NUL), and SIGBUS's line names a full /dev/shm and its fixes.

In process: a queue that cannot start its feeder thread stands for the memory limit, and the
worker raises the signal itself (torch's handler takes a sent signal as a fault's)."""

from __future__ import annotations

import multiprocessing.queues
import os
import resource
import signal
import sys
from typing import Any

import pytest
import torch
from torch.utils.data.dataloader import _MultiProcessingDataLoaderIter

from dlperf.data.loaders import TorchvisionLoader, WorkerDied, _SampleDataset
from dlperf.data.sources import Split


def _loader(workers: int = 2) -> TorchvisionLoader:
    images = torch.zeros(8, 1, 8, 8, dtype=torch.uint8)
    split = Split(images=images, labels=torch.zeros(8, dtype=torch.int64), files=[])
    return TorchvisionLoader(split, 4, (0.5,), (0.25,), None, workers, pin_memory=False)


def _feeders_fail(monkeypatch: pytest.MonkeyPatch, text: str) -> list[Any]:
    """Queues whose feeder thread cannot start (`text` its error), and the reports that reach
    `sys.unraisablehook`."""

    def no_thread(self: object) -> None:
        raise RuntimeError(text)

    monkeypatch.setattr(multiprocessing.queues.Queue, "_start_thread", no_thread)
    reports: list[Any] = []
    monkeypatch.setattr(sys, "unraisablehook", reports.append)
    return reports


# --- C2: the finaliser of an iterator whose start failed -----------------------------------


@pytest.mark.timeout(120)
def test_the_finaliser_is_quiet_after_the_workers_line(monkeypatch: pytest.MonkeyPatch) -> None:
    """Before: the finaliser's "can't start new thread" reached the hook (torch's traceback
    printed above dlperf's line)."""
    reports = _feeders_fail(monkeypatch, "can't start new thread")
    with pytest.raises(WorkerDied) as died:
        next(iter(_loader()))
    assert died.value.message == "the DataLoader could not start its workers' processes or threads"
    assert reports == [], [(r.object, r.exc_value) for r in reports]


@pytest.mark.timeout(120)
def test_the_finaliser_still_speaks_where_the_error_is_not_dlperfs(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """An error dlperf does not word is raised as it is, and the finaliser's own is not hidden."""
    reports = _feeders_fail(monkeypatch, "something else")
    with pytest.raises(RuntimeError, match="something else"):
        next(iter(_loader()))
    finalisers = [getattr(r.object, "__qualname__", "") for r in reports]
    assert "_MultiProcessingDataLoaderIter.__del__" in finalisers, reports


# --- C3: a worker killed by SIGSEGV or SIGBUS ----------------------------------------------


class _Faulting(_SampleDataset):
    """A batch whose worker dies of `sig`, without a core file."""

    sig = signal.SIGSEGV

    def __getitems__(self, index: list[int]) -> Any:
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        os.kill(os.getpid(), self.sig)
        return super().__getitems__(index)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("sig", [signal.SIGSEGV, signal.SIGBUS])
def test_a_worker_faulting_is_one_line(
    sig: signal.Signals, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    """Before: torch's "ERROR: Unexpected ... encountered in worker.\\n\\0" came first, and
    SIGBUS's line gave no cause or fix."""
    # torch looks at its workers each time a wait for a batch times out (5 s by default).
    monkeypatch.setattr(_MultiProcessingDataLoaderIter._try_get_data, "__defaults__", (0.1,))
    loader = _loader(workers=1)
    dataset = _Faulting(loader.dataset.split, loader.dataset.transform, 1, None)
    dataset.sig = sig
    loader.dataset = dataset
    with pytest.raises(WorkerDied) as died:
        next(iter(loader))
    message = died.value.message
    assert message.startswith("a DataLoader worker (pid "), message
    assert message.endswith(f") was killed by {sig.name}"), message
    err = capfd.readouterr().err
    assert "Unexpected" not in err and "\0" not in err, repr(err)
    hint = died.value.hint
    if sig == signal.SIGBUS:
        assert hint is not None and "/dev/shm" in hint, hint
        assert "data.num_workers" in hint and "--shm-size" in hint, hint
