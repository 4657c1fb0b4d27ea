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
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from dlperf.config import DistillConfig, DistillJob, Experiment, build_experiment
from dlperf.data import ImageData, load_data
from dlperf.distill import pool, teacher
from dlperf.distill.select import precision, select
from dlperf.distill.summary import DistillResult, best
from dlperf.engine.build import as_run, build_model
from dlperf.errors import UserError
from dlperf.experiment.run import run_experiment
from dlperf.paths import replaced
from dlperf.progress import NullReporter, Reporter
from dlperf.store import RunStore
from dlperf.store.studies import choose_study
from dlperf.system import pick_device, set_threads, system_info

# The teacher's data must be the experiment's: same images, same splits.
SAME_DATA = ("name", "root", "split_seed", "test_fraction", "val_fraction", "holdout")


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

    def teacher_exp(self) -> Experiment:
        return _derive(self.base, run={"name": f"{self.name}-teacher"})

    def baseline_exp(self) -> Experiment:
        return _derive(self.base, model=self.student, run={"name": f"{self.name}-baseline"})


def plan(job: DistillJob, store: RunStore) -> Plan:
    """Check everything about `job`'s distill study that can be checked before it runs."""
    exp, opts = job.experiment, job.distill
    if opts.unlabeled is None:
        raise UserError("give the unlabelled images with --unlabeled", f"e.g. {pool.EXAMPLE}")
    device = pick_device(exp.run.device)
    pool_cfg, labelled_cfg = pool.parse(opts.unlabeled, exp)
    base = _derive(exp, data=labelled_cfg.model_dump(mode="json"), run={"checkpoint": True})
    base, labelled, _ = as_run(base, store)  # the students have no weights to imply them
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
    build_model(_derive(base, model=model), labelled, torch.device("cpu"))  # the student fits
    unlabeled = pool.load(opts.unlabeled, pool_cfg, labelled)
    name = exp.run.name or exp.model.name
    return Plan(name, opts, base, labelled, given, model, unlabeled, device)


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
            f"{where} has {given.classes} classes; {labelled.name} has {labelled.num_classes}"
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


@dataclass
class _Study:
    """One distill study being run: its plan, finished runs to reuse, the new runs' home."""

    store: RunStore
    plan: Plan
    study_id: int
    directory: Path
    reporter: Reporter
    done: dict[str, dict[str, Any]]  # finished runs of the study by config hash
    scored: teacher.Scores | None = field(default=None, init=False)

    def reused(self, digest: str, label: str) -> dict[str, Any] | None:
        found = self.done.get(digest)
        if found is not None:
            self.reporter.log(f"{label}: run {found['id']} finished before, reused")
        return found

    def stage(self, stage: str, exp: Experiment, tags: dict[str, Any]) -> dict[str, Any]:
        """Train `exp` as `stage`, or reuse its finished run: a summary with run_id, status
        and reused."""
        label = f"{stage} K={tags['top_k']}" if "top_k" in tags else stage
        digest = exp.config_hash()
        found = self.reused(digest, label)
        if found is not None:
            return {**found["summary"], "run_id": found["id"], "status": "finished", "reused": True}
        self.reporter.log(f"{label}: training {exp.run.name}")
        result = run_experiment(exp, self.store, self.reporter, study_id=self.study_id).to_dict()
        tags = {k: str(v) for k, v in {"stage": stage, **tags}.items()}
        self.store.set_tags(result["run_id"], tags)
        self.reporter.log(f"{label}: run {result['run_id']} {result['status']}")
        if result["status"] == "finished":
            self.done[digest] = {"id": result["run_id"], "summary": result}
        return {**result, "reused": False}

    def scores(self, given: teacher.Teacher) -> teacher.Scores:
        """The teacher's scores of the pool, computed once per command."""
        if self.scored is None:
            p = self.plan
            set_threads(p.base.run.threads)
            self.reporter.log(f"teacher run {given.run_id} scoring {len(p.pool.images)} images")
            self.scored = teacher.score(
                given, self.store, p.pool.images, p.device, p.opts.score_batch
            )
        return self.scored

    def select(self, given: teacher.Teacher, k: int) -> dict[str, Any]:
        """The select stage of K: a `select` run whose summary holds the counts, precision
        and the pseudo-labelled file."""
        p = self.plan
        config = {"teacher": given.run_id, "unlabeled": p.pool.spec, "pool": p.pool.digest,
                  "images": len(p.pool.images), "top_k": k, "top_p": p.opts.top_p}  # fmt: skip
        digest = hashlib.sha256(json.dumps(config, sort_keys=True).encode()).hexdigest()[:16]
        found = self.reused(digest, f"select K={k}")
        if found is not None and Path(found["summary"]["file"]).is_file():
            return {**found["summary"], "run_id": found["id"], "reused": True}
        timed = self.scores(given)
        chosen = select(timed.scores, k, p.opts.top_p)
        hidden = p.pool.hidden
        overall, per_class = precision(chosen, hidden) if hidden is not None else (None, None)
        images = p.pool.images[chosen.index]
        path = _write_pseudo(self.directory, images, chosen.label, p.labelled.classes)
        with self.store.new_run(
            name=f"{p.name}-select-k{k}",
            kind="select",
            config=config,
            config_hash=digest,
            system=system_info(timed.device, torch.get_num_threads()),
            study_id=self.study_id,
        ) as record:
            self.store.add_artifact(record.id, "pseudo-labels", path)
            record.summary = {
                "top_k": k,
                "top_p": p.opts.top_p,
                "selected": len(chosen),
                "kept": chosen.kept,
                "pseudo_label_precision": overall,
                "class_precision": per_class,
                "images": len(p.pool.images),
                "scoring_s": timed.seconds,
                "scoring_images_per_s": timed.images_per_s,
                "file": str(path),
            }
        tags = {"stage": "select", **self.tags(given, k)}
        self.store.set_tags(record.id, {key: str(v) for key, v in tags.items()})
        self.done[digest] = {"id": record.id, "summary": record.summary}
        said = f", pseudo-label precision {overall:.4f}" if overall is not None else ""
        self.reporter.log(f"select K={k}: kept {len(chosen)} images{said}")
        return {**record.summary, "run_id": record.id, "reused": False}

    def tags(self, given: teacher.Teacher, k: int) -> dict[str, Any]:
        p = self.plan
        return {"top_k": k, "top_p": p.opts.top_p, "teacher": given.run_id,
                "unlabeled": p.pool.spec}  # fmt: skip

    def student(self, given: teacher.Teacher, k: int) -> dict[str, Any]:
        """Select, pretrain and finetune one student; its row of the result."""
        p = self.plan
        chosen = self.select(given, k)
        row: dict[str, Any] = {
            "top_k": k,
            "top_p": p.opts.top_p,
            **{key: chosen[key] for key in ("selected", "kept", "pseudo_label_precision",
                                            "class_precision", "scoring_images_per_s")},
            "select_run_id": chosen["run_id"],
            "select_reused": chosen["reused"],
            "pretrain_run_id": None,
            "finetune_run_id": None,
            "pretrain_test_accuracy": None,
            "test_accuracy": None,
            "pretrain_batch_size": None,
            "status": "finished",
            "error": None,
        }  # fmt: skip
        data = {"name": "npz", "root": chosen["file"], "mean": list(given.mean),
                "std": list(given.std), "image_size": None, "holdout": 0.0, "limit": None,
                "test_fraction": 0.1, "val_fraction": 0.1}  # fmt: skip
        epochs = p.opts.pretrain_epochs or p.base.train.epochs
        pre = _derive(
            p.base,
            model=p.student,
            data=data,
            train={"epochs": epochs},
            run={"name": f"{p.name}-pretrain-k{k}"},
        )
        # A small K leaves fewer pseudo-labelled images than a batch: pretrain on all at once.
        images = len(load_data(pre.data).train)
        if pre.train.batch_size > images:
            self.reporter.log(f"pretrain K={k}: batch {images}, all its training images")
            pre = _derive(pre, train={"batch_size": images})
        row["pretrain_batch_size"] = pre.train.batch_size
        tags = {**self.tags(given, k), "select": chosen["run_id"]}
        run = self.stage("pretrain", pre, tags)
        row.update(pretrain_run_id=run["run_id"], pretrain_test_accuracy=run.get("test_accuracy"))
        if run["status"] != "finished":
            return _failed(row, "pretrain", run)
        train: dict[str, Any] = {"epochs": p.opts.finetune_epochs or p.base.train.epochs}
        if p.opts.finetune_lr is not None:
            train["lr"] = p.opts.finetune_lr
        weights = {"weights": f"run:{run['run_id']}", "transfer": "finetune", "head": "keep"}
        fine = _derive(
            p.base,
            model={**p.student, **weights},
            train=train,
            run={"name": f"{p.name}-finetune-k{k}"},
        )
        run = self.stage("finetune", fine, {**tags, "pretrain": run["run_id"]})
        row["finetune_run_id"], row["test_accuracy"] = run["run_id"], run.get("test_accuracy")
        return row if run["status"] == "finished" else _failed(row, "finetune", run)


def _failed(row: dict[str, Any], stage: str, run: dict[str, Any]) -> dict[str, Any]:
    error = f"{stage} run {run['run_id']} {run['status']}: {run.get('error')}"
    return {**row, "status": "failed", "error": error}


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
    if not path.is_file():
        with replaced(path) as part:
            np.savez(part, images=images_np, labels=labels_np, classes=classes_np)
    return path


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
    p = plan(job, store)
    exp = job.experiment
    study_id = choose_study(store, p.name, "distill", resume, new)
    out_dir = store.artifact_dir(exp.run.out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)  # an unusable out_dir fails before the study
    if study_id is None:
        study_id = store.create_study(p.name, "distill")
    directory = out_dir / f"study-{study_id}"
    directory.mkdir(exist_ok=True)
    done: dict[str, dict[str, Any]] = {}
    for stored in store.list_runs(study_id=study_id):  # newest first
        if stored.status == "finished" and stored.config_hash:
            done.setdefault(stored.config_hash, {"id": stored.id, "summary": stored.summary})
    study = _Study(store, p, study_id, directory, reporter, done)
    reporter.log(
        f"distill {p.name!r}, study {study_id}: {len(p.pool.images)} unlabelled images, "
        f"K = {', '.join(map(str, p.opts.top_k))}, P = {p.opts.top_p}"
    )
    for warning in oversized_k(p.opts.top_k, len(p.pool.images)):
        reporter.log(f"warning: {warning}")
    result = DistillResult(
        study_id, p.name, {}, {}, [], None, p.labelled.classes, p.pool.spec, str(directory)
    )

    given, reused = p.given, True
    if given is None:
        run = study.stage("teacher", p.teacher_exp(), {})
        if run["status"] != "finished":
            result.error = _failed({}, "teacher", run)["error"]
            return result
        given, reused = teacher.stored(store, run["run_id"]), run["reused"]
    result.teacher = {"run_id": given.run_id, "model": given.exp.model.name,
                      "test_accuracy": given.test_accuracy, "scoring_images_per_s": None,
                      "reused": reused}  # fmt: skip
    if p.baseline_exp().config_hash() == store.get_run(given.run_id).config_hash:
        same = {k: result.teacher[k] for k in ("run_id", "model", "test_accuracy", "reused")}
        result.baseline = {**same, "same_as_teacher": True}
    else:
        run = study.stage("baseline", p.baseline_exp(), {})
        result.baseline = {"run_id": run["run_id"], "model": p.student["name"],
                           "test_accuracy": run.get("test_accuracy"), "reused": run["reused"],
                           "same_as_teacher": False}  # fmt: skip
        if run["status"] != "finished":
            result.error = _failed({}, "baseline", run)["error"]
            return result

    for k in p.opts.top_k:
        row = study.student(given, k)
        result.students.append(row)
        if row["status"] != "finished":
            result.error = row["error"]
            break
    # This command's scoring, or, when every selection was reused, the first one's.
    speeds = [s["scoring_images_per_s"] for s in result.students]
    scored = study.scored.images_per_s if study.scored is not None else None
    result.teacher["scoring_images_per_s"] = scored or (speeds[0] if speeds else None)
    winner = best(result.students)
    result.best_top_k = winner["top_k"] if winner is not None else None
    return result
