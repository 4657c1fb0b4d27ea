"""Break-it round 40, Left list, fixer F3: every writer of one file gets its own temporary name.

L1 (round 40's Left item, `paths.replaced`). Every writer of one path wrote it through the same
temporary name, `NAME.part.SUFFIX`: two processes writing one file at once (two `distill`
commands writing one pseudo-label file, two exports to one path) wrote into one temporary file,
the first rename took the second's half-written bytes and the second's rename failed
(FileNotFoundError), a run stored `failed`. Each writer now writes its own,
`NAME.part-HOST-PID-N.SUFFIX` (HOST a short tag of the host's name, N this process's count):
both writers succeed and the file is one of theirs, whole. A writer killed mid-write (SIGKILL,
an OOM kill) leaves its part, which nobody wrote again under that name: a process's first write
into a directory removes the parts there whose writers are gone (of this host, the pid dead),
and each write the bare `NAME.part.SUFFIX` of an earlier dlperf; a live writer's part and
another host's stay. A name
near the file system's 255 bytes is written (the temporary name is cut to fit), where the
longer temporary name alone was refused.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
from collections.abc import Callable, Iterator
from multiprocessing.process import BaseProcess
from multiprocessing.synchronize import Barrier, Event
from pathlib import Path

import pytest

from dlperf import paths
from dlperf.paths import atomic_write, replaced

SPAWN = multiprocessing.get_context("spawn")  # no fork of a process that holds torch's threads
WAIT_S = 120  # generous: a busy machine starts a spawned interpreter slowly


def _write_halves(path: Path, content: bytes, barrier: Barrier) -> None:
    """Write `content` to `path` through `replaced`: half of it, wait for the other writer to
    have written its half too, then the rest."""
    with replaced(path) as tmp, open(tmp, "wb") as file:
        file.write(content[: len(content) // 2])
        file.flush()
        barrier.wait(WAIT_S)
        file.write(content[len(content) // 2 :])


def _write_when_told(path: Path, content: bytes, inside: Event, go: Event) -> None:
    """Write `content` to `path` through `replaced`, stopping inside the block (its part there)
    until `go` is set; `inside` says it got there."""
    with replaced(path) as tmp, open(tmp, "wb") as file:
        file.write(content)
        file.flush()
        inside.set()
        if not go.wait(WAIT_S):
            raise TimeoutError("never told to go on")


@pytest.fixture
def spawn() -> Iterator[Callable[..., BaseProcess]]:
    """Start a writer process (`target`, `args`); any still running as the test ends, as one
    failing leaves them, is killed."""
    started: list[BaseProcess] = []

    def start(target: Callable[..., None], *args: object) -> BaseProcess:
        process = SPAWN.Process(target=target, args=args, daemon=True)
        process.start()
        started.append(process)
        return process

    yield start
    for process in started:
        if process.is_alive():
            process.kill()
        process.join(WAIT_S)


def _parts(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if ".part" in p.name)


def test_l1_two_writers_of_one_path_at_once_both_succeed_and_the_file_is_whole(
    tmp_path: Path, spawn: Callable[..., BaseProcess]
) -> None:
    """Before: the second rename failed, "No such file or directory", and the file held the
    bytes of both."""
    path = tmp_path / "pseudo.npz"
    barrier = SPAWN.Barrier(2)
    contents = [b"A" * 100_000, b"B" * 100_000]
    writers = [spawn(_write_halves, path, c, barrier) for c in contents]
    for writer in writers:
        writer.join(WAIT_S)
    assert [w.exitcode for w in writers] == [0, 0]
    assert path.read_bytes() in contents
    assert _parts(tmp_path) == []


def test_l1_a_killed_writers_part_goes_with_the_next_write_a_live_ones_stays(
    tmp_path: Path, spawn: Callable[..., BaseProcess]
) -> None:
    """A writer SIGKILLed inside its block leaves its part: the next write of the path removes
    it. One still writing keeps its part through another's write, and finishes."""
    path = tmp_path / "checkpoint.pt"
    inside, go = SPAWN.Event(), SPAWN.Event()
    killed = spawn(_write_when_told, path, b"half", inside, go)
    assert inside.wait(WAIT_S)
    [left] = _parts(tmp_path)
    assert left.startswith("checkpoint.part-") and left.endswith(f"-{killed.pid}-0.pt")
    assert killed.pid is not None
    os.kill(killed.pid, signal.SIGKILL)
    killed.join(WAIT_S)
    assert killed.exitcode == -signal.SIGKILL
    # Another host's part of a pid dead here (a shared file system) may be in use: it stays.
    # The bare name of an earlier dlperf is no writer's now: it goes.
    tag = left.split("-")[1]
    other = left.replace(f"-{tag}-", f"-{'0000' if tag != '0000' else 'ffff'}-")
    (tmp_path / other).write_bytes(b"theirs")
    (tmp_path / "checkpoint.part.pt").write_bytes(b"an earlier dlperf's")

    inside, go = SPAWN.Event(), SPAWN.Event()
    live = spawn(_write_when_told, path, b"live", inside, go)
    assert inside.wait(WAIT_S)
    [mine] = set(_parts(tmp_path)) - {left, other, "checkpoint.part.pt"}
    atomic_write(path, b"next")  # while `live` writes
    assert path.read_bytes() == b"next"
    assert _parts(tmp_path) == sorted([mine, other])  # the killed one's and the bare name gone
    go.set()
    live.join(WAIT_S)
    assert live.exitcode == 0  # before: its rename failed, its part taken by the other write
    assert path.read_bytes() == b"live"
    assert _parts(tmp_path) == [other]


def test_l1_a_name_near_the_limit_is_written_and_one_past_it_is_named(tmp_path: Path) -> None:
    """Before: a name of 253 bytes, legal, was refused ("File name too long"), its temporary
    name past 255 bytes."""
    path = tmp_path / ("n" * 248 + ".json")
    atomic_write(path, "{}")
    assert path.read_text() == "{}" and _parts(tmp_path) == []
    again = tmp_path / ("n" * 252 + ".json")  # 257 bytes: no such file can be
    with pytest.raises(OSError, match="File name too long") as e:
        atomic_write(again, "{}")
    assert e.value.filename == str(again)  # the file asked for, not its temporary one
    assert list(tmp_path.iterdir()) == [path]


def test_l1_each_temporary_name_is_its_writers_own(tmp_path: Path) -> None:
    """Two writes in one process (two threads) get two names, the suffix kept last (numpy's
    savez appends .npz to a name without it)."""
    path = tmp_path / "weights.npz"
    with replaced(path) as one, replaced(path) as two:
        assert one != two
        assert one.suffix == two.suffix == ".npz"
        assert one.name.startswith("weights.part-") and one.parent == tmp_path
        one.write_text("one")
        two.write_text("two")
    assert path.read_text() == "one" and _parts(tmp_path) == []  # the outer block ends last
    assert paths.part_name(path) != paths.part_name(path)
