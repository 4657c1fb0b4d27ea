"""Break-it round 30, P4 causes 1-6: calibrate's device file, study lines, serve's HTTP forms,
device lines, TORCH_HOME.

C1. `calibrate` rewrote the user's device file in place: a write that failed (a full disk, a
file size limit) or was killed left it cut short, every device in it lost. Now it is replaced
whole by one rename (fsynced), under a lock on its folder, and the error names the file.
C2. A stopped study's line named the newest study of its name, another command's where two ran
at once. Now it names the study this command made.
C3. `serve` answered an absolute-form target (`GET http://HOST:PORT/v2/health/ready`, RFC 9112
§3.2.2) with 404 and HEAD (RFC 9110 §9.1) with 405. Now both are answered as GET of the path
(HEAD in the middleware: HEAD routes listed every route twice in OpenAPI under one id).
C4. "device 'cuda' asked for, but CUDA is not available here" had no fix and blamed the machine
when CUDA_VISIBLE_DEVICES hid every GPU. Now it names the variable and the fix (cuda:N, mps too).
C5. TORCH_HOME naming a file was told as a failed download with a copy fix that could not work.
Now the cache folder is checked first: TORCH_HOME is named, and the fix.
C6. A sweep stopped after its last point (drawing its figures) exited 130 saying nothing. Now
it prints the stop line docs/sweep.md promises; its command ranks and draws, every point skipped.
C7. StudyStop deleted the store's create_study on exit: a test's was lost, a nested one's
exit raised AttributeError over the stop. Now it gives back the one it found.
"""

from __future__ import annotations

import errno
import fcntl
import http.client
import os
import socket
import threading
import tomllib
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from dlperf.analytic.devices import load_catalog, save_device
from dlperf.errors import UserError
from dlperf.paths import told
from dlperf.store import RunStore
from tests.analytic.test_devices import device
from tests.conftest import CliResult, file_size_limit
from tests.deploy.test_server import infer_body, running, tiny_classifier
from tests.faults.test_break_it_26_stops import BASE, _stop

Cli = Callable[..., CliResult]

# --- C1: the device file is replaced whole, never rewritten in place ------------------------


def test_a_device_file_write_that_fails_leaves_the_users_devices_whole(tmp_path: Path) -> None:
    """A file size limit (EFBIG, as a full disk's ENOSPC) below the new file's size. Before:
    the file cut at the limit, malformed, its 40 devices lost."""
    path = tmp_path / "devices.toml"
    for i in range(40):
        save_device(device(name=f"lab{i}"), path)
    before = path.read_bytes()
    with file_size_limit(len(before)), pytest.raises(OSError) as caught:
        save_device(device(name="calbox"), path)
    assert caught.value.errno == errno.EFBIG
    said, bad = told(caught.value)
    assert said.startswith(f"cannot use {path}: File too large (") and not bad, said
    assert path.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["devices.toml"]  # no temporary left
    assert len(load_catalog(path)) > 40


def test_a_device_file_write_waits_for_another_and_keeps_its_device(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A second calibrate's save while the first holds the folder: it waits, then keeps both
    (before: nothing held, each read the file before the other wrote it). The file's mode and
    a link to the file are kept. Events, not a join's timeout: the save is seen asking for the
    folder's lock, and its read comes only once the lock is let go."""
    from dlperf.analytic import devices

    real = tmp_path / "dotfiles" / "devices.toml"
    real.parent.mkdir()
    save_device(device(name="A"), real)
    real.chmod(0o600)
    link = tmp_path / "devices.toml"
    link.symlink_to(real)
    flock, read_file = fcntl.flock, devices._read_file
    asked: list[tuple[int, int]] = []
    locking, read = threading.Event(), threading.Event()

    def lock(fd: int, how: int) -> None:
        asked.append((os.fstat(fd).st_ino, how))
        locking.set()
        flock(fd, how)

    def reading(path: Path) -> Any:
        read.set()
        return read_file(path)

    monkeypatch.setattr(fcntl, "flock", lock)
    monkeypatch.setattr(devices, "_read_file", reading)
    fd = os.open(real.parent, os.O_RDONLY | os.O_DIRECTORY)
    try:
        flock(fd, fcntl.LOCK_EX)  # another calibrate, between its read and its rename
        second = threading.Thread(target=save_device, args=(device(name="B"), link))
        second.start()
        assert locking.wait(timeout=60), "the save asked for no lock"
        assert asked == [(real.parent.stat().st_ino, fcntl.LOCK_EX)]
        assert not read.wait(timeout=0.2), "the save read the file while the lock was held"
        real.write_text(real.read_text() + '[C]\nsource = "the other\'s"\n')  # its rename
    finally:
        os.close(fd)  # lets the lock go
    assert read.wait(timeout=60)
    second.join(timeout=60)
    assert not second.is_alive()
    assert sorted(tomllib.loads(real.read_text())) == ["A", "B", "C"]
    assert link.is_symlink() and (real.stat().st_mode & 0o777) == 0o600


# --- C2, C6: a stopped study's line names this command's study, also after its last point ---

ONE_POINT = """
base = "base.toml"
[grid]
"train.lr" = [0.1]
"""


def test_a_stopped_sweep_names_its_own_study_not_a_newer_one_of_its_name(
    cli: Cli, db: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another sweep of the file (--new, another terminal) makes study 2 while this one, study
    1, runs. Before: "sweep study 2 stopped", and its --resume 2 continued the other's."""
    (tmp_path / "base.toml").write_text(BASE)
    (tmp_path / "sw.toml").write_text(ONE_POINT)

    def stopped(self: Any, *rest: Any) -> None:
        assert RunStore.open(db).create_study(self.sweep.name, "sweep") == 2  # the other's
        _stop()

    monkeypatch.setattr("dlperf.sweep.runner.SweepRun.run_here", stopped)
    done = cli("sweep", "sw.toml", "--new")
    assert done.code == 130, done.err
    assert done.err.splitlines()[-1] == (
        "sweep study 1 stopped; continue it (the points that finished are skipped): dlperf "
        "sweep sw.toml --resume 1"
    )


def test_a_study_stop_gives_back_the_stores_create_study_it_found(
    store: RunStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Its own create_study on the store, a test's before it and a second StudyStop's inside
    it. Before: each exit deleted the instance's, so the test's was lost and the outer exit
    raised AttributeError over the stop (a Ctrl-C's traceback)."""
    from dlperf.study_stop import StudyStop

    made: list[str] = []
    said: list[str] = []

    def spy(name: str, kind: str) -> int:
        made.append(name)
        return RunStore.create_study(store, name, kind)

    monkeypatch.setattr(store, "create_study", spy)
    with pytest.raises(KeyboardInterrupt), StudyStop("sweep", None, False, said.append) as outer:
        outer.watch(store, "a")
        with StudyStop("sweep", None, False, said.append) as inner:
            inner.watch(store, "b")
            store.create_study("b", "sweep")
        raise KeyboardInterrupt
    assert vars(store)["create_study"] is spy and made == ["b"]
    assert (outer.made, inner.made) == (1, 1)
    # Only the outer one saw the stop; its line is given to `say`, not printed.
    assert len(said) == 1 and said[0].startswith("sweep study 1 stopped; continue it")


@pytest.mark.faults
def test_a_sweep_stopped_after_its_last_point_ranks_it(
    cli: Cli, db: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Ctrl-C while the figures are drawn, every point stored. Before round 30: exit 130, no
    line; rounds 30-67: exit 130 and "continue it ... --resume 1", whose command only ranked the
    study. Since round 68 a study whose every point is stored finished is whole, as `run`'s
    stored run is: one stop does not count, and it is ranked, exit 0."""
    from dlperf.report import sweep as figures

    (tmp_path / "base.toml").write_text(BASE)
    (tmp_path / "sw.toml").write_text(ONE_POINT)
    draw = figures.sweep_figures

    def stopped(*args: Any) -> Any:
        _stop()
        return draw(*args)

    monkeypatch.setattr(figures, "sweep_figures", stopped)
    done = cli("sweep", "sw.toml")
    assert done.code == 0, done.err
    assert "winner: run 1" in done.out
    assert "continue it" not in done.err


# --- C3: serve answers absolute-form targets and HEAD -----------------------------------------


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tiny_classifier(tmp_path_factory.mktemp("served") / "tiny.onnx")


@pytest.fixture(scope="module")
def served(tiny: Path) -> Iterator[str]:
    from dlperf.deploy.server import create_app

    with running(create_app(tiny, max_batch=4, max_wait_ms=1, threads=1)) as url:
        yield url


def _ask(url: str, method: str, target: str, body: bytes | None = None) -> tuple[int, bytes]:
    """`method target` over real HTTP/1.1 with the stdlib client, the target sent as given."""
    host, port = url.removeprefix("http://").split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=30)
    try:
        headers = {"Content-Type": "application/json"} if body is not None else {}
        conn.request(method, target, body, headers)
        answer = conn.getresponse()
        return answer.status, answer.read()
    finally:
        conn.close()


@pytest.mark.parametrize(
    ("method", "target", "status", "body"),
    [
        ("GET", "{url}/v2/health/ready", 200, b'{"ready":true}'),  # before: 404
        ("GET", "{url}/v2/models/tiny/ready?x=1", 200, b'{"name":"tiny","ready":true}'),
        ("GET", "{url}/v2/models/nope/ready", 404, None),  # still routed, still refused
    ],
)
def test_serve_answers_absolute_form_targets_and_head(
    served: str, method: str, target: str, status: int, body: bytes | None
) -> None:
    got = _ask(served, method, target.format(url=served))
    assert got[0] == status, got
    if body is not None:
        assert got[1] == body, got


def _raw(url: str, method: str, target: str) -> tuple[bytes, dict[bytes, bytes], bytes]:
    """`method target` on a raw socket with Connection: close: the status line, the headers
    and every byte after them until the server closes (http.client never reads a HEAD's)."""
    host, port = url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=30) as sock:
        sock.sendall(f"{method} {target} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".encode())
        answer = b""
        while chunk := sock.recv(65536):
            answer += chunk
    head, _, body = answer.partition(b"\r\n\r\n")
    status, *lines = head.split(b"\r\n")
    headers = dict(line.lower().split(b": ", 1) for line in lines)
    return status, headers, body


@pytest.mark.parametrize(
    "target", ["/v2/health/ready", "/v2/models/tiny", "{url}/metrics", "/v2/models/nope/ready"]
)
def test_serve_answers_head_with_gets_status_and_length_and_no_body(
    served: str, target: str
) -> None:
    """Before: 405 (no HEAD route); then the HEAD routes were there but http.client's check
    could not see a body sent after the headers."""
    target = target.format(url=served)
    status, headers, body = _raw(served, "HEAD", target)
    get_status, get_headers, get_body = _raw(served, "GET", target)
    assert (status, body) == (get_status, b""), (status, body)
    assert get_headers[b"content-length"] == str(len(get_body)).encode()
    if "metrics" not in target:  # /metrics counts this HEAD: the GET's is a few bytes longer
        assert headers[b"content-length"] == get_headers[b"content-length"]


def test_serve_openapi_has_one_operation_per_route(tiny: Path) -> None:
    """Before: each GET route was listed for HEAD too with the same operation id, 13 warnings
    'Duplicate Operation ID' and a document client generators refuse."""
    from dlperf.deploy.server import create_app

    app = create_app(tiny, threads=1)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a duplicate id's UserWarning fails the test
        doc = app.openapi()
    ids = [op["operationId"] for path in doc["paths"].values() for op in path.values()]
    assert len(ids) == len(set(ids)) > 10, ids
    assert all("head" not in path for path in doc["paths"].values())


def test_serve_infers_for_an_absolute_form_post(served: str) -> None:
    x = np.zeros((1, 3, 8, 8), np.float32)
    doc = str(infer_body(x)).replace("'", '"').encode()
    status, answer = _ask(served, "POST", f"{served}/v2/models/tiny/infer", doc)
    assert status == 200 and b'"outputs"' in answer, answer


# --- C4: a device this host does not show is told with its cause and fix -------------------


@pytest.mark.parametrize(
    ("spec", "visible", "gpus", "said"),
    [
        ("cuda", None, 0, "device 'cuda' asked for, but CUDA is not available here (no GPU or "
         "no driver found) (set run.device = auto or cpu)"),
        ("cuda", "", 0, "device 'cuda' asked for, but CUDA_VISIBLE_DEVICES='' hides every GPU "
         "(unset CUDA_VISIBLE_DEVICES or name a GPU in it, or set run.device = auto or cpu)"),
        ("cuda:0", "-1", 0, "device 'cuda:0' asked for, but CUDA_VISIBLE_DEVICES='-1' hides every "
         "GPU (unset CUDA_VISIBLE_DEVICES or name a GPU in it, or set run.device = auto or cpu)"),
        ("cuda", "3", 0, "device 'cuda' asked for, but CUDA is not available here (no GPU that "
         "CUDA_VISIBLE_DEVICES='3' names) (unset CUDA_VISIBLE_DEVICES or name a GPU in it, or "
         "set run.device = auto or cpu)"),
        ("cuda:2", "0", 1, "device 'cuda:2': only 1 GPU(s) here (CUDA_VISIBLE_DEVICES='0' shows "
         "1) (use cuda:0 to cuda:0, or set run.device = auto)"),
        ("mps", None, 0, "device 'mps' asked for, but MPS is not available here (set run.device "
         "= auto or cpu)"),
    ],
)  # fmt: skip
def test_a_device_not_shown_here_is_told_with_why_and_the_fix(
    monkeypatch: pytest.MonkeyPatch, spec: str, visible: str | None, gpus: int, said: str
) -> None:
    """As on a GPU machine (a CUDA build of torch) whose GPUs the variable hides; before:
    "device 'cuda' asked for, but CUDA is not available here", no fix."""
    from dlperf.system import pick_device

    if visible is None:
        monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    else:
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", visible)
    monkeypatch.setattr(torch.version, "cuda", "13.0")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: gpus > 0)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: gpus)
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: False)
    with pytest.raises(UserError) as caught:
        pick_device(spec)
    assert str(caught.value) == said


# --- C5: TORCH_HOME naming a file ------------------------------------------------------------


def test_torch_home_naming_a_file_is_named_with_a_fix_that_works(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before: "could not be downloaded from https://... ([Errno 20] Not a directory: ...)
    (offline: copy the file to .../afile/hub/checkpoints/resnet18-f37072fd.pth, ...)"."""
    import urllib.error

    import torch.hub

    from dlperf.engine.pretrained import _from_torchvision

    def offline(*args: object, **kwargs: object) -> None:  # never a real download in tests
        raise urllib.error.URLError("[Errno -2] Name or service not known")

    monkeypatch.setattr(torch.hub, "urlopen", offline)
    afile = tmp_path / "afile"
    afile.touch()
    monkeypatch.setenv("TORCH_HOME", str(afile))
    with pytest.raises(UserError) as caught:
        _from_torchvision("resnet18", "IMAGENET1K_V1").fetch()
    assert str(caught.value) == (
        f"TORCH_HOME {afile} is not a directory (point TORCH_HOME at a folder you can write, or "
        "give model.weights = a state-dict file)"
    )
