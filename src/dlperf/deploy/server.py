"""The HTTP inference server behind `dlperf serve`: FastAPI in front of one ONNX Runtime session.

It speaks the REST side of the Open Inference Protocol (KServe v2): server and model health,
server and model metadata, Triton's model configuration, repository index and statistics,
and inference on JSON tensors or on binary tensors (the `binary_tensor_data` extension), at
`/v2/models/NAME[/versions/1]/...`. Besides it, `POST /predict` takes an image and
`GET /metrics` exposes Prometheus metrics. Requests meet in a `Batcher`: a model with a
dynamic batch dimension runs concurrent requests as one batch; a detector, or a model
without one, runs them one at a time. Every error answers `{"error": message}`: 400 bad
input, 404 unknown model or version, 413 too large, 415 a compressed body, 503 overloaded
or shutting down, 507 out of memory (the model's run, or the request as it arrives); a
request HTTP/1.1 cannot read, with h11's reason and status (400, 431 a head over 16 KiB,
501 a transfer coding other than chunked), and its connection ended.

What production servers add in front of an application, uvicorn's HTTP/1.1 protocol gets here
(`_GuardedH11`): a deadline for a request to arrive, headers and body (a client slower than its
Content-Length, or one that opens a connection and sends nothing, is answered 408 and
disconnected rather than held open for ever), and a cap on open connections (a connection past
it is answered 503 as it opens, without waiting for its request, and closed when its client
closes or REFUSED_LINGER_S has passed). A stop reads what had arrived before it decides: a
whole request is served, one still arriving answered 503 (`_GuardedH11.shutdown`); from the
stop's signal on every answer says `Connection: close`, and a connection idle between requests
answers 503 to a request that still comes on it before it ends (`_await_late`). An answer sent
before its request's body arrived (a 413 for a Content-Length over the limit, a 404) says
`Connection: close` and ends the connection, with no second answer; so does a request with both
Content-Length and Transfer-Encoding, answered 400. A request asking to upgrade
its connection (h2c, websocket) is answered as HTTP/1.1, said once per server. A server out of
files says so once, and again when it accepts connections again (`_AcceptWatch`). A client
that half-closes after its request still gets the answer (`_GuardedH11.eof_received`).

This module puts the server together and runs it (start, drain, the signal it stopped on);
the parts live beside it: `served_model` (the session and its description), `protocol`
(the v2 codec), `routes` (the endpoints), `images` (what /predict decodes),
`serve_metrics` (Prometheus metrics and the statistics), `serve_log` (the log lines,
written by a thread of their own) and `batcher`.
"""

from __future__ import annotations

import array
import asyncio
import errno
import importlib
import ipaddress
import json
import logging
import re
import signal
import socket
import time
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager, contextmanager, suppress
from http import HTTPStatus
from pathlib import Path
from types import FrameType
from typing import Any, ClassVar

import h11
import numpy as np
import uvicorn
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from h11._connection import DEFAULT_MAX_INCOMPLETE_EVENT_SIZE
from PIL import Image
from starlette.datastructures import Headers
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.requests import ClientDisconnect
from uvicorn.protocols.http.h11_impl import H11Protocol, RequestResponseCycle

from dlperf import stopping
from dlperf.config import ServeConfig
from dlperf.deploy import runtime
from dlperf.deploy.batcher import Batcher, start_threads
from dlperf.deploy.images import DECODE_THREADS
from dlperf.deploy.routes import Serving, add_routes
from dlperf.deploy.serve_log import Writer, unblocked
from dlperf.deploy.serve_metrics import (
    ANSWERED,
    CONNECTION_ROUTE,
    Instrumented,
    Metrics,
    Statistics,
)
from dlperf.deploy.served_model import OutOfMemory, ServedModel, out_of_memory
from dlperf.errors import UserError, error_text
from dlperf.parsing import printable
from dlperf.paths import files_open, open_files_limit, room_for_files

_DEFAULTS = ServeConfig()
# uvicorn's logger, whose lines reach stderr in uvicorn's own format.
_log = logging.getLogger("uvicorn.error")
# Files the server may open beside its connections and those open when it starts: the event
# loop's, a /metrics scrape's reads of /proc, onnxruntime's and the store's.
SPARE_FILES = 32
# What asyncio's accept loop reports when accept() fails for want of a file (EMFILE, ENFILE)
# or of memory; it goes on trying, and reports again, thousands of times a second.
_ACCEPT_FAILED = "socket.accept() out of system resource"
# The errors asyncio's accept loop reports that way, and retries a second later.
_OUT_OF_RESOURCE = (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM)
# How long a connection refused over serve.max_connections reads and drops what its client
# sends before it is closed, at most (the client's close ends it sooner). Closed at once, it
# met a request on its way with a reset, and a client that wrote it in two parts (httpx, serve
# bench) failed on the second write without reading the 503 waiting for it.
REFUSED_LINGER_S = 1.0
# How long a connection idle between requests when the stop reaches it waits for its client's
# next request (answered 503, `Connection: close`) before the server sends its end, and then
# reads and drops what still comes before it closes: the client may have sent one on the way,
# as the last answer (given before the stop) allowed, and a close under it reset it unanswered.
STOP_GRACE_S = 0.5


# Modules a request imports on first use, imported before the server accepts: an import opens
# files, and a burst of connections can hold every file the limit allows by the time the first
# request runs (one then answered 500 with "Too many open files: .../anyio/_backends/
# __init__.py"). anyio's asyncio backend: Starlette's first body read or thread-pool call
# (/predict's softmax is numpy's own, runtime.softmax: no scipy on the serving path).
FIRST_REQUEST_MODULES = ("anyio._backends._asyncio",)


def import_request_modules() -> None:
    """Import what serving a request would import lazily: FIRST_REQUEST_MODULES, and every
    image plugin of Pillow (Image.open loads the common ones on its first call, the rest on
    the first image those do not read)."""
    for name in FIRST_REQUEST_MODULES:
        with suppress(ImportError):  # moved in another release: imported lazily as before
            importlib.import_module(name)
    Image.init()


def create_app(
    model_path: Path,
    max_batch: int = _DEFAULTS.max_batch,
    max_wait_ms: float = _DEFAULTS.max_wait_ms,
    queue: int = _DEFAULTS.queue,
    threads: int | None = _DEFAULTS.threads,
    max_body_bytes: int = int(_DEFAULTS.max_body_mb * 2**20),
    max_pixels: int | None = _DEFAULTS.max_pixels,
) -> FastAPI:
    """The server for one model; loads the session now so a bad model fails before serving,
    and imports what a first request would (`import_request_modules`).
    The options are those of the [serve] config section (dlperf.config.ServeConfig), with
    their defaults; `max_pixels` caps the images /predict decodes (None: `runtime.MAX_PIXELS`)."""
    model = ServedModel(model_path, threads)
    import_request_modules()
    batch = max_batch if model.batchable else 1
    pixel_cap = runtime.MAX_PIXELS if max_pixels is None else max_pixels
    metrics = Metrics(model.name, lambda: batcher.depth)
    stats = Statistics()

    def execute(payloads: list[dict[str, np.ndarray]]) -> list[tuple[dict[str, np.ndarray], int]]:
        """The model call, each request's outputs with the call's time (ns) beside them."""
        start = time.perf_counter_ns()
        results = model.run(payloads)
        spent = time.perf_counter_ns() - start
        return [(outputs, spent) for outputs in results]

    def on_batch(rows: int, seconds: float) -> None:
        metrics.batch(rows, seconds)
        stats.batch(rows, seconds)

    batcher = Batcher(execute, batch, max_wait_ms / 1000, queue, on_batch=on_batch)
    decoder = ThreadPoolExecutor(DECODE_THREADS, thread_name_prefix="decode")
    start_threads(decoder, DECODE_THREADS)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        batcher.start()
        yield
        await batcher.close()  # uvicorn has stopped accepting: finish what is queued
        decoder.shutdown(wait=True)

    app = FastAPI(title=f"dlperf serve {model.name}", lifespan=lifespan)
    app.add_middleware(Instrumented, metrics=metrics, max_body_bytes=max_body_bytes)
    app.state.model = model
    app.state.batcher = batcher
    app.state.metrics = metrics  # the protocol's own answers are counted in them too

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        return JSONResponse({"error": exc.detail}, exc.status_code, headers=exc.headers)

    @app.exception_handler(UserError)
    async def bad_input(request: Request, exc: UserError) -> JSONResponse:
        status = 413 if isinstance(exc, runtime.ImageTooLarge) else 400
        return JSONResponse({"error": str(exc)}, status)

    @app.exception_handler(OutOfMemory)
    async def starved(request: Request, exc: OutOfMemory) -> JSONResponse:
        _log.warning("%s", exc)  # the operator's one line: the server is short of memory
        return JSONResponse({"error": str(exc)}, 507)

    @app.exception_handler(MemoryError)
    async def no_memory(request: Request, exc: MemoryError) -> JSONResponse:
        # Here, not in `failure`: Starlette logs a traceback for what reaches that one.
        said = f"the server ran out of memory on a request{_of_size(request.headers)}"
        return await starved(request, out_of_memory(said, "send less per request"))

    @app.exception_handler(ClientDisconnect)
    async def gone(request: Request, exc: ClientDisconnect) -> Response:
        # Nobody reads this answer; 499 (nginx's "client closed request") keeps the
        # metrics from counting a client that hung up as a server error.
        return Response(status_code=499)

    @app.exception_handler(Exception)
    async def failure(request: Request, exc: Exception) -> JSONResponse:
        # Starlette still logs the traceback; the client gets the same JSON shape as always
        # (error_text: an exception whose own __str__ raises is still answered).
        said = f"internal error: {type(exc).__name__}: {error_text(exc)}"
        return JSONResponse({"error": said}, 500)

    @app.exception_handler(RequestValidationError)
    async def bad_query(request: Request, exc: RequestValidationError) -> JSONResponse:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        return JSONResponse({"error": f"{where}: {first['msg']}"}, 400)

    description = model.metadata(batch, max_wait_ms, queue)
    configuration = model.config(batch, max_wait_ms, queue)
    add_routes(
        app, Serving(model, batcher, metrics, stats, decoder, pixel_cap, description, configuration)
    )
    return app


class _DrainingServer(uvicorn.Server):
    """uvicorn waits for the requests in flight before it runs the app's shutdown; a request
    waiting out --max-wait-ms for company would hold the stop that long. Telling the
    batcher first makes it run what is queued at once; it is closed in the app's shutdown,
    after the connections: closed first, it refused the requests read after the stop, those
    that had arrived whole before it among them (`_GuardedH11.shutdown`)."""

    def __init__(self, config: uvicorn.Config, batcher: Batcher, noted: Sequence[int] = ()) -> None:
        super().__init__(config)
        self.batcher = batcher
        self.first_signal: int | None = None
        self.accepts = _AcceptWatch()
        # The stop signals that came before uvicorn took them (serve_forever's `note`), once
        # "serving" was said: uvicorn never heard of them, and served on for ever (round 57).
        self.noted = noted

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        if self.first_signal is not None:
            # Noted (the exit code is the first one's) and not passed on: uvicorn takes a
            # second SIGINT for "force quit", which cut the requests in flight and skipped the
            # app's shutdown (its lifespan cancelled, with a traceback). A second Ctrl-C must
            # not cut the first one's cleanup short.
            return
        # uvicorn raises the signals it caught again last first, once drained: the first one
        # is noted here, as it arrives, for the command to exit by it.
        self.first_signal = sig
        stopping.noted(sig)
        # Every answer from now on says `Connection: close`, not from uvicorn's next tick
        # (up to 0.1 s), when it asks each connection to shut down (`_GuardedH11.shutdown`).
        protocol = getattr(self.config, "http_protocol_class", None)
        if isinstance(protocol, type) and issubclass(protocol, _GuardedH11):
            protocol.stop_begun = True
        super().handle_exit(sig, frame)

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        asyncio.get_running_loop().set_exception_handler(self._loop_error)
        if sockets is not None:
            sockets = [_Listener.watching(sock, self.accepts) for sock in sockets]
        await super().startup(sockets)
        if self.noted and self.first_signal is None:  # stopped before uvicorn listened for it
            self.handle_exit(self.noted[0], None)

    def _loop_error(self, loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        """asyncio's report of an error no task owns. A failed accept() is the listener's to
        say (`_Listener`): asyncio logged each attempt with its traceback, and retries every
        second as many times as the backlog is long, which filled stderr (and the disk)
        within seconds."""
        error = context.get("exception")
        if isinstance(error, MemoryError):  # a connection's read or callback: no traceback
            _log.warning("the server ran out of memory: %s", context.get("message"))
            return
        accept_failed = context.get("message") == _ACCEPT_FAILED and isinstance(error, OSError)
        if not accept_failed and not _late_retry(context):
            loop.default_exception_handler(context)

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        self.batcher.stop()
        await super().shutdown(sockets)

    @contextmanager
    def capture_signals(self) -> Iterator[None]:
        """uvicorn drains on SIGINT and SIGTERM only: dlperf's other stop signals (SIGHUP)
        drain it too, and are raised again as uvicorn raises its own once it is done."""
        with super().capture_signals():
            extra = [s for s in stopping.taken() if s not in uvicorn.server.HANDLED_SIGNALS]
            previous = {sig: signal.signal(sig, self.handle_exit) for sig in extra}
            try:
                yield
            finally:  # before uvicorn raises what it caught, for the handlers it restores
                for sig, handler in previous.items():
                    signal.signal(sig, handler)


class _AcceptWatch:
    """What a server out of files (or memory) says: an outage, a run of failed accept()s, is
    one line as it begins and one as it ends. asyncio retries every second, as often as the
    backlog is long, so each attempt said filled the disk; the first alone said, for the
    server's life, left a later outage silent and the log unable to tell whether one ended.
    Under steady load at the limit outages come and go every second (a file frees, one
    connection is taken, the next accept fails): a new one is said only RESAY_S after the
    last line, at its first failure then, however long it has lasted."""

    RESAY_S = 60.0

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self.since: float | None = None  # when the outage under way began
        self.said = False  # whether it was said
        self.last_line: float | None = None  # when a line was last said

    def failed(self, error: OSError) -> str | None:
        """The line for a failed accept(), if this one is to be said."""
        now = self.clock()
        if self.since is None:
            self.since = now
        if self.said or (self.last_line is not None and now - self.last_line < self.RESAY_S):
            return None
        self.said, self.last_line = True, now
        return (
            f"cannot accept connections: {error.strerror}{_accept_hint(error)}; new "
            "connections wait until open ones close"
        )

    def accepted(self) -> str | None:
        """The line for an accept() that worked, if it ends an outage that was said."""
        if self.since is None:
            return None
        now = self.clock()
        line = None
        if self.said:
            line = f"connections are accepted again (accept() failed for {now - self.since:.1f} s)"
            self.last_line = now
        self.since, self.said = None, False
        return line


class _Listener(socket.socket):
    """The listening socket, its accept() watched: asyncio's accept loop calls it, and only
    there is it known when an accept works again (a connection's protocol is made later, after
    the accepts of its batch, the failed ones too)."""

    accepts: _AcceptWatch
    # After a failure, until asyncio's accept loop has let go: it goes on after one, as many
    # times as the backlog is long (2,048), and each failure set one more retry a second later,
    # thousands a second, each a traceback if the server stopped before it ran. "Nothing
    # waiting" ends the loop, and its one retry stands.
    resting = False

    @classmethod
    def watching(cls, sock: socket.socket, accepts: _AcceptWatch) -> _Listener:
        """`sock` as a _Listener (the same file: `sock` is left detached)."""
        listener = cls(sock.family, sock.type, sock.proto, fileno=sock.detach())
        listener.accepts = accepts
        return listener

    def accept(self) -> tuple[socket.socket, Any]:
        if self.resting:
            raise BlockingIOError(errno.EAGAIN, "accept() failed: retried in a second")
        try:
            accepted = super().accept()
        except OSError as error:
            if error.errno in _OUT_OF_RESOURCE:
                self.resting = True
                asyncio.get_running_loop().call_soon(self._rested)
                if line := self.accepts.failed(error):
                    _log.warning(line)
            raise  # for asyncio, which retries in a second
        if line := self.accepts.accepted():
            _log.warning(line)
        return accepted

    def _rested(self) -> None:
        self.resting = False


def _late_retry(context: dict[str, Any]) -> bool:
    """Whether asyncio's error is its retry of a failed accept() on a listener closed since
    (the server stopped within the second): it fails on the closed socket, with a traceback,
    and there is nothing left to accept."""
    handle = context.get("handle")
    callback = getattr(handle, "_callback", None)
    listeners = [a for a in getattr(handle, "_args", ()) if isinstance(a, _Listener)]
    named = getattr(callback, "__name__", "") == "_start_serving"
    return named and any(listener.fileno() == -1 for listener in listeners)


def _accept_hint(error: OSError) -> str:
    """What a failed accept() needs: for this process's open-file limit, the limit named."""
    if error.errno != errno.EMFILE:
        return ""
    return f" ({open_files_limit(' or lower --max-connections')})"


def is_wildcard(host: str) -> bool:
    """Whether `host` is the unspecified address (0.0.0.0, ::): every interface."""
    try:
        return ipaddress.ip_address(host).is_unspecified
    except ValueError:  # a name such as localhost
        return False


def client_url(host: str, port: int) -> str:
    """The URL a client on this machine reaches a server listening on `host` at: a wildcard
    is where a server listens, not an address to connect to, and `serve bench` refused the
    very URL `serve` printed (http://0.0.0.0:8000); its loopback address stands in for it."""
    if is_wildcard(host):
        host = "::1" if ":" in host else "127.0.0.1"
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


def ensure_open_files(max_connections: int) -> None:
    """Make room for `max_connections` connections under the open-file limit (RLIMIT_NOFILE),
    beside the files open now (the model's session, the store) and SPARE_FILES: a soft limit
    too low is raised to the hard one, and a hard limit too low refused (UserError). Past the
    limit every accept() failed, and clients waited on a server that could not take them."""
    needed = max_connections + files_open(SPARE_FILES) + SPARE_FILES
    # asyncio accepts a burst of connections before any is answered, those over the cap too:
    # all the room the hard limit gives keeps accept() from failing meanwhile.
    limit = room_for_files(needed)
    if limit is None:
        return
    raise UserError(
        f"--max-connections {max_connections} needs up to {needed} open files "
        f"({needed - max_connections} for the server itself), over the open-file limit of "
        f"{limit}",
        f"ulimit -n {limit} is too low: raise it or lower --max-connections",
    )


def _closing_answer(message: str, status: int) -> tuple[list[tuple[bytes, bytes]], bytes]:
    """The headers and body of an error answer after which the connection closes."""
    body = json.dumps({"error": message}).encode()
    headers = [
        (b"content-type", b"application/json"),
        (b"content-length", str(len(body)).encode()),
        (b"connection", b"close"),
        *([(b"retry-after", b"1")] if status == 503 else []),
    ]
    return headers, body


class _Unreadable(Exception):
    """A request h11 could not read, its head or its body's framing: raised past uvicorn's
    `handle_events`, which answered every one 400 text/plain "Invalid HTTP request received.",
    said nothing else and logged that line, for `_GuardedH11` to answer with the reason."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


# h11 quotes what it could not read as a repr: "illegal header line: bytearray(b'...')".
_QUOTED = re.compile(r"bytearray\(b(?P<text>'.*'|\".*\")\)\Z", re.DOTALL)
# How much of such a line is quoted back: a header line may be up to h11's 16 KiB.
_QUOTED_CHARS = 60


def _refusal(error: h11.RemoteProtocolError, in_head: bool, limit: int) -> _Unreadable:
    """What a client is told of a request h11 refused (`in_head`: while reading its head; a
    buffer over `limit` bytes is h11's "Receive buffer too long")."""
    status = error.error_status_hint
    said = str(error)
    if said == "Receive buffer too long":
        part = "the request's head" if in_head else "a chunk's line or the trailer of the request"
        what = " (its request line and headers together)" if in_head else ""
        return _Unreadable(status, f"{part} is over {limit:,} bytes{what}")
    quoted = _QUOTED.search(said)
    if quoted is not None:
        text = quoted["text"]
        if len(text) - 2 > _QUOTED_CHARS:
            text = f"{text[: _QUOTED_CHARS + 1]}…{text[-1]}"
        said = said[: quoted.start()] + text
    return _Unreadable(status, "the request could not be read as HTTP/1.1: " + printable(said))


class _EarlyClosing(h11.Connection):
    """h11's server side, whose answer to a request whose body has not wholly arrived (a 413,
    404 or 415 sent before the body was read) says `Connection: close`. Kept open, such a
    connection still owed the refused body: a client that took the answer as final (one that
    sent `Expect: 100-continue` sends no body after it) had its next request read as that
    body, and the read deadline then answered it a second time, 408. h11's own state is left
    keep-alive, so that uvicorn does not close at once: `_GuardedH11` closes it gracefully.

    A request framed twice, by Content-Length and by Transfer-Encoding, is refused as h11
    refuses two Content-Lengths (answered 400 and its connection ended): h11 read its body as
    chunked and kept the connection, where a proxy in front that reads the Content-Length
    takes the rest for the next request (request smuggling; RFC 9112 §6.1 has the server close).

    A request it cannot read raises `_Unreadable` with the reason, not h11's error, which
    uvicorn caught to answer its own words (`_GuardedH11._unreadable` answers)."""

    answered_early = False

    def __init__(
        self,
        our_role: type[h11.SERVER],
        max_incomplete_event_size: int,
        stop_begun: Callable[[], bool] = lambda: False,
    ) -> None:
        super().__init__(our_role, max_incomplete_event_size)
        self.head_limit = max_incomplete_event_size  # h11's limit on a head, in bytes
        self.stop_begun = stop_begun  # whether the server is stopping: no answer keeps alive

    def next_event(self) -> h11.Event | type[h11.NEED_DATA] | type[h11.PAUSED]:
        in_head = self.their_state is h11.IDLE
        # What the buffer held before: a Request event takes its whole head out of it.
        buffered = len(self._receive_buffer) if in_head else 0
        try:
            event = super().next_event()
        except h11.RemoteProtocolError as error:
            raise _refusal(error, in_head, self.head_limit) from error
        if type(event) is h11.Request:
            # h11's limit holds only for a head still incomplete in its buffer: one that
            # arrived whole in one read (asyncio reads up to 256 KiB) was parsed whatever
            # its size, and a 100 KB head answered 200. Measured whole, as it arrived.
            if buffered - len(self._receive_buffer) > self.head_limit:
                too_long = h11.RemoteProtocolError("Receive buffer too long", error_status_hint=431)
                raise _refusal(too_long, True, self.head_limit)
            names = {name for name, _ in event.headers}
            if {b"content-length", b"transfer-encoding"} <= names:
                raise _Unreadable(
                    400,
                    "a request with both Content-Length and Transfer-Encoding "
                    "(RFC 9112 §6.1): send one",
                )
        return event

    # h11 declares send() once per kind of event (overloads); this one is the same for each.
    def send(self, event: h11.Event) -> bytes | None:  # type: ignore[override]
        early = type(event) is h11.Response and self.their_state is h11.SEND_BODY
        if type(event) is h11.Response and not early and self.stop_begun():
            # From the stop's signal on, every answer says `Connection: close` (h11 adds it,
            # and closes after it), as Go's Server.Shutdown does: kept alive, its client sent
            # the next request onto a connection the stop then closed, and it was reset.
            self._cstate.process_keep_alive_disabled()
        data = super().send(event)
        if early and data is not None:
            # Marked whether or not the head says so already (a request that said
            # `Connection: close`, an HTTP/1.0 one): either way the body is unread.
            self.answered_early = True
            if b"\r\nconnection: close\r\n" not in data.lower():
                # The head ends in an empty line; h11 writes each header as "name: value\r\n".
                data = data[:-2] + b"connection: close\r\n\r\n"
        return data


def _of_size(headers: Headers) -> str:
    """ " of N bytes", a request's size as its Content-Length declares it, for the lines of a
    request the server had no memory for; "" where it declares none (chunked)."""
    declared = headers.get("content-length", "")
    return f" of {int(declared):,} bytes" if declared.isdigit() else ""


class _AnswersTransport:
    """The connection's transport as a request's cycle (uvicorn's RequestResponseCycle) uses
    it, but for its close after an answer sent before the request's body arrived, which
    lingers instead (`_GuardedH11._linger`). uvicorn closes at once after answering a request
    that said `Connection: close` (urllib's all do; HTTP/1.0's by default): with the body
    still arriving, the socket sent a reset that wiped out the 413 or 404 before the client
    read it."""

    def __init__(self, protocol: _GuardedH11) -> None:
        self._protocol = protocol

    def close(self) -> None:
        if self._protocol.conn.answered_early:
            self._protocol._linger()
        else:
            self._protocol.transport.close()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._protocol.transport, name)


class _GuardedH11(H11Protocol):
    """uvicorn's HTTP/1.1 protocol with a read deadline and a connection cap (see the module
    docstring). The deadline runs while a request is arriving: from the connection's opening,
    or from the first byte of a later request on it, until the request's last byte. Between
    requests uvicorn's keep-alive timeout governs, and while the app works nothing does.
    An answer sent before its request's body arrived ends the connection (`_EarlyClosing`)."""

    read_timeout_s: float = _DEFAULTS.read_timeout_s
    max_connections: int = _DEFAULTS.max_connections
    metrics: Metrics | None = None  # None: an app of another's, with no dlperf metrics
    upgrade_noted: ClassVar[bool] = False  # whether this server said it does not upgrade
    stop_begun: ClassVar[bool] = False  # whether its stop has come: from the signal, or `shutdown`
    conn: _EarlyClosing

    def __init__(self, config: uvicorn.Config, *args: Any, **kwargs: Any) -> None:
        super().__init__(config, *args, **kwargs)
        limit = config.h11_max_incomplete_event_size
        self.conn = _EarlyClosing(
            h11.SERVER,
            DEFAULT_MAX_INCOMPLETE_EVENT_SIZE if limit is None else limit,
            lambda: type(self).stop_begun,
        )
        self.received = 0  # bytes read from the socket
        self.owed: int | None = None  # bytes that had arrived when the deadline ran out
        self.read_at_expiry = 0  # bytes read when it last ran out
        # After an early answer: the rest of the connection's bytes are read and dropped.
        self.lingering = False
        self.said = False  # whether an answer was written here, not by h11 (`_say`)
        self.arriving_since = time.perf_counter()  # when the request under way began to arrive
        self.stopping: asyncio.TimerHandle | None = None  # the stop, waiting for bytes to be read
        self.refused = False  # answered 503 over the cap: lingering, not one of those served
        self.client_done = False  # the client has ended its sending (`eof_received`)
        self.awaiting_late = False  # idle at the stop: a request now is answered 503

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self.deadline: asyncio.TimerHandle | None = None
        served = [c for c in self.connections if not (isinstance(c, _GuardedH11) and c.refused)]
        if len(served) > self.max_connections:
            # Answered now: waiting for its request held its file, which the cap is there to
            # save, until the request came or the deadline ran out. Closed once its client
            # has read the answer, within REFUSED_LINGER_S.
            message = f"too many connections: {self.max_connections} are open"
            self._say(503, "Service Unavailable", message + " (serve.max_connections)")
            self.refused = self.lingering = True
            self._arm(min(self.read_timeout_s, REFUSED_LINGER_S))
            return
        self._arm()

    def data_received(self, data: bytes) -> None:
        self.received += len(data)
        if self.lingering:
            return  # the rest of an early-answered body, or a request sent after it: unread
        if self.awaiting_late:
            self._answer_late()
            return
        try:
            super().data_received(data)
        except MemoryError:  # h11's receive buffer, or uvicorn's copy of a body's part
            self._starved()
            return
        self._follow()

    def _starved(self) -> None:
        """The request arriving did not fit in memory: answered 507, as the app answers a
        request it has no memory for, and the rest of it read and dropped until the client
        closes or the read deadline runs out (`_linger`). asyncio closed the connection
        with a traceback, and the reset under a client still sending lost it the answer."""
        cycle, size = self.cycle, ""
        if cycle is not None and not cycle.response_complete:  # not the last request's
            size = _of_size(Headers(raw=list(cycle.scope["headers"])))
        said = f"the server ran out of memory receiving a request{size}"
        error = out_of_memory(said, "send less per request")
        _log.warning("%s", error)
        self._say(507, "Insufficient Storage", str(error))
        self.lingering = True
        if self.deadline is None:  # what ends the connection if the client does not
            self._arm()

    def eof_received(self) -> bool | None:  # type: ignore[override]  # asyncio's own type
        """The client's end of sending (a FIN: `shutdown(SHUT_WR)`, `nc -N`, some proxies),
        not of reading: a request that had arrived whole is served and its answer sent, then
        the connection closed (`on_response_complete`). uvicorn let asyncio close at once, and
        the answer was lost, counted 499. A request cut short by it (its head, or its body) is
        answered 400 with h11's reason; an idle or lingering connection closes, as before."""
        self.client_done = True
        if self.lingering:
            return None  # answered already: the client's end is what it waited for
        state = self.conn.their_state
        if state is h11.SEND_BODY or (state is h11.IDLE and self.conn.trailing_data[0]):
            self.conn.receive_data(b"")  # h11 refuses the cut request: `_unreadable` answers
            self.handle_events()
            return None  # closed once the answer is written
        cycle = self.cycle
        return True if cycle is not None and not cycle.response_complete else None

    def on_response_complete(self) -> None:
        super().on_response_complete()
        if self.conn.answered_early and not self.transport.is_closing():
            self._linger()
            return
        self._follow()  # a pipelined request may already be arriving
        cycle = self.cycle
        if self.client_done and (cycle is None or cycle.response_complete):
            # Nothing more can come on a connection its client ended (`eof_received`).
            self.transport.close()

    def _linger(self) -> None:
        """End a connection whose answer came before its request's body: the answer's end said
        (EOF) at once, and what the client still sends read and dropped until it closes, or
        until the read deadline or uvicorn's keep-alive timer (armed by the answer, and no
        longer reset by bytes) runs out. Closed at once, with the body unread, the socket sent
        a reset that could reach the client before the answer was read. Once: the cycle's
        close (`_AnswersTransport`) and the answer's completion both ask for it."""
        if self.lingering:
            return
        self.lingering = True
        if self.transport.can_write_eof():
            with suppress(OSError):  # a client gone already (ENOTCONN): nothing to tell
                self.transport.write_eof()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        if self.stopping is not None:
            self.stopping.cancel()
        super().connection_lost(exc)

    def _follow(self) -> None:
        """Arm the deadline while a request arrives; disarm it once the request is in, or
        when the connection waits, idle, for the next one. A lingering connection keeps the
        deadline that ends it."""
        if self.lingering:
            return
        state = self.conn.their_state
        if state is h11.SEND_BODY or (state is h11.IDLE and self.conn.trailing_data[0]):
            if self.deadline is None:
                self._arm()
        elif state is not h11.IDLE or self.cycle is not None:
            self._disarm()
            if state is h11.IDLE:
                self._keep_alive()

    def _keep_alive(self) -> None:
        """uvicorn's keep-alive timer for an idle connection. uvicorn arms it when an answer
        is sent and cancels it on the next bytes: bytes after which the connection idles
        again left it open for ever, with no timer (the rest of a body answered early did,
        before such answers ended their connection: `_linger`)."""
        answered = self.cycle is not None and self.cycle.response_complete
        if answered and self.timeout_keep_alive_task is None:
            self.timeout_keep_alive_task = self.loop.call_later(
                self.timeout_keep_alive, self.timeout_keep_alive_handler
            )

    def _unsupported_upgrade_warning(self) -> None:
        """A request asking to upgrade its connection (h2c, websocket) is answered as HTTP/1.1,
        and said once per server: uvicorn said two lines per request, advising a WebSocket
        library the server has no use for (an h2c upgrade too), and any client could fill
        the log with them."""
        server = type(self)  # one class per server (`_guarded`)
        if server.upgrade_noted:
            return
        server.upgrade_noted = True
        # The client's text: its control characters (C1's one-byte CSI, obs-text to h11) escaped
        asked = printable((self._get_upgrade() or b"").decode("latin-1")[:40])
        _log.warning(
            "a client asked to upgrade the connection to %s; dlperf serve speaks HTTP/1.1 only: "
            "answered without upgrading (said once)",
            asked,
        )

    def handle_events(self) -> None:
        try:
            super().handle_events()
        except _Unreadable as unreadable:
            self._unreadable(unreadable)
        finally:
            # The cycle of a request just read (made above, its app not yet started) closes
            # its connection through `_AnswersTransport`.
            cycle = self.cycle
            if cycle is not None and not isinstance(cycle.transport, _AnswersTransport):
                cycle.transport = _AnswersTransport(self)  # type: ignore[assignment]

    def _unreadable(self, unreadable: _Unreadable) -> None:
        """Answer a request h11 could not read (`_EarlyClosing`) with the reason, say its
        end, and read and drop what the client still sends until it closes or the read
        deadline runs out, as after an early answer (`_linger`): closed at once, a head over
        h11's limit still arriving met a reset, and its client lost the answer. Counted under
        "(connection)" when no route saw the request; a route reading its body (a bad chunk)
        hears of a disconnect now and counts it, once, as its own."""
        status, message = unreadable.status, unreadable.message
        _log.warning("answered %d: %s", status, message)
        cycle = self.cycle
        if cycle is not None and cycle.response_complete:
            # The last request's, answered: no route saw this one (Content-Length with
            # Transfer-Encoding is refused once h11 has read the head, before uvicorn makes
            # its cycle). None, as before a first request (uvicorn types it as a cycle).
            cycle = self.cycle = None  # type: ignore[assignment]
        self._say(status, HTTPStatus(status).phrase, message)
        if not self.said:  # an answer had begun (the app's): cut, as uvicorn cut it
            self.transport.close()
            return
        self.lingering = True
        if cycle is not None and not cycle.response_complete:
            # uvicorn's connection_lost tells a route waiting for the body so.
            cycle.disconnected = True
            cycle.message_event.set()
        if self.deadline is None:  # what ends the connection if the client does not
            self._arm()

    def _answered(self, cycle: RequestResponseCycle | None, status: int) -> None:
        """Count `status`, an answer the protocol layer sent: as the route's, for a request
        whose app, reading the body, hears the disconnect and counts it (`ANSWERED`); else
        on its own, as no route did."""
        if cycle is None or cycle.response_complete:
            self._count(status)
        elif not cycle.response_started:
            cycle.scope[ANSWERED] = status  # type: ignore[literal-required]

    def _count(self, status: int) -> None:
        """Count an answer no route gave, as /metrics counts the app's."""
        if self.metrics is not None:
            seconds = time.perf_counter() - self.arriving_since
            self.metrics.request(CONNECTION_ROUTE, status, seconds)

    def _arm(self, seconds: float | None = None) -> None:
        """Start the read deadline: `seconds` (None: read_timeout_s) from now."""
        self.arriving_since = time.perf_counter()
        self.owed = None
        timeout = self.read_timeout_s if seconds is None else seconds
        self.deadline = self.loop.call_later(timeout, self._expired)

    def _disarm(self) -> None:
        self.owed = None
        if self.deadline is not None:
            self.deadline.cancel()
            self.deadline = None

    def _expired(self) -> None:
        self.deadline = None
        if self._arrived_in_time():
            # One more turn of the loop, to read them: a timer due now runs after the reads
            # that its turn's poll reports.
            self.deadline = self.loop.call_later(0, self._expired)
            return
        self._cut(
            408, "Request Timeout", f"the request took over {self.read_timeout_s:g} s to arrive"
        )

    def _arrived_in_time(self) -> bool:
        """Whether bytes that had arrived by the deadline still wait in the socket, unread. A
        server paused past the deadline (SIGSTOP/SIGCONT, `docker pause`, a debugger) runs the
        expired timer in the first turn after it resumes, before it reads what arrived during
        the pause: epoll_wait fails with EINTR, and Python's retry, its timeout past, reports
        no events. A whole request was then answered 408, the client blamed for the server's
        stall. Only those bytes are waited for, as long as each turn reads some: a client
        that keeps sending cannot hold the deadline off."""
        if self.lingering or not self.transport.is_reading():
            return False
        if self.owed is None:
            self.owed = self.received + _unread(self.transport)
        elif self.received == self.read_at_expiry:
            return False  # a turn that read nothing: nothing more will come in time
        self.read_at_expiry = self.received
        return self.received < self.owed

    def shutdown(self) -> None:
        """The server stops: once what had arrived by then is read (`_stop_once_read`), a
        request still arriving is not waited for (uvicorn would wait for it up to the
        deadline), but answered 503 as one that came now would be; a whole one is served, and
        its connection closed after the answer."""
        type(self).stop_begun = True  # a server stopped by another's signal handling
        self._stop_once_read(self.received + _unread(self.transport), -1)

    def _stop_once_read(self, owed: int, read: int) -> None:
        """Stop once `owed` bytes are read, as long as each turn of the loop reads some (a
        timer due now runs after the reads its turn's poll reports). The stop comes in the
        loop's first turn after a pause (SIGSTOP/SIGCONT: its poll reports nothing) or in a
        busy turn, before the bytes waiting were read: whole requests sent before the stop were
        answered 503 on a new connection, and dropped unanswered on one idle between requests."""
        self.stopping = None
        reading = not self.lingering and self.transport.is_reading()
        if reading and read < self.received < owed:
            self.stopping = self.loop.call_later(0, self._stop_once_read, owed, self.received)
        elif self.deadline is None:
            cycle = self.cycle
            idle = cycle is None or cycle.response_complete
            if idle and reading and not self.client_done and not self.transport.is_closing():
                self._await_late()
            else:
                super().shutdown()
        else:
            self._disarm()
            self._cut(503, "Service Unavailable", "the server is shutting down")

    def _await_late(self) -> None:
        """A connection idle between requests as the stop reaches it: its last answer, given
        before the stop, kept it alive, and its client may be sending the next request now.
        Closed at once, that request met a reset and was never answered. A request arriving
        within STOP_GRACE_S is answered 503 (`_answer_late`); after it the server's end is
        sent, and what still comes is read and dropped for STOP_GRACE_S before the close."""
        self.awaiting_late = True
        self.stopping = self.loop.call_later(STOP_GRACE_S, self._end_idle)

    def _answer_late(self) -> None:
        """A request came on the idle connection after the stop: answered 503 with
        `Connection: close` as it begins to arrive, its rest read and dropped until the client
        closes or REFUSED_LINGER_S has passed (the read deadline ends it)."""
        self.awaiting_late = False
        if self.stopping is not None:
            self.stopping.cancel()
            self.stopping = None
        self._arm(min(self.read_timeout_s, REFUSED_LINGER_S))
        self._say(503, "Service Unavailable", "the server is shutting down")
        self.lingering = True

    def _end_idle(self) -> None:
        """No request came within STOP_GRACE_S: the server's end sent (a client that sends
        after it reads the end, not a reset), and the connection closed when its client closes
        or STOP_GRACE_S later."""
        self.awaiting_late = False
        self.stopping = None
        if self.transport.is_closing():
            return
        self.lingering = True
        if self.transport.can_write_eof():
            with suppress(OSError):  # a client gone already (ENOTCONN): nothing to tell
                self.transport.write_eof()
        self.stopping = self.loop.call_later(STOP_GRACE_S, self.transport.close)

    def _cut(self, status: int, reason: str, message: str) -> None:
        """Answer `status` unless an answer has begun, and close the connection; the app, if
        it waits for the rest of the body, hears of a disconnect."""
        if self.transport.is_closing():
            return
        self._say(status, reason, message)
        self.transport.close()

    def _say(self, status: int, reason: str, message: str) -> None:
        """Answer `status`, and say the answer's end, unless an answer has begun: the app's,
        or one said here already."""
        cycle = self.cycle
        # A finished answer is a later request's only when this one's body is not awaited: one
        # answered before its body arrived has had its answer, and a second was unsolicited.
        answered = cycle is not None and cycle.response_complete
        early = answered and (self.lingering or self.conn.their_state is h11.SEND_BODY)
        started = cycle is not None and not answered and cycle.response_started
        if self.said or early or started:
            return
        # Written by hand: h11 answers only a request it has read whole.
        headers, body = _closing_answer(message, status)
        head = b"".join(k + b": " + v + b"\r\n" for k, v in headers)
        status_line = f"HTTP/1.1 {status} {reason}\r\n".encode()
        self.transport.write(status_line + head + b"\r\n" + body)
        # The answer's end said before the close: a socket closed with a request unread (one
        # sent before it was accepted, or a body still arriving) sends a reset, and a reset
        # ahead of the end makes the client drop the answer it has not yet read.
        if self.transport.can_write_eof():
            with suppress(OSError):  # a client gone already (ENOTCONN): nothing to tell
                self.transport.write_eof()
        self._answered(cycle, status)
        self.said = True


def _unread(transport: asyncio.Transport) -> int:
    """How many bytes wait unread in the transport's socket (0 where the system cannot say)."""
    sock = transport.get_extra_info("socket")
    if sock is None:
        return 0
    try:
        import fcntl
        import termios
    except ImportError:  # Windows: no FIONREAD here, and no grace after a pause
        return 0
    count = array.array("i", [0])
    try:
        fcntl.ioctl(sock.fileno(), termios.FIONREAD, count)
    except OSError:
        return 0
    return count[0]


def _guarded(
    read_timeout_s: float, max_connections: int, metrics: Metrics | None
) -> type[H11Protocol]:
    """uvicorn makes one protocol object per connection from a class: this one's limits, and
    the metrics its own answers are counted in."""
    return type(
        "GuardedH11",
        (_GuardedH11,),
        {
            "read_timeout_s": read_timeout_s,
            "max_connections": max_connections,
            "metrics": metrics,
            "stop_begun": False,
        },
    )


def uvicorn_config(
    app: FastAPI,
    read_timeout_s: float = _DEFAULTS.read_timeout_s,
    max_connections: int = _DEFAULTS.max_connections,
) -> uvicorn.Config:
    """How uvicorn serves `app`: a request must arrive within `read_timeout_s`, and at most
    `max_connections` are served at once (see `_GuardedH11`); the answers these limits give
    are counted in the app's /metrics (`create_app`'s), as the app's own are."""
    return uvicorn.Config(
        app,
        # create_app's metrics; an app made otherwise has none to count in
        http=_guarded(read_timeout_s, max_connections, getattr(app.state, "metrics", None)),
        ws="none",  # no WebSocket routes: an upgrade to one is answered as HTTP/1.1
        log_level="warning",
        access_log=False,
    )


def serve_forever(
    app: FastAPI,
    sock: socket.socket,
    read_timeout_s: float = _DEFAULTS.read_timeout_s,
    max_connections: int = _DEFAULTS.max_connections,
    writer: Writer | None = None,
) -> int | None:
    """Serve `app` on the bound socket until a stop signal, then stop accepting, answer
    every queued request and return the number of the signal that stopped it (None if
    none did), with the limits of `uvicorn_config`."""
    stopped_by: list[int] = []

    def note(signum: int, frame: object) -> None:
        stopped_by.append(signum)
        stopping.noted(signum)  # the stop is under way: a later signal must not cut it

    # Once drained, uvicorn raises the signal that stopped it again, for the handler in
    # force before it ran: dlperf's would raise KeyboardInterrupt out of uvicorn's shutdown,
    # so this one only notes which signal it was, for the caller to exit by it.
    previous = {sig: signal.signal(sig, note) for sig in stopping.taken()}
    server = _DrainingServer(
        uvicorn_config(app, read_timeout_s, max_connections), app.state.batcher, stopped_by
    )
    # Its log lines written by a thread of their own: a stderr nobody reads blocked the loop
    # in a write, and neither requests nor stop signals were heard again. Waited for after
    # the handlers are put back, so that a further stop signal ends the wait.
    with unblocked(writer):  # `writer`: started before serving was said, or made here
        try:
            server.run(sockets=[sock])
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
    return server.first_signal or (stopped_by[0] if stopped_by else None)
