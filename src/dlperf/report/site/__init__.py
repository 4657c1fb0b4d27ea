"""`dlperf report`: a static, self-contained HTML site of stored runs and studies.

DIR/index.html lists every run and study included, with status, key figures and the counts
of `dlperf doctor`'s findings; DIR/run-ID.html and DIR/study-ID.html hold one each. Figures
are PNG data URIs, the CSS is inline, there is no script and no external reference: the site
opens offline from file:// and can be sent as a directory or an archive. The report only
reads the store.

    from dlperf.store import RunStore
    from dlperf.report.site import build_report
    done = build_report(RunStore.open("dlperf.db"), Path("report"), last=10)
"""

from __future__ import annotations

import contextlib
import os
import re
import secrets
import shutil
import signal
import socket
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dlperf import stopping
from dlperf.errors import (
    NoSuchRun,
    NoThreads,
    UserError,
    memory_limit,
    out_of_threads,
    threads_limit,
)
from dlperf.paths import locked_folder
from dlperf.procs import ended_how
from dlperf.progress import NullReporter, Reporter
from dlperf.store import RunStore
from dlperf.store.query import no_runs
from dlperf.store.record import RunRecord

if TYPE_CHECKING:
    from concurrent.futures import Future, ProcessPoolExecutor
    from multiprocessing.process import BaseProcess

    from dlperf.doctor import Finding

DEFAULT_LAST = 20  # no selection: the newest 20 runs and every study they belong to
# In the site's directory, the pages until the whole site is drawn: a folder per report,
# STAGING-HOST-PID-RANDOM. Two reports into one DIR at once shared a fixed one, and the second's
# clearing of it failed the first, naming a file in it ("cannot use site/.report-partial/...").
STAGING = ".report-partial"
# One a report of this host left (its pid is gone: SIGKILLed) is removed by the next; one of
# another host's, or of the bare name an earlier dlperf used, is matched too.
_STAGED = re.compile(rf"{re.escape(STAGING)}(?:-(?P<host>.+)-(?P<pid>[0-9]+)-[0-9a-f]{{8}})?")
# The names of the pages a report writes besides index.html (pages.run_href, study_href): of
# these alone, those an earlier report left and this one does not write are removed.
PAGE_NAME = re.compile(r"(run|study)-[0-9]+\.html")


@dataclass
class Report:
    """What `build_report` wrote: the directory, its pages (relative names, index first), the
    runs and studies it holds, the pages of an earlier report it removed from `out`, and the
    runs it chose that were deleted (by another process) before it read them."""

    out: Path
    pages: list[str]
    runs: list[int]
    studies: list[int]
    removed: list[str]
    gone: list[int] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        """The --json document, whose keys scripts read: `removed` and `gone` are said on
        stderr only."""
        document = {**asdict(self), "out": str(self.out)}
        del document["removed"], document["gone"]
        return document


def select(
    store: RunStore,
    run_ids: Iterable[int] = (),
    study_ids: Iterable[int] = (),
    last: int | None = None,
) -> tuple[list[int], list[int]]:
    """(runs, studies) to report, newest first. Runs: `run_ids`, every run of `study_ids` and
    the newest `last`; nothing given: the newest DEFAULT_LAST. Studies: `study_ids` and every
    study a chosen run belongs to. Unknown IDs and --last < 1 are bad input."""
    run_ids, study_ids = list(run_ids), list(study_ids)
    if last is not None and last < 1:
        raise UserError(f"--last must be at least 1, got {last}")
    runs = {run.id: run for run in map(store.get_run, run_ids)}
    studies = {int(store.get_study(study_id)["id"]) for study_id in study_ids}
    for study_id in study_ids:
        runs.update({r.id: r for r in store.list_runs(study_id=study_id)})
    if last is not None or not (run_ids or study_ids):
        runs.update({r.id: r for r in store.list_runs(limit=last or DEFAULT_LAST)})
    if not runs and not studies:
        raise no_runs(store.engine)
    studies |= {r.study_id for r in runs.values() if r.study_id is not None}
    return sorted(runs, reverse=True), sorted(studies, reverse=True)


def build_report(
    store: RunStore,
    out: Path,
    run_ids: Iterable[int] = (),
    study_ids: Iterable[int] = (),
    last: int | None = None,
    reporter: Reporter | None = None,
    jobs: int | None = None,
    db: Sequence[str] = (),
) -> Report:
    """Write the report of the selected runs and studies (see `select`) into `out`. Run pages
    are drawn by `jobs` processes (default: one per usable core from POOL_FROM run pages,
    fewer drawn in this process; matplotlib's drawing is the cost, and it holds the GIL),
    each with its own connection to the store, and die with this one. The pages are drawn
    in a staging directory and renamed into `out` once all of them are: an interrupted
    report leaves no partial site (nor `out`, if it made it). Then the pages an earlier
    report left in `out` that this one does not write (a deleted run's, one no longer
    chosen) are removed, so that what `out` holds is this report; files of other names in
    `out` are the user's and are left alone. `db`: the words naming the store on a command
    line, which the doctor's fixes carry (`doctor.examine`)."""
    from dlperf.doctor import examine
    from dlperf.report.site import pages

    reporter = reporter or NullReporter()
    chosen_runs, chosen_studies = select(store, run_ids, study_ids, last)
    studies = [store.get_study(s) for s in chosen_studies]
    study_runs = {s["id"]: store.list_runs(study_id=s["id"]) for s in studies}
    runs = {r.id: r for mine in study_runs.values() for r in mine}
    # A run deleted since it was listed (another process's `runs delete`) is left out, and
    # said once: the user named no such run, and the others still make a site.
    gone: list[int] = []
    for rid in chosen_runs:
        if rid not in runs:
            try:
                runs[rid] = store.get_run(rid)
            except NoSuchRun:
                gone.append(rid)
    findings: dict[int, list[Finding]] = {rid: [] for rid in runs}
    for f in examine(store, sorted(runs), gone=gone, db=db):
        findings[f.run_id].append(f)
    chosen_runs = [rid for rid in chosen_runs if rid not in gone]
    with_page = {("run", r) for r in chosen_runs} | {("study", s) for s in chosen_studies}

    def has_page(kind: str, item_id: int) -> bool:
        return (kind, item_id) in with_page

    made = not out.exists()
    out.mkdir(exist_ok=True)  # the site's own directory, not a missing tree above it
    staging = out / f"{STAGING}-{socket.gethostname()}-{os.getpid()}-{secrets.token_hex(4)}"
    written = []
    try:
        _remove_abandoned(out)
        staging.mkdir()
        reporter.task("report", total=len(chosen_runs) + len(chosen_studies))
        for study in studies:
            name = pages.study_href(study["id"])
            html = pages.study_page(store, study, study_runs[study["id"]], findings, has_page)
            (staging / name).write_text(html, encoding="utf-8")
            written.append(name)
            reporter.advance(status=f"study {study['id']}")
        tasks = [(runs[r], findings[r]) for r in chosen_runs]
        for name in _run_pages(store, staging, tasks, with_page, jobs):
            written.append(name)
            reporter.advance(status=name)
        listed = [runs[r] for r in chosen_runs]
        index = pages.index_page(studies, listed, study_runs, findings, has_page)
        (staging / "index.html").write_text(index, encoding="utf-8")
        # Shielded, as export's publishing is: a stop among the renames left some new pages
        # and no index (or the old index among a mix of old and new pages). One that lands
        # here waits for the whole site, then stops the command.
        # One report at a time moves its pages into `out`: two interleaved left one's index
        # linking to pages the other removed; the last to publish has its whole site there.
        with stopping.shielded(), locked_folder(out):
            # Listed before any page moves: the listing needs a descriptor besides the lock's,
            # and at the open-files limit it failed after the pages were in, the index not.
            removed = _stale(out, written)
            for name in [*written, "index.html"]:  # the index last: it links to the others
                os.replace(staging / name, out / name)
            for name in removed:  # once the new index, which no longer links to them, is in
                (out / name).unlink(missing_ok=True)
            # The site is in place: a stop from here on no longer counts (it exited 143 with
            # the whole site there), as export's once its model is published.
            stopping.settle()
    finally:
        hrefs = [*map(pages.study_href, chosen_studies), *map(pages.run_href, chosen_runs)]
        left = _remove_staging(staging, [*hrefs, "index.html"])
        if left is not None:
            # Not when saying it fails too (rich imports a module as it prints): the error
            # on its way already says why, and the next report removes the leftover.
            with contextlib.suppress(OSError):
                reporter.log(f"warning: {left}")
        if made:  # and interrupted before any page was in place: else it is not empty
            # By rmdir alone, whose ENOTEMPTY says so: a listing needs a descriptor, which a
            # report failing at the descriptor limit has none of.
            with contextlib.suppress(OSError):
                out.rmdir()
    return Report(out, ["index.html", *written], chosen_runs, chosen_studies, removed, gone)


def _remove_abandoned(out: Path) -> None:
    """Remove the staging folders in `out` that no running report owns: those of this host
    whose process is gone (a SIGKILLed report's), and one of the bare name, which an earlier
    dlperf's report left. Another host's may be in use (a shared file system): it stays."""
    from dlperf.procs import process_alive

    # Not removing one costs some disk, not the report: a failure here is not the report's.
    with contextlib.suppress(OSError):
        for entry in os.scandir(out):
            staged = _STAGED.fullmatch(entry.name)
            if staged is None or not entry.is_dir(follow_symlinks=False):
                continue
            pid = staged["pid"]
            owner = None if pid is None else {"host": staged["host"], "pid": int(pid)}
            if owner is None or process_alive(owner) is False:
                shutil.rmtree(entry.path, ignore_errors=True)


def _remove_staging(staging: Path, names: list[str]) -> str | None:
    """Remove the staging directory, which holds pages of `names` alone; what is left of it
    and why, or None when it is gone. Under a low `ulimit -n` the report fails with its
    descriptors all in use, where rmtree's walk needs two (the directory's and its
    listing's): it left NEW/.report-partial, and NEW with it, behind while its error was
    ignored. Removed by the names the report writes, it needs none."""
    for name in names:
        with contextlib.suppress(OSError):  # not written, or not removable: rmdir says
            (staging / name).unlink(missing_ok=True)
    try:
        staging.rmdir()
        return None
    except FileNotFoundError:
        return None
    except OSError:  # something of another name in it (put there by hand): rmtree's walk
        pass
    try:
        shutil.rmtree(staging)
    except FileNotFoundError:
        return None
    except OSError as e:
        return f"could not remove {staging} ({e.strerror or e}): remove it, or run the report again"
    return None


def _stale(out: Path, written: list[str]) -> list[str]:
    """The pages in `out` named as a report names them that are not in `written`, sorted: an
    earlier report's, which this one removes."""
    return sorted(
        entry.name
        for entry in os.scandir(out)
        if PAGE_NAME.fullmatch(entry.name)
        and entry.name not in written
        and entry.is_file(follow_symlinks=False)
    )


# --- run pages, in worker processes -------------------------------------------------------

# The fewest run pages for which the report starts its pool of drawing processes when the
# caller set no `jobs`; fewer are drawn in this process. Each worker is a fresh interpreter that
# imports dlperf, SQLAlchemy and matplotlib again (about 1.6 s of CPU) before its first page,
# and a page costs about 0.6 s of CPU either way (0.7 s in a worker, its pickling included).
# Measured on a busy 2-core machine (load 4-6; build_report's seconds, drawn here / pool of
# 2): 2 runs 1.9-3.9 / 4.9-10.8, 4: 2.9-6.7 / 6.8-13.3, 8: 5.5-11.9 / 7.9-14.6, 16:
# 14.8-22.2 / 19.0-26.4, 32: 19.5-40.7 / 25.0-47.8, 64: 38.5 / 38.8. On an idle core the
# second worker saves half of each page it draws, which repays its start-up from about 10
# pages; on a busy machine there is no idle core to win with: the pool lost up to 32 pages
# and tied at 64. 16 is between the two: a report as small as the test suites' (and most
# users') starts no process, one of the default 20 runs or more still draws in parallel.
POOL_FROM = 16

_worker: dict[str, Any] = {}
# The stop signals a terminal sends its whole process group: Ctrl-C's, and SIGHUP as it closes
# (getattr: a platform without SIGHUP has no process groups either).
_GROUP_SIGNALS = {signal.SIGINT, *([signal.SIGHUP] if hasattr(signal, "SIGHUP") else [])}


def _start_worker(url: str, out: Path, with_page: set[tuple[str, int]], parent: int) -> None:
    """A drawing process: SIGKILLed by Linux when the report's process dies (SIGKILL
    included, which leaves no chance to stop it), as scale's workers are."""
    from dlperf.procs import die_with_parent

    # A terminal's Ctrl-C, and its SIGHUP as it closes, go to the whole process group, these
    # workers too: they ignore them (the report stops them itself), and one that came while
    # they started, which waited blocked (`_stops_blocked`), is dropped with them.
    for sig in _GROUP_SIGNALS:
        signal.signal(sig, signal.SIG_IGN)
    if hasattr(signal, "pthread_sigmask"):
        signal.pthread_sigmask(signal.SIG_UNBLOCK, _GROUP_SIGNALS)
    die_with_parent()
    if os.getppid() != parent:  # the report died before the guard took effect
        os._exit(1)
    _worker.update(store=RunStore.open(url), out=out, with_page=with_page)


def _write_run_page(task: tuple[RunRecord, list[Finding]]) -> str:
    """A drawing worker's page, of the report that started it."""
    return _draw_run_page(_worker["store"], _worker["out"], _worker["with_page"], task)


def _draw_run_page(
    store: RunStore,
    out: Path,
    with_page: set[tuple[str, int]],
    task: tuple[RunRecord, list[Finding]],
) -> str:
    from dlperf.report.site import pages

    run, found = task
    html = pages.run_page(store, run, found, lambda k, i: (k, i) in with_page)
    name = pages.run_href(run.id)
    (out / name).write_text(html, encoding="utf-8")
    return name


def _run_pages(
    store: RunStore,
    out: Path,
    tasks: list[tuple[RunRecord, list[Finding]]],
    with_page: set[tuple[str, int]],
    jobs: int | None,
) -> Iterator[str]:
    """Write the run pages, yielding each page's name as it is done; in this process when
    one job will do, when no `jobs` was set and there are fewer than POOL_FROM pages (the
    pool's start-up would cost more than it saves), or when the store is in memory (which
    other processes cannot open). Drawn here, a page is the same, and so are the report's
    stops (Ctrl-C between or within pages leaves no site), its progress (a page at a time)
    and its failures (a page that cannot be drawn fails the report, as a worker's does)."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor
    from concurrent.futures.process import BrokenProcessPool
    from multiprocessing import resource_tracker

    from dlperf.system import usable_cores

    url = store.engine.url
    if not jobs and len(tasks) < POOL_FROM:  # no `jobs` set: the pool only where it wins
        jobs = 1
    jobs = min(jobs or usable_cores(), len(tasks))
    if jobs <= 1 or url.database in (None, "", ":memory:"):
        # Not through _worker: two reports in one process (threads of an API caller) would
        # draw into whichever staging folder was set last.
        yield from (_draw_run_page(store, out, with_page, task) for task in tasks)
        return
    # Fresh interpreters, not forks: a fork of a process with threads (torch's, SQLAlchemy's,
    # a test runner's) inherits the locks they held, and a drawing worker once waited on one
    # for ever inside matplotlib (a whole `make test` hung in the report's fixture).
    context = multiprocessing.get_context("spawn")
    init = (url.render_as_string(hide_password=False), out, with_page, os.getpid())
    with _stops_blocked():
        # multiprocessing's resource tracker, which the pool's queues start, ignores SIGINT and
        # SIGTERM but not SIGHUP: a closing terminal's killed it, and the report's shutdown
        # started another, which printed a warning and a KeyError traceback for each semaphore
        # it was told to forget. Started here, it keeps SIGHUP blocked for life (it unblocks
        # only the two it ignores); it ends as ever, when every process of the report has.
        if os.name == "posix":  # where there is one
            resource_tracker.ensure_running()
    pool = ProcessPoolExecutor(jobs, context, initializer=_start_worker, initargs=init)
    # The pool's own table of its workers, which it empties never and drops at shutdown: read
    # once they are joined, it says which one died and how (BrokenProcessPool says neither).
    workers = pool._processes
    try:
        with _stops_blocked():
            done = _submitted(pool, tasks)
    except BaseException as e:  # a stop too: what started is ended
        with stopping.shielded():
            _abandon(pool, workers)
        if not out_of_threads(e):
            raise
        # Not drawn here instead: under the ulimit -v that left no room for a thread's stack,
        # OpenBLAS ended this process short of its buffer as it drew (exit 1, no error line).
        raise NoThreads(
            "the report could not start its drawing workers' processes or threads",
            threads_limit(),
        ) from None
    try:
        yield from done
    except BrokenProcessPool as e:
        if e.__cause__ is not None:  # a result that could not be read back: no worker died
            raise
        with stopping.shielded():  # joins every worker: their exit codes are known then
            pool.shutdown(cancel_futures=True)
        raise WorkerDied(_died(workers)) from None
    finally:  # on Ctrl-C, the pages not yet started are not drawn (cancelled here: `_in_order`)
        # Shielded: a second Ctrl-C that cut the shutdown left the workers waiting for work
        # that never came, and the interpreter's exit joining them, for ever.
        with stopping.shielded():
            pool.shutdown(cancel_futures=True)


def _submitted(
    pool: ProcessPoolExecutor, tasks: list[tuple[RunRecord, list[Finding]]]
) -> Iterator[str]:
    """Submit every task to `pool` (which starts its workers and its manager thread), the pages'
    names in order as they are drawn. The call queue's feeder thread is started first, here:
    left to the pool, its manager thread starts it as it hands the first task over, and under
    a `ulimit -v` with room for one more thread's stack and not two, it could not, printed
    "can't start new thread" in a traceback of its own and died, and the report waited for
    ever on pages no one would draw. Here its failure, as the manager's own, is this thread's."""
    internals: Any = pool  # the pool's private parts, which typeshed lacks or mistypes
    feeder = internals._call_queue
    with feeder._notempty:  # as `put` starts it
        if feeder._thread is None:
            feeder._start_thread()
    return _in_order([pool.submit(_write_run_page, task) for task in tasks])


def _in_order(pages: list[Future[str]]) -> Iterator[str]:
    """The results of `pages`, in order. Not `pool.map`'s iterator, which cancels the pages not
    yet started, in this thread, when a stop cuts its wait: a stop sent to the whole group
    (`timeout`'s) kills the workers too, and the pool's manager thread, failing every page it
    holds with BrokenProcessPool, met a page cancelled under it, which Python 3.11's
    `set_exception` refuses: "Exception in thread ... InvalidStateError" on stderr. The pages
    are cancelled by the report's `shutdown(cancel_futures=True)` instead, which the manager
    thread does itself, between its own steps."""
    pages.reverse()  # popped from the end: no page's result is held once it is yielded
    while pages:
        yield pages.pop().result()


def _abandon(pool: ProcessPoolExecutor, workers: Mapping[int, BaseProcess]) -> None:
    """End what of `pool` started before its start failed part way. Its manager thread, which
    ends the workers at shutdown, may be one that could not start (shutdown raised then, as
    it cannot join it) or none: the workers it spawned are ended here, and the feeder too."""
    internals: Any = pool  # as in `_submitted`
    manager = internals._executor_manager_thread
    if manager is None or manager.ident is None:  # none, or one whose start failed
        internals._executor_manager_thread = None
        for process in [*workers.values()]:
            process.terminate()
        for process in [*workers.values()]:
            process.join()
        internals._call_queue.close()  # tells a started feeder to end
        internals._call_queue.join_thread()
    pool.shutdown(cancel_futures=True)


class WorkerDied(UserError):
    """A drawing worker that died (SIGKILLed by the OOM killer, sent a SIGTERM, ended by
    OpenBLAS short of memory): the machine's doing, not the input's, so exit code 1, in one
    line. The site in `out` is left as it was, as on any failure of the report."""

    exit_code = 1


def _died(workers: Mapping[int, BaseProcess]) -> str:
    """Which of the pool's joined `workers` died and how, in the words a sweep uses for its
    workers (`procs.ended_how`). The pool ends the others with SIGTERM once one
    has died: the one that ended otherwise is the one, else all ended by SIGTERM, the one sent
    to them."""
    ended = [(pid, p.exitcode) for pid, p in workers.items() if p.exitcode is not None]
    pool_sent = -int(signal.SIGTERM)
    pid, code = next(((pid, c) for pid, c in ended if c != pool_sent), (None, pool_sent))
    if pid is None and ended:
        pid = ended[0][0]
    who = "a report drawing worker" + (f" (pid {pid})" if pid is not None else "")
    said = f"{who} {'was ' if code < 0 else ''}{ended_how(code)}"
    if 0 < code < 128:  # under a memory limit: OpenBLAS's exit(1) short of a buffer, most likely
        said += memory_limit()
    return said


@contextlib.contextmanager
def _stops_blocked() -> Iterator[None]:
    """SIGINT and SIGHUP blocked in this thread while it starts the drawing workers (and the
    resource tracker), which inherit the mask through spawn's fork and exec: a terminal's
    Ctrl-C, sent to the whole process group, reached them in spawn_main's imports of
    dlperf.report (matplotlib, numpy), before any code of theirs ran, and each printed its
    KeyboardInterrupt traceback. Blocked, not ignored: a signal meanwhile is not lost to this
    process, but taken as the block ends (or by another of its threads), while the workers
    drop theirs (`_start_worker`)."""
    if not hasattr(signal, "pthread_sigmask"):  # not POSIX: no process groups either
        yield
        return
    before = signal.pthread_sigmask(signal.SIG_BLOCK, _GROUP_SIGNALS)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, before)
