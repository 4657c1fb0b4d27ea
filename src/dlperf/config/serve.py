"""`[serve]`: where `dlperf serve` listens and how it batches requests."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field, field_validator

from dlperf.config.base import Count, Positive, Section
from dlperf.config.experiment import Job


class ServeConfig(Section):
    """`dlperf serve`: where the server listens and how it batches requests."""

    host: str = "127.0.0.1"
    """Address to listen on; other than loopback, other machines reach it unauthenticated."""

    @field_validator("host")
    @classmethod
    def _an_address(cls, host: str) -> str:
        # A blank host is no address, yet the socket binds "" to every interface (0.0.0.0),
        # which the warning and the URL printed then named as nothing ("listening on :").
        if not host.strip():
            raise ValueError("give an address, e.g. 127.0.0.1, or 0.0.0.0 for all")
        if host != host.strip():  # was "cannot listen on  127.0.0.1: Name or service not known"
            raise ValueError("white space at an edge: write the address without it")
        return host

    port: Annotated[int, Field(ge=0, le=65535)] = 8000
    """TCP port; 0 = any free port (printed when the server starts)."""
    max_batch: Count = 32
    """Most rows in one model call (models with a dynamic batch dimension)."""
    # Bounded: a lone request waits this long for company, and 1e20 left it unanswered.
    max_wait_ms: Annotated[float, Field(ge=0, le=600_000)] = 5.0
    """How long the first request of a batch waits for company (at most 600,000: ten minutes)."""
    queue: Count = 256
    """Waiting requests before the server answers 503."""
    threads: Count | None = None
    """ONNX Runtime intra-op threads; None = its own choice."""
    max_body_mb: Positive = 8.0
    """Largest request body in MiB, rounded up to whole bytes; larger ones get 413."""
    max_pixels: Count | None = None
    """Largest image /predict decodes, in pixels; None = 40,000,000."""
    read_timeout_s: Positive = 30.0
    """Most seconds a request may take to arrive, headers and body, from the connection's
    opening (or the next request's first byte); a slower client gets 408 and is disconnected."""
    max_connections: Count = 512
    """Most connections open at once; a request on one more gets 503 and its connection is
    closed."""


class ServeJob(Job):
    serve: ServeConfig
