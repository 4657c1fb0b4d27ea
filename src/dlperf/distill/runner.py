"""`dlperf distill`: a teacher, a baseline and one student per K, every stage a stored run of
one `distill` study.

Stages (tag `stage` on each run; docs/distill.md):
- teacher: the experiment trained on the labelled data (or a finished run, --teacher);
- baseline: the student model trained on the labelled data only (the teacher itself when
  the student is the teacher's model with the same recipe);
- select (per K): the teacher scores the unlabelled images once (timed) and the K best per
  class are kept, written as an npz file (a `select` run records the counts and precision);
- pretrain (per K): the student trained on those pseudo-labelled images;
- finetune (per K): the student fine-tuned from its pretrain run, head included, on the
  labelled data.
A stage whose config (its hash) already finished in the study is reused, so the same command
resumes after an interruption; what was reused is said.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import torch

from dlperf import stopping
from dlperf.config import DistillConfig, DistillJob, Experiment, build_experiment
from dlperf.config.experiment import changed_source
from dlperf.data import ImageData, load_data
from dlperf.data.sources import read_npz
from dlperf.distill import pool, pretrain, teacher
from dlperf.distill.select import precision, select
from dlperf.distill.summary import BaselineRow, DistillResult, StudentRow, TeacherRow, best
from dlperf.engine import pretrained
from dlperf.engine.build import (
    as_run,
    build_checked,
    check_profile_fits,
    check_unrecorded,
    checked_alike,
)
from dlperf.errors import GoneMeanwhile, NoSuchRun, UserError
from dlperf.experiment.run import model_file_changed, run_experiment, telling_changed
from dlperf.formatting import few
from dlperf.paths import not_regular, replaced, writing
from dlperf.progress import NullReporter, Reporter
from dlperf.records import FINISHED, Record, RunSummary
from dlperf.store import RunStore
from dlperf.store.deleting import telling_deleted
from dlperf.store.names import Made, at_most, check_made_names, given
from dlperf.store.studies import choose_study
from dlperf.system import pick_device, set_threads, system_info

# The teacher's data must be the experiment's: same images, same splits.
SAME_DATA = ("name", "root", "split_seed", "test_fraction", "val_fraction", "holdout")


def stage_name(name: str, stage: str, k: int | None = None) -> str:
    """A stage's run name: NAME-teacher, NAME-baseline, NAME-select-k10 and so on."""
    return f"{name}-{stage}" if k is None else f"{name}-{stage}-k{k}"


def _check_names(exp: Experiment, opts: DistillConfig) -> str:
    """The study's name (run.name, else the model's) and every stage's run name fit the
    store, checked before anything runs: the store checks a run's name only as it is
    written, which for a K's stages came after the teacher had trained and scored the pool.
    The study, named NAME itself, fits whenever its stages' longer names do."""
    name, source = given(exp.run.name, exp.model.name)
    stages: list[tuple[str, int | None]] = [("teacher", None)] if opts.teacher is None else []
    stages += [("baseline", None)]
    stages += [(stage, k) for k in opts.top_k for stage in ("select", "pretrain", "finetune")]
    runs = [stage_name(name, stage, k) for stage, k in stages]
    made = [Made("run", run, f"suffix {run[len(name) :]!r}") for run in runs]
    check_made_names(name, source, made, at_most("run.name"))
    return name


def _derive(exp: Experiment, **sections: dict[str, Any]) -> Experiment:
    """`exp` with the keys of `sections` replaced, validated as any config is."""
    raw = exp.to_dict()
    for section, values in sections.items():
        raw[section] = {**raw[section], **values}
    return build_experiment(raw, "dlperf distill")


@dataclass
class Plan:
    """A distill study checked and ready to run; nothing stored yet."""

    name: str
    opts: DistillConfig
    base: Experiment  # the labelled data and recipe every stage starts from
    labelled: ImageData
    given: teacher.Teacher | None  # --teacher
    student: dict[str, Any]  # the student's [model] section
    pool: pool.Pool
    device: torch.device
    warnings: list[str]  # the labelled data's and the pool's, for the study to say

    def teacher_exp(self) -> Experiment:
        return _derive(self.base, run={"name": stage_name(self.name, "teacher")})

    def baseline_exp(self) -> Experiment:
        name = stage_name(self.name, "baseline")
        return _derive(self.base, model=self.student, run={"name": name})


def plan(job: DistillJob, store: RunStore, reporter: Reporter | None = None) -> Plan:
    """Check everything about `job`'s distill study that can be checked before it runs;
    `reporter` hears the labelled set's and the pool's reading."""
    exp, opts = job.experiment, job.distill
    if opts.unlabeled is None:
        raise UserError("give the unlabelled images with --unlabeled", f"e.g. {pool.EXAMPLE}")
    name = _check_names(exp, opts)
    device = pick_device(exp.run.device)
    pool_cfg, labelled_cfg = pool.parse(opts.unlabeled, exp)
    base = _derive(exp, data=labelled_cfg.model_dump(mode="json"), run={"checkpoint": True})
    # the students have no weights to imply them; the warnings carry the reader's notes,
    # said only at a set's first load (this one)
    base, labelled, warnings = as_run(base, store, reporter)
    if opts.top_p > labelled.num_classes:
        raise UserError(
            f"--top-p {opts.top_p} is more than the {labelled.num_classes} classes of "
            f"{labelled.name}",
            f"use --top-p 1..{labelled.num_classes}",
        )
    given = teacher.stored(store, opts.teacher) if opts.teacher is not None else None
    if given is not None:
        _check_teacher(given, labelled, base)
    student = opts.student or exp.model.name
    kwargs = exp.model.kwargs if student == exp.model.name else {}
    model = {"name": student, "kwargs": kwargs, "weights": None, "transfer": "scratch"}
    teacher_model = _check_stages(base, labelled, model, opts, given is None, store)
    unlabeled = pool.load(opts.unlabeled, pool_cfg, labelled, reporter)
    # The teacher at the batch sizes it will score the pool at, which no check tried: a
    # forward wrong there failed only at scoring, after the teacher and the baseline trained.
    scoring = len(unlabeled.images), opts.score_batch
    if teacher_model is not None:
        what = f"'{base.model.name}'"  # as `run` names it: no run yet
        teacher.check_scoring_batches(teacher_model, what, labelled.shape, *scoring)
    else:  # --teacher's, with its weights, as it will score
        assert given is not None
        warnings += _check_stored_teacher(given, store, scoring, reporter or NullReporter())
    # Before the teacher trains: a K whose pretrain stage cannot run was refused only then.
    pretrain.check_plan(opts, len(unlabeled.images), labelled.num_classes, base.target.accuracy)
    pretrain.check_profile(opts, len(unlabeled.images), labelled.num_classes, base)
    warnings += unlabeled.notes
    return Plan(name, opts, base, labelled, given, model, unlabeled, device, warnings)


def _check_stages(
    base: Experiment,
    labelled: ImageData,
    student: dict[str, Any],
    opts: DistillConfig,
    trains_teacher: bool,
    store: RunStore,
) -> torch.nn.Module | None:
    """Refuse, before the study is made, what `dlperf run` refuses of a run before recording
    it (a batch larger than the training split, target.accuracy without a validation split, a
    training split of one class, a model that does not build or take the batch, ...), for
    the labelled stages: the teacher (`base`, unless --teacher gives it) and the baseline
    (the `student` model), on the `labelled` data every such stage trains on. Left to the
    stages' runs, these were refused after the study and its folder were made, which stayed
    empty. The fine-tuning is the baseline's model and data, but its own epochs: held to
    run.profile's window here, as the runs are. Returns the teacher's model as checked (None
    with --teacher), for its scoring's batch sizes once the pool is read."""
    built: set[str] = set()  # a student of the teacher's model and recipe is built once
    teacher_model = None
    if trains_teacher:
        # check_unrecorded's checks but its build, told it is done; then that build
        # (build_checked, its own), kept rather than built again for the scoring's checks
        key = checked_alike(base)
        check_unrecorded(base, labelled, pretrained.resolve(base.model, store), {key})
        teacher_model = build_checked(base, labelled, torch.device("cpu"))
        built.add(key)
    check_unrecorded(_derive(base, model=student), labelled, None, built)
    epochs = opts.finetune_epochs or base.train.epochs
    try:
        check_profile_fits(_derive(base, train={"epochs": epochs}), labelled)
    except UserError as e:
        raise UserError(
            f"the finetune stage (distill.finetune_epochs = {epochs}): {e.message}",
            "lower run.warmup_steps or run.profile.active, or raise distill.finetune_epochs",
        ) from None
    return teacher_model


def _check_stored_teacher(
    given: teacher.Teacher, store: RunStore, scoring: tuple[int, int], reporter: Reporter
) -> list[str]:
    """--teacher's model, built with its weights, tried at the batch sizes it will score at;
    the warning to say where its model file (or a module beside it) changed since it
    trained: it scores as the files are now, as export exports, where it scored with no word
    (docs/run.md: --teacher treats such a change as export does). A build or check that
    fails says the change first, which alone lost it."""
    run = store.get_run(given.run_id)
    with telling_changed(run, lambda said: reporter.log(f"warning: {said}")):
        trained = teacher.build(given, store, torch.device("cpu"))
        teacher.check_scoring_batches(trained, teacher.named(given), given.shape, *scoring)
    changed = model_file_changed(run, "scored")
    return [] if changed is None else [changed]


def _check_teacher(given: teacher.Teacher, labelled: ImageData, base: Experiment) -> None:
    """A stored teacher must take the experiment's images, know its classes and have trained
    on its splits (so that it saw no held-out label and shares the test set)."""
    where = f"teacher run {given.run_id}"
    if given.shape != labelled.shape:
        raise UserError(
            f"{where} takes {'x'.join(map(str, given.shape))} images; the experiment's "
            f"{labelled.name} are {'x'.join(map(str, labelled.shape))}",
            f"set data.image_size = {given.shape[-1]}",
        )
    if given.classes != labelled.num_classes:
        raise UserError(
            f"{where} has {given.classes} classes; {labelled.name} has {labelled.num_classes}",
            f"give --teacher a run trained on {labelled.name} (dlperf runs list), or leave "
            "--teacher out to train one",
        )
    trained, now = list(given.class_names), list(labelled.classes)
    if trained and now and trained != now:  # an image folder's class renamed since, say
        raise UserError(
            f"{where} was trained on classes {few(trained)}; {labelled.name} has {few(now)}: "
            "its scores would be taken for other classes than they are of",
            "give --teacher a run trained on these classes (dlperf runs list), or leave "
            "--teacher out to train one",
        )
    for key in SAME_DATA:
        theirs, ours = getattr(given.exp.data, key), getattr(base.data, key)
        if theirs == ours:
            continue
        if key == "holdout":
            raise UserError(
                f"{where} did not train with data.holdout = {ours:g}: it saw the labels of "
                "the images held out as unlabelled",
                f"train the teacher with --set data.holdout={ours:g}, or leave out --teacher",
            )
        raise UserError(
            f"{where} trained on other data: data.{key} {theirs!r}, the experiment's {ours!r}",
            "train the teacher on the experiment's data, or leave out --teacher",
        )


@dataclass(frozen=True)
class Staged:
    """A stage's run, trained now or `reused` (it finished before in the study)."""

    run_id: int
    status: str
    reused: bool
    test_accuracy: float | None = None
    error: str | None = None  # a failed run's

    def failure(self, stage: str) -> str | None:
        """Why the run ended the study as `stage`; None when it finished."""
        failed = f"{stage} run {self.run_id} {self.status}: {self.error}"
        return None if self.status == FINISHED else failed


@dataclass(frozen=True)
class SelectSummary(Record):
    """A select run's stored summary: the images kept per class, their precision against
    the pool's hidden labels (None without them), the teacher's scoring and the npz file."""

    top_k: int
    top_p: int
    selected: int
    kept: list[int]
    pseudo_label_precision: float | None
    class_precision: list[float | None] | None
    images: int
    scoring_s: float
    scoring_images_per_s: float
    file: str


@dataclass(frozen=True)
class Selected:
    """The select stage of one K: its run, made now or `reused`, and that run's summary."""

    run_id: int
    reused: bool
    summary: SelectSummary


@dataclass
class _Study:
    """One distill study being run: its plan, finished runs to reuse, the new runs' home."""

    store: RunStore
    plan: Plan
    study_id: int
    directory: Path
    reporter: Reporter
    done: dict[str, dict[str, Any]]  # finished runs of the study by config hash (`_finished`)
    # A stop's check that the study is whole (`_whole`): a stage not stored finished raises
    # _NotStored, nothing is trained or selected.
    only_reuse: bool = False
    scored: teacher.Scores | None = field(default=None, init=False)
    # The last K's stages have begun: before, a stop left one of them not run.
    on_last: bool = field(default=False, init=False)

    def reused(self, digest: str, label: str) -> dict[str, Any] | None:
        found = self.done.get(digest)
        if found is not None:
            self.reporter.log(f"{label}: run {found['id']} finished before, reused")
        return found

    def stage(self, stage: str, exp: Experiment, tags: dict[str, Any]) -> Staged:
        """Train `exp` as `stage`, or reuse its finished run."""
        label = f"{stage} K={tags['top_k']}" if "top_k" in tags else stage
        digest = exp.config_hash()
        found = self.reused(digest, label)
        if found is not None:
            self.tag(found, {"stage": stage, **tags})
            accuracy = RunSummary.stored(found["summary"]).test_accuracy
            return Staged(found["id"], FINISHED, not found["mine"], accuracy)
        if self.only_reuse:
            raise _NotStored
        self.reporter.log(f"{label}: training {exp.run.name}")
        result = run_experiment(exp, self.store, self.reporter, study_id=self.study_id)
        tags = {k: str(v) for k, v in {"stage": stage, **tags}.items()}
        self.store.set_tags(result.run_id, tags)
        self.reporter.log(f"{label}: run {result.run_id} {result.status}")
        summary = result.summary or RunSummary()  # a failed run's is empty
        if result.finished:
            self.done[digest] = _entry(result.run_id, summary.to_dict(), mine=True, tagged=True)
        return Staged(result.run_id, result.status, False, summary.test_accuracy, result.error)

    def scores(self, given: teacher.Teacher) -> teacher.Scores:
        """The teacher's scores of the pool, computed once per command."""
        if self.scored is None:
            p = self.plan
            set_threads(p.base.run.threads)
            self.reporter.log(f"teacher run {given.run_id} scoring {len(p.pool.images)} images")
            try:
                self.scored = teacher.score(
                    given, self.store, p.pool.images, p.device, p.opts.score_batch
                )
            except NoSuchRun:
                try:
                    self.store.get_run(given.run_id)
                except NoSuchRun:
                    # Deleted by another process since the plan checked it: "no run 1 in the
                    # store", exit 2, blamed the input, which named no run (or named one there)
                    raise GoneMeanwhile(
                        f"teacher run {given.run_id} was deleted (`dlperf runs delete`) while "
                        "distill scored with it",
                        "run distill again: without --teacher it trains a teacher anew",
                    ) from None
                raise  # another run's, not the teacher's
        return self.scored

    def select(self, given: teacher.Teacher, k: int) -> Selected:
        """The select stage of K: a `select` run whose summary holds the counts, precision
        and the pseudo-labelled file."""
        p = self.plan
        config = {"teacher": given.run_id, "unlabeled": p.pool.spec, "pool": p.pool.digest,
                  "images": len(p.pool.images), "top_k": k, "top_p": p.opts.top_p}  # fmt: skip
        digest = hashlib.sha256(json.dumps(config, sort_keys=True).encode()).hexdigest()[:16]
        found = self.done.get(digest)
        before = SelectSummary.stored(found["summary"]) if found else None
        if found and before and Path(before.file).is_file():
            broken = _unreadable(Path(before.file))
            if broken is None:
                self.reused(digest, f"select K={k}")  # says so
                self.tag(found, {"stage": "select", **self.tags(given, k)})
                return Selected(found["id"], not found["mine"], before)
            # dlperf's own file (truncated, say): made again, as a deleted one is
            self.reporter.log(f"warning: select K={k}: {broken}; selecting again")
        if self.only_reuse:
            raise _NotStored
        timed = self.scores(given)
        chosen = select(timed.scores, k, p.opts.top_p)
        hidden = p.pool.hidden
        overall, per_class = precision(chosen, hidden) if hidden is not None else (None, None)
        images = p.pool.images[chosen.index]
        path = _write_pseudo(self.directory, images, chosen.label, p.labelled.classes)
        summary = SelectSummary(k, p.opts.top_p, len(chosen), chosen.kept, overall, per_class,
                                len(p.pool.images), timed.seconds, timed.images_per_s,
                                str(path))  # fmt: skip
        with self.store.new_run(
            name=stage_name(p.name, "select", k),
            kind="select",
            config=config,
            config_hash=digest,
            system=system_info(timed.device, torch.get_num_threads()),
            study_id=self.study_id,
        ) as record:
            self.store.add_artifact(record.id, "pseudo-labels", path)
            record.summary = summary.to_dict()
        tags = {"stage": "select", **self.tags(given, k)}
        self.store.set_tags(record.id, {key: str(v) for key, v in tags.items()})
        self.done[digest] = _entry(record.id, record.summary, mine=True, tagged=True)
        said = f", pseudo-label precision {overall:.4f}" if overall is not None else ""
        self.reporter.log(f"select K={k}: kept {len(chosen)} images{said}")
        return Selected(record.id, False, summary)

    def tag(self, found: dict[str, Any], tags: dict[str, Any]) -> None:
        """A reused stage's run tagged as its stage, where a stop left it untagged: one that came
        as the run was stored finished, before its tags were set (the report reads a study's
        stages by them, and reusing it never tagged it)."""
        if not found["tagged"]:
            self.store.set_tags(found["id"], {key: str(v) for key, v in tags.items()})
            found["tagged"] = True

    def tags(self, given: teacher.Teacher, k: int) -> dict[str, Any]:
        p = self.plan
        return {"top_k": k, "top_p": p.opts.top_p, "teacher": given.run_id,
                "unlabeled": p.pool.spec}  # fmt: skip

    def student(self, given: teacher.Teacher, k: int) -> StudentRow:
        """Select, pretrain and finetune one student; its row of the result."""
        p = self.plan
        chosen = self.select(given, k)
        s = chosen.summary
        row = StudentRow(k, p.opts.top_p, s.selected, s.kept, s.pseudo_label_precision,
                         s.class_precision, s.scoring_images_per_s, chosen.run_id,
                         chosen.reused)  # fmt: skip
        data = {"name": "npz", "root": s.file, "mean": list(given.mean),
                "std": list(given.std), "image_size": None, "holdout": 0.0, "limit": None,
                # a tenth of under 6 images is no test image, which the npz reader refuses
                # at a test_fraction above 0: 0 says there is none (pretrain.sizes alike)
                "test_fraction": pretrain.FRACTION if pretrain.sizes(sum(s.kept))[2] else 0.0,
                "val_fraction": pretrain.FRACTION}  # fmt: skip
        epochs = p.opts.pretrain_epochs or p.base.train.epochs
        pre = _derive(
            p.base,
            model=p.student,
            data=data,
            train={"epochs": epochs},
            run={"name": stage_name(p.name, "pretrain", k)},
        )
        pseudo = load_data(pre.data, self.reporter)
        if (seed := pretrain.split_seed(pseudo, pre.data)) != pre.data.split_seed:
            pre = _derive(pre, data={"split_seed": seed})
            pseudo = load_data(pre.data, self.reporter)
        pretrain.check_kept(k, pseudo, s.kept, p.opts, pre.target.accuracy)
        # A small K leaves fewer pseudo-labelled images than a batch: pretrain on all at once.
        images = len(pseudo.train)
        if pre.train.batch_size > images:
            self.reporter.log(f"pretrain K={k}: batch {images}, all its training images")
            pre = _derive(pre, train={"batch_size": images})
        tags = {**self.tags(given, k), "select": chosen.run_id}
        run = self.stage("pretrain", pre, tags)
        row = replace(row, pretrain_run_id=run.run_id, pretrain_test_accuracy=run.test_accuracy,
                      pretrain_batch_size=pre.train.batch_size)  # fmt: skip
        if (error := run.failure("pretrain")) is not None:
            return replace(row, status="failed", error=error)
        train: dict[str, Any] = {"epochs": p.opts.finetune_epochs or p.base.train.epochs}
        if p.opts.finetune_lr is not None:
            train["lr"] = p.opts.finetune_lr
        weights = {"weights": f"run:{run.run_id}", "transfer": "finetune", "head": "keep"}
        fine = _derive(
            p.base,
            model={**p.student, **weights},
            train=train,
            run={"name": stage_name(p.name, "finetune", k)},
        )
        run = self.stage("finetune", fine, {**tags, "pretrain": run.run_id})
        row = replace(row, finetune_run_id=run.run_id, test_accuracy=run.test_accuracy)
        error = run.failure("finetune")
        return row if error is None else replace(row, status="failed", error=error)


def _write_pseudo(
    directory: Path, images: torch.Tensor, labels: torch.Tensor, classes: list[str]
) -> Path:
    """The pseudo-labelled set as an npz file named by its content (so a run's config hash
    names its data), written once."""
    images_np, labels_np, classes_np = images.numpy(), labels.numpy(), np.array(classes)
    digest = hashlib.sha256()
    for array in (images_np, labels_np, classes_np):
        digest.update(array.tobytes())
    path = directory / f"pseudo-{digest.hexdigest()[:12]}.npz"
    if (kind := not_regular(path)) is not None:  # the rename into it would name its .part file
        raise UserError(
            f"{path} is {kind}, where distill keeps a pseudo-labelled file",
            "remove it, and run distill again",
        )
    if _unreadable(path) is not None:  # a truncated one of this name is written again
        with writing(path), replaced(path) as part:
            np.savez(part, images=images_np, labels=labels_np, classes=classes_np)
    return path


def _unreadable(path: Path) -> str | None:
    """Why a pseudo-labelled file cannot be read (missing, truncated, corrupt); None if it can."""
    try:
        read_npz(path)
    except UserError as e:
        return e.message
    return None


def oversized_k(top_k: list[int], pool: int) -> list[str]:
    """A K of at least the pool's size keeps every image a class could take: such students
    all train on the same images, and K compares nothing (--top-k 1000000000 ran silently)."""
    big = [k for k in top_k if k >= pool]
    if not big:
        return []
    ks = ", ".join(map(str, big))
    return [
        f"K = {ks} is not below the {pool} unlabelled images: every image is kept, so K "
        "selects nothing (give K values below the pool's size)"
    ]


def run_distill(
    job: DistillJob,
    store: RunStore,
    resume: int | None = None,
    new: bool = False,
    reporter: Reporter | None = None,
) -> DistillResult:
    """Run (or continue) the distill study of `exp` and its [distill] section; everything is
    checked before anything is stored."""
    reporter = reporter or NullReporter()
    p = plan(job, store, reporter)
    exp = job.experiment
    study_id = choose_study(store, p.name, "distill", resume, new)
    out_dir = store.artifact_dir(exp.run.out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)  # an unusable out_dir fails before the study
    if study_id is None:
        study_id = store.create_study(p.name, "distill")
    directory = out_dir / f"study-{study_id}"
    directory.mkdir(exist_ok=True)
    reporter.log(
        f"distill {p.name!r}, study {study_id}: {len(p.pool.images)} unlabelled images, "
        f"K = {', '.join(map(str, p.opts.top_k))}, P = {p.opts.top_p}"
    )
    for warning in [*p.warnings, *oversized_k(p.opts.top_k, len(p.pool.images))]:
        reporter.log(f"warning: {warning}")
    if p.pool.unmeasured is not None:  # the summaries' null precision, said
        reporter.log(f"note: {p.pool.unmeasured}")
    # The study's newest run before this command: its own are newer.
    since = max((run.id for run in store.list_runs(study_id=study_id, limit=1)), default=0)
    done = _finished(store, study_id, p.labelled.classes)
    study = _Study(store, p, study_id, directory, reporter, done)
    result = DistillResult(
        study_id, p.name, None, None, [], None, p.labelled.classes, p.pool.spec, str(directory)
    )
    # A stage stopped by `runs delete --force` says so before the study's stop line, as
    # `run` says it of its run: "continue it" alone read as if Ctrl-C had stopped it.
    with telling_deleted(store, lambda: _written_last(store, study_id), reporter.log):
        try:
            result = _stages(study, result)
            if result.error is None:
                # Every stage stored finished: the study is whole and its outcome decided,
                # as `run`'s stored run is. One stop from here (its figure drawn, its table
                # printed) does not unsay it; a second ends what is left, 128 + the first.
                stopping.settle()
            return result
        except KeyboardInterrupt:
            # A stop as the last stage's run was stored finished (its mark is shielded and
            # the stop raised once written, or its "finished" line was said): nothing is left
            # to run, and "continue it ... --resume" would name a study whole (round 68, as a
            # sweep's). Spared: store reads, as `run`'s after a stop; a second stop ends them.
            if not study.on_last:  # the last K's stages had not begun: one is not run
                raise
            with stopping.spared():
                whole = _whole(study, result, since)
                if whole is None:
                    raise
                stopping.settle()
            return whole


class _NotStored(Exception):
    """A stage that a stop's check (`_whole`) found not stored finished: the study is not whole."""


def _entry(run_id: int, summary: dict[str, Any], mine: bool, tagged: bool) -> dict[str, Any]:
    """A finished stage's run as a stage reuses it: `mine`, this command's own (it is not said
    reused); `tagged`, whether its stage's tags were set."""
    return {"id": run_id, "summary": summary, "mine": mine, "tagged": tagged}


def _finished(
    store: RunStore, study_id: int, classes: list[str], since: int | None = None
) -> dict[str, dict[str, Any]]:
    """The study's finished runs that a stage may reuse, the newest of each config hash.
    `since`: runs newer than it that this process wrote are its own (`_entry`'s mine)."""
    done: dict[str, dict[str, Any]] = {}
    for stored in store.list_runs(study_id=study_id):  # newest first
        if stored.status != "finished" or not stored.config_hash:
            continue
        # The modules its model file imports are no part of its config hash (that needs the
        # file imported): a run trained before one changed is no stage of the code as it is;
        # nor one whose run: weights resolve to another run now (a newer run:last:NAME).
        if changed_source(stored.config, stored.system, store) is not None:
            continue
        # Nor one trained on classes named otherwise (an image folder's renamed since, the
        # same count): its outputs stand for other classes than the data's by those names.
        named = (stored.trained.data or {}).get("class_names")
        if named is None or named == list(classes):
            pid = (stored.process or {}).get("pid")
            mine = since is not None and stored.id > since and pid == os.getpid()
            entry = _entry(stored.id, stored.summary, mine, "stage" in stored.tags)
            done.setdefault(stored.config_hash, entry)
    return done


def _whole(study: _Study, result: DistillResult, since: int) -> DistillResult | None:
    """The study's result as a command that ran on would have given it, once a stop found
    every stage stored finished; None when one is not. Its stages are read again from the
    store, none trained or selected, nothing said: the stop's stage stored finished is no
    longer cut short, and this command's own stages are not said reused."""
    p = study.plan
    done = _finished(study.store, study.study_id, p.labelled.classes, since)
    again = _Study(study.store, p, study.study_id, study.directory, NullReporter(), done, True)
    again.scored = study.scored  # the teacher's scoring speed, if this command scored
    empty = replace(result, teacher=None, baseline=None, students=[], error=None)
    try:
        return _stages(again, empty)
    except Exception:  # _NotStored, or a store or file that fails now: not known whole
        return None


def _written_last(store: RunStore, study_id: int) -> list[int]:
    """The newest run of the study that this process wrote: the stage a stop cut, if any."""
    for run in store.list_runs(study_id=study_id):  # newest first
        if (run.process or {}).get("pid") == os.getpid():
            return [run.id]
    return []


def _stages(study: _Study, result: DistillResult) -> DistillResult:
    """Train (or reuse) the study's stages: the teacher, the baseline, then each K's student,
    until one does not finish."""
    p, store = study.plan, study.store
    given, reused = p.given, True
    if given is None:
        run = study.stage("teacher", p.teacher_exp(), {})
        result.error = run.failure("teacher")
        if result.error is not None:
            return result
        given, reused = teacher.stored(store, run.run_id), run.reused
    model, accuracy = given.exp.model.name, given.test_accuracy
    result.teacher = TeacherRow(given.run_id, model, accuracy, None, reused)
    if p.baseline_exp().config_hash() == store.get_run(given.run_id).config_hash:
        result.baseline = BaselineRow(given.run_id, model, accuracy, reused, True)
    else:
        run = study.stage("baseline", p.baseline_exp(), {})
        student = p.student["name"]
        result.baseline = BaselineRow(run.run_id, student, run.test_accuracy, run.reused, False)
        result.error = run.failure("baseline")
        if result.error is not None:
            return result

    for k in p.opts.top_k:
        study.on_last = k == p.opts.top_k[-1]
        row = study.student(given, k)
        result.students.append(row)
        result.error = row.error
        if row.error is not None:
            break
    # This command's scoring, or, when every selection was reused, the first one's.
    speeds = [s.scoring_images_per_s for s in result.students]
    scored = study.scored.images_per_s if study.scored is not None else None
    speed = scored or (speeds[0] if speeds else None)
    result.teacher = replace(result.teacher, scoring_images_per_s=speed)
    winner = best(result.students)
    result.best_top_k = winner.top_k if winner is not None else None
    return result
