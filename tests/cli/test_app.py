"""The command line: help texts, the error table, JSON output and the run commands."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
import typer
import typer.core

from dlperf.cli.app import app
from dlperf.store import RunStore
from tests.conftest import CliResult, interrupt_wrapped_by_a_class_body


def all_commands() -> list[list[str]]:
    paths: list[list[str]] = []

    def walk(command: typer.core.TyperCommand | typer.core.TyperGroup, path: list[str]) -> None:
        paths.append(path)
        # Typer 0.2x vendors click; groups are recognised by their sub-commands.
        for name, sub in getattr(command, "commands", {}).items():
            walk(sub, [*path, name])

    walk(typer.main.get_command(app), [])
    return paths


@pytest.mark.parametrize("path", all_commands(), ids=lambda p: " ".join(p) or "dlperf")
def test_every_help_ends_with_a_runnable_example(
    cli: Callable[..., CliResult], path: list[str]
) -> None:
    result = cli(*path, "--help")
    assert result.code == 0, result.err
    assert "Example: dlperf" in result.out


def one_line_error(result: CliResult, text: str) -> None:
    assert result.code == 2, (result.out, result.err)
    lines = result.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.err
    assert text in lines[0]
    assert "Traceback" not in result.err


@pytest.mark.parametrize(
    ("args", "text"),
    [
        (["run", "missing.toml"], "missing.toml: no such experiment file"),
        (["run", "{bad}"], "malformed TOML"),
        (["run", "{exp}", "--set", "model.name=resnet2"], "unknown model 'resnet2'"),
        (
            ["run", "{exp}", "--set", "data.name=cifar11"],
            "unknown dataset 'cifar11' (did you mean 'cifar10'?)",
        ),
        (
            ["run", "{exp}", "--set", "data.name=cifar10", "--set", "data.root=nowhere"],
            "data.root 'nowhere' has no readable cifar10",
        ),
        (
            ["run", "{exp}", "--set", "train.batch_size=100000"],
            "is larger than the 1294 training images",
        ),
        (["run", "{exp}", "--set", "train.lrr=1"], "'train.lrr' (did you mean 'train.lr'?)"),
        (["run", "{exp}", "--set", "run.device=cuda"], "CUDA is not available here"),
        (
            ["run", "{exp}", "--timing", "always"],
            "run.timing: Input should be 'off', 'coarse' or 'phases'",
        ),
        (["run", "--resume", "42"], "no run 42 in the store"),
        (["run"], "give an experiment file or --resume RUN_ID"),
        (["runs", "show", "7"], "no run 7 in the store"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(
    cli: Callable[..., CliResult],
    store: RunStore,
    tiny_exp: Callable[..., Path],
    tmp_path: Path,
    args: list[str],
    text: str,
) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text("[model\n")
    exp = tiny_exp()
    result = cli(*(a.format(exp=exp, bad=bad) for a in args))
    one_line_error(result, text)
    assert store.list_runs() == []


def test_debug_shows_the_traceback_and_keeps_the_exit_code(
    cli: Callable[..., CliResult], db: str, tmp_path: Path
) -> None:
    """Bad input is exit 2 with --debug too: before, the traceback came with exit 1 (round 18)."""
    r = cli("--debug", "run", "missing.toml")
    assert r.code == 2
    assert "Traceback (most recent call last)" in r.err
    assert "dlperf.errors.UserError: missing.toml" in r.err
    (tmp_path / "afile").write_text("")
    out = str(tmp_path / "afile" / "x")  # under a file: an OSError dlperf calls bad input
    plain = cli("data", "samples", "digits", "--out", out)
    debug = cli("--debug", "data", "samples", "digits", "--out", out)
    assert (plain.code, debug.code) == (2, 2), (plain.err, debug.err)
    assert "NotADirectoryError" in debug.err


def test_runs_list_and_compare_by_study(cli: Callable[..., CliResult], store: RunStore) -> None:
    study = store.create_study("lr", "sweep")
    ids = [store.create_run(f"p{v}", "run", {"train": {"lr": v}}, study_id=study) for v in (1, 2)]
    store.create_run("outside", "run", {"train": {"lr": 3}})

    listed = json.loads(cli("runs", "list", "--study", str(study), "--json").out)
    assert sorted(r["id"] for r in listed) == ids
    compared = json.loads(cli("runs", "compare", "--study", str(study), "--json").out)
    assert compared["runs"] == ids and compared["config_diff"] == {"train.lr": [1, 2]}
    for args in (["list", "--study", "99"], ["compare", "--study", "99"]):
        result = cli("runs", *args)
        assert result.code == 2 and "no study 99" in result.err, result.err
    both = cli("runs", "compare", "1", "--study", str(study))
    assert both.code == 2 and "not both" in both.err


def test_a_diverging_run_exits_1(
    cli: Callable[..., CliResult], tiny_exp: Callable[..., Path]
) -> None:
    result = cli("run", str(tiny_exp()), "--set", "train.lr=1e12", "--set", "train.momentum=0")
    assert result.code == 1 and "failed: loss became" in result.err


def test_config_show_and_keys(cli: Callable[..., CliResult], tiny_exp: Callable[..., Path]) -> None:
    shown = cli("config", "show", str(tiny_exp()), "--set", "train.lr=0.3")
    assert shown.code == 0 and "lr = 0.3" in shown.out and "[train.schedule]" in shown.out
    assert "batch_aug_m" in cli("config", "keys").out


def test_an_interrupt_wrapped_outside_a_recording_still_exits_130(
    cli: Callable[..., CliResult], monkeypatch: pytest.MonkeyPatch
) -> None:
    """SIGTERM (raised as KeyboardInterrupt) that lands in code which wraps it in another
    exception, before any run is recorded, still ends the command as Ctrl-C does."""
    from dlperf.analytic import devices

    monkeypatch.setattr(devices, "load_catalog", interrupt_wrapped_by_a_class_body)
    r = cli("devices")
    assert r.code == 130 and "Traceback" not in r.err
