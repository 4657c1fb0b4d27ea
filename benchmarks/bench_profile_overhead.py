"""What profiling costs: the same training steps of resnet20 (batch 64, synthetic 32x32)
without a profiler and inside dlperf's profiled window (torch.profiler recording CPU and, on a
GPU, CUDA activity, each phase labelled), in interleaved repetitions. The window's steps are
left out of a run's throughput; this says how much slower they are, and what writing the
trace adds. Question: is a profiled window cheap enough to take from every run?"""

from __future__ import annotations

import tempfile
from pathlib import Path

import torch

from benchlib import save, spread, table
from dlperf.config import Experiment
from dlperf.engine.profiler import ProfileWindow
from dlperf.engine.step import prepare
from dlperf.engine.timers import PhaseTimer
from dlperf.models import create_model
from dlperf.system import pick_device
from dlperf.timing import Timer, round_robin

ROUNDS, STEPS, BATCH = 5, 10, 64
EXP = Experiment.model_validate(
    {
        "model": {"name": "resnet20"},
        "data": {"name": "synthetic", "shape": [3, 32, 32]},
        "train": {"batch_size": BATCH, "lr": 0.05},
        "run": {"profile": {"enabled": True, "warmup": 1, "active": STEPS}},
    }
)


def main() -> None:
    torch.set_num_threads(2)
    device = pick_device()
    torch.manual_seed(0)
    labels_timer = PhaseTimer(device, enabled=False)
    step = prepare(create_model("resnet20").to(device), EXP, device, 1000, timer=labels_timer)
    x = torch.randn(BATCH, 3, 32, 32, device=device)
    y = torch.randint(0, 10, (BATCH,), device=device)
    for _ in range(3):  # warm up caches and the allocator once for both
        step(x, y)
    out = Path(tempfile.mkdtemp())

    def one_step() -> None:  # as the engine's loop marks it (the marks label the phases)
        labels_timer.mark("data")
        labels_timer.mark("h2d")
        step(x, y)

    def plain() -> float:
        timer = Timer(device)
        timer.start()
        for _ in range(STEPS):
            one_step()
        return timer.stop() / STEPS * 1e3

    def profiled(count: list[int] = [0]) -> float:  # noqa: B006 (a call counter)
        count[0] += 1
        window = ProfileWindow(EXP.run.profile, device, 0, out / f"r{count[0]}.pt.trace.json.gz")
        labels_timer.labels = window.labels
        with window:
            one_step()  # the profiler's own warm-up step, discarded
            window.after_step()
            timer = Timer(device)
            timer.start()
            for i in range(STEPS):
                one_step()
                if i < STEPS - 1:
                    window.after_step()
            recorded = timer.stop()
            timer.start()
            window.after_step()  # the last one writes the trace
            written = timer.stop()
        labels_timer.labels = None
        export_ms.append(written * 1e3)
        return recorded / STEPS * 1e3

    export_ms: list[float] = []
    results = round_robin({"plain": plain, "profiled": profiled}, ROUNDS)
    ratios = [p / q for p, q in zip(results["profiled"], results["plain"], strict=True)]
    rows = [[name, *spread(v).values()] for name, v in results.items()]
    rows.append(["ratio profiled/plain", *spread(ratios).values()])
    rows.append(["trace export (ms, once)", *spread(export_ms).values()])
    print(
        table(
            f"resnet20, batch {BATCH}, {STEPS} steps per round, {ROUNDS} rounds, on {device}: "
            "ms per step (min / median / max)",
            ["contender", "min", "median", "max"],
            rows,
        )
    )
    save(
        "profile_overhead",
        {
            "ms_per_step": results,
            "ratio_profiled_over_plain": ratios,
            "trace_export_ms": export_ms,
            "device": str(device),
            "steps": STEPS,
            "batch": BATCH,
        },
    )


if __name__ == "__main__":
    main()
