"""Server throughput with dynamic micro-batching (--max-batch 32) against one request per
model call (--max-batch 1): CIFAR ResNet-20 exported to ONNX with a dynamic batch dimension,
`dlperf serve` in its own process, the `dlperf serve bench` load generator at concurrency 32
posting a 32x32 PNG to /predict. Both servers run side by side; the load alternates between
them in interleaved repetitions. Requests/s = successful responses / wall time of a run."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

import httpx
import torch
from prometheus_client.parser import text_string_to_metric_families

from benchlib import save, spread, table
from dlperf.deploy import loadgen, meta
from dlperf.models import create_model
from dlperf.timing import round_robin

REPEATS, DURATION_S, CONCURRENCY, THREADS = 3, 5.0, 32, 1
CONTENDERS = {"micro-batching (max-batch 32)": 32, "batch 1 (max-batch 1)": 1}


def export_resnet20(path: Path) -> Path:
    torch.manual_seed(0)
    model = create_model("resnet20", num_classes=10).eval()
    batch = torch.export.Dim("batch", min=1, max=1024)
    torch.onnx.export(
        model,
        (torch.randn(2, 3, 32, 32),),
        str(path),
        dynamo=True,
        external_data=False,
        input_names=["input"],
        output_names=["logits"],
        dynamic_shapes=({0: batch},),
    )
    pre = meta.Preprocess((32, 32), 3, (0.4914, 0.4822, 0.4465), (0.2470, 0.2435, 0.2616))
    labels = [f"class{i}" for i in range(10)]
    meta.save(path, meta.ModelMeta("classification", "resnet20", "input", (3, 32, 32), pre, labels))
    return path


@contextmanager
def server(model: Path, max_batch: int) -> Iterator[str]:
    env = {**os.environ, "OMP_NUM_THREADS": str(THREADS)}
    options = f"--port 0 --threads {THREADS} --max-batch {max_batch} --max-wait-ms 5 --queue 256"
    command = [sys.executable, "-m", "dlperf", "serve", str(model), *options.split()]
    proc = subprocess.Popen(command, stderr=subprocess.PIPE, text=True, env=env)
    try:
        assert proc.stderr is not None
        line = proc.stderr.readline()
        found = re.search(r"on (http://127\.0\.0\.1:\d+) ", line)
        if not found:
            raise RuntimeError(f"dlperf serve did not start: {line!r}")
        yield found.group(1)
    finally:
        proc.terminate()
        proc.wait(timeout=60)


def mean_batch(url: str) -> float:
    """Rows per model call over the server's life, from its /metrics."""
    text = httpx.get(f"{url}/metrics", trust_env=False).text
    # One server, one model: its series are the only ones of each name, whatever their labels.
    values = {
        sample.name: sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }
    return values["dlperf_batch_size_sum"] / values["dlperf_batch_size_count"]


def main() -> None:
    torch.set_num_threads(2)
    runs: dict[str, list[loadgen.LevelResult]] = {name: [] for name in CONTENDERS}
    with tempfile.TemporaryDirectory() as tmp, ExitStack() as stack:
        model = export_resnet20(Path(tmp) / "resnet20.onnx")
        urls = {name: stack.enter_context(server(model, b)) for name, b in CONTENDERS.items()}

        def measure(name: str) -> float:
            (result,) = loadgen.run(urls[name], [CONCURRENCY], DURATION_S)
            runs[name].append(result)
            return result.throughput

        results = round_robin({name: lambda n=name: measure(n) for name in CONTENDERS}, REPEATS)
        batches = {name: mean_batch(url) for name, url in urls.items()}
    batched, single = (results[name] for name in CONTENDERS)
    ratios = [b / s for b, s in zip(batched, single, strict=True)]
    rows = [
        [
            name,
            *spread(v).values(),
            spread([r.p50_ms or 0 for r in runs[name]])["median"],
            spread([r.p99_ms or 0 for r in runs[name]])["median"],
            batches[name],
            sum(r.errors for r in runs[name]),
        ]
        for name, v in results.items()
    ]
    rows.append(["ratio batched / batch 1", *spread(ratios).values(), "", "", "", ""])
    print(
        table(
            f"resnet20 ONNX, POST /predict 32x32 PNG, concurrency {CONCURRENCY}, "
            f"{DURATION_S:g} s x {REPEATS}, requests/s (min / median / max)",
            ["server", "min", "median", "max", "p50 ms", "p99 ms", "mean batch", "errors"],
            rows,
        )
    )
    print(f"median speed-up from micro-batching: {spread(ratios)['median']:.2f}x")
    save(
        "serve",
        {
            "requests_per_s": results,
            "ratio_batched_over_single": ratios,
            "latency_ms": {
                name: [{"p50": r.p50_ms, "p90": r.p90_ms, "p99": r.p99_ms} for r in rs]
                for name, rs in runs.items()
            },
            "mean_batch_size": batches,
            "errors": {name: sum(r.errors for r in rs) for name, rs in runs.items()},
            "settings": {
                "model": "resnet20 (CIFAR, 3x32x32, dynamic batch), torch.onnx.export dynamo",
                "concurrency": CONCURRENCY,
                "duration_s": DURATION_S,
                "repeats": REPEATS,
                "ort_threads": THREADS,
                "max_wait_ms": 5,
                "contenders_max_batch": CONTENDERS,
            },
        },
    )


if __name__ == "__main__":
    main()
