"""`dlperf serve MODEL.onnx` (the inference server) and `dlperf serve bench URL`."""

from __future__ import annotations

import errno
import math
import signal
import socket
from dataclasses import asdict
from fractions import Fraction
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from dlperf.cli import console
from dlperf.cli.app import Json, app, config_option, default_command_group, set_option
from dlperf.errors import UserError
from dlperf.parsing import one_line, parse_list

if TYPE_CHECKING:
    from dlperf.deploy.loadgen import LevelResult

serve_app = typer.Typer(
    cls=default_command_group("start"),
    subcommand_metavar="[start] MODEL.onnx [OPTIONS] | bench URL [OPTIONS]",
    help="Serve an exported model over HTTP (Open Inference Protocol / KServe v2 with binary "
    "tensors, image upload, Prometheus metrics) and load-test it. `dlperf serve MODEL.onnx` "
    "is short for `dlperf serve start MODEL.onnx`.\n\nExample: dlperf serve model.onnx --port 8000",
    no_args_is_help=True,
)
app.add_typer(serve_app, name="serve")


def _listen(host: str, port: int) -> socket.socket:
    """Bind here rather than in uvicorn: a taken port is one clear error, --port 0 gets a
    free port whose number we can print, and clients that connect as soon as it is printed
    wait in the backlog until uvicorn accepts."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # proto must say TCP: asyncio sets TCP_NODELAY on accepted connections only when it does,
    # and without it every keep-alive response waits ~40 ms for the client's delayed ACK.
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as e:
        sock.close()
        raise UserError(f"cannot listen on {host}:{port}: {e.strerror}", _bind_hint(e)) from None
    sock.listen(2048)  # uvicorn's default backlog
    return sock


def _bind_hint(error: OSError) -> str:
    """The fix for a failed bind: the port is taken or reserved, or the host is not an
    address of this machine (a name that does not resolve, another machine's address)."""
    if error.errno == errno.EADDRINUSE:
        return "pick another --port"
    if error.errno == errno.EACCES:
        return "pick a --port above 1023"
    return "give --host an address of this machine, e.g. 127.0.0.1, or 0.0.0.0 for all"


@serve_app.command("start")
def start(
    model: Path = typer.Argument(
        ..., help="An ONNX model; one exported by `dlperf export` also gets /predict."
    ),
    config: Path = config_option("[serve] section"),
    set_: list[str] = set_option("serve.port=9000"),
    host: str = typer.Option(None, "--host", help="Address to listen on."),
    port: int = typer.Option(None, "--port", help="Port (0 = any free)."),
    max_batch: int = typer.Option(None, "--max-batch", help="Most rows in one model call."),
    max_wait_ms: float = typer.Option(
        None, "--max-wait-ms", help="How long the first request waits for company."
    ),
    queue: int = typer.Option(None, "--queue", help="Waiting requests before 503."),
    threads: int = typer.Option(None, "--threads", help="ONNX Runtime intra-op threads."),
    max_body_mb: float = typer.Option(None, "--max-body-mb", help="Largest request body (MiB)."),
    max_pixels: int = typer.Option(None, "--max-pixels", help="Largest image /predict decodes."),
    read_timeout_s: float = typer.Option(
        None, "--read-timeout-s", help="Seconds a request may take to arrive (then 408)."
    ),
    max_connections: int = typer.Option(
        None, "--max-connections", help="Connections open at once (then 503)."
    ),
) -> None:
    """Serve an ONNX model: one shared ONNX Runtime session, dynamic micro-batching, the
    Open Inference Protocol (KServe v2: JSON and binary tensors) under /v2, /predict for
    images, /metrics for Prometheus. Ctrl-C, SIGTERM or SIGHUP stops accepting, finishes the
    queued requests and exits 128 + the signal (130, 143, 129).

    The options from --host to --max-connections are short for --set serve.KEY=VALUE (KEY: the
    option's name with _ for -); `dlperf config keys` explains every key.

    Example: dlperf serve model.onnx --port 8000 --max-batch 32 --max-wait-ms 5
    """
    from dlperf.config import ServeJob, load_job
    from dlperf.deploy.loadgen import is_loopback
    from dlperf.deploy.serve_log import Writer
    from dlperf.deploy.server import (
        client_url,
        create_app,
        ensure_open_files,
        is_wildcard,
        serve_forever,
    )

    flags = {
        "host": host, "port": port, "max_batch": max_batch, "max_wait_ms": max_wait_ms,
        "queue": queue, "threads": threads, "max_body_mb": max_body_mb, "max_pixels": max_pixels,
        "read_timeout_s": read_timeout_s, "max_connections": max_connections,
    }  # fmt: skip
    opts = load_job(ServeJob, config, set_, serve=flags).serve
    server_app = create_app(
        model,
        opts.max_batch,
        opts.max_wait_ms,
        opts.queue,
        opts.threads,
        # In exact arithmetic: rounded up (a byte at least), and no float overflow at 1e308.
        max_body_bytes=math.ceil(Fraction(opts.max_body_mb) * 2**20),
        max_pixels=opts.max_pixels,
    )
    ensure_open_files(opts.max_connections)  # before a port is taken and serving is said
    sock = _listen(opts.host, opts.port)
    if not is_loopback(opts.host):
        console.warn(
            f"listening on {opts.host}: other machines can reach this server, unauthenticated"
        )
    served = server_app.state.model
    url = client_url(opts.host, sock.getsockname()[1])
    listening = f" (listening on every interface, {opts.host})" if is_wildcard(opts.host) else ""
    # Its log's writer thread started before serving is said: one it cannot start is one line
    writer = Writer()
    # One line: the name is the file's stem, and the note may name the graph's inputs.
    console.err_line(
        one_line(
            f"serving {served.name} ({served.task or 'no dlperf metadata: tensors only'}; "
            f"{served.note}) on {url}{listening} - Ctrl-C stops after the queued requests"
        )
    )
    if served.said is not None:
        console.err_line(f"note: {served.said}")
    stopped_by = serve_forever(server_app, sock, opts.read_timeout_s, opts.max_connections, writer)
    if stopped_by is not None:
        # 128 + the signal, as a shell reports it: 130 for Ctrl-C, 143 for SIGTERM.
        raise typer.Exit(128 + stopped_by)


@serve_app.command("bench")
def bench(
    url: str = typer.Argument(..., help="The server, e.g. http://127.0.0.1:8000 (loopback)."),
    concurrency: str = typer.Option("1,8,32", "--concurrency", help="Clients, comma-separated."),
    duration: float = typer.Option(10.0, "--duration", help="Seconds per level (0.1 or more)."),
    max_requests: int = typer.Option(
        None, "--max-requests", min=1, help="Stop a level after this many requests."
    ),
    image: Path = typer.Option(None, "--image", help="Image to post (default: 32x32 noise)."),
    as_json: Json = False,
) -> None:
    """Load a running `dlperf serve` on this machine: closed-loop clients post an image to
    /predict; throughput and latency percentiles per concurrency level, and how long the
    server's or the load generator's threads waited for a CPU (CPU wait; a level at 10% or
    more is marked unreliable). A stop (Ctrl-C, SIGTERM) or an error in a later level (the
    server gone) prints the levels done before it.

    Example: dlperf serve bench http://127.0.0.1:8000 --concurrency 1,8,32 --duration 10
    """
    from dlperf import stopping
    from dlperf.deploy import loadgen

    bad = UserError(f"--concurrency {concurrency!r}: expected positive integers", "e.g. 1,8,32")
    levels = parse_list(concurrency, int, bad, minimum=1)
    endpoint = loadgen.target(url)
    document = {"url": endpoint, "duration_s": duration, "max_requests": max_requests}
    done: list[LevelResult] = []
    try:
        with console.reporter() as rep:
            loadgen.run(endpoint, levels, duration, max_requests, image, rep, done)
    except (KeyboardInterrupt, UserError) as e:
        # The finished levels are measured: a stop or an error (a server gone, a level that
        # sent nothing) in a later one keeps them; the error's line and exit code follow.
        if done:
            cut = levels[len(done)] if len(done) < len(levels) else None
            during = "after its last level" if cut is None else f"during concurrency {cut}"
            if isinstance(e, UserError):
                why: dict[str, object] = {"error": e.message}
                said = f"ended by the error below {during}"
            else:  # the signal exit_code ends the command with (Ctrl-C's, where none was taken)
                name = signal.Signals(stopping.exit_code(130) - 128).name
                why, said = {"signal": name}, f"stopped by {name} {during}"
            _print_levels(as_json, document, done, {**why, "during_concurrency": cut})
            console.err_line(f"{said}; {len(done)} of {len(levels)} levels done (printed)")
        raise
    _print_levels(as_json, document, done, None)


def _print_levels(
    as_json: bool,
    document: dict[str, object],
    results: list[LevelResult],
    stopped: dict[str, object] | None,
) -> None:
    """The levels as a table, or as `document` with them; `stopped`: the stop (its signal) or
    the error that cut them."""
    levels = [asdict(r) for r in results]
    if console.printed_json(as_json, {**document, "levels": levels, "stopped": stopped}):
        return
    rows = [
        [r.concurrency, r.requests, r.errors, r.throughput, r.p50_ms, r.p90_ms, r.p99_ms,
         None if r.cpu_wait_share is None else f"{r.cpu_wait_share:.0%}"]
        for r in results
    ]  # fmt: skip
    columns = ["concurrency", "requests", "errors", "req/s", "p50 ms", "p90 ms", "p99 ms",
               "CPU wait"]  # fmt: skip
    console.print_table(f"POST {document['url']}", columns, rows)
    from dlperf.deploy.loadgen import error_kinds

    for r in results:
        if r.errors:
            line = f"errors: concurrency {r.concurrency}: {error_kinds(r.statuses)}"
            console.out.print(line, soft_wrap=True)
    for r in results:
        if r.reliable is False:
            note = f"unreliable: concurrency {r.concurrency}: {r.reliability_note}"
            console.out.print(note, soft_wrap=True)
