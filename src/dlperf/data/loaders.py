"""Batch iterators. Both yield (images, labels) ready for the model apart from the copy
to the device: the tensor loader's batches are already there.

- TensorLoader: the split lives on the device as uint8; each batch is gathered by index
  and augmented as a whole (airbench's approach).
- TorchvisionLoader: the classic per-sample path, PIL transforms in DataLoader workers;
  also the streaming path for image folders too large for memory.

Each epoch's shuffling and augmentation draw from a generator seeded by (seed, epoch), so
an epoch is reproduced exactly after a resume without saving generator state.
"""

from __future__ import annotations

import contextlib
import errno
import math
import os
import resource
import signal
import sys
import threading
import traceback
from collections.abc import Iterator
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Self

import torch
from torch.utils.data import DataLoader, Dataset, default_collate
from torch.utils.data._utils import signal_handling

from dlperf.config import AugmentConfig
from dlperf.data.augment import augment_batch, host_to_device, normalize
from dlperf.data.sources import ImageData, Split, decode_file
from dlperf.errors import UserError, causes, out_of_threads, threads_limit
from dlperf.paths import files_open, open_files_limit, room_for_files, room_under
from dlperf.system import usable_cores


def epoch_generator(seed: int, epoch: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed * 1_000_003 + epoch)


class TensorLoader:
    def __init__(
        self,
        split: Split,
        batch_size: int,
        device: torch.device,
        mean: torch.Tensor,
        std: torch.Tensor,
        augment: AugmentConfig | None = None,
        drop_last: bool = False,
        seed: int = 0,
    ) -> None:
        assert split.images is not None
        self.images = split.images.to(device)
        self.labels = split.labels.to(device)
        self.batch_size = batch_size
        self.mean, self.std = mean.to(device), std.to(device)
        self.augment = augment
        self.drop_last = drop_last
        self.seed = seed
        self.epoch = 0

    def __len__(self) -> int:
        n = len(self.labels) / self.batch_size
        return math.floor(n) if self.drop_last else math.ceil(n)

    def set_epoch(self, epoch: int) -> Self:
        """The loader, drawing epoch `epoch`'s order (and augmentation)."""
        self.epoch = epoch
        return self

    def __iter__(self) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        g = epoch_generator(self.seed, self.epoch)
        n = len(self.labels)
        order = torch.randperm(n, generator=g) if self.augment else torch.arange(n)
        order = host_to_device(order, self.images.device)
        for i in range(len(self)):
            index = order[i * self.batch_size : (i + 1) * self.batch_size]
            x, y = self.images[index], self.labels[index]
            if self.augment is None:
                yield normalize(x, self.mean, self.std), y
            else:
                yield augment_batch(x, y, self.augment, self.mean, self.std, g)


class _Cutout:
    """Per-sample Cutout for the torchvision path (torchvision has no exact equivalent)."""

    def __init__(self, side: int) -> None:
        self.side = side

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        _, h, w = x.shape
        cy, cx = int(torch.randint(h, ())), int(torch.randint(w, ()))
        top, left = cy - self.side // 2, cx - self.side // 2
        x = x.clone()
        x[:, max(top, 0) : max(top + self.side, 0), max(left, 0) : max(left + self.side, 0)] = 0
        return x


class _SampleDataset(Dataset[Any]):
    """One image at a time through PIL transforms; M augmented copies for batch augmentation.

    torchvision's random transforms draw from torch's global generator: in the training
    process itself (no workers) that is the run's generator, whose state an epoch reached
    after a resume is not the one it had, and in workers it depends on which worker took
    the batch. So each batch is augmented under the global generator seeded by the epoch's
    `seed` and the batch's first sample, and put back afterwards: an epoch's augmentation
    is a function of (seed, epoch) alone, whatever the number of workers."""

    def __init__(self, split: Split, transform: Any, copies: int, side: int | None) -> None:
        self.split, self.transform, self.copies, self.side = split, transform, copies, side
        self.seed = 0  # set for each epoch by TorchvisionLoader

    def __len__(self) -> int:
        return len(self.split)

    def _image(self, i: int) -> Any:
        from torchvision.transforms.v2 import functional as TF

        if self.split.images is not None:
            return TF.to_pil_image(self.split.images[i])
        assert self.side is not None
        return TF.to_pil_image(decode_file(self.split.files[i], self.side))

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        image, label = self._image(i), self.split.labels[i]
        if self.copies == 1:
            return self.transform(image), label
        return torch.stack([self.transform(image) for _ in range(self.copies)]), label.repeat(
            self.copies
        )

    def __getitems__(self, index: list[int]) -> list[tuple[torch.Tensor, torch.Tensor]] | _Refused:
        """One batch (DataLoader's fetcher asks for a batch's samples at once), or the refusal
        of a sample's file (decode_file's UserError) as a value the batch's place carries."""
        # Below 2**63 for any split of fewer than 2**32 samples.
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(self.seed * 2**32 + index[0])
            try:
                return [self[i] for i in index]
            except UserError as e:
                return _Refused(e.message, e.hint)


@dataclass(frozen=True)
class _Refused:
    """A batch's place taken by dlperf's one-line refusal of one of its files (a streamed
    image that cannot be decoded, met only when its batch comes). Raised in a DataLoader
    worker, the UserError would come back as torch rebuilds it: its message replaced by
    "Caught UserError in DataLoader worker process 0." and the worker's whole traceback, its
    hint lost. Returned as a value instead, it reaches the training process whole, where
    TorchvisionLoader raises it again, the same with or without workers."""

    message: str
    hint: str | None


class _Collate:
    """The batch's collate function, passing a refused batch through untouched (a class, not
    a closure, so that workers of any start method can unpickle it)."""

    def __init__(self, collate: Any) -> None:
        self.collate = collate

    def __call__(self, batch: Any) -> Any:
        return batch if isinstance(batch, _Refused) else self.collate(batch)


def _flatten_copies(batch: list[tuple[torch.Tensor, torch.Tensor]]) -> Any:
    # Copy-major order, the same as the tensor path: all first copies, then all second ones.
    x = torch.stack([b[0] for b in batch], 1)
    y = torch.stack([b[1] for b in batch], 1)
    return x.flatten(0, 1), y.flatten(0, 1)


class TorchvisionLoader:
    def __init__(
        self,
        split: Split,
        batch_size: int,
        mean: tuple[float, ...],
        std: tuple[float, ...],
        augment: AugmentConfig | None,
        num_workers: int,
        pin_memory: bool,
        side: int | None = None,
        drop_last: bool = False,
        seed: int = 0,
    ) -> None:
        from torchvision import transforms as T

        steps: list[Any] = []
        if augment and augment.crop_padding:
            # The image's own H x W, as the tensor path's random_crop: an int is a square of
            # that side, which cropped an 8x12 image's padding to 12x12 (or failed). Streamed
            # files decode to side x side.
            size = tuple(split.images.shape[-2:]) if split.images is not None else (side, side)
            steps.append(T.RandomCrop(size, padding=augment.crop_padding))
        if augment and augment.flip:
            steps.append(T.RandomHorizontalFlip())
        steps += [T.ToTensor(), T.Normalize(mean, std)]
        if augment and augment.cutout:
            steps.append(_Cutout(augment.cutout))
        copies = augment.batch_aug_m if augment else 1
        self.dataset = _SampleDataset(split, T.Compose(steps), copies, side)
        self.batch_size, self.num_workers, self.pin_memory = batch_size, num_workers, pin_memory
        self.shuffle, self.drop_last, self.seed = augment is not None, drop_last, seed
        self.collate = _flatten_copies if copies > 1 else None
        self.epoch = 0

    def __len__(self) -> int:
        n = len(self.dataset) / self.batch_size
        return math.floor(n) if self.drop_last else math.ceil(n)

    def set_epoch(self, epoch: int) -> Self:
        """The loader, drawing epoch `epoch`'s order (and augmentation)."""
        self.epoch = epoch
        return self

    def __iter__(self) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        g = epoch_generator(self.seed, self.epoch)
        # Drawn before the shuffle's own draws: the augmentation's seed, then the order.
        self.dataset.seed = int(torch.randint(2**31, (), generator=g))
        loader = _DataLoader(
            self.dataset,
            batch_size=self.batch_size,
            shuffle=self.shuffle,
            num_workers=self.num_workers,
            pin_memory=self.pin_memory,
            drop_last=self.drop_last,
            collate_fn=_Collate(self.collate or default_collate),
            generator=g,
            persistent_workers=False,
            worker_init_fn=_hold_group_stops if self.num_workers else None,
        )
        if not self.num_workers:
            for batch in loader:
                yield _passed(batch)
            return
        watch = _WorkerWatch()
        try:
            iterator = watch.start(loader)
            while True:
                with watch.waiting():
                    batch = next(iterator, _END)
                if batch is _END:
                    return
                yield _passed(batch)
        finally:
            watch.close()


_END = object()  # the iterator's end, told from any batch


class _DataLoader(DataLoader[Any]):
    """torch's DataLoader without its check of the workers against the cores: it warned
    (a UserWarning with dataloader.py's path and source line) as each epoch's loader was built
    and again as its iterator started; `crowded_workers` says it once a run, in dlperf's words."""

    def check_worker_number_rationality(self) -> None:
        return


def crowded_workers(workers: int) -> str | None:
    """The warning for `workers` DataLoader workers on this host: None unless they are more
    than its usable cores. A warning, as threads past the free cores are (system.crowding), not
    a refusal as threads past the usable ones: torch only suggests a worker a core at most, and
    workers that wait on files (a streamed image folder) take less than one."""
    cores = usable_cores()
    if workers <= cores:
        return None
    return (
        f"data.num_workers = {workers} on {cores} usable cores: workers past the cores take "
        f"turns on them, and the steps they feed wait; set data.num_workers = {cores} or fewer"
    )


def _passed(batch: Any) -> Any:
    """`batch`, or its refusal raised (`_Refused`)."""
    if isinstance(batch, _Refused):
        raise UserError(batch.message, batch.hint)
    return batch


class WorkerDied(UserError):
    """A DataLoader worker that ended mid-epoch (the kernel's OOM killer, a user's kill), or
    workers out of file descriptors: the host's problem, not the input's, so exit 1."""

    exit_code = 1


# The faults torch's worker start (`_set_worker_signal_handlers`) takes with C handlers that
# write "ERROR: Unexpected segmentation fault encountered in worker.\n" and a NUL byte to
# stderr before dying of the signal: a second line, above the training process's one line
# (`_WorkerWatch`, which names the signal), and a NUL byte at that line's start.
_FAULTS = tuple(
    s for s in (getattr(signal, n, None) for n in ("SIGSEGV", "SIGBUS", "SIGFPE")) if s is not None
)


def _hold_group_stops(worker_id: int) -> None:
    """A DataLoader worker's start: a terminal's Ctrl-C and its SIGHUP as it closes go to the
    whole process group, these workers too; they ignore them, as report's drawing workers do,
    and the training process, which the signal stops, shuts them down. SIGTERM is left as
    inherited: torch's shutdown, and multiprocessing's at exit, end a worker that does not
    finish in time with it, and one ignoring it would hold the process's exit. A worker out of
    file descriptors is the training process's to say, once (`_out_of_files`): the worker's
    resource_sharer and queue feeder threads, and its exit's finalisers, printed a traceback
    for every tensor they could not hand over (multiprocessing prints them through
    `sys.excepthook` and `traceback.print_exc`, which this worker's copies keep quiet for it).
    A fault (SIGSEGV, SIGBUS) takes its default action, without torch's line (`_FAULTS`)."""
    for sig in (signal.SIGINT, getattr(signal, "SIGHUP", None)):
        if sig is not None:
            signal.signal(sig, signal.SIG_IGN)
    for sig in _FAULTS:
        signal.signal(sig, signal.SIG_DFL)
    sys.excepthook = _quiet_out_of_files
    print_exc = traceback.print_exc

    def quiet_print_exc(*args: Any, **kwargs: Any) -> None:
        error = sys.exc_info()[1]
        if error is None or not _the_parents_to_say(error):
            print_exc(*args, **kwargs)

    traceback.print_exc = quiet_print_exc


def _quiet_out_of_files(
    kind: type[BaseException], error: BaseException, trace: TracebackType | None
) -> None:
    """A loader worker's `sys.excepthook`: nothing for a process out of file descriptors."""
    if not _the_parents_to_say(error):
        sys.__excepthook__(kind, error, trace)


def _the_parents_to_say(error: BaseException) -> bool:
    """Whether a loader worker's `error` is the training process's to say: out of file
    descriptors (left unprinted), or out of threads (the worker ends, `_no_threads_exit`)."""
    if out_of_threads(error):
        _no_threads_exit()
    return _out_of_files(error)


# A worker's exit code where it could not start a thread (EX_TEMPFAIL, sysexits.h's): a worker
# runs only dlperf's dataset, so nothing else ends one with it.
NO_THREADS_EXIT = 75


def _no_threads_exit() -> None:
    """End this worker, which could not start a thread: its queue feeder, short of the
    resource-sharer thread that hands a batch's tensors over, printed a traceback and dropped
    the batch, and the training process waited for it for ever (torch's DataLoader has no
    timeout). Ended, it is found dead at torch's next look at its workers, and its exit code
    tells `_WorkerWatch` why."""
    os._exit(NO_THREADS_EXIT)


def _out_of_files(error: BaseException) -> bool:
    """Whether `error` is, or was raised because of, a process out of file descriptors:
    torch's RuntimeError ("Too many open files. Communication with the workers is no longer
    possible") holds the EMFILE OSError only as its context."""
    return any(
        (isinstance(e, OSError) and e.errno == errno.EMFILE)
        or (isinstance(e, RuntimeError) and str(e).startswith("Too many open files"))
        for e in causes(error)
    )


def _let_go(error: BaseException, told: bool = False) -> None:
    """Free now the DataLoader iterator whose __init__ `error` cut short (the frames of its
    traceback hold it), its finaliser's AttributeError ("object has no attribute
    '_workers_status'": torch's __del__ assumes a whole iterator) left unprinted. Where the
    error is `told` in dlperf's line (`_WorkerWatch._told`), any error of that finaliser is
    left unprinted: shutting the started workers down meets the same limit again (under
    `ulimit -v`, "can't start new thread" for a queue's feeder thread printed torch's 14-line
    traceback above the line). torch's finaliser still ends the workers, in its `finally`."""
    hook = sys.unraisablehook

    def quiet(report: sys.UnraisableHookArgs) -> None:
        finaliser = getattr(report.object, "__qualname__", "")
        if not (
            finaliser.endswith("Iter.__del__")
            and (told or isinstance(report.exc_value, AttributeError))
        ):
            hook(report)

    sys.unraisablehook = quiet
    try:
        traceback.clear_frames(error.__traceback__)
    finally:
        sys.unraisablehook = hook


# Why a worker is most likely killed by a signal, and the fix. SIGBUS: a worker hands each
# batch over in shared memory, and writing past a full /dev/shm (docker's default is 64 MB)
# faults; torch's own worker line said only "insufficient shared memory (shm)".
_KILLED_BY = {
    "SIGKILL": (
        "the kernel's out-of-memory killer sends SIGKILL: lower data.num_workers or "
        "train.batch_size, or use data.loader=tensor"
    ),
    "SIGBUS": (
        "a full /dev/shm, where workers hand batches over, sends SIGBUS: give it more room "
        "(docker run --shm-size), or lower data.num_workers or train.batch_size, or use "
        "data.loader=tensor"
    ),
}


def _killed(pid: int, name: str) -> tuple[str, str | None]:
    """WorkerDied's message and hint for worker `pid` ended by signal `name` (SIGKILL...)."""
    return f"a DataLoader worker (pid {pid}) was killed by {name}", _KILLED_BY.get(name)


def _no_sigchld_raise() -> None:
    """Keep torch's SIGCHLD handler out of this process. It raises "DataLoader worker is
    killed by signal" wherever the main thread is when a worker ends: in the step, in the
    run's marking (which it cut, leaving the run `running`), and inside a
    `threading.Thread.start` of a queue's feeder thread, after which the new thread died on
    `del _limbo[self]` and Python printed its KeyError traceback (CI's slow suite, round 25's
    killed-worker test). torch finds a dead worker without it, in the wait for a batch: it
    asks its workers every 5 s (`MP_STATUS_CHECK_INTERVAL`) and raises there, in order.
    Private names: a torch without them keeps its handler (and its races)."""
    if not hasattr(signal_handling, "_SIGCHLD_handler_set"):
        return
    signal_handling._SIGCHLD_handler_set = True  # the next DataLoader iterator sets none
    sigchld = getattr(signal, "SIGCHLD", None)
    if sigchld is None or threading.current_thread() is not threading.main_thread():
        return
    handler = signal.getsignal(sigchld)
    if getattr(handler, "__module__", None) == signal_handling.__name__:  # set earlier
        signal.signal(sigchld, signal.SIG_DFL)


# Open files a DataLoader worker costs the training process (its queue's pipes, a descriptor
# for each batch it hands over until it is taken), and the most a worker holds beside the
# files it inherits: measured with 2 workers on digits, 25 open in the training process (8
# before the workers) and 28 in a worker. Between about 18 and 28 open files, two workers'
# epoch failed in torch's "Too many open files" behind the workers' tracebacks, or hung:
# a worker waited on the training process to take a batch's descriptor it could not open.
FILES_PER_WORKER = 10
# The other ways out of a host limit that workers run into.
_FEWER = ", or lower data.num_workers, or use data.loader=tensor"


# Processes and threads a DataLoader worker costs its user (`ulimit -u` counts both): the
# worker, its result queue's feeder thread, its resource-sharer thread (which hands a batch's
# tensors over), and the training process's feeder thread for the worker's index queue. Two
# workers on digits ran at 9 (the training process alone: 1) and hung at 10 (`_room_for_tasks`
# keeps a margin of 2).
TASKS_PER_WORKER = 4


def _user_tasks() -> int:
    """The processes and threads of this process's real user, as RLIMIT_NPROC counts them
    (those /proc shows; this process's at least)."""
    uid, count = os.getuid(), 0
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/status") as status:
                fields = dict(line.split(":", 1) for line in status if ":" in line)
        except OSError:  # ended since the listing, or hidden
            continue
        if int(fields.get("Uid", "-1 ").split()[0]) == uid:
            count += int(fields.get("Threads", "1"))
    return max(count, threading.active_count())


LOADAVG = "/proc/loadavg"


def _system_tasks() -> int | None:
    """The threads on the whole system, from /proc/loadavg's 'running/total' (None where it
    cannot be read): a bound on the user's own that costs one read, not one per process."""
    try:
        with open(LOADAVG) as f:
            return int(f.read().split()[3].split("/")[1])
    except (OSError, IndexError, ValueError):
        return None


def _room_for_tasks(workers: int) -> None:
    """Refuse, in one line naming `ulimit -u`, a limit on processes and threads (RLIMIT_NPROC)
    too low for `workers` DataLoader workers, once a soft limit is raised toward the hard one
    (paths.room_under)."""
    soft = resource.getrlimit(resource.RLIMIT_NPROC)[0]
    if soft == resource.RLIM_INFINITY or os.getuid() == 0:  # root's processes are not held to it
        return
    more = TASKS_PER_WORKER * workers + 2
    system = _system_tasks()
    # every epoch starts here: reading each /proc/PID/status takes ~1 s on a busy node, so the
    # user's own count is read only where even every thread on the system may not fit
    if system is not None and soft >= system + more:
        return
    needed = _user_tasks() + more
    limit = room_under(resource.RLIMIT_NPROC, needed)
    if limit is None:
        return
    raise WorkerDied(
        f"data.num_workers = {workers} needs about {needed} processes and threads, over the "
        f"limit of {limit}",
        f"ulimit -u {limit} is too low: raise it to {needed} or more{_FEWER}",
    )


def _room_for_workers(workers: int) -> None:
    """Refuse, in one line naming `ulimit -n` or `ulimit -u`, an open-file limit or a limit on
    processes and threads too low for `workers` DataLoader workers, once a soft limit is raised
    toward the hard one (paths.room_for_files, `_room_for_tasks`)."""
    if not workers:
        return
    _room_for_tasks(workers)
    needed = files_open(0) + FILES_PER_WORKER * workers + 2
    limit = room_for_files(needed)
    if limit is not None:
        raise WorkerDied(
            f"data.num_workers = {workers} needs about {needed} open files, over the "
            f"open-file limit of {limit}",
            f"ulimit -n {limit} is too low: raise it to {needed} or more{_FEWER}",
        )


class _WorkerWatch:
    """One epoch's DataLoader iterator with workers, its workers' deaths told in one line.

    A worker's death is raised by torch in the wait for a batch, as "DataLoader worker
    (pid(s) N) exited unexpectedly" (`_no_sigchld_raise`: never asynchronously); it becomes
    `WorkerDied`, naming the worker's pid and the signal that ended it. The iterator is shut
    down (its workers joined) before its epoch's generator ends, so nothing of it is left for
    a finaliser to raise later."""

    def __init__(self) -> None:
        self.iterator: Any = None

    def start(self, loader: DataLoader[Any]) -> Iterator[Any]:
        """`loader`'s iterator, its workers started, once the open-file limit has room for
        them (`_room_for_workers`)."""
        _no_sigchld_raise()
        _room_for_workers(loader.num_workers)
        try:
            iterator: Iterator[Any] = iter(loader)
        except (RuntimeError, OSError) as e:
            told = self._told(e)
            _let_go(e, told=told is not e)
            if told is e:
                raise
            raise told from None
        self.iterator = iterator
        return iterator

    @contextlib.contextmanager
    def waiting(self) -> Iterator[None]:
        """The wait for one batch: torch's line for a worker's death, or for the process out
        of file descriptors, becomes `WorkerDied`."""
        try:
            yield
        except (RuntimeError, OSError) as e:
            told = self._told(e)
            if told is e:
                raise
            raise told from None

    def _describe(self, error: BaseException) -> tuple[str, str | None]:
        """The line for a worker that ended: its pid and the signal that killed it (or its
        exit code), read from the worker; torch's message where no worker has ended."""
        for worker in getattr(self.iterator, "_workers", []):
            code = worker.exitcode
            if code is None:
                continue
            if code == NO_THREADS_EXIT:
                return f"a DataLoader worker (pid {worker.pid}) could not start a thread", (
                    threads_limit(_FEWER)
                )
            if code >= 0:
                return f"a DataLoader worker (pid {worker.pid}) exited with code {code}", None
            try:
                return _killed(worker.pid, signal.Signals(-code).name)
            except ValueError:
                return _killed(worker.pid, f"signal {-code}")
        return (str(error).splitlines() or [type(error).__name__])[0], None

    def _told(self, error: Exception) -> BaseException:
        """`error` as the one-line WorkerDied where it is torch's about a worker, or the
        process out of file descriptors (each worker holds pipes, and each batch it hands
        over, a descriptor until it is taken)."""
        if _out_of_files(error):
            return WorkerDied(
                "the DataLoader's workers ran out of file descriptors (Too many open files)",
                open_files_limit(_FEWER),
            )
        if out_of_threads(error):
            return WorkerDied(
                "the DataLoader could not start its workers' processes or threads",
                threads_limit(_FEWER),
            )
        if "DataLoader worker (pid" not in str(error):
            return error
        return WorkerDied(*self._describe(error))

    def close(self) -> None:
        """Shut the iterator's workers down."""
        if self.iterator is not None and hasattr(self.iterator, "_shutdown_workers"):
            # Private, and what torch's own finaliser calls: done here, at the epoch's end,
            # rather than whenever the iterator is collected.
            self.iterator._shutdown_workers()


# The least std training normalises by: a channel of one value (a blank set) has std 0, and
# dividing by it made every input NaN.
STD_FLOOR = 1e-3


# Training images the statistics of a streamed split are measured on: each is a file to
# decode, and a folder of a million would be read through once more before training. A split
# held in memory is measured whole (its pixels are there already).
STATS_SAMPLE = 4096
# Pixels counted at a time (a streamed chunk is decoded whole): some 16 MiB of uint8, whatever
# the split's size.
STATS_CHUNK = 1 << 24


def stats_measured(data: ImageData, sample: int | None = None) -> int:
    """How many training images `channel_stats` measures: every one of a split held in
    memory, at most `sample` (default STATS_SAMPLE) spread over a streamed one."""
    n = len(data.train)
    if sample is None:
        sample = n if data.train.images is not None else STATS_SAMPLE
    return min(n, sample)


def _chunks(data: ImageData, index: torch.Tensor) -> Iterator[torch.Tensor]:
    """The training images at `index` as uint8 N,C,H,W, a chunk of at most STATS_CHUNK
    pixels (at least one image) at a time."""
    split = data.train
    per = max(1, STATS_CHUNK // math.prod(data.shape))
    side = data.shape[-1]
    for part in torch.split(index, per):
        if split.images is not None:
            yield split.images[part]
        else:
            yield torch.stack([decode_file(split.files[i], side) for i in part.tolist()])


def channel_stats(
    data: ImageData, sample: int | None = None, floor: float = STD_FLOOR
) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """Per-channel mean and (unbiased) std in [0, 1] of the training split (of the
    `stats_measured` images of it, spread over it, first and last included), each std at
    least `floor` (0: as measured, exactly 0 for a channel of one value).

    Counts of each uint8 value, chunk by chunk, give the sums of the values and of their
    squares as integers: exact, so a channel of one value has std exactly 0, and a single
    pixel per channel needs no degrees-of-freedom correction (torch's std() of one value
    warned and gave NaN)."""
    n = stats_measured(data, sample)
    total = len(data.train)
    # The whole split by arange: float32's linspace skips and repeats indices past 2**24.
    index = torch.arange(total) if n == total else torch.linspace(0, total - 1, n).long()
    channels = data.shape[0]
    # How often each of the 256 values occurs, per channel: bincount is some 20x faster than
    # an int64 sum over the N, H, W dimensions (45,000 CIFAR-10 images: 0.7 s against 21 s).
    counts = torch.zeros(channels, 256, dtype=torch.int64)
    for chunk in _chunks(data, index):
        for c in range(channels):
            counts[c] += torch.bincount(chunk[:, c].reshape(-1), minlength=256)
    values = torch.arange(256, dtype=torch.int64)
    # int64 holds them: at most 255**2 per pixel, for some 1.4e14 pixels a channel.
    sums = (counts * values).sum(dim=1).tolist()
    squares = (counts * values * values).sum(dim=1).tolist()
    pixels = int(counts[0].sum())
    mean = tuple(s / pixels / 255 for s in sums)
    # n·Σx² − (Σx)² is exact in Python's integers; 0 exactly when every value is the same.
    spread = [pixels * q - s * s for s, q in zip(sums, squares, strict=True)]
    std = tuple(
        max(math.sqrt(d / (pixels * (pixels - 1))) / 255 if d > 0 else 0.0, floor) for d in spread
    )
    return mean, std
