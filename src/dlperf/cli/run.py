"""`dlperf run`, `dlperf demo` and `dlperf config`."""

from __future__ import annotations

import contextlib
import shlex
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeGuard

import typer

from dlperf import clocks, stopping
from dlperf.cli import console
from dlperf.cli.app import Json, app, db_words, open_store, set_option
from dlperf.cli.runs import transfer_notes
from dlperf.errors import CheckFailed, UserError

if TYPE_CHECKING:
    from dlperf.records import RunResult
    from dlperf.store import RunStore
    from dlperf.store.record import RunRecord

config_app = typer.Typer(
    help="Inspect experiment configs.\n\nExample: dlperf config show examples/digits_smallcnn.toml",
    no_args_is_help=True,
)
app.add_typer(config_app, name="config")


def _print_result(result: RunResult) -> None:
    s = result.summary
    if s is None:
        console.err.print(f"run {result.run_id} {result.status}: {result.error}")
        return
    # What was made of the weights the run started from (a first convolution adapted to the
    # data's channels, the head kept or new): the table says nothing of them.
    for note in transfer_notes(s.to_dict()):
        console.out.print(f"transfer: {note}", soft_wrap=True)
    rows: list[list[Any]] = [
        ["run", result.run_id],
        ["device", f"{s.device} ({s.threads} threads)"],
        ["test accuracy", s.test_accuracy],
        ["best val accuracy", s.best_val_accuracy],
        ["epochs to target", s.epochs_to_target],
        # Time to target beside the wall clock it is read from (dlperf.clocks).
        [clocks.TIME_TO_TARGET, s.time_to_target_s],
        [clocks.elapsed_label([s.epochs]), s.elapsed_s],
        ["throughput (samples/s)", s.throughput],
        ["CPU wait (share of thread time)", s.cpu_wait_share],
        [clocks.TRAIN_TIME, s.train_time_s],
        ["peak memory (MiB)", None if s.peak_memory_bytes is None else s.peak_memory_bytes / 2**20],
    ]
    if s.reliable is False:
        rows.insert(9, ["unreliable", s.reliability_note])
    console.print_table(None, ["", "value"], rows)
    console.print_phases({"phases": s.phases})


@app.command()
def run(
    experiment: Path = typer.Argument(None, help="Experiment TOML file.", show_default=False),
    set_: list[str] = set_option("train.lr=0.01"),
    timing: str = typer.Option(
        None, "--timing", help="off | coarse | phases (same as --set run.timing=...)."
    ),
    profile: bool = typer.Option(
        False,
        "--profile",
        help="Record a window of steps with torch.profiler (--set run.profile.enabled=true); "
        "dlperf runs trace RUN summarises it.",
    ),
    resume: int = typer.Option(None, "--resume", help="Continue run ID from its checkpoint."),
    as_json: Json = False,
) -> None:
    """Train one experiment, measured phase by phase, and keep it in the run store.

    Example: dlperf run examples/digits_smallcnn.toml --set train.epochs=3 --timing phases
    """
    from dlperf.config import load_experiment
    from dlperf.experiment.run import resume_run, run_experiment
    from dlperf.records import FINISHED, RunResult, RunSummary

    if (experiment is None) == (resume is None):
        raise UserError("give an experiment file or --resume RUN_ID (not both)")
    overrides = list(set_) + ([f'run.timing="{timing}"'] if timing else [])
    overrides += ["run.profile.enabled=true"] if profile else []
    if resume is not None and overrides:
        raise UserError(
            "--resume continues a run with its stored config; drop --set/--timing/--profile"
        )
    exp = load_experiment(experiment, overrides) if experiment is not None else None
    # A resume reads the store it names: a mistyped --db made an empty ./dlperf.db, then
    # said there is no such run.
    store = open_store(create=resume is None)
    try:
        with console.reporter() as rep:
            if exp is not None:
                result = run_experiment(exp, store, rep)
            else:
                result = resume_run(resume, store, rep)
            stopping.settle()  # the run is stored: a later Ctrl-C does not unsay it
    except KeyboardInterrupt:
        # A stop that came as the run was marked finished (the mark is shielded, and the
        # signal raised once it was written) or as the result came back: the run finished,
        # and the command ends as a finished run, not with exit 130 and a resume hint that
        # `--resume` answers with "already finished".
        # Spared: a second Ctrl-C (pressed as the first seemed slow) cut these reads, and the
        # hint was lost; a third still ends them, should the store not answer.
        with stopping.spared():
            own = _own_run(store, resume)
            if not (_written_here(own) and own.status == FINISHED and own.summary is not None):
                _resume_hint(store, own)
                raise
            stopping.settle()
            result = RunResult(own.id, FINISHED, RunSummary.from_dict(own.summary))
    if as_json:
        console.print_json(result.to_dict())
    else:
        _print_result(result)
    if not result.finished:
        raise typer.Exit(1)


def _own_run(store: RunStore, run_id: int | None) -> RunRecord | None:
    """The run this command was about: `run_id` when resuming, else the newest run if this
    process wrote it (a stop before the run was made leaves none)."""
    if run_id is not None:
        try:
            return store.get_run(run_id)
        except UserError:  # no such run: the command had not got as far as saying so
            return None
    newest = store.list_runs(limit=1)
    return newest[0] if newest and _written_here(newest[0]) else None


def _written_here(run: RunRecord | None) -> TypeGuard[RunRecord]:
    """Whether this process is the run's writer (it made the run, or took it over to resume
    it): a stop before `--resume` took a finished run over is not that run finishing."""
    import os

    return run is not None and (run.process or {}).get("pid") == os.getpid()


def _resumable(run: RunRecord | None, store: RunStore) -> TypeGuard[RunRecord]:
    """Whether `run` stopped (not finished) after reaching a checkpoint, and is not being
    deleted (`runs delete --force` stopped it, and deletes it once it is marked)."""
    from dlperf.engine.checkpoint import run_checkpoint
    from dlperf.store.query import deleted_by

    if run is None or run.status == "finished" or deleted_by(run) is not None:
        return False
    try:
        run_checkpoint(store, run.id, "", "")
    except UserError:
        return False
    return True


def _resume_hint(store: RunStore, run: RunRecord | None) -> None:
    """After Ctrl-C or SIGTERM: how to go on with this process's run, when it stopped (not
    finished) after reaching a checkpoint; or that it was stopped to be deleted, which no
    resume outlives."""
    from dlperf.store.deleting import stopped_to_delete

    if (deleting := stopped_to_delete(run)) is not None:
        console.err_line(deleting)
    elif _resumable(run, store):
        console.err_line(
            f"run {run.id} stopped; continue it from its last checkpoint{_resume(run.id)}"
        )


def _resume(run_id: int) -> str:
    """`: dlperf [--db URL] run --resume ID`, the store as this command line named it: the
    hint without --db opened ./dlperf.db and said there is no such run."""
    db = db_words()
    hid = "***" in " ".join(db)
    fill = " (put the --db password back in place of ***)" if hid else ""
    return f"{fill}: {shlex.join(['dlperf', *db, 'run', '--resume', str(run_id)])}"


def _demo_stopped(store: RunStore) -> None:
    """After Ctrl-C or SIGTERM of `dlperf demo`, which exited 130 with nothing said: the run it
    was training and how to continue it, and that the demo itself is redone, not continued
    (its comparison needs both runs: `dlperf demo` trains them anew, as a study of its own)."""
    again = "run dlperf demo again to redo the demo"
    line = f"demo stopped; {again}"
    with stopping.spared():  # as `run`'s hint: a second Ctrl-C waits for it, a third does not
        # Any error now is the stop's consequence (dlperf.errors.interrupted): the stop goes on.
        with contextlib.suppress(Exception):
            run = _own_run(store, None)
            if _resumable(run, store):
                line = (
                    f"demo stopped in run {run.id} ({run.name}); continue that run from its "
                    f"last checkpoint{_resume(run.id)}, or {again}"
                )
        console.err_line(line)


@config_app.command("show")
def config_show(
    experiment: Path = typer.Argument(None, help="Experiment TOML file (none: the defaults)."),
    set_: list[str] = typer.Option([], "--set", help="Override a key, e.g. train.lr=0.01."),
) -> None:
    """Print the resolved config (defaults < file < --set) as TOML.

    Example: dlperf config show examples/digits_smallcnn.toml --set train.lr=0.01
    """
    from dlperf.config import load_file, to_toml

    # soft_wrap: data, not prose; a line wrapped at 160 columns was TOML no run could read.
    # In stdout's encoding: one that is not UTF-8 gets TOML's escapes, not the stream's.
    text = to_toml(*load_file(experiment, list(set_)), encoding=console.out.encoding)
    console.out.print(text, soft_wrap=True)


@config_app.command("keys")
def config_keys() -> None:
    """List every config key with its help text.

    Example: dlperf config keys
    """
    from dlperf.config import describe

    console.print_table(None, ["key", "meaning"], describe())


@app.command()
def demo(as_json: Json = False) -> None:
    """Train smallcnn and resnet20 on the bundled digits to 95% test accuracy, and compare.

    Runs on a laptop CPU in well under 3 minutes; both runs are kept in the store.

    Example: dlperf demo
    """
    from dlperf.demo import run_demo

    store = open_store()
    try:
        with console.reporter() as rep:
            results = run_demo(store, rep)
    except KeyboardInterrupt:
        _demo_stopped(store)
        raise
    if not console.printed_json(as_json, results):
        keys = ("test_accuracy", "epochs_to_target", "time_to_target_s", "throughput")
        phases = ("data", "forward", "backward", "optimizer")
        console.print_table(
            "dlperf demo: scikit-learn digits (8x8), target 95% validation accuracy",
            ["model", "run", "test acc", "epochs to target", clocks.TIME_TO_TARGET, "samples/s",
             "data ms", "fwd ms", "bwd ms", "opt ms"],
            [
                [r["model"], r["run_id"], *map(r.get, keys),
                 *((r.get("phases") or {}).get(p, 0) * 1e3 for p in phases)]
                for r in results["runs"]
            ],
        )  # fmt: skip
    if not results["passed"]:
        raise CheckFailed(f"a demo model finished below {results['target']:.0%} test accuracy")
