"""Break-it round 12: `dlperf.analyze` from several threads at once. Counting installs
process-wide module hooks and torch's ModuleTracker, so one thread's counter saw another's
modules: some threads raised "the model rejects input ...: KeyError: '0.bn1'", a false word
about the input. Counts now take turns; every thread gets the same answer."""

from __future__ import annotations

import threading

from torch import nn

import dlperf

REGISTER_PARAMETER = nn.Module.register_parameter
REGISTER_BUFFER = nn.Module.register_buffer


def test_analyze_from_four_threads_at_once_gives_each_the_same_count() -> None:
    expected = dlperf.analyze("resnet20", (3, 32, 32)).totals["flops"]
    start = threading.Barrier(4)
    counts: list[object] = []
    errors: list[str] = []

    def count() -> None:
        start.wait(timeout=60)  # all four begin together
        try:
            counts.append(dlperf.analyze("resnet20", (3, 32, 32)).totals["flops"])
        except Exception as e:  # what the thread met, kept for the assertion
            errors.append(f"{type(e).__name__}: {e}")

    threads = [threading.Thread(target=count) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    assert errors == []
    assert counts == [expected] * 4
    # Building on meta patches nn.Module: every build put back what it found, one at a time
    # (two at once once left the meta patch in place for good, and every later model of the
    # process was built without weights)
    assert nn.Module.register_parameter is REGISTER_PARAMETER
    assert nn.Module.register_buffer is REGISTER_BUFFER
