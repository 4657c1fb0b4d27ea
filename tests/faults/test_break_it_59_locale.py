"""Break-it round 59, fixer G7: a C locale (UTF-8 mode off) in `converge fit --to-csv`,
`runs list --where` and `infer` (T1's C2, C4 and C6).

Python reads a name's bytes there as ASCII, each byte over 127 a surrogate escape ('ë' as
'\\udcc3\\udcab'); the tests give those escapes as the arguments, as argv brings them.

C2. `converge fit --csv lössé.csv --to-csv beta.csv` ended in a UnicodeEncodeError traceback,
exit 1, no table: the table was written in the locale's encoding (ASCII), and its `source`
column, the CSV's name, was the escapes themselves. Now the table is UTF-8 whatever the
locale, and a CSV curve is labelled with its name's text (`lössé.csv`; a byte that is not
UTF-8 as U+FFFD), in the table, `--json` and the figures alike.
C4. `runs list --where tag.note=jä` listed nothing, exit 0: the escaped value was compared
with the stored text. Now it is refused in one line with the locale hint, exit 2, as
`runs tag note=jä` is (a value whose bytes are not UTF-8 at all: "holds a byte that is not
UTF-8").
C6. `infer ëxp.onnx` said "ONNX Runtime cannot load ...: __init__(): incompatible constructor
arguments. The following argument types are supported:" (pybind11's first line), exit 2. Now
"model: is UTF-8, but Python read it as ASCII: 'ëxp.onnx'" with the locale hint, as `export
--out ëxp.onnx` says.
"""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import onnx
import pytest
from onnx import TensorProto, helper
from PIL import Image

from dlperf.config.base import LOCALE_FIX
from dlperf.deploy import meta as meta_io
from dlperf.deploy import runtime
from dlperf.errors import UserError
from dlperf.store.runstore import RunStore
from tests.conftest import CliResult
from tests.deploy.test_server import OPSET
from tests.faults.test_store_faults import one_line

Cli = Callable[..., CliResult]


def as_ascii_reads(name: str) -> str:
    """`name` as Python reads it from argv in a C locale with UTF-8 mode off."""
    return name.encode("utf-8").decode("ascii", "surrogateescape")


# --- C2: converge fit --to-csv ------------------------------------------------------------------


def _curve_csv(path: Path) -> Path:
    rows = [f"{i},{1 / (0.1 * i + 0.5) + 0.2:.5f}" for i in range(1, 41)]
    path.write_text("step,loss\n" + "\n".join(rows) + "\n", encoding="utf-8")
    return path


@pytest.mark.usefixtures("fewer_bootstrap_fits")
def test_fit_table_of_a_csv_whose_name_was_read_as_ascii_is_utf8(cli: Cli, tmp_path: Path) -> None:
    _curve_csv(tmp_path / "lössé.csv")
    given = as_ascii_reads("lössé.csv")
    args = ["converge", "fit", "--csv", given, "--x", "step", "--y", "loss"]
    done = cli(*args, "--to-csv", "beta.csv")
    assert done.code == 0, done.err
    with open(tmp_path / "beta.csv", newline="", encoding="utf-8") as f:
        assert [row["source"] for row in csv.DictReader(f)] == ["lössé.csv"]
    shown = cli(*args, "--json")
    assert shown.code == 0, shown.err
    assert json.loads(shown.out)["source"] == "lössé.csv"  # not '\udcc3\udcb6' escapes


def test_fit_table_is_written_as_utf8_under_a_c_locale(tmp_path: Path) -> None:
    # The locale's encoding is read as the interpreter starts: a fresh one in a C locale,
    # writing a run's row (a non-ASCII model name, as a model file's path gives) alone.
    code = (
        "from pathlib import Path\n"
        "from dlperf.converge.fitting import write_table\n"
        "write_table(Path('beta.csv'), [{'source': 'run 1', 'model': 'caf\\u00e9/m.py:Net'}])\n"
    )  # the é escaped: argv is read as ASCII there too
    env = {**os.environ, "LC_ALL": "C", "PYTHONCOERCECLOCALE": "0", "PYTHONUTF8": "0"}
    done = subprocess.run(
        [sys.executable, "-X", "utf8=0", "-c", code],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert (
        tmp_path / "beta.csv"
    ).read_bytes() == "source,model\r\nrun 1,café/m.py:Net\r\n".encode()


# --- C4: runs list --where ----------------------------------------------------------------------


@pytest.fixture
def tagged(store: RunStore) -> int:
    """A run named café, tagged note=jä."""
    run_id = store.create_run("café", "run", {})
    store.set_tags(run_id, {"note": "jä"})
    return run_id


def test_where_value_read_as_ascii_is_told_to_change_the_locale(cli: Cli, tagged: int) -> None:
    listed = cli("runs", "list", "--where", "tag.note=jä", "--json")  # read as UTF-8: listed
    assert [run["id"] for run in json.loads(listed.out)] == [tagged]
    done = cli("runs", "list", "--where", f"tag.note={as_ascii_reads('jä')}", "--json")
    one_line(done, 2, "--where tag.note: the value is UTF-8, but Python read it as ASCII: 'jä'")
    assert LOCALE_FIX in done.err
    assert done.out == ""  # not [] (and not the table form's empty table)


def test_where_value_not_utf8_is_refused_not_an_empty_list(cli: Cli, tagged: int) -> None:
    done = cli("runs", "list", "--where", "name=caf\udce9", "--json")  # latin-1's é
    one_line(done, 2, "--where 'name=caf\\udce9': the value holds a byte that is not UTF-8")
    assert done.out == ""


# --- C6: infer of a model whose name was read as ASCII -----------------------------------------


def _classifier(path: Path) -> Path:
    """A 1x8x8 -> 2 classes ONNX classifier with dlperf's metadata."""
    graph = helper.make_graph(
        [
            helper.make_node("Flatten", ["input"], ["flat"], axis=1),
            helper.make_node("Gemm", ["flat", "W"], ["logits"]),
        ],
        "tiny",
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, ["N", 1, 8, 8])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["N", 2])],
        [helper.make_tensor("W", TensorProto.FLOAT, [64, 2], [0.0] * 128)],
    )
    onnx.save(helper.make_model(graph, opset_imports=OPSET, ir_version=10), path)
    pre = meta_io.Preprocess((8, 8), 1, (0.5,), (0.5,))
    meta_io.save(path, meta_io.ModelMeta("classification", "tiny", "input", (1, 8, 8), pre))
    return path


def test_infer_of_a_model_name_read_as_ascii_gives_the_locale_hint(
    cli: Cli, tmp_path: Path
) -> None:
    _classifier(tmp_path / "ëxp.onnx")
    Image.new("L", (8, 8)).save(tmp_path / "a.png")
    done = cli("infer", as_ascii_reads("ëxp.onnx"), "a.png")
    one_line(done, 2, "model: is UTF-8, but Python read it as ASCII: 'ëxp.onnx'")
    assert LOCALE_FIX in done.err
    assert "incompatible constructor" not in done.err


def test_session_of_a_model_name_not_utf8_says_so(tmp_path: Path) -> None:
    named = os.fsdecode(b"caf\xe9.onnx")  # latin-1's é: no locale reads it as UTF-8
    _classifier(tmp_path / named)
    with pytest.raises(UserError) as refused:
        runtime.session(tmp_path / named)
    assert refused.value.message.startswith("model: is not UTF-8: ")
    assert refused.value.message.endswith("caf\\xe9.onnx'")
