"""dlperf.system: device choice, threads, memory gauges, the system record, and the fd-2
filter around torch.profiler. Fakes stand in for the host (cores, CUDA) where it matters."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator

import pytest
import torch

from dlperf import contention, system
from dlperf.errors import UserError


@pytest.fixture
def two_cores(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(contention, "usable_cpus", lambda: {0, 1})


@pytest.fixture
def torch_threads() -> Iterator[None]:
    before = torch.get_num_threads()
    yield
    torch.set_num_threads(before)


@pytest.fixture
def no_accelerator(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: False)


def test_usable_cores_counts_the_affinity_set(two_cores: None) -> None:
    assert system.usable_cores() == 2


def test_auto_picks_the_cpu_without_an_accelerator(no_accelerator: None) -> None:
    assert system.pick_device("auto") == torch.device("cpu")
    assert system.pick_device("cpu") == torch.device("cpu")


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("tpu9", "unknown device 'tpu9' (use auto, cpu, cuda, cuda:N or mps)"),
        ("meta", "device 'meta' holds no values: a run cannot train on it"),
        ("cuda", "device 'cuda' asked for, but CUDA is not available here"),
        ("cuda:1", "device 'cuda:1' asked for, but CUDA is not available here"),
        ("mps", "device 'mps' asked for, but MPS is not available here"),
    ],
)
def test_pick_device_refuses_in_one_line(no_accelerator: None, spec: str, message: str) -> None:
    with pytest.raises(UserError) as e:
        system.pick_device(spec)
    assert str(e.value).startswith(message)
    assert "\n" not in str(e.value)


def test_set_threads_sets_torch_and_returns_the_count(two_cores: None, torch_threads: None) -> None:
    assert system.set_threads(1) == 1
    assert torch.get_num_threads() == 1
    assert system.set_threads(None) == 2  # every usable core
    assert torch.get_num_threads() == 2


def test_set_threads_auto_takes_the_free_cores(
    two_cores: None, torch_threads: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(contention, "free_cores", lambda: 0.6)
    assert system.set_threads("auto") == 1


def test_set_threads_refuses_zero_and_more_than_the_cores(
    two_cores: None, torch_threads: None
) -> None:
    before = torch.get_num_threads()
    with pytest.raises(UserError, match=r"^--threads must be at least 1, got 0$"):
        system.set_threads(0)
    with pytest.raises(UserError) as e:
        system.set_threads(3)
    assert str(e.value) == (
        "3 threads asked for, but this host has 2 usable cores "
        "(ask for at most 2, or leave threads unset to use them all)"
    )
    assert torch.get_num_threads() == before  # nothing was set


def test_auto_threads_rounds_the_free_cores_within_one_and_the_usable(two_cores: None) -> None:
    assert system.auto_threads(0.0) == 1
    assert system.auto_threads(1.49) == 1
    assert system.auto_threads(1.5) == 2
    assert system.auto_threads(7.0) == 2  # never more than usable


def test_crowding_warns_only_when_threads_exceed_the_free_cores(two_cores: None) -> None:
    assert system.crowding(1, 0.2) is None  # one thread: fewer cannot help
    assert system.crowding(2, 1.8) is None
    assert system.crowding(2, None) is None  # not measured
    warning = system.crowding(2, 0.7)
    assert warning is not None
    assert warning.startswith("only 0.7 of 2 usable cores are free")
    assert "this run takes 2 threads" in warning
    assert 'set run.threads = 1 (or "auto")' in warning


def test_cpu_memory_gauges(no_accelerator: None) -> None:
    cpu = torch.device("cpu")
    assert system.peak_memory_bytes(cpu) > 1_000_000  # a Python with torch: megabytes of RSS
    system.reset_peak_memory(cpu)  # a no-op off CUDA, and no error
    system.synchronize(cpu)
    assert system.gpu_memory(cpu) is None
    assert system.gpu_utilization(cpu) is None


def test_system_info_records_the_machine(no_accelerator: None, two_cores: None) -> None:
    info = system.system_info(torch.device("cpu"), threads=1)
    assert info["device"] == "cpu"
    assert info["threads"] == 1
    assert info["usable_cores"] == 2
    assert info["torch"] == torch.__version__
    assert info["cudnn"] is None  # no CUDA
    assert info["memory_gb"] > 0
    assert info["git_commit"] is None or len(info["git_commit"]) == 40
    assert system.system_info()["device"] is None


def test_profiler_quiet_drops_kinetos_lines_and_passes_the_rest_on(
    capfd: pytest.CaptureFixture[str],
) -> None:
    kineto = b"USDT:2026-11-26 12:19:21 25184:25184 File.cpp:39] profiler_start\n"
    error = b"ERROR:2026-11-26 12:19:21 1:1 CuptiActivityApi.cpp:12] gpuGetDeviceCount failed\n"
    with system.profiler_quiet():
        os.write(2, kineto + b"a warning of Python's\n" + error)
        print("to stderr too", file=sys.stderr)
    err = capfd.readouterr().err
    assert "profiler_start" not in err
    assert "gpuGetDeviceCount" not in err
    assert "a warning of Python's\n" in err
    assert "to stderr too\n" in err


def test_profiler_quiet_restores_fd_2_when_the_block_raises(
    capfd: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(ValueError), system.profiler_quiet():
        os.write(2, b"kept line\n")
        raise ValueError("boom")
    os.write(2, b"after\n")
    assert capfd.readouterr().err == "kept line\nafter\n"
