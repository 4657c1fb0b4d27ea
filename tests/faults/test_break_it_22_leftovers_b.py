"""Round 22's leftovers (fixer B): an image folder's `test/` that holds no images, or is no
folder, beside a `val/` that has them (taken as the test split, or passed over for val/,
without the folder being named), and the MLflow export's set-up lock files left in the
temporary directory, one per store, never removed. Each through the real entry point, each
seen failing before its fix."""

from __future__ import annotations

import json
import tempfile
import threading
from collections.abc import Callable
from pathlib import Path

import pytest

from dlperf import exporters
from tests.conftest import CliResult

Cli = Callable[..., CliResult]

# Generous: a thread waiting on a lock another releases, on a busy 2-core machine.
WAIT_S = 60.0


def _image_folder(root: Path, splits: tuple[str, ...] = ("train", "val")) -> None:
    from PIL import Image

    for split in splits:
        for c, name in enumerate(["a", "b"]):
            folder = root / split / name
            folder.mkdir(parents=True)
            for i in range(6):
                Image.new("RGB", (8, 8), (120 * c, 20 * i, 0)).save(folder / f"{i}.png")


SETS = ("--set", 'data.name="imagefolder"', "--set", 'data.root="if"')
SETS += ("--set", "data.image_size=8")


def _refused(result: CliResult) -> str:
    assert result.code == 2, (result.code, result.err)
    assert result.err.startswith("error: ") and result.err.count("\n") == 1, result.err
    return result.err


def _empty_test(root: Path, kind: str) -> None:
    test = root / "test"
    test.mkdir()
    if kind in ("class folders", "text files"):
        for name in ("a", "b"):
            (test / name).mkdir()
            if kind == "text files":
                (test / name / "notes.txt").write_text("not an image")
    elif kind == "hidden images":  # macOS's ._x.png beside no image
        (test / "a").mkdir()
        (test / "a" / "._0.png").write_bytes(b"\0" * 8)


@pytest.mark.parametrize("kind", ["nothing", "class folders", "text files", "hidden images"])
def test_an_empty_test_folder_beside_a_full_val_is_named_in_describe(
    cli: Cli, tmp_path: Path, kind: str
) -> None:
    _image_folder(tmp_path / "if")
    _empty_test(tmp_path / "if", kind)
    err = _refused(cli("data", "describe", "imagefolder", *SETS, "--json"))
    # before: "error: if: Couldn't find any class folder in if/test." (no way out said) or
    # "error: if: Found no valid file for the classes a, b. ..." (test/ not named at all)
    assert err == (
        "error: if/test is empty, and imagefolder tests on test/ where there is one "
        "(put the test images in test/<class>/, or remove test/ to test on val/)\n"
    )


def test_an_empty_test_folder_refuses_a_run_before_it_starts(
    cli: Cli, tiny_exp: Callable[..., Path], tmp_path: Path
) -> None:
    _image_folder(tmp_path / "if")
    _empty_test(tmp_path / "if", "class folders")
    tiny_exp(epochs=1)
    err = _refused(cli("run", "tiny.toml", *SETS, "--set", "train.batch_size=4"))
    assert "if/test is empty" in err and "remove test/ to test on val/" in err
    runs = json.loads(cli("runs", "list", "--json").out)
    assert runs == []


def test_an_empty_test_folder_without_val_says_only_to_fill_it(cli: Cli, tmp_path: Path) -> None:
    _image_folder(tmp_path / "if", ("train",))
    _empty_test(tmp_path / "if", "nothing")
    err = _refused(cli("data", "describe", "imagefolder", *SETS))
    assert err == (
        "error: if/test is empty, and imagefolder tests on test/ where there is one "
        "(put the test images in test/<class>/, one folder per class as in train/)\n"
    )


def test_a_test_folder_short_of_some_class_images_is_named(cli: Cli, tmp_path: Path) -> None:
    _image_folder(tmp_path / "if", ("train", "val", "test"))
    for image in (tmp_path / "if" / "test" / "b").iterdir():
        image.unlink()
    err = _refused(cli("data", "describe", "imagefolder", *SETS))
    # not empty: torchvision's line, now naming the folder it is about (it named only the root)
    assert err.startswith("error: if/test: Found no valid file for the classes b."), err


@pytest.mark.parametrize("kind", ["a file", "a link to nothing"])
def test_a_test_path_that_is_no_folder_is_refused_not_passed_over(
    cli: Cli, tmp_path: Path, kind: str
) -> None:
    _image_folder(tmp_path / "if")
    test = tmp_path / "if" / "test"
    if kind == "a file":
        test.write_text("not a folder")
        said = "if/test is a file, not a folder of class folders"
    else:
        test.symlink_to(tmp_path / "unmounted" / "test")
        said = f"if/test is a link to nothing ({tmp_path / 'unmounted' / 'test'})"
    # before: val/ taken as the test split without a word, for both describe and run
    err = _refused(cli("data", "describe", "imagefolder", *SETS))
    assert err == (
        f"error: {said}, and imagefolder tests on test/ where there is one "
        "(make it a folder of class folders of test images, or remove test/ to test on val/)\n"
    )


def test_a_full_test_folder_is_still_the_test_split(cli: Cli, tmp_path: Path) -> None:
    _image_folder(tmp_path / "if", ("train", "val", "test"))
    for image in (tmp_path / "if" / "test" / "a").iterdir():
        if image.name != "0.png":
            image.unlink()
    result = cli("data", "describe", "imagefolder", *SETS, "--json")
    assert result.code == 0, result.err
    assert json.loads(result.out)["splits"]["test"] == 7
    # a link to a folder of images is a folder too
    (tmp_path / "if" / "test").rename(tmp_path / "elsewhere")
    (tmp_path / "if" / "test").symlink_to(tmp_path / "elsewhere")
    result = cli("data", "describe", "imagefolder", *SETS, "--json")
    assert result.code == 0, result.err
    assert json.loads(result.out)["splits"]["test"] == 7


# --- the MLflow export's set-up lock -----------------------------------------------------------


def _locks(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name.startswith("dlperf-mlflow-setup-"))


@pytest.fixture
def private_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A temporary directory of this test's own, for tempfile.gettempdir() in this process."""
    folder = tmp_path / "tmp"
    folder.mkdir()
    monkeypatch.setenv("TMPDIR", str(folder))
    monkeypatch.setattr(tempfile, "tempdir", str(folder))
    return folder


@pytest.mark.filterwarnings("ignore:The ``noload`` loader strategy:DeprecationWarning")
def test_an_mlflow_export_leaves_no_lock_file_behind(
    cli: Cli, db: str, tmp_path: Path, private_tmp: Path
) -> None:
    pytest.importorskip("mlflow", reason="the mlflow extra (pip install 'dlperf[mlflow]')")
    import dlperf

    with dlperf.track("mine", {"lr": 0.1}, store=db) as run:
        run.log(1, loss=1.0)
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    for _ in range(2):  # into a new store, then into the one it made
        r = cli("runs", "export", "1", "--to", "mlflow", "--uri", uri, "--json")
        assert r.code == 0, r.err
        # before: dlperf-mlflow-setup-<digest>.lock, one per store, for ever
        assert _locks(private_tmp) == []


@pytest.mark.parametrize("uri", ["sqlite:///{tmp}/a.db", "postgresql://u:p@db.example:5432/mlflow"])
def test_the_setup_lock_still_lets_one_in_at_a_time_and_is_removed(
    tmp_path: Path, private_tmp: Path, uri: str
) -> None:
    uri = uri.format(tmp=tmp_path)
    first_in, second_in, first_may_leave = (threading.Event() for _ in range(3))
    order: list[str] = []

    def first() -> None:
        with exporters._one_setup_at_a_time(uri):
            order.append("first in")
            first_in.set()
            assert first_may_leave.wait(WAIT_S)
            order.append("first out")

    def second() -> None:
        assert first_in.wait(WAIT_S)
        with exporters._one_setup_at_a_time(uri):
            order.append("second in")
            second_in.set()

    threads = [threading.Thread(target=first), threading.Thread(target=second)]
    for thread in threads:
        thread.start()
    try:
        assert first_in.wait(WAIT_S)
        # the second waits on the first's lock (flock is per open file, threads alike): were
        # it let in, it would be so at once; a slow machine can only let this pass, not fail
        assert not second_in.wait(1.0)
        assert len(_locks(private_tmp)) == 1  # the lock is a file while it is held
    finally:
        first_may_leave.set()
        for thread in threads:
            thread.join(WAIT_S)
    assert second_in.is_set()
    assert order == ["first in", "first out", "second in"]
    assert _locks(private_tmp) == []
