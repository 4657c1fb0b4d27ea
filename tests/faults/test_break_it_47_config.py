"""Break-it round 47, fixer F5: --set of a quoted key holding '=', and a sweep's labels.

T2 C2: `--set 'model.kwargs."a=b"=1'` was "not a TOML key (Unterminated string ...)" with the
hint `--set model.kwargs."a.b"=1`: KEY=VALUE was split at its first '=', inside the key's
quotes. It is split at the first '=' outside quotes now, and the key, which holds '=', is
refused in the words a file's key holding '=' is ("no --where could name it").

T2 C3: a sweep's point labels, and so its runs' names and its "point N/M started" lines, wrote
axis values as Python (`augment.flip=True`, `train.schedule={'kind': 'cosine'}`), which --set
refuses or cannot read. They are written as --set reads them back now (`augment.flip=true`,
`train.schedule={kind = "cosine"}`), by the writer `runs show` uses (store.query.setting).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from dlperf.config import apply_override, parse_value
from dlperf.errors import UserError
from dlperf.sweep import load_sweep
from tests.conftest import CliResult

Cli = Callable[..., CliResult]
BASE = '[model]\nname = "smallcnn"\n[train]\nepochs = 1\n'
HOLDS = "holds '=', which --where KEY=VALUE splits on: no --where could name it"


# --- C2: --set of a quoted key holding '=' ----------------------------------------------------


@pytest.mark.parametrize("key", ['model.kwargs."a=b"', "model.kwargs.'a=b'"])
def test_c2_a_set_key_holding_an_equals_sign_is_refused_as_a_files_key_is(
    cli: Cli, tmp_path: Path, key: str
) -> None:
    """Was: not a TOML key (Unterminated string (at end of document))."""
    (tmp_path / "eqk.toml").write_text('[model.kwargs]\n"a=b" = 1\n')
    in_file = cli("config", "show", "eqk.toml")
    assert in_file.code == 2
    assert in_file.err == f"error: eqk.toml: key model.kwargs.a=b {HOLDS} (write it without '=')\n"
    given = cli("config", "show", "--set", f"{key}=1")
    assert given.code == 2, given.out
    assert given.err == (
        f"error: --set {key + '=1'!r}: key model.kwargs.a=b {HOLDS} (write it without '=')\n"
    )


def test_c2_a_set_is_split_at_the_first_equals_sign_outside_quotes() -> None:
    raw: dict[str, Any] = {}
    apply_override(raw, 'model.kwargs."a.b"=p=q')
    apply_override(raw, "run.name=x=y")
    assert raw == {"model": {"kwargs": {"a.b": "p=q"}}, "run": {"name": "x=y"}}


def test_c2_a_sweeps_set_of_such_a_key_is_refused_naming_the_set(tmp_path: Path) -> None:
    (tmp_path / "base.toml").write_text(BASE)
    (tmp_path / "s.toml").write_text('base = "base.toml"\n[grid]\n"train.lr" = [0.1]\n')
    with pytest.raises(UserError) as refused:
        load_sweep(tmp_path / "s.toml", ['model.kwargs."a=b"=1'])
    assert refused.value.message == (
        f"--set 'model.kwargs.\"a=b\"=1': key model.kwargs.a=b {HOLDS}"
    )


def test_c2_an_unterminated_quote_is_still_not_a_toml_key(cli: Cli) -> None:
    """No '=' outside quotes: split at the first, as before, so the key's fault is said."""
    given = cli("config", "show", "--set", 'model.kwargs."a=1')
    assert given.code == 2
    assert given.err.startswith("error: --set 'model.kwargs.\"a=1': not a TOML key ("), given.err


# --- C3: a sweep's labels write values as --set reads them ------------------------------------


def test_c3_a_points_label_and_run_name_write_values_as_set_reads_them(tmp_path: Path) -> None:
    """Was: augment.flip=True, train.schedule={'kind': 'cosine'}, milestones=[1, 2] alike."""
    (tmp_path / "base.toml").write_text(BASE)
    (tmp_path / "swb.toml").write_text(
        'base = "base.toml"\n[grid]\n"augment.flip" = [true, false]\n'
        '"train.schedule" = [{kind = "cosine"}, {kind = "multistep", milestones = [1, 2]}]\n'
        '"data.root" = ["a b"]\n'
    )
    sweep = load_sweep(tmp_path / "swb.toml")
    labels = [point.label() for point in sweep.points]
    assert labels == [
        'augment.flip=true train.schedule={kind = "cosine"} data.root="a b"',
        'augment.flip=true train.schedule={kind = "multistep", milestones = [1, 2]} '
        'data.root="a b"',
        'augment.flip=false train.schedule={kind = "cosine"} data.root="a b"',
        'augment.flip=false train.schedule={kind = "multistep", milestones = [1, 2]} '
        'data.root="a b"',
    ]
    assert [point.exp.run.name for point in sweep.points] == [f"swb {label}" for label in labels]
    for point in sweep.points:  # each value as written reads back, through --set, as itself
        for key, value in point.params.items():
            written = point.label().split(f"{key}=", 1)[1]
            for later in point.params:
                written = written.split(f" {later}=")[0]
            assert parse_value(written) == value, (key, written)
