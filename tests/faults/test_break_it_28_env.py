"""Break-it round 28, P4 (the environment around a command), causes C8, C10, C11 and C12.

C8. `serve bench` against a server that died mid-level went on posting into refused
    connections until the level's end, then printed a normal table and exit 0.
C10. With a HOME that cannot be written, every figure (`report`, `runs plot`) printed
    matplotlib's two warnings about its config folder ("mkdir -p failed ...").
C11. `calibrate` with a HOME that cannot be written said "cannot use /nonexistent: Permission
    denied", naming neither the device file it writes nor the way round it.
C12. COLUMNS=1 or 2 printed every table as lines of spaces: each value was gone.
"""

from __future__ import annotations

import http.server
import json
import os
import re
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from dlperf.analytic import devices
from dlperf.errors import UserError
from tests.conftest import CliResult

Cli = Callable[..., CliResult]
PREDICTION = {"model_name": "m", "predictions": [{"index": 0, "label": "a", "probability": 1.0}]}
ANSWERED = 20  # requests the dying server answers (the probe and warm-ups among them)


class _Dying(http.server.BaseHTTPRequestHandler):
    """Answers a prediction to each POST, one connection each (HTTP/1.0), and closes its
    listening socket after the ANSWERED-th: every later connection is refused."""

    answered = 0

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        body = json.dumps(PREDICTION).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
        type(self).answered += 1
        if type(self).answered == ANSWERED:
            threading.Thread(target=self.server.shutdown).start()

    def log_message(self, format: str, *args: object) -> None:
        """Nothing: the request log would go to the stderr the test reads."""


@pytest.fixture
def dying_server() -> Iterator[str]:
    """The URL of a `_Dying` server on loopback; its thread joined after the test."""
    _Dying.answered = 0
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Dying)

    def serve() -> None:
        server.serve_forever()
        server.server_close()  # the listening socket closed: the server is gone

    thread = threading.Thread(target=serve)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        thread.join(timeout=60)
        assert not thread.is_alive()


def test_bench_stops_and_exits_1_when_the_server_stops_answering(
    cli: Cli, dying_server: str
) -> None:
    # A minute per level: before, the level posted into refused connections until its end.
    r = cli("serve", "bench", dying_server, "--concurrency", "2", "--duration", "60")
    assert r.code == 1, (r.out, r.err)
    assert r.out == ""  # no table of a level the server died in
    said = re.fullmatch(
        rf"error: {dying_server}/predict stopped answering at concurrency 2 after \d+\.\d s: "
        r"connection refused \((\d+) of (\d+) requests\) \(is the server still running\? "
        r"Restart it, then bench again\)",
        r.err.splitlines()[-1],
    )
    assert said is not None, r.err
    refused, sent = map(int, said.groups())
    # each client's last request was refused; the rest were answered before the server went
    assert refused >= 2 and refused + ANSWERED - 3 <= sent  # -3: the probe and two warm-ups


@pytest.mark.parametrize("home", ["a file", "a folder"])
def test_figures_are_quiet_whatever_home_is(tmp_path: Path, home: str) -> None:
    (tmp_path / "tmp").mkdir()
    where = tmp_path / "home"
    if home == "a file":  # a HOME nothing can be made under, even by root
        where.write_text("")
    else:
        where.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("XDG_", "MPL"))}
    env |= {"HOME": str(where), "TMPDIR": str(tmp_path / "tmp")}
    draw = (
        "import os, dlperf.report\n"
        "from matplotlib.figure import Figure\n"
        "figure = Figure()\n"
        "figure.add_subplot().plot([0, 1])\n"
        "figure.savefig('p.png')\n"
        "print(os.environ.get('MPLCONFIGDIR'))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", draw],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    # before: "mkdir -p failed for path .../.config/matplotlib" and "Matplotlib created a
    # temporary cache directory at ..."
    assert (done.returncode, done.stderr) == (0, ""), done.stderr
    assert (tmp_path / "p.png").stat().st_size > 0
    used = done.stdout.strip()
    if home == "a file":  # a folder of its own for the process, removed as it ends
        assert Path(used).parent == tmp_path / "tmp" and not Path(used).exists()
    else:  # matplotlib's own folders, as ever
        assert used == "None" and (where / ".config" / "matplotlib").is_dir()
    assert list((tmp_path / "tmp").iterdir()) == []


@pytest.mark.parametrize("variable", ["HOME", "XDG_CONFIG_HOME", "DLPERF_DEVICES"])
def test_a_device_file_that_cannot_be_written_is_named_with_the_way_round(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, variable: str
) -> None:
    blocked = tmp_path / "home"
    blocked.write_text("")  # a file: nothing can be made under it, even by root
    for name in ("XDG_CONFIG_HOME", "DLPERF_DEVICES"):
        monkeypatch.delenv(name, raising=False)
    path = {
        "HOME": blocked / ".config" / "dlperf" / "devices.toml",
        "XDG_CONFIG_HOME": blocked / "dlperf" / "devices.toml",
        "DLPERF_DEVICES": blocked / "devices.toml",
    }[variable]
    monkeypatch.setenv(variable, str(path if variable == "DLPERF_DEVICES" else blocked))
    fix = (
        "point DLPERF_DEVICES at a file you can write"
        if variable == "DLPERF_DEVICES"
        else f"set DLPERF_DEVICES=FILE to a file you can write, or give a writable {variable}"
    )
    t4 = devices.get_device("T4", tmp_path / "none")  # the built-in one
    for attempt in (lambda: devices.writable(devices.user_file()), lambda: devices.save_device(t4)):
        with pytest.raises(UserError) as raised:
            attempt()
        # before: "cannot use .../home: Not a directory" (or "File exists"), from the OSError
        assert raised.value.message.startswith(f"cannot write the device file {path} (")
        assert raised.value.hint == fix
    assert blocked.read_text() == ""


@pytest.mark.parametrize("columns", ["1", "2"])
def test_a_table_narrower_than_any_block_still_shows_every_value(
    cli: Cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, columns: str
) -> None:
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))  # the built-in devices
    names = list(json.loads(cli("devices", "--json").out))
    monkeypatch.setenv("COLUMNS", columns)
    r = cli("devices")
    assert r.code == 0, r.err
    # before: lines of spaces; now one block a device, `name` and its value on one line
    shown = [line.split()[1] for line in r.out.splitlines() if line.startswith("name ")]
    assert shown == names
