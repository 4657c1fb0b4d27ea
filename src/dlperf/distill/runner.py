"""`dlperf distill`: a teacher, a baseline and one student per K, every stage a stored run of
one `distill` study.

Stages (tag `stage` on each run; docs/distill.md):
- teacher: the experiment trained on the labelled data (or a finished run, --teacher);
- baseline: the student model trained on the labelled data only (the teacher itself when
  the student is the teacher's model with the same recipe);
- select (per K): the teacher scores the unlabelled images once (timed) and the K best per
  class are kept, written as an npz file (a `select` run records the counts and precision);
- pretrain (per K): the student trained on those pseudo-labelled images;
- finetune (per K): the student fine-tuned from its pretrain run on the labelled data.
A stage whose config (its hash) already finished in the study is reused, so the same command
resumes after an interruption; what was reused is said.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from dlperf.config import DistillConfig, Experiment, build_experiment
from dlperf.data import ImageData, load_data
from dlperf.distill import pool, teacher
from dlperf.distill.select import precision, select
from dlperf.engine import pretrained
from dlperf.engine.run import build_model, load_run_data, run_experiment
from dlperf.errors import UserError
from dlperf.progress import NullReporter, Reporter
from dlperf.store import Store
from dlperf.sweep.runner import choose_study
from dlperf.system import pick_device, set_threads, system_info


@dataclass
class DistillResult:
    study_id: int
    name: str
    teacher: dict[str, Any]  # run_id, model, test_accuracy, scoring_images_per_s, reused
    baseline: dict[str, Any]  # run_id, model, test_accuracy, reused, same_as_teacher
    students: list[dict[str, Any]]  # one per K, in the order given
    best_top_k: int | None
    classes: list[str]
    plots: list[str] = field(default_factory=list)
    error: str | None = None  # the stage that failed, which ended the study early


def _derive(exp: Experiment, **sections: dict[str, Any]) -> Experiment:
    """`exp` with the keys of `sections` replaced, validated as any config is."""
    raw = exp.to_dict()
    for section, values in sections.items():
        raw[section] = {**raw[section], **values}
    return build_experiment(raw, "dlperf distill")


@dataclass
class _Study:
    """One distill study being run: finished runs to reuse, and the new runs' home."""

    store: Store
    study_id: int
    directory: Path
    reporter: Reporter
    done: dict[str, dict[str, Any]]  # finished runs of the study by config hash

    def stage(self, stage: str, exp: Experiment, tags: dict[str, Any]) -> dict[str, Any]:
        """Train `exp` as `stage`, or reuse its finished run: a summary with run_id, status
        and reused."""
        label = f"{stage} K={tags['top_k']}" if "top_k" in tags else stage
        found = self.done.get(exp.config_hash())
        if found is not None:
            self.reporter.log(f"{label}: run {found['id']} finished before, reused")
            return {**found["summary"], "run_id": found["id"], "status": "finished", "reused": True}
        self.reporter.log(f"{label}: training {exp.run.name}")
        result = run_experiment(exp, self.store, self.reporter, study_id=self.study_id)
        self.store.set_tags(
            result["run_id"], {k: str(v) for k, v in {"stage": stage, **tags}.items()}
        )
        self.reporter.log(f"{label}: run {result['run_id']} {result['status']}")
        return {**result, "reused": False}


def run_distill(
    exp: Experiment,
    store: Store,
    resume: int | None = None,
    new: bool = False,
    reporter: Reporter | None = None,
) -> DistillResult:
    """Run (or continue) the distill study of `exp` and its [distill] section; everything is
    checked before anything is stored."""
    reporter = reporter or NullReporter()
    opts = exp.distill
    if opts.unlabeled is None:
        raise UserError("give the unlabelled images with --unlabeled", f"e.g. {pool.EXAMPLE}")
    pool_cfg, labelled_cfg = pool.parse(opts.unlabeled, exp)
    name = exp.run.name or exp.model.name
    base = _derive(exp, data=labelled_cfg.model_dump(mode="json"), run={"checkpoint": True})
    base.distill = DistillConfig()  # the stages are plain runs; tags say what they were
    labelled, _ = load_run_data(base, pretrained.resolve(base.model, store))
    if opts.top_p > labelled.num_classes:
        raise UserError(
            f"--top-p {opts.top_p} is more than the {labelled.num_classes} classes of "
            f"{labelled.name}",
            f"use --top-p 1..{labelled.num_classes}",
        )
    given = teacher.stored(store, opts.teacher) if opts.teacher is not None else None
    if given is not None:
        _check_teacher(given, labelled, labelled_cfg.holdout)
    student = opts.student or exp.model.name
    kwargs = exp.model.kwargs if student == exp.model.name else {}
    student_model = {"name": student, "kwargs": kwargs, "weights": None, "transfer": "scratch"}
    teacher_exp = _derive(base, run={"name": f"{name}-teacher"})
    baseline_exp = _derive(base, model=student_model, run={"name": f"{name}-baseline"})
    build_model(baseline_exp, labelled, torch.device("cpu"))  # the student takes the images
    unlabeled = pool.load(opts.unlabeled, pool_cfg, labelled)

    study_id = choose_study(store, name, "distill", resume, new)
    out_dir = store.artifact_dir(exp.run.out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)  # an unusable out_dir fails before the study
    if study_id is None:
        study_id = store.create_study(name, "distill")
    directory = out_dir / f"study-{study_id}"
    directory.mkdir(exist_ok=True)
    done: dict[str, dict[str, Any]] = {}
    for run in store.list_runs(study_id=study_id):  # newest first
        if run["status"] == "finished" and run["config_hash"]:
            done.setdefault(run["config_hash"], run)
    study = _Study(store, study_id, directory, reporter, done)
    reporter.log(
        f"distill {name!r}, study {study_id}: {len(unlabeled.images)} unlabelled images, "
        f"K = {', '.join(map(str, opts.top_k))}, P = {opts.top_p}"
    )
    result = DistillResult(study_id, name, {}, {}, [], None, labelled.classes)

    if given is None:
        run = study.stage("teacher", teacher_exp, {})
        if run["status"] != "finished":
            result.error = f"teacher run {run['run_id']} failed: {run.get('error')}"
            return result
        given = teacher.stored(store, run["run_id"])
        teacher_reused = run["reused"]
    else:
        teacher_reused = True
    result.teacher = {
        "run_id": given.run_id,
        "model": given.exp.model.name,
        "test_accuracy": given.test_accuracy,
        "scoring_images_per_s": None,
        "reused": teacher_reused,
    }
    teacher_hash = store.get_run(given.run_id)["config_hash"]
    if baseline_exp.config_hash() == teacher_hash:
        same = {k: result.teacher[k] for k in ("run_id", "model", "test_accuracy", "reused")}
        result.baseline = {**same, "same_as_teacher": True}
    else:
        run = study.stage("baseline", baseline_exp, {})
        result.baseline = {
            "run_id": run["run_id"],
            "model": student,
            "test_accuracy": run.get("test_accuracy"),
            "reused": run["reused"],
            "same_as_teacher": False,
        }
        if run["status"] != "finished":
            result.error = f"baseline run {run['run_id']} failed: {run.get('error')}"
            return result

    scored: list[teacher.Scores] = []  # scored once, when a K is first selected

    def scores() -> teacher.Scores:
        if not scored:
            device = pick_device(exp.run.device)
            set_threads(exp.run.threads)
            reporter.log(f"teacher run {given.run_id} scoring {len(unlabeled.images)} images")
            scored.append(teacher.score(given, store, unlabeled.images, device, opts.score_batch))
        return scored[0]

    for k in opts.top_k:
        row = _student(
            study, base, given, unlabeled, k, opts, scores, name, student_model, labelled.classes
        )
        result.students.append(row)
        if result.teacher["scoring_images_per_s"] is None or not row["select_reused"]:
            result.teacher["scoring_images_per_s"] = row["scoring_images_per_s"]
        if row["status"] != "finished":
            result.error = row["error"]
            break
    finished = [s for s in result.students if s["test_accuracy"] is not None]
    if finished:
        result.best_top_k = max(finished, key=lambda s: (s["test_accuracy"], -s["top_k"]))["top_k"]
        from dlperf.report.distill import plot_distill

        path = directory / "student_accuracy.png"
        study_key = (study_id, name)
        plot_distill(path, study_key, result.teacher, result.baseline, result.students)
        result.plots = [str(path)]
    return result


def _check_teacher(given: teacher.Teacher, labelled: ImageData, holdout: float) -> None:
    """A stored teacher must take the experiment's images and know its classes, and must not
    have seen the labels of held-out images."""
    where = f"teacher run {given.run_id}"
    if given.shape != labelled.shape:
        raise UserError(
            f"{where} takes {'x'.join(map(str, given.shape))} images; the experiment's "
            f"{labelled.name} are {'x'.join(map(str, labelled.shape))}",
            f"set data.image_size = {given.shape[-1]}",
        )
    if given.classes != labelled.num_classes:
        raise UserError(
            f"{where} has {given.classes} classes; {labelled.name} has {labelled.num_classes}"
        )
    data = given.exp.data
    if holdout and (data.name, data.holdout) != (labelled.name, holdout):
        raise UserError(
            f"{where} did not train with data.holdout = {holdout:g}: it saw the labels of "
            "the images held out as unlabelled",
            f"train the teacher with --set data.holdout={holdout:g}, or leave out --teacher",
        )


def _write_pseudo(
    directory: Path, images: torch.Tensor, labels: torch.Tensor, classes: list[str]
) -> Path:
    """The pseudo-labelled set as an npz file named by its content (so a run's config hash
    names its data), written once."""
    arrays = {"images": images.numpy(), "labels": labels.numpy(), "classes": np.array(classes)}
    digest = hashlib.sha256()
    for array in arrays.values():
        digest.update(array.tobytes())
    path = directory / f"pseudo-{digest.hexdigest()[:12]}.npz"
    if not path.is_file():
        part = path.with_suffix(".part.npz")
        np.savez(part, **arrays)
        part.replace(path)
    return path


def _select(
    study: _Study,
    given: teacher.Teacher,
    unlabeled: pool.Pool,
    k: int,
    opts: DistillConfig,
    scores: Any,
    name: str,
    classes: list[str],
) -> dict[str, Any]:
    """The select stage of K: a `select` run whose summary holds the counts and precision."""
    config = {"teacher": given.run_id, "unlabeled": unlabeled.spec, "top_k": k,
              "top_p": opts.top_p, "images": len(unlabeled.images)}  # fmt: skip
    digest = hashlib.sha256(json.dumps(config, sort_keys=True).encode()).hexdigest()[:16]
    found = study.done.get(digest)
    if found is not None and Path(found["summary"]["file"]).is_file():
        study.reporter.log(f"select K={k}: run {found['id']} finished before, reused")
        return {**found["summary"], "run_id": found["id"], "reused": True}
    timed = scores()
    chosen = select(timed.scores, k, opts.top_p)
    overall, per_class = (
        precision(chosen, unlabeled.hidden) if unlabeled.hidden is not None else (None, None)
    )
    path = _write_pseudo(study.directory, unlabeled.images[chosen.index], chosen.label, classes)
    store = study.store
    with store.new_run(
        name=f"{name}-select-k{k}",
        kind="select",
        config=config,
        config_hash=digest,
        system=system_info(timed.scores.device, torch.get_num_threads()),
        study_id=study.study_id,
    ) as record:
        store.add_artifact(record.id, "pseudo-labels", path)
        record.summary = {
            "top_k": k,
            "top_p": opts.top_p,
            "selected": len(chosen),
            "kept": chosen.kept,
            "pseudo_label_precision": overall,
            "class_precision": per_class,
            "images": len(unlabeled.images),
            "scoring_s": timed.seconds,
            "scoring_images_per_s": timed.images_per_s,
            "file": str(path),
        }
    tags = {
        "stage": "select",
        "top_k": str(k),
        "top_p": str(opts.top_p),
        "teacher": str(given.run_id),
    }
    store.set_tags(record.id, tags)
    study.reporter.log(
        f"select K={k}: kept {len(chosen)} images"
        + (f", pseudo-label precision {overall:.4f}" if overall is not None else "")
    )
    return {**record.summary, "run_id": record.id, "reused": False}


def _student(
    study: _Study,
    base: Experiment,
    given: teacher.Teacher,
    unlabeled: pool.Pool,
    k: int,
    opts: DistillConfig,
    scores: Any,
    name: str,
    student_model: dict[str, Any],
    classes: list[str],
) -> dict[str, Any]:
    """Select, pretrain and finetune one student; its row of the result."""
    chosen = _select(study, given, unlabeled, k, opts, scores, name, classes)
    row: dict[str, Any] = {
        "top_k": k,
        "top_p": opts.top_p,
        "selected": chosen["selected"],
        "kept": chosen["kept"],
        "pseudo_label_precision": chosen["pseudo_label_precision"],
        "class_precision": chosen["class_precision"],
        "scoring_images_per_s": chosen["scoring_images_per_s"],
        "select_run_id": chosen["run_id"],
        "select_reused": chosen["reused"],
        "pretrain_run_id": None,
        "finetune_run_id": None,
        "pretrain_test_accuracy": None,
        "test_accuracy": None,
        "pretrain_batch_size": None,
        "status": "finished",
        "error": None,
    }
    data = {"name": "npz", "root": chosen["file"], "mean": list(given.mean),
            "std": list(given.std), "image_size": None, "holdout": 0.0, "limit": None,
            "test_fraction": 0.1}  # fmt: skip
    pre = _derive(
        base,
        model=student_model,
        data=data,
        train={"epochs": opts.pretrain_epochs or base.train.epochs},
        run={"name": f"{name}-pretrain-k{k}"},
    )
    # A small K leaves fewer pseudo-labelled images than a batch: pretrain on all at once.
    images = len(load_data(pre.data).train)
    if pre.train.batch_size > images:
        study.reporter.log(f"pretrain K={k}: batch {images}, all {images} training images")
        pre = _derive(pre, train={"batch_size": images})
    row["pretrain_batch_size"] = pre.train.batch_size
    tags = {"top_k": k, "top_p": opts.top_p, "teacher": given.run_id, "select": chosen["run_id"]}
    run = study.stage("pretrain", pre, tags)
    row["pretrain_run_id"], row["pretrain_test_accuracy"] = run["run_id"], run.get("test_accuracy")
    if run["status"] != "finished":
        return {
            **row,
            "status": "failed",
            "error": f"pretrain run {run['run_id']} failed: {run.get('error')}",
        }
    train = {"epochs": opts.finetune_epochs or base.train.epochs}
    if opts.finetune_lr is not None:
        train["lr"] = opts.finetune_lr
    fine = _derive(
        base,
        model={**student_model, "weights": f"run:{run['run_id']}", "transfer": "finetune"},
        train=train,
        run={"name": f"{name}-finetune-k{k}"},
    )
    run = study.stage("finetune", fine, {**tags, "pretrain": run["run_id"]})
    row["finetune_run_id"], row["test_accuracy"] = run["run_id"], run.get("test_accuracy")
    if run["status"] != "finished":
        return {
            **row,
            "status": "failed",
            "error": f"finetune run {run['run_id']} failed: {run.get('error')}",
        }
    return row
