"""`dlperf distill`: teacher-student training on pseudo-labels, every stage a stored run."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from dlperf import stopping
from dlperf.cli import console
from dlperf.cli.app import Json, app, open_store, set_option
from dlperf.formatting import scaled
from dlperf.study_stop import StudyStop

if TYPE_CHECKING:
    from dlperf.config import DistillJob
    from dlperf.distill.summary import DistillResult, StudentRow


def _print_summary(result: DistillResult, plots: list[str]) -> None:
    from dlperf.distill.summary import best, verdict

    t, b = result.teacher, result.baseline
    rows: list[list[Any]] = []
    if t:
        rows.append(["teacher", None, t.run_id, t.model, t.test_accuracy, None, None,
                     "reused" if t.reused else ""])  # fmt: skip
    if b:
        note = "the teacher itself" if b.same_as_teacher else ("reused" if b.reused else "")
        rows.append(["baseline", None, b.run_id, b.model, b.test_accuracy, None, None,
                     note])  # fmt: skip
    for s in result.students:
        runs = f"{s.select_run_id} > {s.pretrain_run_id} > {s.finetune_run_id}"
        rows.append(["student", s.top_k, runs, b.model if b else None, s.test_accuracy,
                     s.selected, s.pseudo_label_precision, s.status])  # fmt: skip
    console.print_table(
        f"distill {result.name!r}, study {result.study_id}",
        ["stage", "K", "run(s): select > pretrain > finetune", "model", "test acc", "kept",
         "precision", ""],
        rows,
    )  # fmt: skip
    if result.students:
        console.print_table(
            "images kept per class (pseudo-label precision)",
            ["class", *(f"K={s.top_k}" for s in result.students)],
            [
                [name, *(_kept(s, c) for s in result.students)]
                for c, name in enumerate(result.classes)
            ],
        )
    speed = t.scoring_images_per_s if t else None
    if speed is not None:
        # scaled: past FIXED_MAX a float is shown to its significant digits, not every digit
        console.out.print(f"teacher scoring: {scaled('scoring_images_per_s', speed)}")
    winner = best(result.students)
    if winner is not None:
        console.out.print(verdict(winner, t, b))
    if result.error:
        console.err.print(f"stopped: {result.error}")
    console.tell([], *plots)


def _kept(student: StudentRow, c: int) -> str:
    precision = student.class_precision
    if precision is None or precision[c] is None:
        return str(student.kept[c])
    return f"{student.kept[c]} ({precision[c]:.2f})"


@app.command()
def distill(
    experiment: Path = typer.Argument(
        ..., help="Experiment TOML file: the labelled data and recipe.", show_default=False
    ),
    set_: list[str] = set_option("train.epochs=5"),
    unlabeled: str = typer.Option(
        None,
        "--unlabeled",
        help="NAME[:KEY=VALUE,...], e.g. mnist5k:image_size=8 or digits:holdout=0.5.",
    ),
    top_k: str = typer.Option(None, "--top-k", help="Images kept per class, e.g. 50,100,200."),
    top_p: int = typer.Option(None, "--top-p", help="Classes an image may be kept for."),
    teacher: int = typer.Option(None, "--teacher", help="A finished run ID as the teacher."),
    student: str = typer.Option(None, "--student", help="Student model (default: the EXP's)."),
    pretrain_epochs: int = typer.Option(None, "--pretrain-epochs", help="On pseudo-labels."),
    finetune_epochs: int = typer.Option(None, "--finetune-epochs", help="On the labelled data."),
    finetune_lr: float = typer.Option(None, "--finetune-lr", help="Fine-tuning learning rate."),
    resume: int = typer.Option(
        None, "--resume", help="Continue study ID (default: the newest of the EXP's name)."
    ),
    new: bool = typer.Option(False, "--new", help="Start a new study, even if one exists."),
    as_json: Json = False,
) -> None:
    """Train a teacher on the labelled data, let it pick the K images it scores highest per
    class from an unlabelled set, pre-train a student on them and fine-tune it on the labelled
    data; one student per K, every stage a stored run of one study (Yalniz et al. 2019).
    Running it again reuses the stages that finished.

    The options from --unlabeled to --finetune-lr are short for --set distill.KEY=VALUE; the
    file's [distill] section may hold them too.

    Example: dlperf distill examples/distill_digits.toml --top-k 25,50,100
    """
    from dlperf.config import DistillJob, load_job
    from dlperf.distill.runner import run_distill
    from dlperf.report.distill import distill_figure
    from dlperf.store.names import given

    flags = {
        "unlabeled": unlabeled, "top_k": top_k, "top_p": top_p, "teacher": teacher,
        "student": student, "pretrain_epochs": pretrain_epochs, "finetune_epochs": finetune_epochs,
        "finetune_lr": finetune_lr,
    }  # fmt: skip
    # the pool's errors name where distill.unlabeled was given: the flag, the file or --set
    job = _with_source(
        load_job(DistillJob, experiment, set_, distill=flags), experiment, set_, flags
    )
    store = open_store()
    # The figure and the table inside the stop's line too: a stop after the last stage
    # exited 130 saying nothing. The line's command (every stage reused) draws and prints.
    with StudyStop("distill", resume, new, console.err_line) as said:
        with console.reporter() as rep:
            # The study's name as run_distill gives it: run.name, else the model's.
            said.watch(store, given(job.experiment.run.name, job.experiment.model.name)[0])
            result = run_distill(job, store, resume, new, rep)
        figure = distill_figure(result)
        plots = [str(figure)] if figure is not None else []
        # A study whole is settled already (run_distill: one stop as its figure is drawn does
        # not count, round 68); one with a stage failed is once its figure is drawn: one stop
        # as it prints does not unsay its exit 1 (no "continue it" line), as a sweep's (round 49)
        stopping.settle()
        if not console.printed_json(as_json, result.to_dict() | {"plots": plots}):
            _print_summary(result, plots)
    if result.error:
        raise typer.Exit(1)


def _with_source(
    job: DistillJob, path: str | Path | None, overrides: list[str], flags: dict[str, Any]
) -> DistillJob:
    """`job` with its distill.unlabeled said as given: by the --unlabeled flag (in `flags`,
    None for a flag not given) or by the config at `path` with `overrides` (--set), named as
    load_job names it for the other keys."""
    from dlperf.config.distill import Unlabeled
    from dlperf.config.loading import config_words

    spec = job.distill.unlabeled
    if spec is None or flags.get("unlabeled") is not None:
        return job
    source = config_words(path, bool(overrides) or any(v is not None for v in flags.values()))
    distill = job.distill.model_copy(update={"unlabeled": Unlabeled(spec, source)})
    return job.model_copy(update={"distill": distill})
