"""Break-it round 33, the user's own data, detection and resume (fixer F2).

C1. An .npz's class names saved under another key (`names`, CIFAR's `label_names`) were
    dropped without a word: the run, its export and infer called the classes 0, 1, ... Every
    member dlperf does not read is now named in a warning of `run` and `data describe`, and
    one holding names is told to be saved as `classes`; a file without 'labels' names the
    arrays it holds, as one without 'images' does.
C2. `detect finetune --weights` of a dlperf checkpoint trained on other class names (the same
    count) took its heads by position: the set's names replaced the checkpoint's before they
    were compared, so the refusal was dead, and its "before" AP disagreed with `detect eval`.
    The checkpoint's own names are compared with the set's now.
C3. `run --resume` of an image-folder run whose class folders were renamed (the same count)
    trained on permuted labels without a word: the checkpoint kept no class names. It keeps
    them now, and a resume on data whose names differ is refused in one line.
C4. model.head = "keep" kept the weights' head by position: data of the same classes in
    another order trained and tested with labels swapped, without a word. The names of the
    weights' run are compared with the data's, and a head they do not match is refused.
C5. An .npz's labels saved as text were told "save the labels as numpy.int64 class indices",
    which fails for names ('cat') and would drop them: names are told to be saved as
    `classes` with their indices, digits ('0') to be cast.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import torch

from dlperf.config import DataConfig
from dlperf.data import sources
from dlperf.detect import ssd
from dlperf.distill import pool
from dlperf.errors import UserError
from dlperf.store import RunStore
from tests.conftest import CliResult
from tests.distill.test_pool import labelled_data
from tests.faults.test_break_it_17_resume import _image_folder
from tests.faults.test_break_it_21_detect import shapes
from tests.faults.test_break_it_24_detect import finetune, refused_before_training
from tests.faults.test_store_faults import one_line

Cli = Callable[..., CliResult]


# --- C1: an .npz's names under another key -------------------------------------------------------


def pets(path: Path, **more: object) -> Path:
    """An .npz of 12 grey 8x8 images of two classes and the arrays `more`."""
    rng = np.random.default_rng(0)
    images = rng.integers(0, 255, (12, 1, 8, 8), dtype=np.uint8)
    np.savez(path, images=images, labels=np.array([0, 1] * 6), **more)  # type: ignore[arg-type]
    return path


def test_an_npz_array_not_read_is_named_in_a_warning(cli: Cli, tmp_path: Path) -> None:
    """Before: `data describe` said classes ["0", "1"], warnings [], of a file whose `names`
    array held cat and dog."""
    path = pets(tmp_path / "pets.npz", names=np.array(["cat", "dog"]))
    r = cli("data", "describe", "npz", "--set", f"data.root={path}", "--json")
    assert r.code == 0, r.err
    said = (
        f"{path}: its array 'names' is not read: dlperf takes class names from 'classes' "
        "(save classes=names)"
    )
    assert json.loads(r.out)["warnings"] == [said]
    assert f"warning: {said}" in r.err.splitlines(), r.err


def test_npz_arrays_not_read_are_said_in_one_line(tmp_path: Path) -> None:
    """Names as bytes (CIFAR's label_names) are names too; other arrays are named as unread;
    a file of only what dlperf reads says nothing."""
    names = np.array([b"cat", b"dog"])
    files = np.array([f"{i}.png" for i in range(12)])  # text, but one per image: no names
    path = pets(tmp_path / "p.npz", label_names=names, files=files, y_test=np.zeros(3))
    notes: list[str] = []
    sources.read_npz(path, notes=notes)
    assert notes == [
        f"{path}: its array 'label_names' is not read: dlperf takes class names from 'classes' "
        "(save classes=label_names)",
        f"{path}: its arrays 'files' and 'y_test' are not read: dlperf reads 'images', "
        "'labels' and 'classes'",
    ]
    # with `classes` given, another array of names is only one more array not read
    path = pets(tmp_path / "q.npz", classes=np.array(["a", "b"]), names=np.array(["c", "d"]))
    sources.read_npz(path, notes=(notes := []))
    assert notes == [
        f"{path}: its array 'names' is not read: dlperf reads 'images', 'labels' and 'classes'"
    ]
    sources.read_npz(pets(tmp_path / "r.npz", classes=np.array(["a", "b"])), notes=(notes := []))
    assert notes == []


def test_a_pools_npz_array_not_read_is_named_in_a_warning(tmp_path: Path) -> None:
    """Before (review of C1): distill's pool reader asked for no notes, so a pool's names saved
    as 'names' were dropped without a word, its classes 0, 1 matched to none of the teacher's."""
    path = tmp_path / "pool.npz"
    images = np.full((3, 1, 4, 4), 9, np.uint8)
    np.savez(path, images=images, labels=np.array([0, 1, 0]), names=np.array(["a", "b"]))
    root = str(path)
    got = pool.load(f"npz:root={root}", DataConfig(name="npz", root=root), labelled_data())
    assert got.notes == [
        f"{path}: its array 'names' is not read: dlperf takes class names from 'classes' "
        "(save classes=names)"
    ]


@pytest.mark.parametrize(
    ("labels", "fix"),
    [
        (
            np.array(["cat", "dog"] * 6),
            "name the classes: classes, labels = numpy.unique(labels, return_inverse=True), then "
            "save classes=classes, labels=labels",
        ),
        (np.array([b"cat", b"dog"] * 6), "name the classes: classes, labels = numpy.unique"),
        (np.array(["0", "1"] * 6), "save labels=labels.astype(numpy.int64)"),
        # a column of text (review of C5: told the cast that fails on 'cat')
        (
            np.array([["cat"], ["dog"]] * 6),
            "name the classes: classes, labels = numpy.unique(labels[:, 0], return_inverse=True)",
        ),
        (np.array([["0"], ["1"]] * 6), "save labels=labels[:, 0].astype(numpy.int64)"),
    ],
)
def test_npz_labels_saved_as_text_are_told_a_fix_that_works(
    tmp_path: Path, labels: np.ndarray, fix: str
) -> None:
    """Before: "save the labels as numpy.int64 class indices", whose astype fails on 'cat'."""
    path = tmp_path / "text.npz"
    images = np.zeros((12, 1, 8, 8), np.uint8)
    np.savez(path, images=images, labels=labels)
    with pytest.raises(UserError) as caught:
        sources.read_npz(path)
    said = f"{path}: 'labels' is {labels.dtype} of shape {labels.shape}: dlperf wants one "
    assert str(caught.value).startswith(said + "integer class index per image, shape (12,) (" + fix)
    # the fix, as said, makes a file that reads
    column = labels[:, 0] if labels.ndim == 2 else labels
    if "unique" in fix:
        classes, indices = np.unique(column, return_inverse=True)
        np.savez(path, images=images, labels=indices, classes=classes)
    else:
        np.savez(path, images=images, labels=column.astype(np.int64))
    assert len(sources.read_npz(path)[2]) == 2


def test_an_npz_without_labels_names_what_it_holds(cli: Cli, tmp_path: Path) -> None:
    """Before: "has no 'labels' array to train on", naming no array (its 'Labels' unsaid)."""
    path = tmp_path / "caps.npz"
    np.savez(path, images=np.zeros((4, 1, 8, 8), np.uint8), Labels=np.array([0, 1, 0, 1]))
    one_line(
        cli("data", "describe", "npz", "--set", f"data.root={path}"),
        2,
        f"error: {path}: has no array 'labels' to train on (it holds 'images' and 'Labels') "
        "(write it again with numpy.savez(path, images=..., labels=...))",
    )


# --- C2: finetune from weights of other class names ----------------------------------------------


@pytest.mark.faults  # two detectors built and one fine-tuned: over 10 s under load
def test_finetune_refuses_weights_trained_on_other_class_names(cli: Cli, tmp_path: Path) -> None:
    """make-shapes' squares and discs, the checkpoint's classes asquare and disc. Before: no
    refusal, its disc head trained as the set's square and its asquare head as disc."""
    root = shapes(tmp_path)
    weights = tmp_path / "ckb.pt"
    torch.manual_seed(0)
    labels = ["__background__", "asquare", "disc"]
    det = ssd.build("ssdlite320_mobilenet_v3_large", labels=labels, size=96)
    ssd.save_checkpoint(det, weights)
    out = tmp_path / "w.pt"
    one_line(
        finetune(cli, root, out, "--weights", str(weights)),
        2,
        f"error: {weights} was trained on ['asquare', 'disc'], this set has ['disc', 'square'] "
        "(fine-tune from weights of these classes, or leave out --weights to start from random "
        "ones)",
    )
    refused_before_training(cli, out)
    # a set of the checkpoint's own names fine-tunes from it
    for xml in (root / "Annotations").glob("*.xml"):
        xml.write_text(xml.read_text().replace("<name>square<", "<name>asquare<"))
    r = finetune(cli, root, out, "--weights", str(weights))
    assert r.code == 0, r.err


# --- C3: a resume on renamed classes ------------------------------------------------------------


def abc_experiment(tmp_path: Path) -> tuple[Path, Path]:
    """An image folder of classes a, b, c and a 1-epoch experiment on it: (folder, file)."""
    imgs = tmp_path / "imgs"
    _image_folder(imgs, ["a", "b", "c"])
    exp = tmp_path / "exp.toml"
    exp.write_text(
        f'[model]\nname = "smallcnn"\n[data]\nname = "imagefolder"\nroot = "{imgs}"\n'
        f"image_size = 8\n[train]\nepochs = 1\nbatch_size = 8\n[run]\nthreads = 1\n"
        f'out_dir = "{tmp_path / "runs"}"\n'
    )
    return imgs, exp


def abc_run(cli: Cli, tmp_path: Path) -> Path:
    """Run 1, a finished 1-epoch run of `abc_experiment`; the folder."""
    imgs, exp = abc_experiment(tmp_path)
    r = cli("run", str(exp))
    assert r.code == 0, r.err
    return imgs


def test_a_resume_on_renamed_classes_is_refused(cli: Cli, tmp_path: Path, store: RunStore) -> None:
    """Before: resumed on classes b, c, z, the images of 'a' trained as b's, without a word."""
    imgs = abc_run(cli, tmp_path)
    (path,) = [Path(a["path"]) for a in store.artifacts(1) if a["kind"] == "checkpoint"]
    assert torch.load(path, weights_only=True)["classes"] == ["a", "b", "c"]
    store.finish_run(1, "killed", error="interrupted")  # as if stopped after its checkpoint
    for split in ("train", "val"):
        (imgs / split / "a").rename(imgs / split / "z")
    one_line(
        cli("run", "--resume", "1"),
        2,
        "error: run 1 was trained on classes a, b, c; its data now names b, c, z (a gone, z "
        "new): resumed, its outputs would be taken for other classes than they were trained on "
        "(restore the classes' names, or start the run again)",
    )
    assert store.get_run(1).status == "killed"
    for split in ("train", "val"):  # its own names back: it resumes
        (imgs / split / "z").rename(imgs / split / "a")
    r = cli("run", "--resume", "1")
    assert r.code == 0, r.err


# --- C4: a kept head of classes in another order -------------------------------------------------


def cba_from_run_1(tmp_path: Path) -> Path:
    """An experiment keeping run 1's head on an .npz of its classes in another order: c, b, a."""
    path = tmp_path / "cba.npz"
    images = np.random.default_rng(0).integers(0, 255, (12, 3, 8, 8), dtype=np.uint8)
    np.savez(path, images=images, labels=np.arange(12) % 3, classes=np.array(["c", "b", "a"]))
    exp = tmp_path / "npz.toml"
    exp.write_text(
        f'[model]\nname = "smallcnn"\nweights = "run:1"\nhead = "keep"\n[data]\nname = "npz"\n'
        f'root = "{path}"\n[train]\nepochs = 1\nbatch_size = 4\n[run]\nthreads = 1\n'
        f'out_dir = "{tmp_path / "runs"}"\n'
    )
    return exp


def test_a_kept_head_of_other_class_names_is_refused(
    cli: Cli, tmp_path: Path, store: RunStore
) -> None:
    """Before: trained and tested on c, b, a with run 1's head of a, b, c, without a word."""
    abc_run(cli, tmp_path)
    exp = cba_from_run_1(tmp_path)
    refused = (
        "error: run 1's head is of classes a, b, c; npz has c, b, a: kept, its outputs would be "
        'taken for other classes than they were trained on (set model.head = "new" to train a '
        "head for these classes, or give the data the classes of run 1 in its order)"
    )
    one_line(cli("run", str(exp)), 2, refused)
    # a stopped run has no summary: the names its checkpoint keeps are held to the data's
    store.update_run(1, status="killed", summary=None)
    one_line(cli("run", str(exp)), 2, refused)
    assert [r.id for r in store.list_runs()] == [1]


def test_a_teacher_of_other_class_names_is_refused(
    cli: Cli, tmp_path: Path, store: RunStore
) -> None:
    """Before (review of C3): `distill --teacher 1` after a class folder was renamed took
    the teacher's outputs for the classes by position, its pseudo-labels of 'a' saved as b's."""
    imgs = abc_run(cli, tmp_path)
    for split in ("train", "val"):
        (imgs / split / "a").rename(imgs / split / "z")
    pool = tmp_path / "pool.npz"  # unlabelled images of their own
    np.savez(pool, images=np.random.default_rng(0).integers(0, 255, (6, 3, 8, 8), np.uint8))
    one_line(
        cli(
            "distill",
            str(tmp_path / "exp.toml"),
            "--teacher",
            "1",
            "--unlabeled",
            f"npz:root={pool}",
        ),
        2,
        "error: teacher run 1 was trained on classes a, b, c; imagefolder has b, c, z: its "
        "scores would be taken for other classes than they are of (give --teacher a run "
        "trained on these classes (dlperf runs list), or leave --teacher out to train one)",
    )
    assert [r.id for r in store.list_runs()] == [1]


def test_a_kept_head_of_a_run_checkpoint_file_of_other_class_names_is_refused(
    cli: Cli, tmp_path: Path, store: RunStore
) -> None:
    """Before (review of C4): a run's checkpoint given as a file kept its head by position:
    only run:ID's names were read."""
    abc_run(cli, tmp_path)
    (path,) = [Path(a["path"]) for a in store.artifacts(1) if a["kind"] == "checkpoint"]
    exp = cba_from_run_1(tmp_path)
    exp.write_text(exp.read_text().replace('"run:1"', f'"{path}"'))
    one_line(
        cli("run", str(exp)),
        2,
        f"error: {path}'s head is of classes a, b, c; npz has c, b, a: kept, its outputs would "
        "be taken for other classes than they were trained on",
    )
    assert [r.id for r in store.list_runs()] == [1]


def test_a_sweep_of_a_kept_head_of_other_class_names_is_refused_up_front(
    cli: Cli, tmp_path: Path, store: RunStore
) -> None:
    """Before (review of C4): a sweep's up-front check passed it, and each point was stored as
    a failed run of a started study."""
    abc_run(cli, tmp_path)
    cba_from_run_1(tmp_path)
    sweep = tmp_path / "sweep.toml"
    sweep.write_text('base = "npz.toml"\n[grid]\n"train.lr" = [0.1, 0.2]\n')
    one_line(
        cli("sweep", str(sweep)),
        2,
        f"error: {sweep} point 1 (train.lr=0.1): run 1's head is of classes a, b, c; npz has c, "
        "b, a: kept, its outputs would be taken for other classes than they were trained on",
    )
    assert [r.id for r in store.list_runs()] == [1]


@pytest.mark.faults  # two distill studies' worth of stages: over 10 s under load
def test_a_distill_study_resumed_on_renamed_classes_trains_its_stages_again(
    cli: Cli, tmp_path: Path, store: RunStore
) -> None:
    """Before (review of C3): the study run again after a class folder was renamed reused its
    teacher, whose outputs were then taken for the classes by position: its table's row 'b'
    the images kept for 'a'."""
    imgs, exp = abc_experiment(tmp_path)
    pool = tmp_path / "pool.npz"
    np.savez(pool, images=np.random.default_rng(0).integers(0, 255, (6, 3, 8, 8), np.uint8))
    args = ["distill", str(exp), "--unlabeled", f"npz:root={pool}", "--top-k", "1",
            "--pretrain-epochs", "1", "--finetune-epochs", "1"]  # fmt: skip
    assert cli(*args).code == 0
    for split in ("train", "val"):
        (imgs / split / "a").rename(imgs / split / "z")
    r = cli(*args)
    assert r.code == 0, r.err
    assert "teacher: training" in r.err and "teacher: run 1 finished before" not in r.err, r.err
    (teacher,) = [run for run in store.list_runs() if run.id > 1 and "teacher" in run.name]
    assert teacher.trained.data["class_names"] == ["b", "c", "z"]  # type: ignore[index]
