"""Who counts right, and how fast: dlperf against torch's FlopCounterMode, fvcore, ptflops
and DeepSpeed's flops profiler, on 10 torchvision models and the hand-made edge cases.

Reference: torchvision's weight metadata (num_params, _ops = GMACs to 3 decimals) and the
hand counts of tests/analytic/test_counting.py. Each tool reports MACs in its own way
(fvcore's "flops" and ptflops' "macs" are MACs; FlopCounterMode's flops are 2 x MACs);
all are converted to MACs here. Times: median of interleaved repetitions of the counting
call alone (dlperf on meta tensors, the others run the real model on this CPU).
Goal: dlperf right on every case; ResNet-50 analysed end to end in under 2 s.
"""

from __future__ import annotations

import contextlib
import functools
import io
import warnings
from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from benchlib import save, table
from dlperf.analytic.counting import analyze, analyze_module
from dlperf.timing import Spread, Timer, interleave

warnings.filterwarnings("ignore")
REPEATS = 3
MODELS = {  # name -> input side
    "resnet18": 224,
    "resnet50": 224,
    "mobilenet_v3_large": 224,
    "efficientnet_b0": 224,
    "densenet121": 224,
    "vgg16": 224,
    "inception_v3": 299,
    "convnext_tiny": 224,
    "vit_b_16": 224,
    "swin_t": 224,
}


class MatmulInForward(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.randn(4, 6))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x @ self.w


class Inception(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.b1 = nn.Conv2d(4, 2, 1, bias=False)
        self.b3 = nn.Conv2d(4, 3, 3, padding=1, bias=False)
        self.pool = nn.MaxPool2d(3, stride=1, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.cat([self.b1(x), self.b3(x), self.pool(x)], dim=1)


def _transformer() -> nn.Module:
    return nn.TransformerEncoderLayer(8, 2, 16, dropout=0.0, batch_first=True).eval()


# name -> (factory, input shape without batch, hand-counted params, hand-counted MACs)
EDGE_CASES: dict[str, tuple[Callable[[], nn.Module], list[int], int, int]] = {
    "single conv": (lambda: nn.Conv2d(3, 8, 3, padding=1), [3, 8, 8], 224, 13824),
    "strided transposed conv": (
        lambda: nn.ConvTranspose2d(4, 2, 3, 2, 1, output_padding=1, bias=False),
        [4, 5, 5],
        72,
        1800,
    ),
    "depthwise conv": (lambda: nn.Conv2d(8, 8, 3, groups=8, bias=False), [8, 6, 6], 72, 1152),
    "x @ W in forward": (MatmulInForward, [3, 4], 24, 72),
    "inception block (cat)": (Inception, [4, 5, 5], 8 + 108, 2900),
    "transformer layer (eval)": (_transformer, [5, 8], 600, 2960),
}


# --- contenders: (model, input) -> (params or None, MACs) -------------------------------


def dlperf_count(model: nn.Module, x: torch.Tensor) -> tuple[int, float]:
    a = analyze_module(model, list(x.shape[1:]))
    return a.params, a.totals()["macs"]


def torch_count(model: nn.Module, x: torch.Tensor) -> tuple[None, float]:
    from torch.utils.flop_counter import FlopCounterMode

    with FlopCounterMode(display=False) as mode:
        model(x)
    return None, mode.get_total_flops() / 2


def fvcore_count(model: nn.Module, x: torch.Tensor) -> tuple[int, float]:
    from fvcore.nn import FlopCountAnalysis, parameter_count

    analysis = FlopCountAnalysis(model, x).unsupported_ops_warnings(False)
    analysis.uncalled_modules_warnings(False)
    return parameter_count(model)[""], analysis.total()


def ptflops_count(model: nn.Module, x: torch.Tensor) -> tuple[int, float]:
    from ptflops import get_model_complexity_info

    with contextlib.redirect_stdout(io.StringIO()):
        macs, params = get_model_complexity_info(
            model, tuple(x.shape[1:]), as_strings=False, print_per_layer_stat=False
        )
    return params, macs


def deepspeed_count(model: nn.Module, x: torch.Tensor) -> tuple[int, float]:
    from deepspeed.profiling.flops_profiler import get_model_profile

    with contextlib.redirect_stdout(io.StringIO()):
        _, macs, params = get_model_profile(model, args=[x], print_profile=False, as_string=False)
    return params, macs


PEERS = {
    "torch FlopCounterMode": (torch_count, "torch"),
    "fvcore": (fvcore_count, "fvcore"),
    "ptflops": (ptflops_count, "ptflops"),
    "deepspeed": (deepspeed_count, "deepspeed"),
}


def installed(module: str) -> bool:
    try:
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            __import__(module)
    except Exception:  # an optional peer may fail to import in many ways
        return False
    return True


def run_case(
    build: Callable[[], nn.Module], shape: list[int], tools: dict[str, Callable[..., Any]]
) -> dict[str, dict[str, Any]]:
    """Every tool REPEATS times, interleaved; keep its answer and median seconds."""
    results: dict[str, dict[str, Any]] = {}
    models = {name: build().eval() for name in tools}
    x = torch.randn(1, *shape)

    def count_once(name: str) -> None:
        try:
            with torch.no_grad():
                params, macs = tools[name](models[name], x)
            results[name] = {"params": params, "macs": macs}
        except Exception as e:  # report a peer's failure, keep going
            results[name] = {"error": f"{type(e).__name__}: {str(e)[:80]}"}

    times = interleave({name: functools.partial(count_once, name) for name in tools}, 0, REPEATS)
    for name, seconds in times.items():
        results[name]["seconds"] = Spread.of(seconds).median
    return results


def verdict(result: dict[str, Any], params: int, macs: float, tv: bool) -> str:
    if "error" in result:
        return "error"
    same_macs = round(result["macs"] / 1e9, 3) == macs / 1e9 if tv else result["macs"] == macs
    same_params = result["params"] is None or result["params"] == params
    return "ok" if same_macs and same_params else "differs"


def main() -> None:
    import torchvision

    tools: dict[str, Callable[..., Any]] = {"dlperf": dlperf_count}
    missing = []
    for name, (count, module) in PEERS.items():
        if installed(module):
            tools[name] = count
        else:
            missing.append(name)
    cases: list[tuple[str, Callable[[], nn.Module], list[int], int, float, bool]] = []
    for name, side in MODELS.items():
        weights = torchvision.models.get_model_weights(name).DEFAULT
        # Its weights keep the auxiliary classifier (counted in num_params, idle in eval);
        # init_weights=False skips a slow scipy initialisation.
        kwargs = {"init_weights": False} if name == "inception_v3" else {}
        meta = weights.meta
        cases.append(
            (
                name,
                lambda name=name, kwargs=kwargs: torchvision.models.get_model(name, **kwargs),
                [3, side, side],
                meta["num_params"],
                meta["_ops"] * 1e9,
                True,
            )
        )
    for name, (build, shape, params, macs) in EDGE_CASES.items():
        cases.append((name, build, shape, params, macs, False))

    records = []
    for name, build, shape, params, macs, tv in cases:
        results = run_case(build, shape, tools)
        records.append(
            {"case": name, "input": shape, "params": params, "macs": macs, "results": results}
        )
        print(
            f"{name}: "
            + ", ".join(f"{t} {verdict(r, params, macs, tv)}" for t, r in results.items()),
            flush=True,
        )

    resnet50_s = Timer().time(lambda: analyze("resnet50"))

    columns = ["case", "reference MACs"] + [f"{t} MACs" for t in tools] + [f"{t} s" for t in tools]
    rows = []
    for rec in records:
        res = rec["results"]
        cells = []
        for t in tools:
            r = res[t]
            if "error" in r:
                cells.append("error")
            else:
                mark = verdict(r, rec["params"], rec["macs"], rec["case"] in MODELS)
                cells.append(f"{r['macs']:.4g} {'' if mark == 'ok' else '(' + mark + ')'}".strip())
        rows.append(
            [rec["case"], f"{rec['macs']:.4g}", *cells, *(res[t]["seconds"] for t in tools)]
        )
    print(
        table(
            "MACs (1 MAC = 2 FLOPs); (differs): MACs or params differ from the reference",
            columns,
            rows,
        )
    )
    right = {
        t: sum(
            verdict(rec["results"][t], rec["params"], rec["macs"], rec["case"] in MODELS) == "ok"
            for rec in records
        )
        for t in tools
    }
    print(
        "\nright on every case: " + ", ".join(f"{t} {n}/{len(records)}" for t, n in right.items())
    )
    print(f"dlperf analyze resnet50, end to end (build on meta + count): {resnet50_s:.2f} s")
    if missing:
        print(f"not installed: {', '.join(missing)}")
    path = save(
        "flops_peers",
        {
            "repeats": REPEATS,
            "cases": records,
            "right": right,
            "dlperf_resnet50_s": resnet50_s,
            "not_installed": missing,
        },
    )
    print(f"saved {path}")


if __name__ == "__main__":
    main()
