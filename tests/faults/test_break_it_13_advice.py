"""The thirteenth break-it round (issue 41), advice that cannot help.

C6. `dlperf serve MODEL.onnx --max-body-mb 0` started, and then answered every POST with 413
"request body over the 0-byte limit", where `--max-batch 0`, `--queue 0`, `--threads 0` and
`--max-connections 0` are refused up front; a positive limit under a byte (`1e-9`) rounded
down to the same 0 bytes, and 1e308 MiB was a traceback (OverflowError). A limit must now be
above 0 (one line, exit 2), and is counted in bytes exactly, rounded up.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from dlperf.deploy import server
from tests.conftest import CliResult
from tests.faults.test_bad_inputs import onnx_model  # noqa: F401 (an exported classifier)
from tests.faults.test_break_it_9_misc import _one_line as one_line

Cli = Callable[..., CliResult]

# --- C6: serve's body limit --------------------------------------------------------------------


@pytest.fixture
def model(request: pytest.FixtureRequest) -> Path:
    """The bad-inputs cases' exported classifier (made once for this module)."""
    path: Path = request.getfixturevalue("onnx_model")
    return path


@pytest.fixture
def started(monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """`dlperf serve` up to its listening: the app is built as the command builds it (its
    arguments kept here), and the server returns at once instead of serving, so that a
    command which should have been refused ends rather than serving forever."""
    built: dict[str, Any] = {}
    create_app = server.create_app

    def recorded(*args: Any, **kwargs: Any) -> Any:
        built.update(kwargs)
        return create_app(*args, **kwargs)

    monkeypatch.setattr(server, "create_app", recorded)
    monkeypatch.setattr(server, "serve_forever", lambda *args, **kwargs: None)
    return built


@pytest.mark.parametrize(
    "given",
    [("--max-body-mb", "0"), ("--max-body-mb", "-1"), ("--set", "serve.max_body_mb=0")],
)
def test_a_body_limit_of_0_is_refused_up_front(
    cli: Cli, model: Path, started: dict[str, Any], given: tuple[str, str]
) -> None:
    # before: serving, and every POST got 413 "request body over the 0-byte limit"
    said = one_line(cli("serve", str(model), "--port", "0", *given))
    assert "serve.max_body_mb: must be greater than 0 (got " in said, said
    assert started == {}  # no app built


def test_a_body_limit_in_a_config_file_of_0_is_refused_naming_the_key(
    cli: Cli, model: Path, started: dict[str, Any], tmp_path: Path
) -> None:
    config = tmp_path / "serve.toml"
    config.write_text("[serve]\nmax_body_mb = 0.0\n")
    said = one_line(cli("serve", str(model), "--port", "0", "--config", str(config)))
    assert "serve.max_body_mb: must be greater than 0 (got 0.0)" in said, said


def test_a_body_limit_under_a_byte_admits_a_byte_not_none(
    cli: Cli, model: Path, started: dict[str, Any]
) -> None:
    # before: int(1e-9 * 2**20) = a 0-byte limit, as with --max-body-mb 0
    assert cli("serve", str(model), "--port", "0", "--max-body-mb", "1e-9").code == 0
    assert started["max_body_bytes"] == 1


@pytest.mark.parametrize(
    ("mib", "limit"),
    [
        ("0.5", 2**19),
        # before: a traceback, OverflowError: 1e308 MiB is more bytes than a float holds
        ("1e308", int(1e308) * 2**20),
    ],
    ids=["0.5", "1e308"],
)
def test_a_body_limit_in_mib_is_its_bytes(
    cli: Cli, model: Path, started: dict[str, Any], mib: str, limit: int
) -> None:
    assert cli("serve", str(model), "--port", "0", "--max-body-mb", mib).code == 0
    assert started["max_body_bytes"] == limit
