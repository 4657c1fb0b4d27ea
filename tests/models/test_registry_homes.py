"""Each model file's directory is a package of its own (models.registry's home): the cases the
round-11 tests (tests/faults/test_break_it_11_models.py) leave out."""

from __future__ import annotations

import pickle
import sys
from pathlib import Path

import pytest

from dlperf.models.registry import load_factory

HELPER = "class Box:\n    TAG = {tag!r}\n\n\ndef tag():\n    return {tag!r}\n"
MODEL = """
import helper


def tag():
    return helper.tag()


def box():
    return helper.Box()
"""


@pytest.fixture
def two(tmp_path: Path) -> Path:
    for tag in ("a", "b"):
        (tmp_path / tag).mkdir()
        (tmp_path / tag / "helper.py").write_text(HELPER.format(tag=tag))
        (tmp_path / tag / "models.py").write_text(MODEL)
    return tmp_path


def test_a_model_directory_on_sys_path_does_not_lend_its_neighbours_to_another(
    two: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A notebook started in a/ has it on sys.path: b's `import helper` must still be b's.
    monkeypatch.syspath_prepend(str(two / "a"))
    tags = [load_factory(f"{two}/{t}/models.py:tag")() for t in ("a", "b", "a")]
    assert tags == ["a", "b", "a"]
    assert "helper" not in sys.modules


def test_an_object_of_a_neighbours_class_pickles_and_comes_back_as_its_own(two: Path) -> None:
    boxes = [load_factory(f"{two}/{t}/models.py:box")() for t in ("a", "b")]
    back = [pickle.loads(pickle.dumps(box)) for box in boxes]
    assert [type(b).TAG for b in back] == ["a", "b"]
    assert [type(b) for b in back] == [type(b) for b in boxes]
