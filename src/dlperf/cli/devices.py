"""`dlperf devices` and `dlperf calibrate`: the device catalog, and measuring this machine."""

from __future__ import annotations

import typer

from dlperf.cli import console
from dlperf.cli.app import Json, app, open_store


@app.command()
def devices(as_json: Json = False) -> None:
    """List the device catalog: peak FLOP/s, bandwidth, memory, interconnect, price, source.
    Add or override devices in $DLPERF_DEVICES or ~/.config/dlperf/devices.toml.

    Example: dlperf devices --json
    """
    from dlperf.analytic.devices import load_catalog, user_file

    catalog = load_catalog()
    if console.printed_json(
        as_json, {name: d.model_dump(exclude={"name"}) for name, d in catalog.items()}
    ):
        return
    precisions = ("fp32", "fp16", "bf16")
    console.print_table(
        f"devices (user file: {user_file()})",
        ["name", "kind", *(f"{p} TFLOPS" for p in precisions), "mem GB/s", "mem GB",
         "link GB/s", "$/GPU-h", "PPP", "date"],
        [
            [name, d.kind if d.gpus_per_board == 1 else f"gpu, 1 of {d.gpus_per_board}/board",
             *(d.peak_tflops.get(p) for p in precisions), d.memory_bandwidth_gbs,
             d.memory_gb, d.interconnect_gbs, d.price_per_hour_usd,
             "per kind" if d.ppp_by_kind else d.ppp, d.date]
            for name, d in catalog.items()
        ],
    )  # fmt: skip


@app.command()
def calibrate(
    name: str = typer.Option(
        None, "--name", help="Device name to store (default: the host name).", show_default=False
    ),
    as_json: Json = False,
) -> None:
    """Measure this machine (matmul FLOP/s per dtype, copy bandwidth) and fit the time
    model's PPP per operator kind, PPP_mem and per-call overhead on small kernels; save it
    as a device named after the host in the user catalog and record the run.

    Example: dlperf calibrate && dlperf predict resnet18 --measure
    """
    from dlperf.analytic.recorded import calibrate_recorded
    from dlperf.errors import UserError
    from dlperf.parsing import has_control

    # Before minutes of measuring: a blank name saved a device " " (a blank row in `dlperf
    # devices`), and a control character would act on the terminal that lists it.
    if name is not None and (not name.strip() or has_control(name)):
        raise UserError(f"--name: a device name is printable text, got {name!r}")
    with console.reporter() as rep:
        done = calibrate_recorded(open_store, name, rep)
    run_id, path, device, marks = done["run_id"], done["path"], done["device"], done["marks"]
    document = {"run_id": run_id, "path": str(path), **device.model_dump(), **marks}
    if console.printed_json(as_json, document):
        return
    console.print_table(
        f"{device.name}: {device.description}",
        ["", "value"],
        [[f"matmul {p} (TFLOP/s)", v] for p, v in device.peak_tflops.items()]
        + [["memory bandwidth, copy (GB/s)", device.memory_bandwidth_gbs]]
        + [[f"PPP {kind}", v] for kind, v in device.kind_ppp().items()]
        + [
            ["PPP_mem", device.ppp_mem],
            ["overhead per operator call (us)", device.op_overhead_us],
            ["CPU wait (share of thread time)", marks["cpu_wait_share"]],
            *([["unreliable", marks["reliability_note"]]] if marks["reliable"] is False else []),
            ["saved to", str(path)],
            ["stored as run", run_id],
        ],
    )
