"""Break-it round 33 (P4), `serve bench`.

C1: a level's errors were a bare count in the table (their kinds only in --json), and a level
some of whose requests timed out ran on up to 30 s past --duration waiting for them, its req/s
the answers over all of that time, with no word of it: a 2-second level of a server that could
not accept connections took 30.3 s and said 3.7 req/s, its only note CPU contention.

The server is httpx's MockTransport in this process (no network, no timer); a request that
times out moves loadgen's clock on by TIMEOUT_S, as its wait would have.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import re
import types
from collections.abc import Callable, Iterator

import httpx
import pytest

from dlperf.deploy import loadgen
from tests.conftest import CliResult

Cli = Callable[..., CliResult]
PREDICTION = {"model_name": "m", "predictions": []}
URL = "http://127.0.0.1:9"  # nothing listens there: every request is the mock's
# What a request gets: a status answered (200 with a prediction), or an error raised
Answer = int | type[httpx.HTTPError]


class Clock:
    """loadgen's perf_counter: a millisecond on at each reading, and a request's wait on."""

    def __init__(self) -> None:
        self.now = 0.0

    def perf_counter(self) -> float:
        self.now += 0.001
        return self.now


def serving(monkeypatch: pytest.MonkeyPatch, *clients: Iterator[Answer]) -> Clock:
    """The n-th client loadgen makes (the probe's first) gets its answers from `clients[n]`,
    each client's warm-up and the probe a prediction first. A timeout moves loadgen's clock on
    by TIMEOUT_S."""
    clock = Clock()
    monkeypatch.setattr(loadgen, "time", types.SimpleNamespace(perf_counter=clock.perf_counter))
    made = iter(clients)

    def client() -> httpx.AsyncClient:
        answers = itertools.chain([200], next(made))

        async def handler(request: httpx.Request) -> httpx.Response:
            await asyncio.sleep(0)  # as a request over the network does: the clients take turns
            answer = next(answers)
            if isinstance(answer, int):
                return httpx.Response(answer, json=PREDICTION if answer == 200 else {"error": "x"})
            if answer.__name__ in loadgen.TIMED_OUT:
                clock.now += loadgen.TIMEOUT_S
            raise answer("no", request=request)

        return httpx.AsyncClient(transport=httpx.MockTransport(handler))

    monkeypatch.setattr(loadgen, "_client", client)
    return clock


def test_a_level_whose_requests_timed_out_says_so_and_how_long_it_took(
    cli: Cli, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A level of --duration 2 s ran 30 s, waiting for a request no answer came to: the table
    said "errors 1" and req/s over the 30 s, and no line said why."""
    serving(
        monkeypatch,
        iter([]),  # the probe
        itertools.repeat(200),
        iter([httpx.ReadTimeout]),  # sent before the deadline, ends at 30 s, past it
    )
    r = cli("serve", "bench", URL, "--concurrency", "2", "--duration", "2")
    assert r.code == 0, r.err
    errors = re.search(r"^errors: concurrency 2: 1 ReadTimeout \(no answer in 30 s\)$", r.out, re.M)
    assert errors is not None, r.out
    said = re.search(
        r"^unreliable: concurrency 2: 1 of (\d+) requests got no answer in 30 s; the level took "
        r"30\.0 s for --duration 2 s, its req/s over all of it(; contended: .*)?$",
        r.out,
        re.M,
    )
    assert said is not None, r.out
    assert re.search(rf"^\W*2\W+{said.group(1)}\W+1\W", r.out, re.M), r.out  # the table's row


def test_a_level_whose_requests_timed_out_is_marked_unreliable_in_json(
    cli: Cli, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Its mark says it too where the level did not overrun --duration (600 s here, ended by
    --max-requests), without the overrun (review: "the level took 30.0 s for --duration
    600 s" read as a level cut short)."""
    timing_out = itertools.chain([httpx.ConnectTimeout], itertools.repeat(200))
    serving(monkeypatch, iter([]), itertools.repeat(200), timing_out)
    r = cli("serve", "bench", URL, "--concurrency", "2", "--duration", "600", "--max-requests",
            "4", "--json")  # fmt: skip
    assert r.code == 0, r.err
    (level,) = json.loads(r.out)["levels"]
    assert level["statuses"] == {"200": 3, "ConnectTimeout": 1}
    assert level["reliable"] is False
    assert level["reliability_note"].split("; contended")[0] == (
        "1 of 4 requests got no answer in 30 s"
    )
    assert level["wall_s"] == pytest.approx(30.0, abs=0.05)
    assert level["throughput"] == pytest.approx(3 / level["wall_s"])


def test_the_table_names_each_kind_of_error(cli: Cli, monkeypatch: pytest.MonkeyPatch) -> None:
    """`--max-connections 4` with 16 clients: "errors 180", its 158 ReadErrors said only in
    --json."""
    answers = [httpx.ReadError, 503, httpx.ReadError, 200, httpx.RemoteProtocolError]
    serving(monkeypatch, iter([]), iter(answers))
    r = cli("serve", "bench", URL, "--concurrency", "1", "--duration", "600", "--max-requests", "5")
    assert r.code == 0, r.err
    assert (
        "errors: concurrency 1: 2 ReadError (connection closed by the server), 1 HTTP 503, "
        "1 RemoteProtocolError (connection closed by the server)\n"
    ) in r.out, r.out
    assert "unreliable: concurrency 1: 1 of" not in r.out  # no request waited for an answer
