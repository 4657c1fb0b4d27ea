"""dlperf.config.serve: [serve]'s defaults (loopback, port 8000, the documented limits) and
its ranges (a port 0..65535, 0 = any free one)."""

from __future__ import annotations

import pytest

from dlperf.config.loading import load_job
from dlperf.config.serve import ServeConfig, ServeJob
from dlperf.errors import UserError


def test_defaults_listen_on_loopback_only() -> None:
    config = load_job(ServeJob, None, []).serve
    assert config == ServeConfig()
    assert (config.host, config.port) == ("127.0.0.1", 8000)
    assert (config.max_batch, config.max_wait_ms, config.queue) == (32, 5.0, 256)
    assert (config.max_body_mb, config.max_pixels, config.threads) == (8.0, None, None)
    assert (config.read_timeout_s, config.max_connections) == (30.0, 512)


@pytest.mark.parametrize("port", [0, 1, 65535])
def test_ports_0_to_65535_are_taken(port: int) -> None:
    assert load_job(ServeJob, None, [f"serve.port={port}"]).serve.port == port


def test_a_zero_wait_is_allowed() -> None:
    assert load_job(ServeJob, None, ["serve.max_wait_ms=0"]).serve.max_wait_ms == 0.0


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("serve.port=70000", "serve.port: must be at most 65535 (got 70000)"),
        ("serve.port=-1", "serve.port: must be at least 0 (got -1)"),
        ("serve.read_timeout_s=0", "serve.read_timeout_s: must be greater than 0 (got 0)"),
        ("serve.max_wait_ms=-1", "serve.max_wait_ms: must be at least 0 (got -1)"),
        # a 0-byte limit would answer every POST with 413 (break-it round 13, C6)
        ("serve.max_body_mb=0", "serve.max_body_mb: must be greater than 0 (got 0)"),
        ("serve.queue=0", "serve.queue: must be at least 1 (got 0)"),
        ("serve.max_connections=0", "serve.max_connections: must be at least 1 (got 0)"),
        ("serve.hots=0.0.0.0", "unknown key 'serve.hots' (did you mean 'serve.host'?)"),
    ],
)
def test_bad_values_are_one_line_naming_the_key(override: str, message: str) -> None:
    with pytest.raises(UserError) as e:
        load_job(ServeJob, None, [override])
    assert message in str(e.value) and "\n" not in str(e.value)
