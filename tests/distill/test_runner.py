"""`dlperf distill`: the top-K/top-P selection on hand-made scores, pseudo-label precision,
the unlabelled sets (held out, another set resized, an npz file without labels), bad input,
the stages of a tiny study and their links, and a study SIGKILLed mid-stage then resumed."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from multiprocessing.process import BaseProcess
from pathlib import Path

import numpy as np
import pytest
import torch

from dlperf.config import DataConfig, Experiment
from dlperf.data import load_data
from dlperf.distill import pool, teacher
from dlperf.distill.select import precision, select
from dlperf.errors import UserError
from dlperf.procs import alive
from dlperf.store import RunStore
from tests.conftest import CliResult, write_distill_exp
from tests.faults.test_store_faults import forked_dlperf
from tests.hooks import hook_env

EVENT_S = 300  # how long a busy machine may take to get somewhere: a deadline, not a wait


def distill_json(cli: Callable[..., CliResult], *args: str) -> dict:
    result = cli(*args, "--json")
    assert result.code == 0, result.err
    return json.loads(result.out)


# `dlperf distill --json`'s document, keys in order (docs/distill.md): what scripts read.
DOC = ["study_id", "name", "teacher", "baseline", "students", "best_top_k", "classes",
       "unlabeled", "directory", "error", "plots"]  # fmt: skip
TEACHER = ["run_id", "model", "test_accuracy", "scoring_images_per_s", "reused"]
BASELINE = ["run_id", "model", "test_accuracy", "reused", "same_as_teacher"]
STUDENT = ["top_k", "top_p", "selected", "kept", "pseudo_label_precision", "class_precision",
           "scoring_images_per_s", "select_run_id", "select_reused", "pretrain_run_id",
           "finetune_run_id", "pretrain_test_accuracy", "test_accuracy", "pretrain_batch_size",
           "status", "error"]  # fmt: skip


def assert_document(out: dict) -> None:
    """`out` has the document's keys in order, in every stage it reached."""
    assert list(out) == DOC
    assert list(out["teacher"]) in ([], TEACHER) and list(out["baseline"]) in ([], BASELINE)
    assert all(list(s) == STUDENT for s in out["students"])


# --- selection ------------------------------------------------------------------------------

# 6 images x 3 classes. Top-1 classes: 0,0,1,2,1,0 (image 5 ties 0 and 1: the lower class
# wins). Top-2 adds: image 0 -> 1, 1 -> 2, 2 -> 0, 3 -> 0, 4 -> 2, 5 -> 1.
SCORES = torch.tensor(
    [
        [0.6, 0.3, 0.1],
        [0.5, 0.1, 0.4],
        [0.3, 0.6, 0.1],
        [0.2, 0.1, 0.7],
        [0.1, 0.5, 0.4],
        [0.4, 0.4, 0.2],
    ]
)


def test_top_k_per_class_among_images_whose_top_1_is_that_class() -> None:
    chosen = select(SCORES, top_k=2, top_p=1)
    # class 0: images 0 (0.6), 1 (0.5), 5 (0.4) -> the two best; class 1: 2 (0.6), 4 (0.5);
    # class 2: only image 3.
    assert chosen.index.tolist() == [0, 1, 2, 4, 3]
    assert chosen.label.tolist() == [0, 0, 1, 1, 2]
    assert chosen.kept == [2, 2, 1]


def test_top_p_lets_an_image_enter_several_classes_and_ties_go_to_the_lower_index() -> None:
    chosen = select(SCORES, top_k=3, top_p=2)
    # class 0 candidates: 0,1,2,3,5 scoring .6,.5,.3,.2,.4 -> 0,1,5. class 1: 0,2,4,5 scoring
    # .3,.6,.5,.4 -> 2,4,5. class 2: 1,3,4 -> 3 (.7), 1 (.4) and 4 (.4): the tie keeps 1 first.
    assert chosen.index.tolist() == [0, 1, 5, 2, 4, 5, 3, 1, 4]
    assert chosen.label.tolist() == [0, 0, 0, 1, 1, 1, 2, 2, 2]
    assert chosen.kept == [3, 3, 3]
    # Every image taken once per class at most, and only for one of its top-2 classes.
    pairs = list(zip(chosen.index.tolist(), chosen.label.tolist(), strict=True))
    assert len(set(pairs)) == len(pairs)


def test_a_tie_for_the_top_class_goes_to_the_lower_class() -> None:
    chosen = select(SCORES, top_k=3, top_p=1)
    # Image 5 scores 0.4 for classes 0 and 1: with P = 1 it is a candidate of class 0 only.
    assert chosen.index.tolist() == [0, 1, 5, 2, 4, 3]
    assert chosen.kept == [3, 2, 1]
    flat = select(torch.full((6, 3), 1 / 3), top_k=4, top_p=1)
    assert (flat.index.tolist(), flat.kept) == ([0, 1, 2, 3], [4, 0, 0])


def test_equal_scores_select_the_same_images_every_time() -> None:
    flat = torch.full((50, 4), 0.25)
    first = select(flat, top_k=5, top_p=4)
    assert first.index.tolist() == list(range(5)) * 4
    again = select(flat.clone(), top_k=5, top_p=4)
    assert torch.equal(first.index, again.index) and torch.equal(first.label, again.label)


def test_precision_against_hidden_labels() -> None:
    chosen = select(SCORES, top_k=2, top_p=1)  # images 0,1 -> 0; 2,4 -> 1; 3 -> 2
    hidden = torch.tensor([0, 2, 1, 2, 0, 1])
    overall, per_class = precision(chosen, hidden)
    assert overall == pytest.approx(3 / 5)
    assert per_class == [pytest.approx(0.5), pytest.approx(0.5), pytest.approx(1.0)]
    none_for_2 = select(SCORES[[0, 1, 2]], top_k=1, top_p=1)
    assert precision(none_for_2, hidden[:3])[1] == [1.0, 1.0, None]


@pytest.mark.parametrize("k, p", [(0, 1), (1, 0), (1, 4)])
def test_select_refuses_k_or_p_out_of_range(k: int, p: int) -> None:
    with pytest.raises(ValueError):
        select(SCORES, top_k=k, top_p=p)


# --- the unlabelled images ------------------------------------------------------------------


def test_holdout_takes_a_seeded_share_of_the_training_split() -> None:
    whole = load_data(DataConfig(name="digits"))
    half = load_data(DataConfig(name="digits", holdout=0.5, image_size=12))
    assert half.unlabeled is not None and half.unlabeled.images is not None
    assert len(half.train) + len(half.unlabeled) == len(whole.train)
    assert abs(len(half.train) - len(half.unlabeled)) <= 1
    assert half.unlabeled.images.shape[1:] == (1, 12, 12)  # resized with the rest
    assert len(half.test) == len(whole.test)  # validation and test splits untouched
    again = load_data(DataConfig(name="digits", holdout=0.5, image_size=12))
    assert torch.equal(again.unlabeled.labels, half.unlabeled.labels)


def test_another_set_resized_to_the_teachers_images() -> None:
    exp = Experiment()  # digits: 1x8x8
    labelled = load_data(exp.data)
    cfg, same = pool.parse("mnist5k:image_size=8", exp)
    assert same == exp.data
    images = pool.load("mnist5k:image_size=8", cfg, labelled)
    assert images.images.shape == (5000, 1, 8, 8) and images.images.dtype == torch.uint8
    assert images.hidden is not None and len(images.hidden) == 5000  # same class names


def test_an_npz_pool_without_labels_has_no_precision(tmp_path: Path) -> None:
    exp = Experiment()
    path = tmp_path / "pool.npz"
    np.savez(path, images=np.zeros((7, 1, 16, 16), np.uint8))
    cfg, _ = pool.parse(f"npz:root={path},image_size=8", exp)
    images = pool.load(f"npz:root={path},image_size=8", cfg, load_data(exp.data))
    assert images.images.shape == (7, 1, 8, 8) and images.hidden is None


def test_the_npz_data_set_reads_images_labels_and_class_names(tmp_path: Path) -> None:
    path = tmp_path / "set.npz"
    labels = np.arange(40) % 4
    np.savez(path, images=np.full((40, 3, 5, 5), 7, np.uint8), labels=labels,
             classes=np.array(["a", "b", "c", "d", "e"]))  # fmt: skip
    data = load_data(DataConfig(name="npz", root=str(path), test_fraction=0.25, val_fraction=0))
    assert (data.shape, data.num_classes, data.classes) == ((3, 5, 5), 5, list("abcde"))
    assert (len(data.train), len(data.test)) == (30, 10)
    np.savez(path, images=np.zeros((3, 1, 4, 4), np.float32), labels=np.zeros(3, int))
    with pytest.raises(UserError, match="uint8 N,C,H,W"):
        load_data(DataConfig(name="npz", root=str(path)))
    np.savez(path, images=np.zeros((3, 1, 4, 4), np.uint8))
    with pytest.raises(UserError, match=r"has no array 'labels' to train on \(it holds 'images'\)"):
        load_data(DataConfig(name="npz", root=str(path)))


@pytest.mark.parametrize(
    "spec, message",
    [
        ("mnist5k", "images are 1x28x28, the teacher takes 1x8x8 (set --unlabeled "
                    "mnist5k:image_size=8)"),
        ("mnist5k:limit=5,image_size=9", "set --unlabeled mnist5k:limit=5,image_size=8"),
        ("synthetic:shape=[3,8,8]", "(3 channel(s), not 1) (choose a set with 1 channel(s))"),
        ("cifar10:holdout=0.5", "holdout sets aside a share of the experiment's own digits"),
        ("digits:holdout=0", "holdout must be above 0"),
        ("digits", "these are the experiment's labelled images"),
        ("mnist5k:imagesize=8", "unknown key 'data.imagesize' (did you mean 'data.image_size'?)"),
        ("nosuchset", "unknown dataset 'nosuchset'"),
    ],
)  # fmt: skip
def test_unlabelled_sets_that_do_not_fit_the_teacher(spec: str, message: str) -> None:
    exp = Experiment()
    with pytest.raises(UserError) as e:
        cfg, _ = pool.parse(spec, exp)
        pool.load(spec, cfg, load_data(exp.data))
    assert message in str(e.value)


# --- the command ----------------------------------------------------------------------------


def test_a_tiny_study_stores_linked_stages(
    tmp_path: Path, store: RunStore, cli: Callable[..., CliResult]
) -> None:
    path = write_distill_exp(tmp_path)
    out = distill_json(cli, "distill", str(path), "--unlabeled", "digits:holdout=0.5",
                       "--top-k", "3", "--student", "resnet20")  # fmt: skip
    assert_document(out)
    assert out["teacher"] and out["baseline"] and out["error"] is None
    runs = {r.id: r for r in store.list_runs(study_id=out["study_id"])}
    assert store.get_study(out["study_id"])["kind"] == "distill"
    teacher_id, baseline = out["teacher"]["run_id"], out["baseline"]
    assert (
        out["teacher"]["scoring_images_per_s"] > 0
        and not out["teacher"]["reused"]
        and 0 <= out["teacher"]["test_accuracy"] <= 1
    )
    assert runs[teacher_id].tags["stage"] == "teacher"
    assert runs[baseline["run_id"]].tags["stage"] == "baseline"
    assert runs[baseline["run_id"]].config["model"]["name"] == "resnet20"
    (student,) = out["students"]
    assert student.keys() >= {"top_k", "top_p", "selected", "pseudo_label_precision",
                              "pretrain_run_id", "finetune_run_id", "test_accuracy"}  # fmt: skip
    assert (student["top_k"], student["top_p"]) == (3, 1) and out["best_top_k"] == 3
    assert student["selected"] == sum(student["kept"]) and max(student["kept"]) <= 3
    assert 0 <= student["pseudo_label_precision"] <= 1  # the held-out images keep their labels
    # The links: select <- teacher; pretrain <- select's file; finetune <- pretrain's weights.
    chosen, pre, fine = (runs[student[f"{s}_run_id"]] for s in ("select", "pretrain", "finetune"))
    assert chosen.kind == "select" and chosen.config["teacher"] == teacher_id
    assert pre.config["data"]["name"] == "npz"
    assert pre.config["data"]["root"] == chosen.summary["file"]
    # The file holds the kept images under the teacher's top class (P = 1), class by class.
    with np.load(chosen.summary["file"]) as f:
        images, labels = torch.from_numpy(f["images"]), torch.from_numpy(f["labels"])
    assert len(labels) == student["selected"] and labels.tolist() == sorted(labels.tolist())
    scores = teacher.score(
        teacher.stored(store, teacher_id), store, images, torch.device("cpu"), 64
    )
    assert torch.equal(scores.scores.argmax(1), labels)
    assert pre.config["model"]["name"] == "resnet20" and pre.tags["select"] == str(chosen.id)
    assert fine.config["model"]["weights"] == f"run:{pre.id}"
    assert fine.config["data"]["holdout"] == 0.5 == runs[teacher_id].config["data"]["holdout"]
    assert fine.config["model"]["head"] == "keep"  # the head learnt on pseudo-labels too
    assert [fine.tags[k] for k in ("stage", "pretrain", "teacher")] == [
        "finetune", str(pre.id), str(teacher_id)]  # fmt: skip
    assert all(r.status == "finished" for r in runs.values()) and len(runs) == 5
    assert Path(out["plots"][0]).is_file()
    # The same command again reuses every stage and stores nothing new.
    again = distill_json(cli, "distill", str(path), "--unlabeled", "digits:holdout=0.5",
                         "--top-k", "3", "--student", "resnet20")  # fmt: skip
    assert again["students"][0]["finetune_run_id"] == fine.id
    assert len(store.list_runs(study_id=out["study_id"])) == 5


def test_a_stored_teacher_and_the_student_as_its_own_baseline(
    tmp_path: Path, store: RunStore, cli: Callable[..., CliResult]
) -> None:
    path = write_distill_exp(tmp_path)
    trained = cli("run", str(path), "--set", "run.checkpoint=true", "--set", "data.holdout=0.5",
                  "--json")  # fmt: skip
    teacher = json.loads(trained.out)["run_id"]
    args = ["--unlabeled", "digits:holdout=0.5", "--top-k", "2", "--top-p", "2"]
    one = distill_json(cli, "distill", str(path), *args[:-1], "1", "--teacher", str(teacher))
    out = distill_json(cli, "distill", str(path), *args, "--teacher", str(teacher))
    # Each recipe's figure is named by it: P = 2 in the same study leaves P = 1's in place.
    assert out["study_id"] == one["study_id"]
    assert_document(out)
    figures = [Path(doc["plots"][0]) for doc in (one, out)]
    assert [f.name for f in figures] == [
        f"distill_top-p{p}_top-k2_{out['baseline']['model']}_digits-holdout-0.5.png" for p in (1, 2)
    ]
    assert all(f.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" for f in figures)
    assert out["teacher"]["run_id"] == teacher and out["teacher"]["reused"]
    assert out["baseline"]["same_as_teacher"] and out["baseline"]["run_id"] == teacher
    assert store.get_run(teacher).study_id is None  # the given teacher stays where it was
    assert out["students"][0]["top_p"] == 2
    # A teacher that saw the held-out images' labels is refused.
    plain = json.loads(cli("run", str(path), "--set", "run.checkpoint=true", "--json").out)
    result = cli("distill", str(path), *args, "--teacher", str(plain["run_id"]))
    assert result.code == 2 and "did not train with data.holdout = 0.5" in result.err


def test_bad_input_is_one_line_and_stores_nothing(
    tmp_path: Path, store: RunStore, cli: Callable[..., CliResult]
) -> None:
    path = write_distill_exp(tmp_path)
    unfinished = store.create_run("half", "run", Experiment().to_dict(), "x", None)
    store.finish_run(unfinished, "killed", error="interrupted")
    holdout = ["--unlabeled", "digits:holdout=0.5"]
    for args, message in [
        (["--unlabeled", "mnist5k"], "takes 1x8x8 (set --unlabeled mnist5k:image_size=8)"),
        ([*holdout, "--top-k", "0"], "distill.top_k.0: must be at least 1"),
        ([*holdout, "--top-k", "2,x"], "distill.top_k.1: Input should be a valid integer"),
        ([*holdout, "--top-p", "0"], "distill.top_p: must be at least 1"),
        ([*holdout, "--top-p", "11"], "--top-p 11 is more than the 10 classes of digits"),
        ([*holdout, "--teacher", str(unfinished)], f"{unfinished} did not finish (status killed)"),
        ([*holdout, "--teacher", "999"], "no run 999 in the store"),
        ([*holdout, "--student", "nosuchnet"], "nosuchnet"),
        ([], "give the unlabelled images with --unlabeled"),
    ]:  # fmt: skip
        result = cli("distill", str(path), *args)
        assert result.code == 2, (args, result.err)
        assert message in result.err and len(result.err.strip().splitlines()) == 1, result.err
    assert [r.id for r in store.list_runs()] == [unfinished]


def start_distill(root: Path, db: str, *args: str, pause_at: int) -> BaseProcess:
    """`dlperf distill ARGS` as a real process, every run parking at step `pause_at`: forked
    from this one (forked_dlperf: torch comes imported), its stderr to root/stderr.txt."""
    env = {"DLPERF_DB": db, **hook_env("pause_at_step", f"{pause_at}:{root / 'parked'}")}
    return forked_dlperf(root, ["distill", *args], root / "stderr.txt", env)


def test_two_students_resume_after_a_sigkill(
    tmp_path: Path, db: str, store: RunStore, cli: Callable[..., CliResult]
) -> None:
    # The teacher trains 2 steps; the K=2 student pre-trains on 16 images in one batch for 3
    # epochs, so the first run to reach step 3 is its pretrain: parked there, then killed.
    path = write_distill_exp(tmp_path, '[distill]\nunlabeled = "digits:holdout=0.5"\n')
    args = [str(path), "--top-k", "2,4", "--pretrain-epochs", "3"]
    proc = start_distill(tmp_path, db, *args, pause_at=3)
    try:
        deadline = time.monotonic() + EVENT_S
        while not (tmp_path / "parked").exists():
            assert proc.is_alive(), (tmp_path / "stderr.txt").read_text()
            assert time.monotonic() < deadline, "timed out waiting for the pretrain to park"
            time.sleep(0.05)
        proc.kill()  # SIGKILL
        proc.join(timeout=EVENT_S)
    finally:
        proc.kill()
        proc.join()
    assert proc.pid is not None and not alive(proc.pid)
    log = (tmp_path / "stderr.txt").read_text()
    assert "pretrain K=2: training" in log and "finetune" not in log
    (killed,) = [r for r in store.list_runs() if r.unfinished]
    assert killed.status == "lost" and killed.tags == {}  # tags come at the end

    result = cli("distill", *args, "--json")
    assert result.code == 0, result.err
    out = json.loads(result.out)
    teacher_id = next(r.id for r in store.list_runs() if r.tags.get("stage") == "teacher")
    tags = {r.id: r.tags for r in store.list_runs()}
    (select_2,) = [
        i for i, t in tags.items() if (t.get("stage"), t.get("top_k")) == ("select", "2")
    ]
    assert f"teacher: run {teacher_id} finished before, reused" in result.err
    assert f"select K=2: run {select_2} finished before, reused" in result.err
    assert "pretrain K=2: training" in result.err
    assert [s["top_k"] for s in out["students"]] == [2, 4]
    assert all(s["test_accuracy"] is not None for s in out["students"])
    assert killed.id not in {s["pretrain_run_id"] for s in out["students"]}
    finished = [r for r in store.list_runs(study_id=out["study_id"]) if r.status == "finished"]
    stages = sorted((r.tags["stage"], r.tags.get("top_k", "")) for r in finished)
    assert stages == [("finetune", "2"), ("finetune", "4"), ("pretrain", "2"), ("pretrain", "4"),
                      ("select", "2"), ("select", "4"), ("teacher", "")]  # fmt: skip


def test_the_shipped_example_runs_on_a_small_budget(
    tmp_path: Path, cli: Callable[..., CliResult]
) -> None:
    example = Path(__file__).resolve().parents[2] / "examples" / "distill_digits.toml"
    # One thread, as the module's tiny experiments: the example leaves run.threads to the
    # host, and two OpenMP threads on a shared core ran its five stages several times slower.
    out = distill_json(cli, "distill", str(example), "--top-k", "5", "--set", "train.epochs=1",
                       "--set", "run.threads=1",
                       "--set", f"run.out_dir={tmp_path / 'runs'}")  # fmt: skip
    assert out["teacher"]["model"] == "resnet20" and out["baseline"]["model"] == "smallcnn"
    assert not out["baseline"]["same_as_teacher"] and out["best_top_k"] == 5
    assert out["students"][0]["selected"] <= 50


def test_a_failed_stage_ends_the_study_with_exit_1_and_keeps_what_finished(
    tmp_path: Path, store: RunStore, cli: Callable[..., CliResult]
) -> None:
    path = write_distill_exp(tmp_path, '[distill]\nunlabeled = "digits:holdout=0.5"\n')
    result = cli("distill", str(path), "--top-k", "2,4", "--finetune-lr", "1e12", "--json")
    assert result.code == 1, result.err
    out = json.loads(result.out)
    assert_document(out)
    (student,) = out["students"]  # K = 4 never started
    assert student["status"] == "failed" and student["test_accuracy"] is None
    assert out["error"].startswith(f"finetune run {student['finetune_run_id']} failed: loss")
    assert out["best_top_k"] is None and out["plots"] == []
    statuses = {r.tags["stage"]: r.status for r in store.list_runs(study_id=out["study_id"])}
    assert statuses == {"teacher": "finished", "select": "finished", "pretrain": "finished",
                        "finetune": "failed"}  # fmt: skip


def test_a_teacher_that_fails_ends_the_study_before_any_other_stage(
    tmp_path: Path, store: RunStore, cli: Callable[..., CliResult]
) -> None:
    path = write_distill_exp(tmp_path, '[distill]\nunlabeled = "digits:holdout=0.5"\n')
    result = cli("distill", str(path), "--top-k", "2", "--set", "train.lr=1e12", "--json")
    assert result.code == 1, result.err
    out = json.loads(result.out)
    (run,) = store.list_runs(study_id=out["study_id"])
    assert (run.tags["stage"], run.status) == ("teacher", "failed")
    assert out["error"] == f"teacher run {run.id} failed: {run.error}"
    assert out == {
        "study_id": out["study_id"], "name": "dist", "teacher": {}, "baseline": {},
        "students": [], "best_top_k": None, "classes": [str(c) for c in range(10)],
        "unlabeled": "digits:holdout=0.5", "directory": out["directory"],
        "error": out["error"], "plots": [],
    }  # fmt: skip
    assert list(out) == DOC


def test_a_changed_pool_is_selected_again(
    tmp_path: Path, store: RunStore, cli: Callable[..., CliResult]
) -> None:
    path, pool_file = write_distill_exp(tmp_path), tmp_path / "pool.npz"
    rng = np.random.default_rng(0)
    args = ["distill", str(path), "--unlabeled", f"npz:root={pool_file}", "--top-k", "3"]
    runs = []
    for _ in range(2):  # the same file name, other images
        np.savez(pool_file, images=rng.integers(0, 256, (60, 1, 8, 8), dtype=np.uint8))
        out = distill_json(cli, *args)
        assert out["students"][0]["pseudo_label_precision"] is None  # no labels to check
        runs.append(out["students"][0]["select_run_id"])
    assert runs[0] != runs[1] and out["teacher"]["scoring_images_per_s"] is not None
    assert out["teacher"]["reused"]  # the teacher, trained on the labelled data, is the same


def test_a_teacher_trained_on_other_splits_is_refused(
    tmp_path: Path, cli: Callable[..., CliResult]
) -> None:
    path = write_distill_exp(tmp_path)
    trained = cli("run", str(path), "--set", "run.checkpoint=true", "--set", "data.split_seed=7",
                  "--json")  # fmt: skip
    run_id = json.loads(trained.out)["run_id"]
    result = cli("distill", str(path), "--unlabeled", "mnist5k:image_size=8", "--teacher",
                 str(run_id))  # fmt: skip
    assert result.code == 2
    assert f"teacher run {run_id} trained on other data: data.split_seed 7, the experiment's 0" in (
        result.err
    )
