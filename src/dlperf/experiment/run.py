"""A run's life: check the inputs, record the run, train, and store how it ended.

Everything that can be wrong with the input is checked (dlperf.engine.build) before the run
is recorded, so bad input leaves nothing in the store.
"""

from __future__ import annotations

import contextlib
import functools
import threading
import traceback
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any, ParamSpec, TypeVar

import torch

from dlperf.config import Experiment, stored_experiment
from dlperf.config.experiment import (
    MODEL_FILE_DIGEST,
    MODEL_NEIGHBOURS_DIGEST,
    WEIGHTS_FILE_DIGEST,
    changed_model_files,
    model_changes,
    model_file_digest,
    weights_digest,
    weights_run_record,
)
from dlperf.engine import checkpoint
from dlperf.engine.build import Prepared, check_profile_fits, prepare_run
from dlperf.engine.loop import Diverged
from dlperf.engine.optim import load_optimizers
from dlperf.engine.step import WrongOutput, steps_per_epoch
from dlperf.engine.train import train
from dlperf.errors import UserError, in_model_file, model_exited
from dlperf.experiment.sink import StoreSink, failed_softly
from dlperf.formatting import few
from dlperf.models.registry import neighbour_digests, rebuilding
from dlperf.parsing import model_file_text, one_line
from dlperf.paths import made_dir
from dlperf.precision import check_default_dtype
from dlperf.procs import this_process
from dlperf.progress import NullReporter, Reporter
from dlperf.records import FAILED, FINISHED, RunResult
from dlperf.store import Recording, RunStore, went_on_in, writer_refusal
from dlperf.store.names import given
from dlperf.store.query import API_PROCESS, from_experiment
from dlperf.store.record import RunRecord
from dlperf.system import system_info

P = ParamSpec("P")
R = TypeVar("R")


def model_file_changed(record: RunRecord, use: str = "exported") -> str | None:
    """What a use of `record`'s model (`use`: "exported", "raced") must say when its model
    file, or a module beside it that its import loaded, differs from the one it was trained
    from (its weights loaded into the code as it is now); None when they are the same, and
    for a run stored without the digests."""
    changed = _changed(record)
    if changed is None:
        return None
    what, modules = changed
    return (
        f"{what} changed since run {record.id} was trained (its parameters still fit): {use} "
        f"as the file{'s are' if modules else ' is'} now"
    )


@contextlib.contextmanager
def telling_changed(record: RunRecord, tell: Callable[[str], None]) -> Iterator[None]:
    """The block (`record`'s model rebuilt from its file as it is now, and checked), telling
    `tell` first, where it raises, that the model file or a module beside it changed since
    the run trained: the model's own error alone ("the model raised ...", a dry check's
    refusal) lost the edit that is its likeliest cause, which `model_file_changed` (export's
    warning) and --resume's refusal say only once the build passed. Compared before the
    block, which imports the files."""
    changed = _changed(record)
    try:
        yield
    except Exception:
        if changed is not None:
            what, modules = changed
            tell(
                f"{what} changed since run {record.id} was trained: built as the "
                f"file{'s are' if modules else ' is'} now"
            )
        raise


def model_file_kept(record: RunRecord) -> bool:
    """Whether `record`'s model is a file whose source, and that of the modules its import
    loaded beside it, is now the one it was trained from (their stored sha256): weights that
    do not fit it then come from a factory that builds another network on each call, not
    from an edit."""
    trained = (record.system or {}).get(MODEL_FILE_DIGEST)
    name = str(record.config.get("model", {}).get("name", ""))
    kept = trained is not None and model_file_digest(name) == trained
    return kept and not model_changes(record.config, record.system)[1]


def _changed(record: RunRecord) -> tuple[str, bool] | None:
    """What of `record`'s model file and the modules beside it differs from what it was
    trained from, in words naming the file (`changed_model_files`)."""
    file = one_line(model_file_text(str(record.config.get("model", {}).get("name", ""))))
    return changed_model_files(record.config, record.system, f"model file {file}")


# A run seeds torch's process-wide generator (its weights, its dropout masks) and sets the
# process's thread count: two at once in one process (dlperf.run from two threads) drew from
# one interleaved stream and stored different results for one seeded config, so runs take
# turns, from their checks to their summary. Reentrant: a run started inside a run's own
# thread (a model file calling dlperf.run) would otherwise wait for itself forever.
_ONE_RUN = threading.RLock()


def _taking_turns(run: Callable[P, R]) -> Callable[P, R]:
    """`run`, holding _ONE_RUN from its checks to its summary, outside the caller's autocast;
    refused before them under a default dtype the caller changed (`check_default_dtype`)."""

    @functools.wraps(run)
    def in_turn(*args: P.args, **kwargs: P.kwargs) -> R:
        check_default_dtype()
        with _ONE_RUN, _callers_autocast_off():
            return run(*args, **kwargs)

    return in_turn


@contextlib.contextmanager
def _callers_autocast_off() -> Iterator[None]:
    """The caller's autocast off on every device kind a run may train on: dlperf.run inside
    torch.autocast ran its dry checks, backward and optimizer step under it while storing its
    own run.precision, which alone turns autocast on (TrainStep). Autocast is thread-local.
    Off without its weight cache: nested in another autocast, a run's own no longer clears
    the cache as it exits (torch clears it at the outermost exit only), and its steps would
    reuse casts of the weights as they were before the optimizer stepped."""
    with contextlib.ExitStack() as stack:
        for kind in ("cpu", "cuda", "mps"):  # pick_device's
            if torch.is_autocast_enabled(kind):
                stack.enter_context(torch.autocast(kind, enabled=False, cache_enabled=False))
        yield


@_taking_turns
def run_experiment(
    exp: Experiment,
    store: RunStore,
    reporter: Reporter | None = None,
    study_id: int | None = None,
    keep_weights: bool = False,
    by_api: bool = False,
) -> RunResult:
    """Train a new run of `exp`. With `keep_weights`, a run without run.checkpoint still saves
    its final weights as its checkpoint (what exporting it needs, not resuming it): a
    sweep's points, of which the sweep keeps its winner's. `by_api`: started by `dlperf.run`
    in the user's own program, which `runs delete --force` then sends no signal: there
    SIGTERM has Python's default action and would end the whole program."""
    reporter = reporter or NullReporter()
    prepared = prepare_run(exp, store, reporter)
    check_profile_fits(exp, prepared.data)
    load_optimizers()  # short of memory for them (a ulimit -v), before the run is recorded
    digest = exp.config_hash()
    final_only = keep_weights and not exp.run.checkpoint
    out_dir = store.artifact_dir(exp.run.out_dir)  # a loop of links fails before the run
    system = system_info(prepared.device, prepared.threads) | {"free_cores": prepared.free_cores}
    source = model_file_digest(exp.model.name)
    if source is not None:  # export says when the file changes after
        system[MODEL_FILE_DIGEST] = source
        # as prepare_run's build imported them
        neighbours = neighbour_digests(Path(model_file_text(exp.model.name)))
        if neighbours:
            system[MODEL_NEIGHBOURS_DIGEST] = neighbours
    weights = weights_digest(exp.model.weights)
    if weights is not None:
        system[WEIGHTS_FILE_DIGEST] = weights
    # run:last:NAME names another run once a newer one finishes: the one read as it loaded
    system |= weights_run_record(prepared.weights_run, store)
    if by_api:  # this process, as "process" records it: a resume by another process differs
        system[API_PROCESS] = this_process()
    with contextlib.ExitStack() as recorded:
        # An unusable out_dir fails before the run is recorded; a run the store refuses (open
        # read-only, a read-only session) leaves none of the directories made for it.
        making = exp.run.checkpoint or final_only
        with made_dir(out_dir) if making else contextlib.nullcontext(out_dir):
            record = recorded.enter_context(
                store.new_run(
                    name=given(exp.run.name, exp.model.name)[0],
                    kind="run",
                    config=exp.to_dict(),
                    config_hash=digest,
                    system=system,
                    study_id=study_id,
                )
            )
        where = out_dir / f"run-{record.id}" / "checkpoint.pt"
        owner = checkpoint.Owner(store.id, record.id, digest)
        ckpt = checkpoint.Slot(where, owner, _record_once(store, record.id))
        ran = _execute(exp, store, record, ckpt, None, prepared, reporter)
        if final_only and ran.finished:  # saved after the clocks stopped
            # its non-persistent buffers too, as each checkpoint keeps
            checkpoint.save(ckpt, checkpoint.model_state(prepared.model))
        return ran


def _record_once(store: RunStore, run_id: int) -> Callable[[Path], None]:
    """Records the run's checkpoint at its first save, once the file is there: a run that
    fails before then has none, and `--resume` and the exports say so. A resumed run's is
    recorded already."""
    recorded: list[Path] = []

    def saved(path: Path) -> None:
        if not recorded:
            store.add_artifact(run_id, "checkpoint", path)
            recorded.append(path)

    return saved


@_taking_turns
def resume_run(run_id: int, store: RunStore, reporter: Reporter | None = None) -> RunResult:
    """Continue a stopped run from its last checkpoint, with its stored config."""
    reporter = reporter or NullReporter()
    stored = store.get_run(run_id)
    _check_resumable(stored)
    # At once, before the data loads; again when taking over.
    elsewhere = store.writes_elsewhere(stored)
    refusal = writer_refusal(stored, elsewhere)
    if refusal is not None:
        raise refusal
    exp = stored_experiment(stored.config, f"run {run_id}")
    why = _no_checkpoint_why(exp, elsewhere)
    path = checkpoint.run_checkpoint(store, run_id, "to resume from", why)
    # The stored hash, not exp's: the run keeps its identity even if the config's defaults
    # have changed since it started.
    owner = checkpoint.Owner(store.id, run_id, stored.config_hash)
    state = checkpoint.load(path, owner)
    done = state["progress"]
    _check_not_ahead(store, run_id, done["epoch"])  # the store's, before the data loads
    # A file that changed and now fails its build or checks: the refusal below, after them,
    # is said as a warning before the failure
    with telling_changed(stored, lambda said: reporter.log(f"warning: {said}")):
        with rebuilding(f"run {run_id}"):  # its model file gone: restore it, not "use another"
            prepared = prepare_run(exp, store, reporter, fresh=False)
        # Checked (and loaded) before taking the run over, so that weights which no longer
        # fit the model's code leave the run lost; `train` loads them again with the
        # optimizer's. Before the split's check: a class gained or lost changes the split
        # too, and the classes say more.
        classes = prepared.data.num_classes
        same = model_file_kept(stored)  # a factory's own change, not the file's: told so
        model, weights = prepared.model, state["model"]
        checkpoint.fit_weights(model, weights, run_id, exp.model.name, classes, same)
    # Weights that fit code that changed: resumed, one run would hold epochs of two networks
    # under one file's sha256 (export and bench, which train nothing, warn instead).
    changed = _changed(stored)
    if changed is not None:
        raise UserError(
            f"{changed[0]} changed since run {run_id} was trained: resumed, its last epochs "
            "would train another network than its first",
            "restore the file the run was trained with, or start a new run",
        )
    _check_same_classes(run_id, state.get("classes"), prepared.data.classes)
    _check_same_split(run_id, done, steps_per_epoch(len(prepared.data.train), exp.train.batch_size))
    check_profile_fits(exp, prepared.data, done["epoch"])
    load_optimizers()  # short of memory for them, the run is left as it stopped, not `failed`
    # One process writes a run: of two resuming it at once, the other stops here.
    store.take_over(run_id)
    with store.recording(run_id) as record:
        # A killed run may have logged steps past its last checkpoint: drop them, so the
        # resumed run's metrics continue without duplicates.
        store.delete_metrics_after(
            run_id,
            [("train/", done["step"])]
            + [(k, done["epoch"]) for k in ("epoch/", "val/", "phase/", "gpu/")],
        )
        ckpt = checkpoint.Slot(path, owner, same_file=same)
        return _execute(exp, store, record, ckpt, state, prepared, reporter)


def _no_checkpoint_why(exp: Experiment, elsewhere: str | None) -> str:
    """Why a run to resume has no checkpoint, and what to do. `elsewhere`: the store its
    process wrote, of which this one is a copy made while it trained
    (`RunStore.writes_elsewhere`): copied in its first epoch, the run never stopped but went
    on there, and "it stopped" blamed a run that may have finished."""
    if elsewhere is not None:
        return went_on_in(elsewhere, "start it again")
    if exp.run.checkpoint:
        return "it stopped before its first epoch ended; start it again"
    return "it kept no checkpoint: run.checkpoint = false; run it again"


# The command that makes each kind of run other than `dlperf run`'s: what to start again.
_MADE_BY = {
    "scale": "dlperf scale run",
    "allreduce": "dlperf scale allreduce",
    "staleness": "dlperf staleness",
    "detect": "dlperf detect",
    "select": "dlperf distill",
    "calibrate": "dlperf calibrate",
    "predict": "dlperf predict",
}


def _check_resumable(run: RunRecord) -> None:
    """Only a run the engine trained from an experiment (`dlperf run`, `dlperf.run`, a sweep's
    point) resumes from a checkpoint: a dlperf.track run was refused for having none ("it
    stopped before its first epoch ended"), and a scale point for its config ("unknown key
    'experiment'"), each blaming what it is not."""
    if from_experiment(run.kind, run.config, run.system):
        return
    if run.kind == "run":
        raise UserError(
            f"run {run.id} is a dlperf.track run (a training loop of your own): dlperf cannot "
            "resume it",
            "run your loop again",
        )
    raise UserError(
        f"run {run.id} is a {one_line(run.kind)} run, not a `dlperf run` one: only those resume "
        "from a checkpoint",
        f"run it again with {_MADE_BY.get(run.kind, 'the command that made it')}",
    )


def _check_not_ahead(store: RunStore, run_id: int, trained: int) -> None:
    """A checkpoint past the epochs this store holds for the run was written by another store
    naming the same files: a byte copy (cp, runs repair) keeps the store id and so the run's
    directory. Resumed from it, the run would finish without the epochs between (each epoch's
    row is stored before its checkpoint is saved, so a run's own checkpoint is never ahead)."""
    stored = store.last_step(run_id, checkpoint.EPOCH_ENDED) or 0
    if trained > stored:
        raise UserError(
            f"run {run_id}'s checkpoint holds {trained} trained epochs, but this store has "
            f"{stored} of them: another store that names the same files (a copy made by cp or "
            "runs repair, or the original this store is a copy of) trained it on",
            "resume it in that store, or start it again here",
        )


def _check_same_classes(run_id: int, trained: list[str] | None, now: list[str]) -> None:
    """A run whose classes were renamed or reordered since it stopped (an image folder's class
    folder renamed: the same count, so the weights fit) would resume with each class's images
    training another's output. `trained`: the names its checkpoint keeps (None in an older
    dlperf's, which kept none)."""
    if trained is None or trained == list(now):
        return
    gone, new = [c for c in trained if c not in now], [c for c in now if c not in trained]
    said = [f"{few(gone)} gone" if gone else "", f"{few(new)} new" if new else ""]
    changed = ", ".join(filter(None, said)) or "reordered"
    raise UserError(
        f"run {run_id} was trained on classes {few(trained)}; its data now names {few(now)} "
        f"({changed}): resumed, its outputs would be taken for other classes than they were "
        "trained on",
        "restore the classes' names, or start the run again",
    )


def _check_same_split(run_id: int, done: dict[str, Any], per_epoch: int) -> None:
    """A training split that gained or lost images since the run stopped (the same classes, or
    the weights would not fit) would resume on other data, its step counts no longer adding up:
    its steps an epoch, the checkpoint's against the data's now, tell (a change within one
    batch's rounding does not show)."""
    epochs, steps = done["epoch"], done["step"]
    if epochs and steps != epochs * per_epoch:
        raise UserError(
            f"run {run_id} trained {steps} steps in {epochs} epoch(s), but its training split "
            f"now gives {per_epoch} steps an epoch: the data changed since the run stopped",
            "restore the data as it was, or start the run again",
        )


def _execute(
    exp: Experiment,
    store: RunStore,
    record: Recording,
    ckpt: checkpoint.Slot,
    state: dict[str, Any] | None,
    prepared: Prepared,
    reporter: Reporter,
) -> RunResult:
    """Train inside `record`: a diverged loss, a model's output without one row per image or
    a model's sys.exit fails the run softly (the result says so), anything else is left to
    `RunStore.recording` to mark."""
    p = prepared
    sink = StoreSink(store, record.id)
    try:
        crowded = [p.crowded] if p.crowded else []
        summary = train(
            exp, p.model, p.data, p.device, sink, ckpt, state, reporter, warnings=crowded
        )
    except (Diverged, WrongOutput) as e:  # a wrong output: the model's fault, in one line
        return failed_softly(record, e)
    except SystemExit as e:
        if not _models_exit(e):  # dlperf's own (rich's on a closed pipe was, blaming the model)
            raise
        # The user's model ended the process mid-run: a failure of the run (exit 1, its line),
        # not the command's own exit code, which would read sys.exit(0) as success.
        error = model_exited(e.code, "during training")
        record.fail(error)
        return RunResult(record.id, FAILED, error=error)
    # The data's resolution and statistics as trained: what a transfer from this run expects.
    data = {"shape": list(p.data.shape), "mean": list(p.data.mean), "std": list(p.data.std)}
    data["classes"] = p.data.num_classes
    if p.data.classes:  # what export labels the outputs with, whatever the folder says later
        data["class_names"] = list(p.data.classes)
    data["test"] = len(p.data.test)  # images the test accuracy is of: doctor's chance rule
    summary = replace(
        summary, device=str(p.device), threads=p.threads, data=data, transfer=p.transfer
    )
    record.summary = summary.to_dict()
    return RunResult(record.id, FINISHED, summary)


def _models_exit(e: SystemExit) -> bool:
    """Whether a model file's code raised `e` (a frame of its traceback is a model file's, as
    `cli._foreign_caller` tells; it may have called a library that exits): any other
    SystemExit is not the model's to be blamed for."""
    return any(in_model_file(frame) for frame, _ in traceback.walk_tb(e.__traceback__))
