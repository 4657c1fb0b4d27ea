"""The twenty-second break-it round (data tester, P2), converge's tables and distill's pool.

C6: speed tables were not range-checked and placements were read through a float: `10` (a
node of 0 GPUs) and a local batch of 0 were fitted, `1.5` read as 1, a 17-digit placement as
44444444444444448, `-12` and a batch of -32 were tracebacks, a global batch ≤ 0 fitted, 5
nodes for 2 workers were taken, and a step time ≤ 0 was a line naming no row. C7: distill's
"these are the experiment's labelled images" compared root strings: `./if/base`, `if/base/`,
a link or a copy pre-trained the student on the test images. C9: curve values below ~1e-308
were scipy's "Initial guess is outside of provided bounds". C11: a tab-separated file or
Excel's `sep=` first line read as one column. C17a: an empty npz pool was told to "hold out a
larger share". C18: steps ≤ 0 in a CSV said "the first step is 1, not 0" of -19, naming
neither file nor value. Each is now one line and exit 2, or read right.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from dlperf.converge import curve, ensemble, speed
from dlperf.errors import UserError
from tests.cli.test_app import one_line_error
from tests.conftest import CliResult

Cli = Callable[..., CliResult]
EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


# --- C6: speed tables --------------------------------------------------------------------------


@pytest.fixture
def placements(tmp_path: Path) -> Callable[[str], Path]:
    """The first 399 measurements of the Pollux placements trace, then the row given: the
    given row is line 401 of the file."""
    base = (EXAMPLES / "pollux" / "cifar10_placements.csv").read_text().splitlines()[:400]

    def table(row: str) -> Path:
        path = tmp_path / "t.csv"
        path.write_text("\n".join([*base, row]) + "\n")
        return path

    return table


@pytest.mark.parametrize(
    ("row", "said"),
    [
        ("10,32,0.05,0.001", "placement '10' is not a placement"),
        ("1.5,32,0.05,0.001", "placement '1.5' is not a placement"),
        ("-12,32,0.05,0.001", "placement '-12' is not a placement"),
        ("0,32,0.05,0.001", "placement '0' is not a placement"),
        ("2,0,0.05,0.001", "local_bsz must be > 0, got 0"),
        ("2,-32,0.05,0.001", "local_bsz must be > 0, got -32"),
        ("2,32,0,0", "step_time must be > 0, got 0"),
        ("2,32,-0.05,0.001", "step_time must be > 0, got -0.05"),
        ("2,32,0.05,-0.001", "sync_time must be ≥ 0, got -0.001"),
    ],
)
def test_a_placement_trace_row_out_of_range_is_one_line_naming_it(
    cli: Cli, placements: Callable[[str], Path], row: str, said: str
) -> None:
    path = placements(row)
    r = cli("converge", "speed", "fit", "--csv", str(path), "--model", "pollux")
    one_line_error(r, f"{path}:401: {said}")


def test_a_placement_is_read_digit_by_digit(placements: Callable[[str], Path]) -> None:
    """17 nodes of 4 GPUs are 68 workers: through a float the placement was 44444444444444448
    (72 workers, a node of 8)."""
    data = speed.load_csv(placements('"44444444444444444",32,0.5,0.1'))
    assert (data.nodes is not None) and data.nodes[-1] == 17
    assert data.workers[-1] == 68 and data.global_batch[-1] == 68 * 32


def test_a_trace_of_more_nodes_than_replicas_is_one_line(cli: Cli, tmp_path: Path) -> None:
    path = tmp_path / "scal.csv"
    path.write_text(
        "num_nodes,num_replicas,local_bsz,step_time,sync_time\n"
        "1,1,32,0.05,0\n2,2,32,0.07,0.02\n5,2,32,0.08,0.03\n"
    )
    r = cli("converge", "speed", "fit", "--csv", str(path), "--model", "pollux")
    one_line_error(r, f"{path}:4: 5 nodes for 2 workers")


OWN = "workers,ps,nodes,global_batch,step_time_s\n1,1,1,64,0.1\n2,1,1,64,0.07\n4,2,1,64,0.05\n"


@pytest.mark.parametrize(
    ("row", "said"),
    [
        ("8,2,1,-512,0.04", "global_batch must be > 0, got -512"),
        ("8,2,1,0,0.04", "global_batch must be > 0, got 0"),
        ("8,2,1,512,0", "step_time_s must be > 0, got 0"),
        ("8,2,1,512,-0.04", "step_time_s must be > 0, got -0.04"),
        ("2,2,5,512,0.04", "5 nodes for 2 workers"),
        ("0,2,1,512,0.04", "workers must be a whole number ≥ 1, got 0"),
    ],
)
@pytest.mark.parametrize("model", ["optimus-sync", "optimus-async"])
def test_a_row_of_dlperfs_own_table_out_of_range_is_one_line_naming_it(
    cli: Cli, tmp_path: Path, row: str, said: str, model: str
) -> None:
    path = tmp_path / "own.csv"
    path.write_text(OWN + row + "\n")
    r = cli("converge", "speed", "fit", "--csv", str(path), "--model", model)
    one_line_error(r, f"{path}:5: {said}")


def test_a_studys_rows_are_range_checked_naming_the_row() -> None:
    rows = [
        {"workers": 1, "global_batch": 64, "step_time_s": 0.1, "nodes": 1},
        {"workers": 2, "global_batch": -64, "step_time_s": 0.1, "nodes": 1},
    ]
    with pytest.raises(UserError, match=r"^study 3: row 2: global_batch must be > 0, got -64$"):
        speed.from_rows(rows, "study 3")


# --- C7: distill's pool of the experiment's own images -----------------------------------------


def _folders(root: Path) -> None:
    """An imagefolder set of 2 classes, 6 16x16 images each in train/, 3 in val/ and test/."""
    rng = np.random.default_rng(0)
    for split, n in (("train", 6), ("val", 3), ("test", 3)):
        for c in ("a", "b"):
            folder = root / split / c
            folder.mkdir(parents=True)
            for i in range(n):
                pixels = rng.integers(0, 256, (16, 16, 3), dtype=np.uint8)
                Image.fromarray(pixels).save(folder / f"{i}.png")


DISTILL_EXP = """
[model]
name = "smallcnn"
[data]
name = "imagefolder"
root = "if/base"
image_size = 16
[train]
epochs = 1
batch_size = 4
[run]
threads = 1
[distill]
top_k = [2]
top_p = 1
student = "smallcnn"
"""


@pytest.fixture
def distill_exp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    _folders(tmp_path / "if" / "base")
    path = tmp_path / "dist.toml"
    path.write_text(DISTILL_EXP)
    return path


@pytest.mark.parametrize("root", ["if/base", "./if/base", "if/base/", "if/../if/base", "link"])
def test_the_experiments_own_folder_however_spelled_is_refused_as_a_pool(
    cli: Cli, distill_exp: Path, root: str
) -> None:
    os.symlink("if/base", "link")
    r = cli("distill", str(distill_exp), "--unlabeled", f"imagefolder:root={root},image_size=16")
    one_line_error(r, "these are the experiment's labelled images")
    assert cli("runs", "list", "--json").out.strip() in ("[]", "")


def test_a_copy_of_the_experiments_images_is_refused_as_a_pool(cli: Cli, distill_exp: Path) -> None:
    """A copy is another folder: the images themselves are compared, byte for byte."""
    shutil.copytree("if/base", "if/copy")
    r = cli("distill", str(distill_exp), "--unlabeled", "imagefolder:root=if/copy,image_size=16")
    one_line_error(r, "images are the experiment's val and test images, byte for byte")
    assert cli("runs", "list", "--json").out.strip() in ("[]", "")


def test_an_empty_npz_pool_is_said_to_be_empty(cli: Cli, distill_exp: Path) -> None:
    np.savez(
        "empty.npz",
        images=np.zeros((0, 3, 16, 16), np.uint8),
        labels=np.zeros((0,), np.int64),
    )
    r = cli("distill", str(distill_exp), "--unlabeled", "npz:root=empty.npz")
    one_line_error(r, "--unlabeled npz:root=empty.npz: empty.npz holds no images")
    assert "hold out" not in r.err


# --- C9: curve values too small for a float's reciprocal --------------------------------------


def _curve_csv(path: Path, factor: float) -> Path:
    k = np.arange(1, 41, dtype=float)
    y = (1.0 / (0.1 * k + 1.0) + 0.1) * factor
    path.write_text(
        "step,loss\n" + "".join(f"{a:g},{float(b)!r}\n" for a, b in zip(k, y, strict=True))
    )
    return path


def test_subnormal_curve_values_are_one_line(cli: Cli, tmp_path: Path) -> None:
    path = _curve_csv(tmp_path / "s.csv", 1e-309)
    r = cli("converge", "fit", "--csv", str(path), "--x", "step", "--y", "loss")
    one_line_error(r, "the curve's values reach only 1e-309")
    assert "multiply it by 1e309" in r.err


def test_tiny_values_are_refused_by_every_fit() -> None:
    k = np.arange(1.0, 41.0)
    y = (1.0 / (0.1 * k + 1.0) + 0.1) * 1e-200
    with pytest.raises(UserError, match="reach only 1e-200"):
        curve.fit(k, y)
    with pytest.raises(UserError, match="reach only 1e-200"):
        ensemble.fit(k, y)


def test_small_values_within_reach_still_fit(cli: Cli, tmp_path: Path) -> None:
    path = _curve_csv(tmp_path / "s.csv", 1e-100)
    r = cli("converge", "fit", "--csv", str(path), "--x", "step", "--y", "loss", "--json")
    assert r.code == 0, r.err


# --- C11: tabs and Excel's sep= line -----------------------------------------------------------

ROWS = [(1, 2.1), (2, 1.9), (3, 1.8), (4, 1.7), (5, 1.65), (6, 1.6)]


def test_a_tab_separated_curve_is_read(cli: Cli, tmp_path: Path) -> None:
    path = tmp_path / "tab.csv"
    path.write_text("step\tloss\n" + "".join(f"{a}\t{b}\n" for a, b in ROWS))
    comma = tmp_path / "comma.csv"
    comma.write_text("step,loss\n" + "".join(f"{a},{b}\n" for a, b in ROWS))
    tab, base = (curve.from_csv(p, "step", "loss") for p in (path, comma))
    assert tab.steps.tolist() == base.steps.tolist()
    assert tab.values.tolist() == base.values.tolist()


@pytest.mark.parametrize("sep", [",", "\t"])
def test_excels_sep_line_is_honoured(tmp_path: Path, sep: str) -> None:
    path = tmp_path / "sep.csv"
    path.write_text(f"sep={sep}\nstep{sep}loss\n" + "".join(f"{a}{sep}{b}\n" for a, b in ROWS))
    c = curve.from_csv(path, "step", "loss")
    assert c.values.tolist() == [b for _, b in ROWS]


def test_a_sep_line_names_a_bad_row_by_its_line(cli: Cli, tmp_path: Path) -> None:
    path = tmp_path / "sep.csv"
    path.write_text("sep=,\nstep,loss\n1,2.1\n2,x\n")
    r = cli("converge", "fit", "--csv", str(path), "--x", "step", "--y", "loss")
    one_line_error(r, f"{path}:4: 'loss' is not a number: 'x'")


@pytest.mark.parametrize(("sep", "said"), [(";", "';'-separated"), ("|", "'|'-separated")])
def test_a_sep_line_of_another_separator_is_one_line(
    cli: Cli, tmp_path: Path, sep: str, said: str
) -> None:
    path = tmp_path / "sep.csv"
    path.write_text(f"sep={sep}\nstep{sep}loss\n" + "".join(f"{a}{sep}{b}\n" for a, b in ROWS))
    r = cli("converge", "fit", "--csv", str(path), "--x", "step", "--y", "loss")
    one_line_error(r, f"{path} says sep={sep} on its first line: {said}")
    assert "did you mean" not in r.err


def test_a_tab_separated_speed_table_is_read(tmp_path: Path) -> None:
    path = tmp_path / "scal.tsv"
    path.write_text(
        "num_nodes\tnum_replicas\tlocal_bsz\tstep_time\tsync_time\n1\t1\t32\t0.05\t0\n"
        "1\t2\t32\t0.07\t0.02\n"
    )
    data = speed.load_csv(path)
    assert data.workers.tolist() == [1, 2] and data.global_batch.tolist() == [32, 64]


# --- C18: steps that are not positive ----------------------------------------------------------


def test_a_negative_step_names_the_file_line_and_value(cli: Cli, tmp_path: Path) -> None:
    path = tmp_path / "neg.csv"
    path.write_text("step,loss\n" + "".join(f"{k},{2.0 - k / 100}\n" for k in range(-19, 21)))
    r = cli("converge", "fit", "--csv", str(path), "--x", "step", "--y", "loss")
    one_line_error(r, f"{path}:2: step -19 is not positive")
    assert "the first step is 1, not 0" not in r.err


def test_a_zero_step_is_told_steps_count_from_1(cli: Cli, tmp_path: Path) -> None:
    path = tmp_path / "zero.csv"
    path.write_text("step,loss\n" + "".join(f"{k},{2.0 - k / 100}\n" for k in range(0, 20)))
    r = cli("converge", "fit", "--csv", str(path), "--x", "step", "--y", "loss")
    one_line_error(r, f"{path}:2: step 0 is not positive")
    assert "the first step is 1, not 0" in r.err
