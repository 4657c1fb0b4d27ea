"""Break-it round 29, reviewer 2 on export and serve (fixer J): causes C3, C4, C6, C9.

C3. A symlink named `.m.onnx.exporting` was followed by `export --out m.onnx`, whose cleanup
emptied the directory it pointed to (a user's files deleted). Now it is refused, unfollowed.
C4. A single-file copy of an export (onnx.save(onnx.load("m.onnx"), "merged.onnx")) kept the
metadata's weights digest and was refused once m.onnx.data changed, a file it never reads.
Now only the weights files the graph references are checked.
C6. A request whose chunked body h11 could not parse was counted twice in /metrics: 400 on
"(connection)" and 499 on its route. Now once, as the 400 on its route that the client got.
C9. `infer bench` hashed the weights file twice, once per metadata load. Now once.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path

import onnx
import pytest

from dlperf.deploy import meta
from dlperf.deploy.export import export, from_registry
from dlperf.deploy.server import create_app
from dlperf.errors import UserError
from tests.conftest import CliResult
from tests.deploy.test_server import tiny_classifier
from tests.deploy.test_server_limits import connect, read_until_closed, serving, wait_for
from tests.faults.test_break_it_29_deploy import _requests

Cli = Callable[..., CliResult]


def test_a_symlink_where_the_staging_directory_goes_is_refused_unfollowed(tmp_path: Path) -> None:
    """Before: the directory the link pointed to was emptied, and the export went on."""
    (tmp_path / "net.py").write_text(
        "from torch import nn\n\n\ndef build(num_classes=10, in_channels=1):\n"
        "    return nn.Sequential(nn.Flatten(), nn.Linear(in_channels * 64, num_classes))\n"
    )
    precious = tmp_path / "precious"
    precious.mkdir()
    (precious / "thesis.tex").write_text("years of work")
    out = tmp_path / "d" / "m.onnx"
    out.parent.mkdir()
    link = out.with_name(".m.onnx.exporting")
    link.symlink_to(precious)
    with pytest.raises(UserError) as refused:
        export(from_registry(f"{tmp_path / 'net.py'}:build", (1, 8, 8), 10), out)
    assert str(refused.value) == (
        f"{link} is a symbolic link, where `dlperf export` keeps the files it is writing "
        f"(remove the link, or give another --out)"
    )
    assert [p.name for p in precious.iterdir()] == ["thesis.tex"]
    assert link.is_symlink() and not out.exists()


def _external(path: Path) -> Path:
    """The tiny classifier with its weights in PATH.data and their digest in its metadata,
    as `dlperf export` writes a model."""
    tiny_classifier(path)
    proto = onnx.load(str(path))
    onnx.save(proto, str(path), save_as_external_data=True, location=path.name + ".data")
    proto = onnx.load(str(path), load_external_data=False)
    digests = meta.weights_digests(path, proto)
    assert digests == {path.name + ".data": meta.file_digest(path.with_name(path.name + ".data"))}
    meta.save(path, dataclasses.replace(meta.load(path), weights_sha256=digests))
    return path


def test_only_the_weights_the_graph_reads_are_checked(tmp_path: Path) -> None:
    """Before: merged.onnx refused: 'm.onnx.data is not the weights of merged.onnx'."""
    model = _external(tmp_path / "m.onnx")
    merged = tmp_path / "merged.onnx"
    onnx.save(onnx.load(str(model)), str(merged))  # weights inside, metadata kept
    data = tmp_path / "m.onnx.data"
    data.write_bytes(bytes(reversed(data.read_bytes())))  # another export's: same size
    assert meta.load(merged).weights_sha256  # loads, its metadata as exported
    with pytest.raises(UserError, match="is not the weights of"):
        meta.load(model)  # the graph that reads them is still refused


def test_infer_bench_hashes_the_weights_once(
    cli: Cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before: two SHA-256 passes over the weights, one per metadata load."""
    model = _external(tmp_path / "m.onnx")
    hashed: list[Path] = []
    real = meta.file_digest

    def sha256(path: Path) -> str | None:
        hashed.append(path)
        return real(path)

    monkeypatch.setattr(meta, "file_digest", sha256)
    result = cli("infer", "bench", str(model), "--batch", "1", "--repeats", "1", "--json")
    assert result.code == 0, result.err
    assert hashed == [tmp_path / "m.onnx.data"]


def test_a_bad_chunked_body_is_counted_once_as_the_400_sent(tmp_path: Path) -> None:
    """Before: ("(connection)", "400") and ("/v2/models/{name}/infer", "499"), both 1."""
    app = create_app(tiny_classifier(tmp_path / "tiny.onnx"), threads=1)
    with serving(app, read_timeout_s=60.0, max_connections=8) as (url, server):
        connections = server.server_state.connections
        with connect(url) as sock:
            sock.sendall(
                b"POST /v2/models/tiny/infer HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked"
                b'\r\nContent-Type: application/json\r\n\r\n5\r\n{"inp\r\nZZZ\r\n\r\n'
            )
            assert read_until_closed(sock).startswith(b"HTTP/1.1 400 ")
        wait_for(lambda: not connections, "the server to drop the connection")
        infer = "/v2/models/{name}/infer"
        wait_for(lambda: (infer, "400") in _requests(url), "the 400 to be counted")
        counted = {k: n for k, n in _requests(url).items() if k[0] in (infer, "(connection)")}
    assert counted == {(infer, "400"): 1.0}
