"""`dlperf staleness`: how stale gradients are under asynchronous SGD."""

from __future__ import annotations

import math
from pathlib import Path

import typer

from dlperf import stopping
from dlperf.cli import console
from dlperf.cli.app import Json, app, open_store
from dlperf.errors import UserError
from dlperf.parsing import parse_list, parse_numbers, refuse_given

# What --train's schedule is made of, said where a simulation's option is given with it.
TRAIN_TIMES = (
    "--train's learners are --learners N or --speeds, over the experiment's epochs, with no latency"
)
# The gradients the table shows: rich renders a row in about 0.4 ms and 7 KB, so a million
# took minutes and gigabytes to print what nobody reads row by row; the summary follows.
TABLE_ROWS = 1_000


def _learners(specs: list[str]) -> dict[str, list[float]]:
    """['L1=1,2,3', 'L2=2.5'] as {'L1': [1, 2, 3], 'L2': [2.5]}, in the order given."""
    learners: dict[str, list[float]] = {}
    for spec in specs:
        name, sep, values = spec.partition("=")
        name = name.strip()
        if not sep or not name:
            raise UserError(f"--learner takes NAME=times, got {spec!r}", "e.g. --learner L1=1,2,3")
        if name in learners:
            raise UserError(f"learner {name} is given twice")
        bad = UserError(f"--learner {spec!r}: times must be numbers")
        learners[name] = parse_list(values, float, bad)
    return learners


def _rates(text: str) -> dict[str, float]:
    return parse_numbers(text, "--speeds", "--speeds L1=1.0,L2=0.4")


@app.command()
def staleness(
    learner: list[str] = typer.Option(
        [], "--learner", help="NAME=t1,t2,...: gradient completion times (repeatable)."
    ),
    speeds: str = typer.Option(None, "--speeds", help="NAME=rate,...: gradients per unit time."),
    horizon: float = typer.Option(None, "--horizon", help="Simulated time, with --speeds."),
    # None, not 0.0, by default: given with --train, where no latency is simulated, either is
    # refused, even at 0.
    push_latency: float = typer.Option(
        None,
        "--push-latency",
        help="Time for a push to reach the server (default: 0).",
        show_default=False,
    ),
    pull_latency: float = typer.Option(
        None,
        "--pull-latency",
        help="Time for new weights to reach a learner (default: 0).",
        show_default=False,
    ),
    train_exp: Path = typer.Option(
        None, "--train", help="Train this experiment with emulated asynchronous SGD and sync SGD."
    ),
    learners: int = typer.Option(None, "--learners", help="With --train: N equally fast learners."),
    set_: list[str] = typer.Option([], "--set", help="With --train: override a config key."),
    as_json: Json = False,
) -> None:
    """Simulate a parameter server with asynchronous learners and report each gradient's
    staleness: how many updates were applied between reading the weights and applying it.

    A learner computes, pushes, waits for the new weights, computes again. Completion times
    are those with no latency; latencies stretch them. Gradients arriving at the same
    instant are applied in the order the learners are given. With --train, the experiment
    is trained twice from the same weights, synchronously and with the staleness of
    --learners (or --speeds) learners, and both runs are stored as one study.

    Example: dlperf staleness --learner L1=1,2,3,4 --learner L2=2.5,5 --push-latency 0.1
    """
    from dlperf.converge import staleness as sim

    if train_exp is not None:
        simulation = {"--learner": learner, "--horizon": horizon}
        simulation |= {"--push-latency": push_latency, "--pull-latency": pull_latency}
        refuse_given(simulation, "a simulation, not --train", TRAIN_TIMES)
        _train_staleness(train_exp, learners, speeds, list(set_), as_json)
        return
    refuse_given({"--learners": learners, "--set": set_}, "--train EXP.toml")
    if speeds is None:  # --learner's times end where they end
        refuse_given({"--horizon": horizon}, "--speeds")
    if bool(learner) == (speeds is not None):
        raise UserError("give --learner NAME=times ... or --speeds NAME=rate,... (not both)")
    if speeds is not None:
        if horizon is None:
            raise UserError("--speeds needs --horizon")
        times = sim.from_speeds(_rates(speeds), horizon)
    else:
        times = _learners(learner)
    gradients = sim.simulate(times, push_latency or 0.0, pull_latency or 0.0)
    if console.printed_json(as_json, sim.to_json(gradients)):
        return
    console.print_table(
        None,
        ["learner", "index", "time", "read version", "applied to", "staleness"],
        [[g.learner, g.index, g.time, g.read_version, g.applied_version, g.staleness]
         for g in gradients[:TABLE_ROWS]],
    )  # fmt: skip
    if len(gradients) > TABLE_ROWS:
        console.out.print(
            f"the first {TABLE_ROWS:,} of {len(gradients):,} gradients; --json gives every one"
        )
    s = sim.summary(gradients)
    histogram = ", ".join(f"{k}: {v}" for k, v in s["histogram"].items())
    console.out.print(
        f"{s['gradients']:,} gradients, staleness mean {s['mean_staleness']:.3g}, "
        f"max {s['max_staleness']}; histogram {histogram}"
    )


def _train_staleness(
    path: Path, learners: int | None, speeds: str | None, overrides: list[str], as_json: bool
) -> None:
    from dlperf.converge import staleness as sim

    if (learners is None) == (speeds is None):
        raise UserError("--train needs --learners N or --speeds NAME=rate,... (one of them)")
    rates = _rates(speeds) if speeds else sim.equal_speeds(learners or 0)
    if any(not math.isfinite(r) or r <= 0 for r in rates.values()):
        raise UserError(f"learner speeds must be positive, got {speeds}")
    # torch's imports after the checks: a refused --learners is said at once
    from dlperf.config import load_experiment
    from dlperf.experiment import staleness as recorded
    from dlperf.experiment.staleness import TrainedRun

    exp = load_experiment(path, overrides)
    from dlperf.report.staleness import plot_staleness

    store = open_store()
    with console.reporter() as rep:
        result = recorded.study(exp, rates, store, rep)
    if result.failed:  # no curves to draw: said as `dlperf run` says a failed run, and exit 1
        if not console.printed_json(as_json, result.to_dict()):
            for run in result.failed:
                console.err.print(f"run {run.run_id} failed: {run.error}")
        raise typer.Exit(1)
    trained = {mode: run for mode, run in result.runs.items() if isinstance(run, TrainedRun)}
    figure = store.artifact_dir(Path(exp.run.out_dir)) / f"staleness-study-{result.study_id}.png"
    curves = {mode: run.val_acc1 for mode, run in trained.items()}
    plot_staleness(figure, curves, trained["async"].staleness_histogram)
    store.add_artifact(trained["async"].run_id, "figure", figure)
    stopping.settle()  # both runs stored, the figure drawn: one stop as it prints does not count
    if console.printed_json(as_json, result.to_dict() | {"figure": str(figure)}):
        return
    console.print_table(
        f"study {result.study_id}: sync SGD vs {len(rates)} asynchronous learners",
        ["", "run", "val accuracy", "val loss", "mean staleness"],
        [[mode, run.run_id, run.val_accuracy, run.val_loss, run.mean_staleness]
         for mode, run in trained.items()],
    )  # fmt: skip
    console.tell([], str(figure))
