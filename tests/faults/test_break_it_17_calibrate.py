"""Break-it round 17, part E, cause B: `calibrate` on a busy host saved `depthwise_conv = 1.0`
in `ppp_by_kind`, labelled calibrated, and its note said nothing: the kind's kernel ran faster
than the memory and call terms alone predict, so solve() left it at its default, and the
next kind's solve wrote that default down beside its own. A kind that cannot be solved is
now left out of `ppp_by_kind` (the device's `ppp`, else 1, applies to it openly) and named in
`unsolved` and the reliability note.

The probes' times are made up from known rates on a clock that advances only when fake work
runs, so the kernel that beats its other terms does so by construction, not by a busy host.
"""

from __future__ import annotations

import functools
import json
import tomllib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch

from dlperf.analytic import interleaved, recorded
from dlperf.analytic.counting import analyze_module
from dlperf.analytic.measure import KERNELS
from dlperf.analytic.paleo import predict
from tests.analytic.test_interleaved import TRUTH
from tests.conftest import CliResult


class FakeClock:
    """Seconds that advance only when fake work runs, by the work's time."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def work(self, seconds: float) -> Callable[[], None]:
        def step() -> None:
            self.now += seconds

        return step


def probes_with_a_fast_depthwise_kernel(clock: FakeClock) -> interleaved.Probes:
    """TRUTH's probes, but the depthwise kernel takes 1 ns: less than its call overhead."""
    flops, nbytes = 2 * 1024**3, 2 * 64 * 2**20
    kernels = []
    for kernel in KERNELS:
        a = analyze_module(kernel.make(), kernel.shape, kernel.batch, kernel.train)
        seconds = 1e-9 if kernel.unknown == "depthwise_conv" else predict(a, TRUTH).totals.time_s
        kernels.append((a, clock.work(seconds)))
    return interleaved.Probes(
        matmul={"fp32": (flops, clock.work(flops / 1e12))},
        copy=(nbytes, clock.work(nbytes / 100e9)),
        kernels=kernels,
    )


def test_a_kind_calibrate_cannot_solve_is_not_saved_as_measured(
    cli: Callable[..., CliResult], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    devices = tmp_path / "devices.toml"
    monkeypatch.setenv("DLPERF_DEVICES", str(devices))
    clock = FakeClock()

    def build(*args: Any) -> interleaved.Probes:
        return probes_with_a_fast_depthwise_kernel(clock)

    monkeypatch.setattr(interleaved, "build_probes", build)
    monkeypatch.setattr(
        recorded, "calibrate", functools.partial(interleaved.calibrate, clock=clock)
    )
    monkeypatch.setattr(recorded, "pick_device", lambda _: torch.device("cpu"))

    done = cli("calibrate", "--name", "here", "--json")
    assert done.code == 0, done.err
    doc = json.loads(done.out)
    assert doc["unsolved"] == ["depthwise_conv"]
    kinds = doc["ppp_by_kind"]
    assert "depthwise_conv" not in kinds
    # every other kind solved; those whose kernels hold no depthwise forward to their truth
    assert list(kinds) == [k for k in TRUTH.kind_ppp() if k != "depthwise_conv"]
    apart = {k: v for k, v in kinds.items() if not k.startswith("depthwise")}
    assert apart == pytest.approx({k: TRUTH.kind_ppp()[k] for k in apart})
    assert doc["reliable"] is False
    assert doc["reliability_note"].split("; ")[-1] == (
        "not solved: depthwise_conv (its kernel ran faster than the other terms alone "
        "predict: left out, the default applies)"
    )
    saved = tomllib.loads(devices.read_text())["here"]
    assert "depthwise_conv" not in saved["ppp_by_kind"]
    assert "ppp" not in saved  # so the kind's PPP is 1, and the device says so openly
