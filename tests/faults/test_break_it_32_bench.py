"""Break-it round 32 (P4), `serve bench`.

C2: `--duration nan` was blamed on slow client start ("give a longer --duration"), and
`--duration inf` was taken: a level that never ended, without a word (click's FloatRange lets
both through its `min=`).
C3: a URL whose port is not a port (`:99999`, `:abc`, `:-1`) or with a cut IPv6 bracket was a
Python traceback (urllib raises only as `.port` is read).
C4: `https://` of a `dlperf serve` (which has no TLS) said "no server answers ... start one".
C5: only the probe's answer had to be a prediction: every later 2xx (any body) counted as a
request served.
C6: more clients than the load generator's open-file limit allows: its own "Too many open
files" at connect was counted as the server refusing (at 30,000 clients: "is the server hung,
or stopped?" after 279 s).
C7: a stop (SIGTERM, Ctrl-C) after a finished level threw that level away, without a word.
C10: the server's process was found by its listening port alone: with two servers on one port
(127.0.0.1 and 127.0.0.2, or ::1) the bench of the healthy one named the other's pid as
stopped, and timed the other's CPU wait.
C11: the URL `serve --host 0.0.0.0` printed (http://0.0.0.0:PORT, before serve gave the loopback
one) was refused as "not a loopback address; serve bench only loads a server on this machine".

The server is httpx's MockTransport in this process (no network, no timer).
"""

from __future__ import annotations

import asyncio
import errno
import itertools
import json
import os
import signal
import socket
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest

from dlperf.deploy import loadgen
from dlperf.errors import UserError
from dlperf.progress import NullReporter
from tests.conftest import CliResult

Cli = Callable[..., CliResult]
PREDICTION = {"model_name": "m", "predictions": []}
Handler = Callable[[int], httpx.Response | None]


def answering(monkeypatch: pytest.MonkeyPatch, answer: Handler) -> list[int]:
    """Every client the load generator makes is answered by `answer(n)` for the n-th request
    of the run (counted from 0, the probe's); None answers a prediction. The requests' n."""
    seen: list[int] = []
    count = itertools.count()

    async def handler(request: httpx.Request) -> httpx.Response:
        await asyncio.sleep(0)  # as a request over the network does: the clients take turns
        n = next(count)
        seen.append(n)
        return answer(n) or httpx.Response(200, json=PREDICTION)

    monkeypatch.setattr(
        loadgen, "_client", lambda: httpx.AsyncClient(transport=httpx.MockTransport(handler))
    )
    return seen


@pytest.mark.parametrize("duration", ["nan", "inf", "-inf", "0.01", "0"])
def test_a_duration_not_a_finite_tenth_or_more_is_refused_before_any_request(
    cli: Cli, monkeypatch: pytest.MonkeyPatch, duration: str
) -> None:
    seen = answering(monkeypatch, lambda n: None)
    r = cli("serve", "bench", "http://127.0.0.1:9", f"--duration={duration}")
    assert (r.code, r.out, seen) == (2, "", [])
    assert r.err == (
        f"error: --duration: must be a finite number of seconds, 0.1 or more (got {duration})\n"
    )


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("http://127.0.0.1:99999", "'http://127.0.0.1:99999' has no valid port (1-65535)"),
        ("http://127.0.0.1:abc/", "'http://127.0.0.1:abc/' has no valid port (1-65535)"),
        ("http://127.0.0.1:-1", "'http://127.0.0.1:-1' has no valid port (1-65535)"),
        ("http://127.0.0.1:0", "'http://127.0.0.1:0' has no valid port (1-65535)"),
        ("http://[::1", "'http://[::1' is not an http:// URL"),
    ],
)
def test_a_url_with_no_valid_port_or_a_cut_ipv6_address_is_one_line(
    cli: Cli, url: str, message: str
) -> None:
    with pytest.raises(UserError) as refused:
        loadgen.target(url)
    assert refused.value.message == message
    r = cli("serve", "bench", url, "--duration", "1")
    assert (r.code, r.out) == (2, "")
    assert r.err.startswith(f"error: {message} (") and r.err.count("\n") == 1, r.err


def test_https_is_refused_up_front_dlperf_serve_has_no_tls() -> None:
    with pytest.raises(UserError) as refused:
        loadgen.target("https://[::1]:8000/predict")
    assert refused.value.message == (
        "'https://[::1]:8000/predict': serve bench speaks http:// only, dlperf serve has no TLS"
    )
    assert refused.value.hint == "use http://[::1]:8000/predict"


def test_a_later_2xx_that_is_not_a_prediction_is_an_error_of_its_own(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The probe (request 0) gets a prediction, every later answer `200 {"hello": 1}`, but
    for the 2nd and 3rd counted requests (3, 4): predictions."""
    other = httpx.Response(200, json={"hello": 1})
    answering(monkeypatch, lambda n: None if n in (0, 3, 4) else other)
    said: list[str] = []

    class Said(NullReporter):
        def log(self, message: str) -> None:
            said.append(message)

    (level,) = loadgen.run("http://127.0.0.1:9", [1], 600.0, max_requests=5, reporter=Said())
    assert level.statuses == {"200": 2, "200-not-prediction": 3}
    assert (level.requests, level.ok, level.errors) == (5, 2, 3)
    assert level.throughput == pytest.approx(2 / level.wall_s)
    assert said == [
        f"concurrency 1: {level.throughput:.1f} req/s, 3 errors of 5 (3 2xx answers not a "
        "prediction: another server?)"
    ]


def test_more_clients_than_the_open_file_limit_allows_are_refused_up_front(
    cli: Cli, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The limit is the hard one: a soft one is raised to it (dlperf.paths.room_for_files)."""
    seen = answering(monkeypatch, lambda n: None)
    asked: list[int] = []
    monkeypatch.setattr(loadgen, "files_open", lambda guess: 10)
    monkeypatch.setattr(loadgen, "room_for_files", lambda needed: asked.append(needed) or 200)
    r = cli("serve", "bench", "http://127.0.0.1:9", "--concurrency", "1,300")
    assert (r.code, r.out, seen, asked) == (2, "", [], [300 + 10 + loadgen.SPARE_FILES])
    assert r.err == (
        f"error: --concurrency 300 needs about {300 + 10 + loadgen.SPARE_FILES} open files (a "
        "connection per client), over the open-file limit of 200 (ulimit -n 200 is too low: "
        "raise it, or give fewer clients in --concurrency)\n"
    )


def test_the_load_generator_out_of_files_is_its_own_failure_not_the_server_refusing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A connect that failed with EMFILE (this process's limit) or ENFILE (the system's), as
    httpx raises it: every counted request, so that refusals would have ended the level."""

    def answer(n: int) -> None:
        if n >= 2:  # after the probe and the warm-up
            code = errno.EMFILE if n % 2 else errno.ENFILE
            failed = OSError("All connection attempts failed")
            failed.__cause__ = OSError(code, "Too many open files")
            raise httpx.ConnectError("All connection attempts failed") from failed

    answering(monkeypatch, answer)
    (level,) = loadgen.run("http://127.0.0.1:9", [1], 600.0, max_requests=4)
    assert level.statuses == {"EMFILE (load generator)": 2, "ENFILE (load generator)": 2}
    assert (level.ok, level.errors) == (0, 4)


@pytest.mark.parametrize("as_json", [True, False], ids=["json", "table"])
def test_a_stop_after_a_finished_level_prints_it_and_says_so(
    cli: Cli, monkeypatch: pytest.MonkeyPatch, as_json: bool
) -> None:
    """Requests: the probe (0); concurrency 1's warm-up (1) and 2 counted (2, 3); concurrency
    2's warm-ups (4, 5), then SIGTERM in its first counted request (6)."""

    def answer(n: int) -> None:
        if n == 6:
            signal.raise_signal(signal.SIGTERM)

    answering(monkeypatch, answer)
    args = ["--concurrency", "1,2", "--duration", "600", "--max-requests", "2"]
    r = cli("serve", "bench", "http://127.0.0.1:9", *args, *(["--json"] if as_json else []))
    assert r.code == 143, (r.out, r.err)
    assert r.err.splitlines()[-1] == (
        "stopped by SIGTERM during concurrency 2; 1 of 2 levels done (printed)"
    )
    if as_json:
        doc = json.loads(r.out)
        assert doc["stopped"] == {"signal": "SIGTERM", "during_concurrency": 2}
        (level,) = doc["levels"]
        assert (level["concurrency"], level["requests"], level["ok"]) == (1, 2, 2)
    else:
        rows = [line for line in r.out.splitlines() if line.lstrip("│ ").startswith("1 ")]
        assert len(rows) == 1, r.out
        assert "POST http://127.0.0.1:9/predict" in r.out


def test_a_finished_bench_says_it_was_not_stopped(
    cli: Cli, monkeypatch: pytest.MonkeyPatch
) -> None:
    answering(monkeypatch, lambda n: None)
    r = cli("serve", "bench", "http://127.0.0.1:9", "--concurrency", "1", "--max-requests", "1",
            "--json")  # fmt: skip
    assert r.code == 0, r.err
    assert json.loads(r.out)["stopped"] is None


# C10. Lines of /proc/net/tcp and tcp6 as a little-endian machine's kernel prints them: each
# 32-bit word of the address in host order, the port in hex (0x4810: 18448).
A = "0100007F:4810"  # 127.0.0.1:18448
B = "0200007F:4810"  # 127.0.0.2:18448
V6 = "00000000000000000000000001000000:4810"  # [::1]:18448
ANY4 = "00000000:4810"  # 0.0.0.0:18448
ANY6 = "00000000000000000000000000000000:4810"  # [::]:18448
MAPPED = "0000000000000000FFFF00000200007F:4810"  # [::ffff:127.0.0.2]:18448
NET_HEADER = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  "


def fake_proc(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, *held: tuple[str, list[int]]
) -> None:
    """A /proc for `loadgen.listeners` whose net/tcp{,6} hold one listening socket per
    (local address, pids holding it), and one connection (not listening) to each."""
    proc = tmp_path / "proc"
    tables = {"tcp": [NET_HEADER], "tcp6": [NET_HEADER]}
    for inode, (address, pids) in enumerate(held, start=100):
        lines = tables["tcp" if len(address) == 13 else "tcp6"]
        zero = "0" * address.index(":")
        for state, node in (("0A", inode), ("01", inode + 100)):  # LISTEN, ESTABLISHED
            queues = "00000000:00000000 00:00000000 00000000"
            lines.append(f"  {len(lines)}: {address} {zero}:0000 {state} {queues}  1000  0 {node}")
        for pid in pids:
            fd = proc / str(pid) / "fd"
            fd.mkdir(parents=True, exist_ok=True)
            (fd / str(inode)).symlink_to(f"socket:[{inode}]")
    (proc / "net").mkdir(parents=True)
    for table, lines in tables.items():
        (proc / "net" / table).write_text("\n".join(lines) + "\n")
    monkeypatch.setattr(loadgen, "PROC", proc)


@pytest.mark.skipif(sys.byteorder != "little", reason="the lines are a little-endian kernel's")
@pytest.mark.parametrize(
    ("held", "host", "pids"),
    [
        ([(A, [10]), (B, [20])], "127.0.0.2", {20}),  # not 127.0.0.1's server, the lower pid
        ([(A, [10]), (B, [20])], "127.0.0.1", {10}),
        ([(A, [10]), (V6, [30])], "::1", {30}),
        ([(A, [10]), (V6, [30])], "127.0.0.1", {10}),
        ([(ANY4, [40])], "127.0.0.5", {40}),  # a wildcard listener takes every address
        ([(ANY4, [40])], "::1", set()),  # ... of its own family
        ([(ANY6, [50])], "127.0.0.1", {50}),  # :: takes IPv4 too (dual-stack, Linux's default)
        ([(ANY4, [40]), (A, [10])], "127.0.0.1", {10}),  # the kernel picks the exact address
        ([(MAPPED, [60])], "127.0.0.2", {60}),
        ([(A, [10]), (A, [11])], "127.0.0.1", {10, 11}),  # two sockets (SO_REUSEPORT)
        ([(A, [10, 11])], "127.0.0.1", {10, 11}),  # one socket, a forked worker holds it too
        # Reviewer 4 F4: the kernel's order for an IPv4 address is the exact one (an IPv4
        # socket before an IPv6 one bound to it mapped), then 0.0.0.0, then :: (a v6-only ::
        # takes no IPv4, and /proc does not say which is which).
        ([(ANY4, [40]), (ANY6, [50])], "127.0.0.1", {40}),
        ([(ANY6, [50]), (ANY4, [40])], "127.0.0.1", {40}),
        ([(ANY4, [40]), (ANY6, [50])], "::1", {50}),
        ([(MAPPED, [60]), (B, [20])], "127.0.0.2", {20}),
        ([(MAPPED, [60]), (ANY4, [40])], "127.0.0.2", {60}),
        ([(ANY6, [50]), (MAPPED, [60])], "::ffff:127.0.0.2", {60}),
    ],
)
def test_the_server_is_found_by_the_url_s_address_and_port(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    held: list[tuple[str, list[int]]],
    host: str,
    pids: set[int],
) -> None:
    fake_proc(tmp_path, monkeypatch, *held)
    assert loadgen.listeners(host, 18448) == pids
    assert loadgen.listeners(host, 18449) == set()


@pytest.mark.skipif(sys.byteorder != "little", reason="the lines are a little-endian kernel's")
def test_several_listeners_time_the_load_generator_alone_and_say_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, cli: Cli
) -> None:
    fake_proc(tmp_path, monkeypatch, ("0100007F:0009", [10]), ("0100007F:0009", [11]))
    answering(monkeypatch, lambda n: None)
    r = cli("serve", "bench", "http://127.0.0.1:9", "--concurrency", "1", "--max-requests", "2",
            "--json")  # fmt: skip
    assert r.code == 0, r.err
    assert (
        "2 processes (pids 10, 11) listen where http://127.0.0.1:9/predict connects: the CPU "
        "wait is the load generator's alone" in " ".join(r.err.split())
    )
    (level,) = json.loads(r.out)["levels"]
    assert level["contention"]["process"] == "load generator"


def _ipv6() -> bool:
    try:
        with socket.socket(socket.AF_INET6) as sock:
            sock.bind(("::1", 0))
    except OSError:
        return False
    return True


LISTEN = """
import socket, sys
with socket.socket(socket.AF_INET6 if ":" in sys.argv[1] else socket.AF_INET) as sock:
    sock.bind((sys.argv[1], int(sys.argv[2])))
    sock.listen()
    print("listening", flush=True)
    sys.stdin.read()
"""


@pytest.mark.skipif(not Path("/proc/net/tcp").exists(), reason="needs Linux's /proc/net")
@pytest.mark.parametrize("other", ["127.0.0.2", "::1"])
def test_two_real_listeners_on_one_port_are_told_apart_by_address(other: str) -> None:
    """This process listens on 127.0.0.1:P, a child on `other`:P."""
    if ":" in other and not _ipv6():
        pytest.skip("no IPv6 here")
    with socket.create_server(("127.0.0.1", 0)) as ours:
        port = ours.getsockname()[1]
        command = [sys.executable, "-c", LISTEN, other, str(port)]
        with subprocess.Popen(
            command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
        ) as child:
            assert child.stdout is not None and child.stdin is not None
            try:
                assert child.stdout.readline() == "listening\n"
                assert loadgen.listeners(other, port) == {child.pid}
                assert loadgen.listeners("127.0.0.1", port) == {os.getpid()}
            finally:
                child.stdin.close()


@pytest.mark.parametrize(
    ("url", "host", "use"),
    [
        ("http://0.0.0.0:18449", "0.0.0.0", "use http://127.0.0.1:18449"),
        ("http://[::]:18449/predict?x=1", "::", "use http://[::1]:18449/predict?x=1"),
        ("http://[::ffff:0.0.0.0]:18449", "::ffff:0.0.0.0", "use http://127.0.0.1:18449"),
        ("http://0.0.0.0/predict", "0.0.0.0", "use http://127.0.0.1/predict"),
    ],
)
def test_a_wildcard_address_is_refused_naming_the_loopback_url(
    cli: Cli, url: str, host: str, use: str
) -> None:
    with pytest.raises(UserError) as refused:
        loadgen.target(url)
    assert (refused.value.message, refused.value.hint) == (
        f"{host} is where a server listens (every interface), not an address to connect to",
        use,
    )
    r = cli("serve", "bench", url, "--duration", "1")
    assert (r.code, r.out, r.err) == (2, "", f"error: {refused.value}\n")


# Reviewer 1 F8: the https hint was cut from the raw text: " https://127.0.0.1:8000" (which
# urllib reads with its leading space stripped) got the refused URL back as the fix.
@pytest.mark.parametrize(
    ("url", "use"),
    [
        (" https://127.0.0.1:8000", "use http://127.0.0.1:8000"),
        ("\thttps://127.0.0.1:8000/predict", "use http://127.0.0.1:8000/predict"),
        ("HTTPS://[::1]:8000", "use http://[::1]:8000"),
    ],
)
def test_the_https_hint_is_built_from_the_url_as_read(url: str, use: str) -> None:
    with pytest.raises(UserError) as refused:
        loadgen.target(url)
    assert refused.value.hint == use


def refuse(request_n: int) -> None:
    """No server takes the connection, as httpx raises it."""
    raise httpx.ConnectError("All connection attempts failed")


@pytest.mark.parametrize("as_json", [True, False], ids=["json", "table"])
def test_a_server_gone_in_a_later_level_keeps_the_finished_ones(
    cli: Cli, monkeypatch: pytest.MonkeyPatch, as_json: bool
) -> None:
    """Reviewer 1 F1: only a stop kept the finished levels; a server that died at a later level
    (the usual end of a load test) lost them. Requests: the probe (0), concurrency 1's warm-up
    (1) and 2 counted (2, 3); from 4 on (concurrency 2's warm-up) every connection is refused."""
    answering(monkeypatch, lambda n: refuse(n) if n >= 4 else None)
    args = ["--concurrency", "1,2", "--duration", "600", "--max-requests", "2"]
    r = cli("serve", "bench", "http://127.0.0.1:9", *args, *(["--json"] if as_json else []))
    gone = (
        "http://127.0.0.1:9/predict stopped answering at concurrency 2, in its warm-up: "
        "connection refused (2 of 2 requests)"
    )
    assert r.code == 1, (r.out, r.err)
    *_, said, error = r.err.splitlines()
    assert said == "ended by the error below during concurrency 2; 1 of 2 levels done (printed)"
    assert error.startswith(f"error: {gone} (is the server still running?"), r.err
    if as_json:
        doc = json.loads(r.out)
        assert doc["stopped"] == {"error": gone, "during_concurrency": 2}
        (level,) = doc["levels"]
        assert (level["concurrency"], level["requests"], level["ok"]) == (1, 2, 2)
    else:
        rows = [line for line in r.out.splitlines() if line.lstrip("│ ").startswith("1 ")]
        assert len(rows) == 1, r.out


def test_a_later_level_that_sent_no_request_keeps_the_finished_ones(
    cli: Cli, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The other error a later level ends with: "no request was sent in --duration"."""
    answering(monkeypatch, lambda n: None)
    real = loadgen._level

    async def level(url: str, body: bytes, concurrency: int, *args: object) -> object:
        if concurrency == 2:
            raise UserError("concurrency 2: no request was sent in --duration 600 s")
        return await real(url, body, concurrency, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(loadgen, "_level", level)
    args = ["--concurrency", "1,2", "--duration", "600", "--max-requests", "1", "--json"]
    r = cli("serve", "bench", "http://127.0.0.1:9", *args)
    assert r.code == 2, (r.out, r.err)
    assert r.err.splitlines()[-1] == "error: concurrency 2: no request was sent in --duration 600 s"
    doc = json.loads(r.out)
    assert doc["stopped"] == {
        "error": "concurrency 2: no request was sent in --duration 600 s",
        "during_concurrency": 2,
    }
    assert [level["concurrency"] for level in doc["levels"]] == [1]


async def _failure_out_of_files(url: str, refused: str) -> str | None:
    """What `_out_of_files` makes of a post to `url` with every file descriptor of this
    process taken (its soft limit lowered near the files open, then filled): the client is
    warmed first on `refused` (a port nothing listens on), as its modules load lazily."""
    import resource

    async with loadgen._client() as client:
        with pytest.raises(httpx.ConnectError):
            await client.post(refused, content=b"x")
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        held = []
        resource.setrlimit(resource.RLIMIT_NOFILE, (len(os.listdir("/proc/self/fd")) + 8, hard))
        try:
            try:
                while True:
                    held.append(open(os.devnull))  # noqa: SIM115 (closed below)
            except OSError:
                pass
            with pytest.raises(httpx.ConnectError) as failed:
                await client.post(url, content=b"x")
        finally:
            for each in held:
                each.close()
            resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    return loadgen._out_of_files(failed.value)


@pytest.mark.skipif(not Path("/proc/self/fd").exists(), reason="needs Linux's /proc")
@pytest.mark.parametrize("host", ["127.0.0.1", "localhost"])
def test_the_load_generator_out_of_files_is_its_own_with_a_localhost_url_too(host: str) -> None:
    """Reviewer 1 F2: with localhost each request looked the name up, and a lookup short of
    file descriptors fails as EBUSY, not EMFILE: counted as the server refusing. `run` looks
    it up once, up front, and posts to the address that takes its connection."""
    with socket.create_server(("127.0.0.1", 0)) as nothing:
        dead = nothing.getsockname()[1]  # closed below: a port nothing listens on
    with socket.create_server(("127.0.0.1", 0)) as server:
        port = server.getsockname()[1]
        url = loadgen._connectable(f"http://{host}:{port}/predict")
        assert url == f"http://127.0.0.1:{port}/predict"
        refused = f"http://{host}:{dead}/"
        assert asyncio.run(_failure_out_of_files(url, refused)) == "EMFILE"
    assert loadgen._connectable(f"http://localhost:{dead}/predict") == (
        f"http://localhost:{dead}/predict"  # nothing takes it: the probe says so, by its name
    )


def test_a_localhost_url_finds_its_server_by_the_address_that_took_the_connection(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Reviewer 4 F3: `run` resolves localhost to the address that takes its connection before
    it looks for the server's process: /proc is searched for that address, never for each of
    localhost's (so two servers on 127.0.0.1:P and ::1:P are not "several processes")."""
    answering(monkeypatch, lambda n: None)
    asked: list[tuple[str, int]] = []
    monkeypatch.setattr(
        loadgen, "listeners", lambda host, port: asked.append((host, port)) or set()
    )
    with socket.create_server(("127.0.0.1", 0)) as server:
        port = server.getsockname()[1]
        loadgen.run(f"http://localhost:{port}", [1], 600.0, max_requests=1)
    assert asked == [("127.0.0.1", port)]
    # None took it (here the mock client answers all the same): no address to look for.
    loadgen.run(f"http://localhost:{port}", [1], 600.0, max_requests=1)
    assert asked == [("127.0.0.1", port)]
