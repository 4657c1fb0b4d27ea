"""dlperf.version: the installed distribution's version, or a marker for a source tree."""

from __future__ import annotations

from collections.abc import Iterator
from importlib.metadata import PackageNotFoundError
from importlib.metadata import version as metadata_version

import pytest

from dlperf import version as version_module


@pytest.fixture
def uncached() -> Iterator[None]:
    version_module.dlperf_version.cache_clear()
    yield
    version_module.dlperf_version.cache_clear()


def test_the_version_is_the_installed_distributions(uncached: None) -> None:
    assert version_module.dlperf_version() == metadata_version("dlperf")


def test_a_source_tree_never_installed_reads_0_unknown(
    uncached: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    def missing(name: str) -> str:
        raise PackageNotFoundError(name)

    monkeypatch.setattr(version_module, "version", missing)
    assert version_module.dlperf_version() == "0+unknown"


def test_the_version_is_read_once(uncached: None, monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[str] = []

    def counted(name: str) -> str:
        calls.append(name)
        return "9.9"

    monkeypatch.setattr(version_module, "version", counted)
    assert version_module.dlperf_version() == "9.9"
    assert version_module.dlperf_version() == "9.9"
    assert calls == ["dlperf"]
