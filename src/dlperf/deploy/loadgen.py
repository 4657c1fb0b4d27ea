"""The load generator behind `dlperf serve bench`: closed-loop clients posting one image.

At each concurrency level, that many clients send `POST /predict` back to back until the
duration is up or the request budget is spent; each first sends one request that is not
counted (connection set-up, the server's first batches). Throughput = successful responses
(a 2xx whose answer is a prediction, as the probe's had to be) / wall time of the level;
latencies are of successful responses. A level ends early, refused (`ServerGone`), once
every client's last request went unanswered: no server to connect to (it died), or no answer
in TIMEOUT_S (it was stopped, SIGSTOP or Ctrl-Z, or hangs: its listening socket still takes
connections, so none is refused); so does a warm-up that no client got an answer to, and a
server whose process is stopped as a level starts is told at once. A level that goes on while
some of its requests time out counts them as errors, and is marked unreliable, saying how long
it took: each timeout held its client TIMEOUT_S, and one sent just before the deadline held the
level open as long past it. Only a server on this machine is loaded: a benchmark must never
become a flood against someone else's host.

Server and load generator share this machine's CPUs, with whatever else runs on it, so each
level's timed stretch (after the warm-up requests) is a contention window
(dlperf.contention) of the load generator's process and of the server's, found by the
socket listening on the URL's address and port (Linux's /proc; where it cannot be seen, or
several processes hold such sockets, the load generator's alone): the
level carries the more contended one's `cpu_wait_share` and figures (`contention`, with
`process`: "server" or "load generator") and its mark (`reliable`, `reliability_note`). Its
`stops` are None: neither process counts its continuations here (dlperf.contention's
`watching_stops` is a training run's), and a stopped server is told by its requests timing out.
"""

from __future__ import annotations

import asyncio
import dataclasses
import errno
import io
import ipaddress
import math
import os
import socket
import sys
import time
from collections import Counter
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlsplit, urlunsplit

import httpx
import numpy as np

from dlperf.contention import PROC, Window, judge
from dlperf.errors import UserError
from dlperf.paths import files_open, image_file, room_for_files
from dlperf.procs import stopped
from dlperf.progress import NullReporter, Reporter

EXAMPLE_URL = "e.g. http://127.0.0.1:8000"
MIN_DURATION_S = 0.1  # a level's least --duration
# Files the load generator opens beside its clients' connections and those open as it starts:
# the event loop's, the contention windows' reads of /proc.
SPARE_FILES = 32
IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
TIMEOUT_S = 30.0  # a request unanswered this long counts as no answer (tests shorten it)
# How long bench waits for the server's description (its batching): its event loop answers
# that at once, where a request may wait for company or the model.
ASK_TIMEOUT_S = 5.0
HEADERS = {"content-type": "application/octet-stream"}
# a 2xx's status when its answer is not a prediction (_is_prediction): "200-not-prediction"
NOT_PREDICTION = "-not-prediction"
# ... when this process had no file descriptor left to connect with: "EMFILE (load generator)"
OWN_FAILURE = " (load generator)"
REFUSED = httpx.ConnectError.__name__  # a request's status when no server took its connection
# ... and when one took it but sent no answer (or took no more of the body) in TIMEOUT_S
TIMED_OUT = frozenset(
    e.__name__ for e in (httpx.ConnectTimeout, httpx.ReadTimeout, httpx.WriteTimeout)
)
# ... and when it took the connection and then closed or reset it without an answer
CLOSED = frozenset(
    e.__name__ for e in (httpx.ReadError, httpx.WriteError, httpx.RemoteProtocolError)
)


class ServerGone(UserError):
    """The server stopped answering mid-level (stopped, killed, crashed, hung): the level
    measured refusals or timeouts, not the server, so it is refused, exit 1 (not the user's
    input)."""

    exit_code = 1


class _Unanswered(Exception):
    """Every client's last request went unanswered: the level's other requests are not
    waited for."""


@dataclass
class LevelResult:
    concurrency: int
    requests: int
    ok: int
    errors: int
    wall_s: float
    throughput: float  # successful responses per second
    p50_ms: float | None
    p90_ms: float | None
    p99_ms: float | None
    statuses: dict[str, int] = field(default_factory=dict)  # HTTP status or exception name
    # the more contended process's window over the level's timed requests (see above)
    cpu_wait_share: float | None = None
    contention: dict[str, Any] | None = None
    reliable: bool | None = None
    reliability_note: str | None = None


def is_loopback(host: str) -> bool:
    """127.0.0.0/8, ::1 or localhost: an address only this machine answers on."""
    try:
        return host == "localhost" or ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def target(url: str) -> str:
    """The /predict URL of a loopback server; anything off this machine is refused, and so is
    https:// (`dlperf serve` has no TLS)."""
    not_http = f"'{url}' is not an http:// URL"
    try:
        parts = urlsplit(url)
    except ValueError:  # a cut IPv6 address, "http://[::1"
        raise UserError(not_http, EXAMPLE_URL) from None
    if parts.scheme == "https":
        raise UserError(
            f"'{url}': serve bench speaks http:// only, dlperf serve has no TLS",
            f"use {urlunsplit(parts._replace(scheme='http'))}",  # as read: no edge white space
        )
    if parts.scheme != "http" or not parts.hostname:
        raise UserError(not_http, EXAMPLE_URL)
    try:  # urllib checks the port only as it is read: ":99999", ":abc", ":-1"
        port = parts.port
    except ValueError:
        port = 0
    if port == 0:  # nothing can be reached on port 0 either
        raise UserError(f"'{url}' has no valid port (1-65535)", EXAMPLE_URL)
    host = parts.hostname
    try:
        address: IPAddress | None = _plain(ipaddress.ip_address(host))
    except ValueError:  # a name: localhost, or one refused below
        address = None
    # Where `serve --host 0.0.0.0` listens, and the URL it printed before round 32
    if address is not None and address.is_unspecified:
        loopback = "127.0.0.1" if address.version == 4 else "[::1]"
        netloc = loopback if port is None else f"{loopback}:{port}"
        url_to_use = urlunsplit((parts.scheme, netloc, parts.path, parts.query, parts.fragment))
        raise UserError(
            f"{host} is where a server listens (every interface), not an address to connect to",
            f"use {url_to_use}",
        )
    if not is_loopback(host):
        raise UserError(
            f"{host} is not a loopback address; serve bench only loads a server on this machine",
            "use 127.0.0.1, ::1 or localhost",
        )
    path = parts.path if parts.path not in ("", "/") else "/predict"
    return urlunsplit((parts.scheme, parts.netloc, path, parts.query, ""))


def sample_image() -> bytes:
    """A fixed 32x32 RGB noise PNG: the server resizes it to the model's input anyway."""
    from PIL import Image

    pixels = np.random.default_rng(0).integers(0, 256, (32, 32, 3), dtype=np.uint8)
    buffer = io.BytesIO()
    Image.fromarray(pixels).save(buffer, format="PNG")
    return buffer.getvalue()


def run(
    url: str,
    concurrency: list[int],
    duration_s: float,
    max_requests: int | None = None,
    image: Path | None = None,
    reporter: Reporter | None = None,
    done: list[LevelResult] | None = None,
) -> list[LevelResult]:
    """Load the server at each concurrency level in turn. Each level is appended to `done`
    (the caller's list) as it ends, so that a caller keeps the finished ones when a stop
    (KeyboardInterrupt) or an error (ServerGone, UserError) cuts a later one."""
    endpoint = _connectable(target(url))
    # Not click's min=: its FloatRange lets nan and inf through (inf: a level without end).
    if not (math.isfinite(duration_s) and duration_s >= MIN_DURATION_S):
        raise UserError(
            f"--duration: must be a finite number of seconds, {MIN_DURATION_S:g} or more "
            f"(got {duration_s:g})"
        )
    if image is not None:  # stat'ed, never opened: a FIFO would block
        image_file(image, "give one image file of it")
    body = image.read_bytes() if image is not None else sample_image()
    rep = reporter or NullReporter()
    _room_for_clients(max(concurrency))

    parts = urlsplit(endpoint)
    host = parts.hostname or ""
    # Still localhost: none of its addresses took a connection, and the probe says so next.
    servers = set() if host == "localhost" else listeners(host, parts.port or 80)
    # Of several, which serves this URL (or whether all do) cannot be told: no guess.
    server = next(iter(servers)) if len(servers) == 1 else None
    if len(servers) > 1:
        rep.log(
            f"{len(servers)} processes (pids {', '.join(map(str, sorted(servers)))}) listen "
            f"where {endpoint} connects: the CPU wait is the load generator's alone"
        )
    results = [] if done is None else done

    async def levels() -> list[LevelResult]:
        _not_stopped(endpoint, server, "before its first request")
        await _probe(endpoint, body, server)
        for level in concurrency:
            _not_stopped(endpoint, server, f"before concurrency {level}")
            rep.task(f"concurrency {level}", total=None)
            result = await _level(endpoint, body, level, duration_s, max_requests, server)
            other = sum(n for got, n in result.statuses.items() if got.endswith(NOT_PREDICTION))
            rep.log(
                f"concurrency {level}: {result.throughput:.1f} req/s, {result.errors} errors "
                f"of {result.requests}"
                + (f" ({other} 2xx answers not a prediction: another server?)" if other else "")
            )
            results.append(result)
        return results

    with asyncio.Runner() as runner:
        runner.get_loop().set_exception_handler(_quiet_stop)
        return runner.run(levels())


def _quiet_stop(loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
    """The loop's handler of errors no one awaited, but for a stop's: Ctrl-C's
    KeyboardInterrupt (dlperf.stopping) may land in a task the HTTP client started (anyio's
    connect, in a task group of its own), which wraps it in a BaseExceptionGroup; the run's
    shutdown cancels the clients' tasks, and each ends with that group. The stop is said in
    one line by the command; its consequences are not errors to print."""
    error = context.get("exception")
    if isinstance(error, KeyboardInterrupt) or (
        isinstance(error, BaseExceptionGroup) and error.subgroup(KeyboardInterrupt) is not None
    ):
        return
    loop.default_exception_handler(context)


def listeners(host: str, port: int) -> set[int]:
    """The pids of the processes on this machine holding the TCP socket that a connection to
    `host` (an address, not a name):`port` lands on, as Linux's lookup picks it: a socket
    bound to that address (for IPv4, an IPv4 one before an IPv6 one bound to it mapped,
    ::ffff:a.b.c.d), else 0.0.0.0 (IPv4), else :: (which takes IPv4 too unless it is v6-only,
    which /proc does not say). Found by the sockets' inodes in /proc/net/tcp and tcp6, then
    the processes that hold them; empty where none can be seen (another user's process,
    another network namespace, no /proc). Several: SO_REUSEPORT, or a forked worker."""
    bound: dict[IPAddress, set[str]] = {}  # a listening address: its sockets
    for table in ("tcp", "tcp6"):
        try:
            lines = (PROC / "net" / table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()  # sl local_address rem_address st ... uid timeout inode
            local, _, at = fields[1].rpartition(":")
            if fields[3] == "0A" and int(at, 16) == port:  # LISTEN
                bound.setdefault(_kernel_address(local), set()).add(f"socket:[{fields[9]}]")
    address = _plain(ipaddress.ip_address(host))
    order: list[IPAddress] = [address]
    if address.version == 4:
        mapped = ipaddress.ip_address(f"::ffff:{address}")
        order += [mapped, ipaddress.ip_address("0.0.0.0")]
    order.append(ipaddress.ip_address("::"))
    # The first that holds a socket: the kernel scores the others' sockets below it.
    sockets = next((bound[each] for each in order if each in bound), set())
    pids = set()
    for process in PROC.glob("[0-9]*") if sockets else ():
        try:
            if any(os.readlink(fd) in sockets for fd in (process / "fd").iterdir()):
                pids.add(int(process.name))
        except OSError:  # not ours to read, or gone
            continue
    return pids


def _connectable(endpoint: str) -> str:
    """`endpoint` with localhost replaced by its first address (in the resolver's order, as
    the HTTP client tries them) that takes a connection now. Looked up once, while this
    process has file descriptors to spare: each request looked the name up again, and a
    lookup short of them fails with EBUSY, not EMFILE, read as the server refusing. Unchanged
    for an address, or where none takes the connection (the probe then says so, by name)."""
    parts = urlsplit(endpoint)
    port = parts.port or 80
    if parts.hostname != "localhost":
        return endpoint
    try:
        found = socket.getaddrinfo("localhost", port, type=socket.SOCK_STREAM)
    except OSError:  # no resolver entry: the client's own lookup will say what it says
        return endpoint
    for family, kind, proto, _, address in found:
        try:
            with socket.socket(family, kind, proto) as probe:
                probe.settimeout(TIMEOUT_S)
                probe.connect(address)
        except OSError:  # refused: nothing listens on this one
            continue
        host = str(address[0]).split("%")[0]
        netloc = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
        return urlunsplit(parts._replace(netloc=netloc))
    return endpoint


def _plain(address: IPAddress) -> IPAddress:
    """An IPv4-mapped IPv6 address (::ffff:127.0.0.1) as the IPv4 address it stands for."""
    return (address.ipv4_mapped if isinstance(address, ipaddress.IPv6Address) else None) or address


def _kernel_address(text: str) -> IPAddress:
    """An address as /proc/net/tcp{,6} prints it: each 32-bit word in hex, in host order. An
    IPv6 socket's mapped IPv4 address stays IPv6: the kernel ranks it below an IPv4 socket."""
    words = (int(text[i : i + 8], 16).to_bytes(4, sys.byteorder) for i in range(0, len(text), 8))
    return ipaddress.ip_address(b"".join(words))


def _client() -> httpx.AsyncClient:
    # trust_env=False: a proxy from the environment must not sit between us and loopback.
    # verify=False: http:// only, and httpx's default loads the CA store for each client
    # (~0.1 s of CPU).
    return httpx.AsyncClient(timeout=TIMEOUT_S, trust_env=False, verify=False)


def _room_for_clients(clients: int) -> None:
    """Make room for `clients` connections under the open-file limit (a soft limit is raised
    to the hard one), else UserError: past it each client's connect failed with "Too many open
    files", read as the server refusing it."""
    needed = clients + files_open(SPARE_FILES) + SPARE_FILES
    limit = room_for_files(needed)
    if limit is not None:
        raise UserError(
            f"--concurrency {clients} needs about {needed} open files (a connection per "
            f"client), over the open-file limit of {limit}",
            f"ulimit -n {limit} is too low: raise it, or give fewer clients in --concurrency",
        )


def _out_of_files(error: BaseException) -> str | None:
    """The errno's name, EMFILE or ENFILE, where a request failed for want of a file
    descriptor of this process's (or the system's): the load generator's failure, not the
    server's (httpx's ConnectError holds the OSError a few causes down). None otherwise."""
    seen: BaseException | None = error
    for _ in range(8):  # a cause chain is short; never follow a cycle for ever
        if seen is None:
            return None
        if isinstance(seen, OSError) and seen.errno in (errno.EMFILE, errno.ENFILE):
            return errno.errorcode[seen.errno]
        seen = seen.__cause__ or seen.__context__
    return None


def _not_stopped(url: str, server: int | None, when: str) -> None:
    """ServerGone at once if the server's process is stopped: it would take the requests'
    connections and answer none, each after TIMEOUT_S (a level's warm-up and its timed
    requests: twice that), and the probe's timeout said no server was there."""
    if server is not None and stopped(server):
        raise ServerGone(
            f"{url} cannot answer {when}: its server is stopped", _gone_hint(server, True)
        )


async def _probe(url: str, body: bytes, server: int | None = None) -> None:
    """One request first, so a wrong URL or image is one clear error, not N failures."""
    try:
        async with _client() as client:
            response = await client.post(url, content=body, headers=HEADERS)
    except httpx.HTTPError as e:
        if type(e).__name__ in TIMED_OUT:  # a server is there, listening: not a URL to fix
            if (waiting := await _lone_wait(url)) is not None:
                raise waiting from None
            raise ServerGone(
                f"{url} took the connection but sent no answer in {TIMEOUT_S:g} s",
                _gone_hint(server, timed_out=True),
            ) from None
        raise UserError(
            f"no server answers at {url} ({type(e).__name__})",
            "start one with `dlperf serve MODEL.onnx --port PORT` and give its URL",
        ) from None
    if not response.is_success or not _is_prediction(response):
        raise _refused(url, response)


async def _lone_wait(url: str) -> UserError | None:
    """The error to give where the probe, a lone request, went unanswered because the server
    holds a lone request for company longer than bench waits (its model's max_wait_ms, as
    dlperf serve describes it at /v2/models/NAME). None where it does not (or says nothing:
    not dlperf's server, or hung): it was called hung, and told to restart."""
    base = urlunsplit(urlsplit(url)._replace(path="", query=""))
    try:
        async with _client() as client:
            index = await client.post(f"{base}/v2/repository/index", timeout=ASK_TIMEOUT_S)
            name = index.json()[0]["name"]
            described = await client.get(
                f"{base}/v2/models/{quote(name, safe='')}", timeout=ASK_TIMEOUT_S
            )
            batching = described.json()["batching"]
            wait_ms, max_batch = float(batching["max_wait_ms"]), int(batching["max_batch"])
    except (httpx.HTTPError, ValueError, LookupError, TypeError):
        return None
    if max_batch < 2 or wait_ms < TIMEOUT_S * 1000:  # a batch of one waits for nobody
        return None
    return UserError(
        f"{url} sent no answer in {TIMEOUT_S:g} s: its server holds a lone request up to "
        f"{wait_ms:g} ms for company (serve.max_wait_ms of model {name}, batches of up to "
        f"{max_batch}), longer than bench waits for an answer",
        "restart it with a smaller --max-wait-ms: the default is 5",
    )


def _is_prediction(response: httpx.Response) -> bool:
    """Whether a 2xx answer is what `dlperf serve`'s /predict answers an image with: the
    model's name and its predictions (a classifier) or detections (a detector). Any other
    server's 200 would otherwise be counted as a prediction served."""
    try:
        said = response.json()
    except ValueError:  # not JSON, or not UTF-8
        return False
    return (
        isinstance(said, dict)
        and isinstance(said.get("model_name"), str)
        and any(isinstance(said.get(key), list) for key in ("predictions", "detections"))
    )


def _refused(url: str, response: httpx.Response) -> UserError:
    """The probe's failed answer in one line: dlperf's server says what went wrong as JSON
    (`{"error": ...}`, never with a 2xx); any other reply (a stock web server's HTML error
    page, nine lines; another server's JSON) is shown by its start, with its whitespace
    collapsed, as not dlperf's."""
    try:
        said = response.json()
    except ValueError:  # not JSON, or not UTF-8
        said = None
    error = said.get("error") if isinstance(said, dict) else None
    if isinstance(error, str) and not response.is_success:
        return UserError(f"{url} answered {response.status_code}: {_oneline(error, 200)}")
    return UserError(
        f"{url} answered {response.status_code}: {_oneline(response.text, 80)!r}; it does not "
        "look like a dlperf server",
        "start one with `dlperf serve MODEL.onnx --port PORT` and give its URL",
    )


def _oneline(text: str, limit: int) -> str:
    """`text` on one line (its whitespace collapsed), cut to `limit` characters."""
    line = " ".join(text.split())
    return line if len(line) <= limit else f"{line[: limit - 3]}..."


def _no_answer(statuses: Counter[str], ended: int) -> str:
    """How a level's requests went unanswered, refused or timed out, of the `ended` ones."""
    refused = statuses[REFUSED]
    timed_out = sum(statuses[name] for name in TIMED_OUT)
    said = []
    if refused:
        said.append(f"connection refused ({refused} of {ended} requests)")
    if timed_out:
        said.append(f"no answer in {TIMEOUT_S:g} s ({timed_out} of {ended} requests timed out)")
    return "; ".join(said)


def error_kinds(statuses: dict[str, int]) -> str:
    """A level's errors by kind, the most first, each with what it means where its name does
    not say: "7 ReadTimeout (no answer in 30 s), 2 HTTP 503"."""
    errors = sorted(
        ((n, got) for got, n in statuses.items() if not (got.isdigit() and got[0] == "2")),
        key=lambda each: (-each[0], each[1]),
    )
    return ", ".join(f"{n} {_error_kind(got)}" for n, got in errors)


def _error_kind(got: str) -> str:
    if got.isdigit():
        return f"HTTP {got}"
    if got.endswith(NOT_PREDICTION):
        return f"HTTP {got.removesuffix(NOT_PREDICTION)}, not a prediction"
    if got in TIMED_OUT:
        return f"{got} (no answer in {TIMEOUT_S:g} s)"
    if got == REFUSED:
        return f"{got} (connection refused)"
    if got in CLOSED:
        return f"{got} (connection closed by the server)"
    return got  # this process's own failure says so ("EMFILE (load generator)")


def _timed_out_note(statuses: Counter[str], wall: float, duration_s: float) -> str | None:
    """What a level's timed-out requests did to it: each held its client up to TIMEOUT_S, and
    one sent before the deadline held the level open past --duration (said where it did);
    req/s is over it all."""
    timed_out = sum(statuses[name] for name in TIMED_OUT)
    if not timed_out:
        return None
    said = f"{timed_out} of {statuses.total()} requests got no answer in {TIMEOUT_S:g} s"
    if wall <= duration_s:  # ended by --max-requests: no overrun to tell
        return said
    overran = f"the level took {wall:.1f} s for --duration {duration_s:g} s"
    return f"{said}; {overran}, its req/s over all of it"


def _gone_hint(server: int | None, timed_out: bool) -> str:
    """What to do about a server that stopped answering: the stopped one by its pid."""
    if server is not None and stopped(server):
        return (
            f"the server (pid {server}) is stopped (SIGSTOP or Ctrl-Z): continue it "
            f"(kill -CONT {server}, or fg), then bench again"
        )
    if timed_out:
        return "is the server hung, or stopped? Restart or continue it, then bench again"
    return "is the server still running? Restart it, then bench again"


async def _level(
    url: str,
    body: bytes,
    concurrency: int,
    duration_s: float,
    budget: int | None,
    server: int | None = None,
) -> LevelResult:
    statuses: Counter[str] = Counter()
    latencies: list[float] = []
    issued = 0
    unanswered: dict[int, str] = {}  # the clients whose last request got no answer: how
    answered = 0.0  # when a request last ended with an answer

    async def send(client: httpx.AsyncClient) -> tuple[str, bool]:
        try:
            response = await client.post(url, content=body, headers=HEADERS)
        except httpx.HTTPError as e:
            own = _out_of_files(e)
            return (type(e).__name__ if own is None else f"{own}{OWN_FAILURE}"), False
        if response.is_success and not _is_prediction(response):
            # Another service on the port since the probe, a proxy's page: not a request served
            return f"{response.status_code}{NOT_PREDICTION}", False
        return str(response.status_code), response.is_success

    async def worker(number: int, client: httpx.AsyncClient, deadline: float) -> None:
        nonlocal issued, answered
        while time.perf_counter() < deadline and (budget is None or issued < budget):
            issued += 1
            start = time.perf_counter()
            status, ok = await send(client)
            end = time.perf_counter()
            statuses[status] += 1
            # Refused: nothing listens on the port any more. Timed out: something took the
            # connection and said nothing (a stopped or hung server; on loopback a busy
            # server's full backlog too). Once every client's last request got no answer,
            # the rest of the level would count only those, each after TIMEOUT_S.
            if status == REFUSED or status in TIMED_OUT:
                unanswered[number] = status
                if len(unanswered) == concurrency:
                    raise _Unanswered
            elif not status.endswith(OWN_FAILURE):  # this process failed, the server did not
                unanswered.pop(number, None)
                answered = end
            if ok:
                latencies.append(end - start)

    # A client (one keep-alive connection) per worker, as independent users would be.
    async with AsyncExitStack() as stack:
        clients = [await stack.enter_async_context(_client()) for _ in range(concurrency)]
        warm_up = Counter(status for status, _ in await asyncio.gather(*map(send, clients)))
        if sum(warm_up[name] for name in (REFUSED, *TIMED_OUT)) == concurrency:
            # No client answered: the timed requests would only wait TIMEOUT_S again.
            raise ServerGone(
                f"{url} stopped answering at concurrency {concurrency}, in its warm-up: "
                f"{_no_answer(warm_up, concurrency)}",
                _gone_hint(server, timed_out=set(warm_up) != {REFUSED}),
            )
        # The server and the load generator are one experiment: neither is the other's
        # neighbour when the window asks what other processes took.
        ours = {os.getpid()} | ({server} if server is not None else set())
        windows = {"load generator": Window(family=ours)} | (
            {"server": Window(server, ours)} if server not in (None, os.getpid()) else {}
        )
        for window in windows.values():
            window.start()
        start = answered = time.perf_counter()
        try:  # the group cancels the other clients' requests, still waiting, as one raises
            async with asyncio.TaskGroup() as group:
                for number, client in enumerate(clients):
                    group.create_task(worker(number, client, start + duration_s))
        except* _Unanswered:
            ended = sum(statuses.values())  # the requests cancelled in flight not among them
            raise ServerGone(
                f"{url} stopped answering at concurrency {concurrency} after "
                f"{answered - start:.1f} s: {_no_answer(statuses, ended)}",
                _gone_hint(server, timed_out=set(unanswered.values()) != {REFUSED}),
            ) from None
        wall = time.perf_counter() - start
        waited = {name: span for name, w in windows.items() if (span := w.stop())}
    if not issued:  # the deadline passed while the event loop still settled the clients
        raise UserError(
            f"concurrency {concurrency}: no request was sent in --duration {duration_s:g} s "
            f"(starting {concurrency} clients took longer)",
            "give a longer --duration, or fewer clients in --concurrency",
        )
    ok = len(latencies)
    p50, p90, p99 = (
        (float(v) * 1000 for v in np.percentile(latencies, [50, 90, 99]))
        if latencies
        else (None, None, None)
    )
    process, worst = max(waited.items(), key=lambda item: item[1].cpu_wait_share)
    # getrusage counts this process's switches, not the server's; and neither process counts
    # its continuations here: its stops are unmeasured, not 0.
    worst = dataclasses.replace(worst, stops=None)
    if process == "server":
        worst = dataclasses.replace(worst, involuntary_switches=None)
    # Timed-out requests are errors of a level the server still answered, but they stretched
    # its wall time, and so its req/s: marked, as a contended window is.
    notes = [_timed_out_note(statuses, wall, duration_s), judge(worst).note]
    said = "; ".join(note for note in notes if note)
    return LevelResult(
        concurrency=concurrency,
        requests=issued,
        ok=ok,
        errors=issued - ok,
        wall_s=wall,
        throughput=ok / wall,
        p50_ms=p50,
        p90_ms=p90,
        p99_ms=p99,
        statuses=dict(statuses),
        cpu_wait_share=worst.cpu_wait_share,
        contention={**worst.to_dict(), "process": process},
        reliable=not said,
        reliability_note=said or None,
    )
