"""Running a sweep: every point a run of one `sweep` study, finished points skipped on a rerun.
Each point is claimed in the store before it starts (`RunStore.claim`): two sweeps of one study
running at once train each point once.

A point is identified by its config hash with run.threads left out when the sweep sets the
threads itself (they follow --jobs, and change how fast a point trains, not what it
trains): so a sweep stopped under --jobs 2 resumes under --jobs 1 and skips what finished.
A stored run whose model file, a module beside it that its import loaded, or model.weights file
has changed since it trained is no point of the sweep (`run_key`): its config, hashed now,
would read the file as it is now.

--jobs 1 runs the points in this process. --jobs N > 1 starts one `python -m
dlperf.sweep.worker` per point, at most N at a time, each through the supervisor
(dlperf.procs: it dies with dlperf, even a SIGKILLed one; Ctrl-C reaches dlperf alone,
which then stops them: SIGTERM, and SIGKILL after a grace).
"""

from __future__ import annotations

import copy
import json
import re
import subprocess
import sys
import time
import traceback
from collections import deque
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from dlperf import stopping
from dlperf.config import Experiment, stored_experiment
from dlperf.config.experiment import ListedOnce, WeightsRuns, changed_source
from dlperf.errors import StoreGone, UserError, interrupted, model_frames
from dlperf.parsing import one_line
from dlperf.paths import error_line
from dlperf.procs import POLL_S, Supervisor, ended_how, process_alive, stop_codes
from dlperf.progress import NullReporter, Reporter
from dlperf.store import RunStore
from dlperf.store.deleting import deleting_its_run
from dlperf.store.names import given
from dlperf.store.record import RunRecord
from dlperf.store.studies import choose_study, studies_named
from dlperf.sweep import summary
from dlperf.sweep.spec import Point, Sweep
from dlperf.sweep.summary import SweepPointResult, SweepRow
from dlperf.system import usable_cores

WORKER_MODULE = "dlperf.sweep.worker"
ON_FAILURE = ("continue", "stop")


def point_key(config: dict[str, Any], free_threads: bool) -> str | None:
    """What identifies a point across reruns (see the module docstring); None for a stored
    config this dlperf no longer reads."""
    if free_threads:
        config = copy.deepcopy(config)
        config.setdefault("run", {})["threads"] = None
    try:
        return stored_experiment(config, "stored run").config_hash()
    except UserError:
        return None


def run_key(run: RunRecord, free_threads: bool, store: WeightsRuns | None = None) -> str | None:
    """The point key of a stored run; None for one trained from a model file, a module beside
    it or a model.weights file with other bytes now than it recorded (`changed_source`): its
    config, hashed now, reads the files as they are now, and would pass for the point trained
    from them. With the `store`, also for one whose `run:` weights resolve to another run now
    (run:last:NAME once a newer run of that name finished) or to another checkpoint: a
    `ListedOnce` of it where many runs are checked."""
    if changed_source(run.config, run.system, store) is not None:
        return None
    return point_key(run.config, free_threads)


def threads_per_job(sweep: Sweep, jobs: int, pending: int) -> int | None:
    """run.threads of each point: the host's cores split between the jobs that will run at
    once; None (the config's own) in-process or when the sweep sets them. Oversubscribing
    the cores is refused rather than measured."""
    cores = usable_cores()
    if jobs < 1:
        raise UserError(f"--jobs must be at least 1, got {jobs}")
    if jobs > cores:
        raise UserError(f"--jobs {jobs} is more than the {cores} usable cores of this host")
    if jobs == 1:
        return None
    given = [p.exp.run.threads for p in sweep.points]
    if sweep.threads_set and any(isinstance(t, int) for t in given):  # "auto" splits them too
        most = max(t if isinstance(t, int) else cores for t in given)
        if jobs * most > cores:
            raise UserError(
                f"--jobs {jobs} x run.threads {most} is more than the {cores} usable cores",
                "drop run.threads from the sweep (--jobs then splits the cores) or use fewer jobs",
            )
        return None
    return max(1, cores // min(jobs, max(1, pending)))


def check_points(
    sweep: Sweep, points: list[Point], store: RunStore, reporter: Reporter | None = None
) -> None:
    """Refuse the sweep, before anything is stored, when `dlperf run` would refuse one of
    `points` before recording it (a batch larger than the data, an unknown model, a model that
    rejects the images): a mistake caught up front is the user's to fix, not a failed run."""
    from dlperf.engine.build import first_refused  # torch: only once a sweep runs

    def named(index: int) -> str:
        return f"{sweep.path} point {points[index].index + 1} ({points[index].label()})"

    refused = first_refused([p.exp for p in points], store, reporter, named)
    if refused is None:
        return
    index, error = refused
    raise UserError(f"{named(index)}: {error.message}", error.hint)


def sweep_study(
    store: RunStore,
    sweep: Sweep,
    keys: list[str | None],
    free_threads: bool,
    resume: int | None,
    new: bool,
    reporter: Reporter,
) -> int | None:
    """The sweep study to continue (None: a new one is to be made), checked without writing.

    Without --resume or --new: the newest study of the sweep's name whose every run is a
    point of this sweep (its points' `keys`), so a rerun resumes and a sweep that ran with
    other --set values or another file keeps to its own study. A study holding runs that
    are not points of this sweep is never joined: its report and figures would mix the two.
    """
    if resume is not None or new:
        return choose_study(store, sweep.name, "sweep", resume, new)
    wanted = set(keys)
    studies = studies_named(store, sweep.name, "sweep")
    listed = ListedOnce(store)
    for study_id in studies:
        runs = store.list_runs(study_id=study_id)
        if all(run_key(run, free_threads, listed) in wanted for run in runs):
            if study_id != studies[0]:
                reporter.log(
                    f"sweep {sweep.name!r}: resuming study {study_id}, the newest whose runs "
                    f"are all points of this sweep (study {studies[0]} ran other points)"
                )
            return study_id
    if studies:
        runs = store.list_runs(study_id=studies[0])
        changes = (changed_source(run.config, run.system, listed) for run in runs)
        changed = next(filter(None, changes), None)
        why = (
            f"{changed} changed since they trained"
            if changed
            else "other --set values or another sweep file"
        )
        reporter.log(
            f"sweep {sweep.name!r}: its points differ from those of study {studies[0]} ({why}): "
            "starting a new study (--resume ID joins one anyway)"
        )
    return None


def continued_study(store: RunStore, sweep: Sweep) -> int | None:
    """The study that `sweep` without --resume or --new continues (`sweep_study`): not
    always the newest of its name."""
    free = not sweep.threads_set
    keys = [point_key(p.exp.to_dict(), free) for p in sweep.points]
    return sweep_study(store, sweep, keys, free, None, False, NullReporter())


def finished_runs(
    store: RunStore, study_id: int | None, free_threads: bool
) -> dict[str, RunRecord]:
    """The newest finished run of each point key in the study."""
    found: dict[str, RunRecord] = {}
    if study_id is None:
        return found
    listed = ListedOnce(store)
    for run in store.list_runs(study_id=study_id):  # newest first
        key = run_key(run, free_threads, listed) if run.status == "finished" else None
        if key is not None:
            found.setdefault(key, run)
    return found


def whole(finished: dict[str, RunRecord], keys: list[str | None]) -> bool:
    """Whether every point of the sweep (its `keys`) has a run among the study's `finished`."""
    return all(key is not None and key in finished for key in keys)


def _own_run(store: RunStore, exp: Experiment, study_id: int, since: int) -> RunRecord | None:
    """The run this sweep started for `exp`: of the study, newer than `since`, same hash."""
    digest = exp.config_hash()
    for run in store.list_runs(study_id=study_id):
        if run.id > since and run.config_hash == digest:
            return run
    return None


def record_failure(
    store: RunStore,
    exp: Experiment,
    study_id: int,
    since: int,
    error: str,
    status: str = "failed",
) -> SweepPointResult:
    """A point that failed (or was stopped: `status` killed): its run marked so, or, if it
    failed before its run was recorded (its model.weights do not load into the model, say:
    `check_points` refuses what can be told before any point runs), a run made for it, so the
    study shows every point it tried. A run its worker ended itself (a worker its CPU-time
    limit stopped marks its run killed with the limit's line) is the point's result as
    stored: the sweep called such a point "failed", with a line naming the signal only."""
    run = _own_run(store, exp, study_id, since)
    if run is not None and not run.unfinished:
        if run.status == "finished":  # the worker ended after storing it, before its result
            return SweepPointResult.of_run(run.id, run.status, run.summary)
        return SweepPointResult(run.id, run.status, run.error or error)
    with stopping.shielded():  # a run made here is marked, whenever a stop signal lands
        if run is None:
            name = given(exp.run.name, exp.model.name)[0]
            run_id = store.create_run(name, "run", exp.to_dict(), exp.config_hash(), None, study_id)
        else:
            run_id = run.id
        store.finish_run(run_id, status, error=error)
    return SweepPointResult(run_id, status, error)


def run_point(
    exp: Experiment, store: RunStore, study_id: int, since: int, reporter: Reporter
) -> SweepPointResult:
    """Run one point here and return its result; any failure is recorded, not raised."""
    from dlperf.experiment.run import run_experiment

    try:
        ran = run_experiment(exp, store, reporter, study_id=study_id, keep_weights=True)
        return SweepPointResult.of_run(ran.run_id, ran.status, ran.to_dict(), ran.error)
    except Exception as e:
        # A stop that landed in an import comes out as another error (a RecursionError, or a
        # model file's import refused in a UserError): the point was stopped, not failed.
        if interrupted(e):
            raise KeyboardInterrupt from e
        failed = record_failure(store, exp, study_id, since, failure(e))
        lines = "".join(traceback.format_list(model_frames(e))).splitlines()
        return replace(failed, frames=tuple(lines))


def being_deleted(
    store: RunStore, exp: Experiment, study_id: int, since: int
) -> tuple[int, int] | None:
    """After a stop of the point `exp`: its run and the pid of the `runs delete --force` that
    stopped it to delete it; None for any other stop. Read while the delete has not removed
    the run yet, as `run` reads its own (a run already gone cannot be told from a point
    stopped before it made one)."""
    from dlperf.store.query import deleted_by

    run = _own_run(store, exp, study_id, since)
    if run is None or (deleter := deleted_by(run)) is None:
        return None
    return run.id, deleter


def failure(e: Exception) -> str:
    """A point's error as stored, the same under --jobs 1 and from a worker (dlperf.sweep.
    worker). A store gone mid-run left its run `running`; it is marked failed here once the
    store answers again (the sweep's own status and exit code), and its line said the run
    "reads as lost now", against that status. A UserError is its one line, as the CLI says
    it (a server's message may hold line breaks); an OSError of a file, as the CLI's line
    says it (`paths.error_line`), which the sweep prints after it."""
    if isinstance(e, StoreGone) and e.run_id is not None:
        return one_line(
            f"{e.message}; marked failed once the store answered again (continue it from its "
            f"last checkpoint: `dlperf run --resume {e.run_id}`)"
        )
    if isinstance(e, UserError):
        return one_line(str(e))
    return error_line(e)


@dataclass
class SweepRun:
    """One sweep being run: its study, what is done, and the points still to do."""

    sweep: Sweep
    store: RunStore
    study_id: int
    out_dir: Path
    threads: int | None
    reporter: Reporter
    on_failure: str
    since: int
    results: dict[int, SweepPointResult] = field(default_factory=dict)
    # The points another live process held when this one came to them, and that process
    # (`RunStore.claim`): read again at the end (`held_elsewhere`).
    held: dict[int, dict[str, Any]] = field(default_factory=dict)

    def config(self, point: Point) -> Experiment:
        if self.threads is None:
            return point.exp
        exp = point.exp.model_copy(deep=True)
        exp.run.threads = self.threads
        return exp

    def started(self, point: Point, how: str = "") -> None:
        total = len(self.sweep.points)
        self.reporter.log(f"point {point.index + 1}/{total} started{how}: {point.label()}")

    def finished(self, point: Point, result: SweepPointResult) -> bool:
        """Keep a point's result; False when the sweep is to stop here."""
        self.results[point.index] = result
        where = f"point {point.index + 1}/{len(self.sweep.points)}"
        if result.status == "finished":
            acc = result.test_accuracy
            self.reporter.log(
                f"{where} finished: run {result.run_id}, test accuracy "
                f"{acc if acc is None else f'{acc:.4f}'}"
            )
            return True
        first = (result.error or "").splitlines()[:1]
        said = first[0] if first else ""
        # The model's own error, told as `dlperf run` tells it: its line, then its frames
        self.reporter.log(
            f"{where} {result.status}: {'the model raised ' * bool(result.frames)}{said}"
        )
        for line in result.frames:
            self.reporter.log(line)
        return self.on_failure == "continue"

    def claimed(self, point: Point) -> bool:
        """Whether this sweep is to run `point` now: it claims the point in the store, so that
        two sweeps of one study never both train it. A point that another live process
        holds, or that finished since this sweep looked, is skipped, and the log says so."""
        free = not self.sweep.threads_set
        key = point_key(point.exp.to_dict(), free)
        if key is None:
            return True
        where = f"point {point.index + 1}/{len(self.sweep.points)}"
        holder = self.store.claim(self.study_id, key)
        if holder is not None:
            self.held[point.index] = holder
            self.reporter.log(
                f"{where} skipped: pid {holder.get('pid')} on {holder.get('host')} runs it"
            )
            return False
        if key in finished_runs(self.store, self.study_id, free):
            self.reporter.log(f"{where} skipped: it finished meanwhile")
            return False
        return True

    def held_elsewhere(self, point: Point, key: str | None) -> dict[str, Any]:
        """A point another process held when this sweep came to it and that has not finished
        since: the point, that process and its run of the point, if it made one yet."""
        holder = self.held[point.index]
        free = not self.sweep.threads_set
        # Its holder may have ended since without finishing it (failed, stopped, killed):
        # then nobody runs it, and it was said to be "still run".
        ended = process_alive(holder) is False
        listed = ListedOnce(self.store)
        runs = [
            run
            for run in self.store.list_runs(study_id=self.study_id)  # newest first
            if run_key(run, free, listed) == key and (ended or run.status == "running")
        ]
        run = runs[0] if runs else None
        of_run = f" (run {run.id}{f' {run.status}' if ended else ''})" if run else ""
        who = f"pid {holder.get('pid')} on {holder.get('host')}"
        self.reporter.log(
            f"point {point.index + 1}/{len(self.sweep.points)} is not finished: "
            + (f"{who}, which held it, ended{of_run}; run the sweep again to run it"
               if ended else f"{who} holds it{of_run}")
            + "; the verdict covers the finished points only"
        )  # fmt: skip
        return {
            "point": point.index + 1,
            "params": point.params,
            "seed": point.exp.run.seed,
            "holder": holder,
            "ended": ended,
            "run_id": run.id if run else None,
        }

    def run_here(self, todo: list[Point]) -> None:
        for point in todo:
            if not self.claimed(point):
                continue
            self.started(point)
            exp = self.config(point)
            try:
                result = run_point(exp, self.store, self.study_id, self.since, self.reporter)
            except KeyboardInterrupt:
                # Spared, as `run`'s hint is: a second stop still ends these reads.
                with stopping.spared():
                    self.said_deleting(point, exp)
                raise
            if not self.finished(point, result):
                return

    def said_deleting(self, point: Point, exp: Experiment) -> None:
        """After a stop of a point run here: when `runs delete --force` stopped it to delete
        its run, say so. The point trains in this process, so that stop ends the whole sweep
        (a stop signal cannot be told to end one point only), and the sweep's stop line alone
        told to continue it, as if Ctrl-C had."""
        if (deleting := being_deleted(self.store, exp, self.study_id, self.since)) is not None:
            self.reporter.log(
                f"point {point.index + 1}/{len(self.sweep.points)} stopped: "
                f"{deleting_its_run(*deleting)}, which stops the sweep (--jobs 1 trains each "
                "point in the sweep's own process)"
            )

    def run_parallel(self, todo: list[Point], jobs: int) -> None:
        pending, running = deque(todo), list[_Child]()
        try:
            with Supervisor() as supervisor:
                while pending or running:
                    while pending and len(running) < jobs:
                        point = pending.popleft()
                        if self.claimed(point):
                            running.append(self._start(supervisor, point))
                    time.sleep(POLL_S)
                    for child in [c for c in running if c.proc.poll() is not None]:
                        running.remove(child)
                        if not self.finished(child.point, self._collect(child)):
                            pending.clear()  # the running points finish; no new ones start
        except BaseException:
            # The supervisor has stopped them (each marks its run killed); a SIGKILLed one
            # could not, and its run reads as lost too once it is gone.
            with stopping.shielded():
                for child in running:
                    run = _own_run(self.store, child.exp, self.study_id, self.since)
                    if run is not None and run.unfinished:
                        self.store.finish_run(run.id, "killed", error=stopping.stopped_by())
            raise

    def _start(self, supervisor: Supervisor, point: Point) -> _Child:
        directory = self.out_dir / f"p{point.index + 1}"
        directory.mkdir(parents=True, exist_ok=True)
        exp = self.config(point)
        config, result = directory / "point.json", directory / "result.json"
        config.write_text(json.dumps(exp.to_dict()))
        result.unlink(missing_ok=True)  # a rerun's result must be this run's
        env = {
            "DLPERF_DB": self.store.engine.url.render_as_string(hide_password=False),
            "OMP_NUM_THREADS": str(t if isinstance(t := exp.run.threads, int) else usable_cores()),
        }
        args = [str(config), str(result), str(self.study_id), str(self.since)]
        command = [sys.executable, "-m", WORKER_MODULE, *args]
        # Under a limit on processes and threads that leaves no room for another worker:
        # one line naming it, with --jobs 1 (the points run in this process) the other way out.
        name = f"the sweep worker of point {point.index + 1}/{len(self.sweep.points)}"
        log = directory / "worker.log"
        proc = supervisor.start(command, log, env, name=name, also=", or use --jobs 1")
        self.started(point, f" (pid {proc.pid})")
        return _Child(point, exp, proc, directory)

    def _collect(self, child: _Child) -> SweepPointResult:
        path = child.directory / "result.json"
        if path.is_file():
            said = json.loads(path.read_text())
            if "deleted" in said:
                # Stopped by `runs delete --force` (the worker said so as it stopped): its run
                # is being deleted, not one to record killed (it was made again as a new run,
                # "sweep worker stopped by SIGTERM"); the sweep's end leaves it out.
                line = deleting_its_run(said["deleted"], said["deleter"])
                return SweepPointResult(said["deleted"], "killed", line)
            if "run_id" in said:
                return SweepPointResult.from_dict(said)
            # The worker's UserError, which it could not store (the store refused it, or was
            # gone as it recorded the failure): its one line is the point's error, recorded
            # here as --jobs 1 records it (a run "lost" is marked failed now, see below).
            error = LOST.sub(MARKED, said["error"])
            return record_failure(self.store, child.exp, self.study_id, self.since, error)
        log = (child.directory / "worker.log").read_text(errors="replace").strip().splitlines()
        # record_failure marks the point's run (failed, or killed below): a StoreGone line of
        # the worker's that says it "reads as lost now" (the store gone under it) is said as
        # what happened to it
        tail = [LOST.sub(MARKED, line) for line in log[-12:]]
        code = child.proc.returncode
        error = "\n".join([f"sweep worker {ended_how(code)}", *tail])
        # A worker stopped by a signal, before it could mark its run, was stopped as the run
        # it would have marked killed (a sweep run again trains it again)
        status = "killed" if stopped(code) else "failed"
        return record_failure(self.store, child.exp, self.study_id, self.since, error, status)


def stopped(returncode: int) -> bool:
    """Whether a stop signal ended a worker: one it caught (128 + the signal), or one that
    ended it by the signal's default action (a negative code) before it took them, in the
    interpreter's own start-up. That one stored the point `failed` ("sweep worker killed by
    SIGTERM") where the same `kill` a moment later stored it `killed`."""
    return returncode in stop_codes() or -returncode in stopping.STOP_SIGNALS


# RunStore._gone's hint for a run its store went away under, left running by the worker
LOST = re.compile(r"\brun (\d+) reads as lost now; once the store is back, ")
MARKED = r"run \1 was marked failed by the sweep once the store answered again; "


def keep_winner_weights(
    store: RunStore, rows: list[SweepRow], winner: int | None, reporter: Reporter
) -> None:
    """Delete the final weights of the points without run.checkpoint except the winner's
    (each saved its own, see `run_point`), once the sweep is over and the winner known: so
    the best point can be exported (or transferred from) at the cost of one checkpoint.
    Pruning as points finish would go wrong with repeats: a point's later seed can drop it
    below one whose weights were already gone."""
    if winner is None:
        return
    removed = []
    for row in rows:
        if row.run_id == winner or store.get_run(row.run_id).config["run"]["checkpoint"]:
            continue
        for artifact in store.artifacts(row.run_id):
            path = Path(artifact["path"])
            if artifact["kind"] == "checkpoint" and path.is_file():
                path.unlink()
                removed.append(row.run_id)
    if removed:
        reporter.log(
            f"kept the weights of the winner, run {winner} (`dlperf export {winner}`); deleted "
            f"those of run {', '.join(map(str, removed))} (run.checkpoint = false)"
        )


def weights_hint(store: RunStore, run: RunRecord) -> str | None:
    """How to get weights for `run` of a sweep study that has none (see
    `keep_winner_weights`): the run whose weights the sweep kept; None for a run that is
    no such point."""
    if run.study_id is None or run.config["run"]["checkpoint"]:
        return None
    if store.get_study(run.study_id)["kind"] != "sweep":
        return None
    kept = [
        other.id
        for other in store.list_runs(study_id=run.study_id)
        if any(a["kind"] == "checkpoint" and Path(a["path"]).is_file()
               for a in store.artifacts(other.id))
    ]  # fmt: skip
    if not kept:  # run by a dlperf that kept no weights, or their files removed since
        return (
            f"sweep study {run.study_id} ran without run.checkpoint and has no point's "
            "weights; sweep again with --new to keep its winner's, or with run.checkpoint = "
            "true to keep every point's"
        )
    return (
        f"sweep study {run.study_id} ran without run.checkpoint and keeps only its winner's "
        f"weights: `dlperf export {kept[0]}`; to export every point, sweep with "
        "run.checkpoint = true"
    )


@dataclass
class _Child:
    point: Point
    exp: Experiment
    proc: subprocess.Popen[bytes]
    directory: Path


@dataclass
class SweepResult:
    study_id: int
    name: str
    axes: dict[str, list[Any]]
    target: float | None  # the base's target.accuracy: what "to target" means
    points: list[SweepRow]  # one per point run or skipped, in the sweep's order
    groups: list[dict[str, Any]]  # one per combination of axis values, ranked (or --sort)
    winner: int | None
    axis_winners: dict[str, Any]
    directory: str  # the study's own directory: the points' files, and its figures
    # The points another process still held at the end (see `SweepRun.held_elsewhere`):
    # when there are any, the ranking and the winner are over the finished points only.
    held_elsewhere: list[dict[str, Any]] = field(default_factory=list)
    # The points whose run was deleted while the sweep ran: left out of `points`, and the
    # sweep ends as for a point that did not finish.
    deleted: list[dict[str, Any]] = field(default_factory=list)


def run_sweep(
    sweep: Sweep,
    store: RunStore,
    jobs: int = 1,
    on_failure: str = "continue",
    resume: int | None = None,
    new: bool = False,
    reporter: Reporter | None = None,
    sort: str | None = None,
) -> SweepResult:
    """Run the points of `sweep` not yet finished in its study (the newest study of its
    name, `resume`, or a new one with `new`), ranked, or in the order of `sort` (a swept key
    or a result column); everything is checked before anything is stored. Ctrl-C
    (KeyboardInterrupt) stops it, its running points marked killed."""
    reporter = reporter or NullReporter()
    if on_failure not in ON_FAILURE:
        raise UserError(f"--on-failure {on_failure!r}", "use continue or stop")
    order = summary.sort_key(sort, sweep.axes) if sort is not None else None
    free = not sweep.threads_set
    keys = [point_key(p.exp.to_dict(), free) for p in sweep.points]
    study_id = sweep_study(store, sweep, keys, free, resume, new, reporter)
    done = finished_runs(store, study_id, free)
    todo = [p for p, key in zip(sweep.points, keys, strict=True) if key not in done]
    threads = threads_per_job(sweep, jobs, len(todo))
    check_points(sweep, todo, store, reporter)
    out_dir = store.artifact_dir(sweep.points[0].exp.run.out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)  # an unusable out_dir fails before the study
    if study_id is None and not new:
        # Looked for again: the checks take seconds (data loaded, every model run dry), and a
        # sweep of this file started meanwhile may have made the study since; join it. Not
        # made before the checks: a refused sweep stores nothing.
        study_id = continued_study(store, sweep)
        done = finished_runs(store, study_id, free)
        todo = [p for p in todo if keys[p.index] not in done]
    if study_id is None:
        study_id = store.create_study(sweep.name, "sweep")
    directory = out_dir / f"study-{study_id}"
    directory.mkdir(exist_ok=True)
    newest = store.list_runs(limit=1)
    since = newest[0].id if newest else 0
    state = SweepRun(sweep, store, study_id, directory, threads, reporter, on_failure, since)
    reporter.log(
        f"sweep {sweep.name!r}, study {study_id}: {len(sweep.points)} points, "
        f"{len(sweep.points) - len(todo)} finished before, {len(todo)} to run"
    )
    try:
        if jobs == 1:
            state.run_here(todo)
        else:
            state.run_parallel(todo, jobs)
    except KeyboardInterrupt:
        # A stop as the last point's run was stored finished (its "finished" line said, or a
        # worker that stored it in the stop's grace): nothing is left to run, and the line
        # "continue it ... --resume" would name a study whole. Ranked, as `run` ends a run
        # the stop found finished (exit 0 and its result).
        with stopping.spared():  # store reads, as `run`'s after a stop: a second stop ends them
            now = finished_runs(store, study_id, free)
            if not whole(now, keys):
                raise
            stopping.settle()
    else:
        # Every point stored finished: the study's outcome is decided, and one stop from here
        # (as it is ranked, its figures drawn) does not unsay it, as `run`'s stored run exits
        # 0; a second ends what is left, 128 + the first (it exited 130 with "continue it").
        with stopping.shielded():
            now = finished_runs(store, study_id, free)
            if whole(now, keys):
                stopping.settle()
    # `now`, read after the points ran: the points another sweep of the study held, or
    # finished, while this one ran are ranked with the rest (each sweep ranked only its own,
    # and named a winner that was not the study's best).
    # A point's run deleted while the sweep ran (`dlperf runs delete`) is no result: ranked,
    # it was named the winner of a store that no longer held it, or the end failed "no run N
    # in the store" (its weights and figures read), the points that finished unranked.
    stored = {run.id for run in store.list_runs(study_id=study_id)}
    rows, elsewhere, deleted = [], [], []
    for point, key in zip(sweep.points, keys, strict=True):
        seed = point.exp.run.seed
        if point.index in state.results:
            row = SweepRow.of(state.results[point.index], point.params, seed)
        elif (run := now.get(key or "") or done.get(key or "")) is not None:
            result = SweepPointResult.of_run(run.id, "finished", run.summary)
            row = SweepRow.of(result, point.params, seed, skipped=True)
        else:
            if point.index in state.held:
                elsewhere.append(state.held_elsewhere(point, key))
            continue
        if row.run_id in stored:
            rows.append(row)
            continue
        deleted.append({"point": point.index + 1, "params": point.params, "run_id": row.run_id})
        reporter.log(
            f"warning: point {point.index + 1}/{len(sweep.points)} ({point.label()}): its run "
            f"{row.run_id} was deleted while the sweep ran; left out of the ranking (run the "
            "sweep again to train it anew)"
        )
    # The delete of the study's last run left removes the study's directory with it: made
    # again for the figures (it failed "cannot use .../study-N/val_error.png").
    directory.mkdir(parents=True, exist_ok=True)
    groups = summary.group_rows(rows)
    winner = summary.winner(rows, groups)
    keep_winner_weights(store, rows, winner, reporter)
    return SweepResult(
        study_id,
        sweep.name,
        sweep.axes,
        sweep.points[0].exp.target.accuracy,
        rows,
        sorted(groups, key=order) if order is not None else groups,
        winner,
        summary.axis_winners(groups, sweep.axes),
        str(directory),
        elsewhere,
        deleted,
    )
