"""The same scaling points on PyTorch DDP and on TensorFlow's strategies, side by side in one
run: images/s of the small CNN (3x32x32, global batch 64) and ResNet-50 (3x32x32, global
batch 32), synthetic data, 1 and 2 workers in strong scaling, for DDP (gloo), MirroredStrategy
(logical CPU devices; hierarchical-copy and reduce-to-one-device all-reduce) and
MultiWorkerMirroredStrategy (two processes; ring and auto collectives), and Horovod's torch
and TensorFlow bindings under horovodrun (gloo) when Horovod is built (make horovod). Every
contender is one `dlperf scale` study in-process, interleaved over the repetitions;
throughput = global samples / wall time of the timed steps.

Needs the tensorflow extra (pip install -e '.[tensorflow]')."""

from __future__ import annotations

import tempfile
from pathlib import Path

from benchlib import save, spread, table
from dlperf.config import load_experiment
from dlperf.distributed.hvd_launch import horovodrun
from dlperf.distributed.study import run_study
from dlperf.store import RunStore
from dlperf.timing import round_robin

REPEATS = 2
MODELS = {"smallcnn": 64, "resnet50": 32}  # global batch
STEPS, WARMUP = 12, 3
CONTENDERS = {
    "DDP (gloo)": {"framework": "torch", "strategy": ["ddp"], "allreduce": []},
    "TF mirrored, hierarchical": {"framework": "tensorflow", "strategy": ["mirrored"],
                                  "allreduce": ["hierarchical"]},
    "TF mirrored, one-device": {"framework": "tensorflow", "strategy": ["mirrored"],
                                "allreduce": ["one-device"]},
    "TF multiworker, ring": {"framework": "tensorflow", "strategy": ["multiworker"],
                             "allreduce": ["ring"]},
    "TF multiworker, auto": {"framework": "tensorflow", "strategy": ["multiworker"],
                             "allreduce": ["auto"]},
}  # fmt: skip
if horovodrun() is not None:
    CONTENDERS["Horovod torch (gloo)"] = {"framework": "horovod", "strategy": ["torch"]}
    CONTENDERS["Horovod TF (gloo)"] = {"framework": "horovod", "strategy": ["tensorflow"]}
EXP = """
[model]
name = "{model}"
[data]
name = "synthetic"
shape = [3, 32, 32]
[train]
lr = 0.01
momentum = 0.9
[scale]
synthetic = true
workers = [1, 2]
mode = "strong"
global_batch = {batch}
steps = {steps}
warmup_steps = {warmup}
comm_split = false
plots = false
[run]
out_dir = "{out}"
"""


def study(root: Path, store: RunStore, model: str, options: dict[str, object]) -> dict[int, float]:
    """Images/s per worker count of one contender's study."""
    path = root / f"{model}.toml"
    text = EXP.format(model=model, batch=MODELS[model], steps=STEPS, warmup=WARMUP, out=root)
    path.write_text(text)
    exp = load_experiment(path)
    exp.scale = exp.scale.model_copy(update=options)
    result = run_study(exp, store, root)
    return {r["workers"]: r["throughput"] for r in result.rows if r["status"] == "finished"}


def main() -> None:
    records: dict[str, dict[str, list[dict[int, float]]]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        store = RunStore.open(str(root / "bench.db"))
        for model in MODELS:
            contenders = {
                name: lambda options=options, model=model: study(root, store, model, options)
                for name, options in CONTENDERS.items()
            }
            records[model] = round_robin(contenders, REPEATS)
    rows = []
    for model, results in records.items():
        for name, runs in results.items():
            for workers in (1, 2):
                values = [run[workers] for run in runs if workers in run]
                ratio = [run[2] / run[1] for run in runs if {1, 2} <= run.keys()]
                speedup = spread(ratio)["median"] if workers == 2 and ratio else None
                rows.append([model, name, workers, *spread(values).values(), speedup])
    print(
        table(
            f"images/s (min / median / max of {REPEATS} interleaved repetitions), strong "
            "scaling, synthetic 3x32x32; speedup = 2-worker / 1-worker images/s (median)",
            ["model", "contender", "workers", "min", "median", "max", "speedup"],
            rows,
        )
    )
    save(
        "bench_frameworks",
        {"images_per_s": records, "models": MODELS, "steps": STEPS, "warmup": WARMUP},
    )


if __name__ == "__main__":
    main()
