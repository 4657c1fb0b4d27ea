"""Break-it round 37, configs and sweep files (docs/faults.md, the thirty-seventh round).

C1: a quoted dotted key in an experiment file (`"train.lr" = 0.1`, as a sweep file and --set
spell keys) was "unknown key 'train.lr' (did you mean 'train'?)", whose fix (`train = ...`)
is wrong; TOML reads a quoted key as one key, dots and all. Now, when its parts name a key, the
line says so and gives the bare and the table spelling; a quoted key that names none is shown
in its quotes ('train."train.lr"', not a doubled section).

C2: a sweep file's [set] of a key its [grid] or [zip] varies was dropped without a word (the
axis won), while --set of that key is refused. It is refused now, as --set is.

C3: -0.0 and 0.0 hashed as two configs (json.dumps writes "-0.0"): a sweep trained one config
twice, and a finished 0.0 point was not found for -0.0. The hash reads -0.0 as 0.0 now.

C4: a fault of a sweep's base alone was blamed on "point 1 (train.lr=0.1)", the base never
named. The base is checked before the points, and its own fault names it.

C5: a sweep axis or [set] key written twice, quoted and bare, kept the later without a word.

C7: a sweep file or base that is there but is not a regular file was "no such ... file".

T2 C3: a sweep `name` holding a control character ended in a pydantic traceback.

C8: a text axis value holding one (data.root = ["a\\tb"]) did too, as the point's run was
named; the label writes it escaped. C9: an axis, [set] or --set key of a command's section
(scale.*, serve.*) was used nowhere; it is refused. F7's: a base holding a NUL was a traceback.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest

from dlperf.config import Experiment
from dlperf.errors import UserError
from dlperf.sweep import load_sweep
from tests.conftest import CliResult

Cli = Callable[..., CliResult]
BASE = '[model]\nname = "smallcnn"\n[train]\nepochs = 1\n'


@pytest.mark.parametrize(
    ("text", "said"),
    [
        (
            '"train.lr" = 0.1\n',
            "unknown key '\"train.lr\"': in quotes, TOML reads it as one key, dots and all "
            "(write it bare, train.lr = ..., or lr = ... under [train])",
        ),
        (
            '[model]\n"kwargs.depth" = 2\n',
            "unknown key 'model.\"kwargs.depth\"': in quotes, TOML reads it as one key, dots "
            "and all (write it bare, kwargs.depth = ..., or depth = ... under [model.kwargs])",
        ),
        (  # its parts name no key below [train]: shown in its quotes, not as train.train.lr
            '[train]\n"train.lr" = 0.1\n',
            "unknown key 'train.\"train.lr\"' (valid keys: epochs, batch_size, optimizer, lr, "
            "momentum, nesterov, weight_decay, grad_clip, label_smoothing, backbone_lr_scale, "
            "schedule)",
        ),
    ],
)
def test_c1_a_quoted_dotted_key_is_said_to_be_one_key(
    cli: Cli, tmp_path: Path, text: str, said: str
) -> None:
    path = tmp_path / "c8.toml"
    path.write_text(text)
    result = cli("config", "show", str(path))
    assert result.code == 2
    assert result.err == f"error: {path}: {said}\n"


def sweep_file(tmp_path: Path, body: str) -> Path:
    (tmp_path / "base.toml").write_text(BASE)
    path = tmp_path / "s1.toml"
    path.write_text('base = "base.toml"\n' + body)
    return path


@pytest.mark.parametrize(
    ("body", "table"),
    [
        ('[set]\n"train.lr" = 0.01\n[grid]\n"train.lr" = [0.1, 0.2]\n', "grid"),
        ('[set.train]\nlr = 0.01\n[zip]\n"train.lr" = [0.1, 0.2]\n', "zip"),
    ],
)
def test_c2_set_of_a_key_the_sweep_varies_is_refused(
    cli: Cli, tmp_path: Path, body: str, table: str
) -> None:
    path = sweep_file(tmp_path, body)
    result = cli("sweep", str(path))
    assert result.code == 2
    assert result.err == (
        f"error: {path}: [set] 'train.lr' is varied by [{table}] (drop it from [set])\n"
    )


def test_c3_minus_zero_is_the_same_config_as_zero(cli: Cli, tmp_path: Path) -> None:
    path = sweep_file(tmp_path, '[grid]\n"train.weight_decay" = [0.0, -0.0]\n')
    result = cli("sweep", str(path))
    assert result.code == 2
    assert result.err == (
        f"error: {path} point 2 (train.weight_decay=-0.0): the same config as point 1 (an "
        "axis repeats a value, or sets what [set] or the base already does)\n"
    )
    # at any depth: a model's kwargs and a list's items too
    zero = {"model": {"kwargs": {"p": 0.0, "q": [1.0, 0.0]}}, "train": {"lr": 0.1}}
    minus = {"model": {"kwargs": {"p": -0.0, "q": [1.0, -0.0]}}, "train": {"lr": 0.1}}
    digest = Experiment.model_validate(zero).config_hash()
    assert Experiment.model_validate(minus).config_hash() == digest


# --- C4: a fault of a sweep's base was blamed on "point 1 (axis=value)" ---------------------


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ("lrr = 0.1\n", "unknown key 'train.lrr' (did you mean 'train.lr'?)"),
        ("[data]\nlimit = -5\n", "data.limit: must be at least 1 (got -5)"),
    ],
)
def test_c4_a_fault_of_the_base_names_the_base_file(
    cli: Cli, tmp_path: Path, text: str, said: str
) -> None:
    base = tmp_path / "sub" / "base.toml"
    base.parent.mkdir()
    base.write_text(BASE + text)
    path = tmp_path / "s13.toml"
    path.write_text('base = "sub/base.toml"\n[grid]\n"train.lr" = [0.1, 0.2]\n')
    result = cli("sweep", str(path))
    assert result.code == 2
    assert result.err == f"error: {path}: base {base}: {said}\n"


def test_c4_a_sweep_file_as_base_is_said_to_be_one(cli: Cli, tmp_path: Path) -> None:
    path = tmp_path / "s6.toml"
    path.write_text('base = "s6.toml"\n[grid]\n"train.lr" = [0.1, 0.2]\n')
    result = cli("sweep", str(path))
    assert result.code == 2
    assert result.err == (
        f"error: {path}: base {path} is a sweep file, not an experiment (give the experiment "
        "file every point starts from)\n"
    )


def test_c4_what_the_sweep_puts_right_in_the_base_is_not_refused(cli: Cli, tmp_path: Path) -> None:
    # data.limit = -5 alone is wrong, but [set] or the axis replaces it in every point
    (tmp_path / "base.toml").write_text(BASE + "[data]\nlimit = -5\n")
    for body in (
        '[set]\n"data.limit" = 64\n[grid]\n"train.lr" = [0.1]\n',
        '[grid]\n"data.limit" = [64]\n',
    ):
        (tmp_path / "s.toml").write_text('base = "base.toml"\n' + body)
        assert load_sweep(tmp_path / "s.toml").points[0].exp.data.limit == 64
    # a point's own value is still the point's
    (tmp_path / "s.toml").write_text('base = "base.toml"\n[grid]\n"data.limit" = [64, -7]\n')
    result = cli("sweep", str(tmp_path / "s.toml"))
    assert result.code == 2
    assert result.err == (
        f"error: {tmp_path / 's.toml'} point 2 (data.limit=-7): data.limit: must be at least 1 "
        "(got -7)\n"
    )


# --- C5: an axis or [set] key written twice, quoted and bare, kept one without a word ------


@pytest.mark.parametrize(
    ("body", "said"),
    [
        (
            '[grid]\n"train.lr" = [0.1, 0.2]\ntrain.lr = [0.3, 0.4, 0.5]\n',
            '[grid] "train.lr" and train.lr are one key',
        ),
        (
            '[zip]\n"train.lr" = [0.1]\n[zip.train]\nlr = [0.3]\n',
            '[zip] "train.lr" and train.lr are one key',
        ),
        (
            '[set]\n"train.lr" = 0.1\ntrain.lr = 0.7\n[grid]\n"train.epochs" = [1, 2]\n',
            '[set] "train.lr" and train.lr are one key',
        ),
        (  # across the tables: the spellings flattened alike
            '[grid]\n"train.lr" = [0.1]\n[zip.train]\nlr = [0.3]\n',
            "'train.lr' is in both [grid] and [zip]",
        ),
    ],
)
def test_c5_a_key_written_twice_in_a_sweep_table_is_refused(
    cli: Cli, tmp_path: Path, body: str, said: str
) -> None:
    path = sweep_file(tmp_path, body)
    result = cli("sweep", str(path))
    assert result.code == 2
    assert result.err.startswith(f"error: {path}: {said}"), result.err
    assert result.err.count("\n") == 1


# --- C7: a sweep file or base there but not a regular file was "no such ... file" ----------


def test_c7_a_sweep_file_or_base_not_a_regular_file_says_what_it_is(
    cli: Cli, tmp_path: Path
) -> None:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    (tmp_path / "adir").mkdir()
    result = cli("sweep", str(fifo))
    assert result.code == 2
    assert result.err == (
        f"error: sweep file {fifo} is not a regular file (a FIFO) (give the path of a sweep "
        "TOML file)\n"
    )
    path = tmp_path / "s7.toml"
    path.write_text('base = "adir"\n[grid]\n"train.lr" = [0.1, 0.2]\n')
    result = cli("sweep", str(path))
    assert result.code == 2
    assert result.err == (
        f"error: {path}: base {tmp_path / 'adir'} is a directory, not an experiment file "
        "(give a TOML file in it)\n"
    )
    path.write_text('base = "fifo"\n[grid]\n"train.lr" = [0.1, 0.2]\n')
    result = cli("sweep", str(path))
    assert result.code == 2
    assert result.err == (
        f"error: {path}: base experiment file {fifo} is not a regular file (give the path of "
        "a TOML file)\n"
    )


# --- T2 C3: a sweep name holding a control character ended in a pydantic traceback ---------


@pytest.mark.parametrize(("escaped", "shown"), [("\\t", "\\t"), ("\\u202e", "\\u202e")])
def test_t2c3_a_sweep_name_with_a_control_character_is_refused(
    cli: Cli, tmp_path: Path, escaped: str, shown: str
) -> None:
    path = sweep_file(tmp_path, f'name = "s{escaped}w"\n[grid]\n"train.lr" = [0.1]\n')
    result = cli("sweep", str(path))
    assert result.code == 2
    assert result.err == (
        f"error: {path}: name: must hold no control characters (ESC, NUL, tab, newline, ...) "
        f"nor format characters (U+202E, U+200B, ...) (got 's{shown}w')\n"
    )


# --- T3 C8: a string axis value holding a control character ended in a pydantic traceback ----


def test_c8_an_axis_value_with_a_control_character_is_escaped_in_the_run_name(
    tmp_path: Path,
) -> None:
    # the values are valid; only the run's name, "NAME LABEL", may hold no control character
    path = sweep_file(
        tmp_path,
        '[grid]\n"data.root" = ["a\\tb", "c", "d\\u202e"]\n"run.device" = ["cpu\\n"]\n',
    )
    names = [point.exp.run.name for point in load_sweep(path).points]
    assert names == [
        's1 data.root="a\\tb" run.device="cpu\\n"',  # as --set takes them (round 47)
        's1 data.root=c run.device="cpu\\n"',
        's1 data.root="d\\u202E" run.device="cpu\\n"',
    ]


# --- T3 C9: a sweep axis, [set] or --set of a command section's key was used nowhere ---------

_NOT_READ = (
    "a sweep's points are runs, which do not read it (sweep or set a key of model, data, "
    "train, augment, target or run)"
)


@pytest.mark.parametrize(
    ("body", "said"),
    [
        (
            '[grid]\n"scale.steps" = [10, 20]\n',
            "[grid] 'scale.steps' is a key of dlperf scale's [scale] section",
        ),
        (
            "[zip]\nserve = [{port = 1}, {port = 2}]\n",
            "[zip] 'serve' is a key of dlperf serve's [serve] section",
        ),
        (
            '[set.export]\nopset = 17\n[grid]\n"train.lr" = [0.1]\n',
            "[set] 'export.opset' is a key of dlperf export's [export] section",
        ),
    ],
)
def test_c9_a_sweep_key_of_a_command_section_is_refused(
    cli: Cli, tmp_path: Path, body: str, said: str
) -> None:
    path = sweep_file(tmp_path, body)
    result = cli("sweep", str(path))
    assert result.code == 2
    assert result.err == f"error: {path}: {said}: {_NOT_READ}\n"


def test_c9_set_of_a_command_section_key_is_refused(tmp_path: Path) -> None:
    path = sweep_file(tmp_path, '[grid]\n"train.lr" = [0.1]\n')
    with pytest.raises(UserError) as caught:
        load_sweep(path, ["serve.port=9000"])
    assert str(caught.value) == (
        f"--set 'serve.port' is a key of dlperf serve's [serve] section: {_NOT_READ}"
    )
    assert caught.value.exit_code == 2


# --- F7's: a base holding a NUL ended in "ValueError: embedded null byte" ----------------------


def test_a_base_holding_a_nul_is_no_such_file(cli: Cli, tmp_path: Path) -> None:
    path = tmp_path / "s1.toml"
    path.write_text('base = "a\\u0000b"\n[grid]\n"train.lr" = [0.1]\n')
    result = cli("sweep", str(path))
    assert result.code == 2
    assert result.err.startswith(
        f"error: {path}: base 'a\\x00b': no such experiment file (looked for "
    )
