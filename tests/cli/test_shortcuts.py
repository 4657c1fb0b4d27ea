"""dlperf.cli.shortcuts: flags declared as data become a command's options, in place, and
reach it as `**flags` with None for those not given."""

from __future__ import annotations

from typing import Any

import typer
from typer.core import TyperOption
from typer.testing import CliRunner

from dlperf.cli.app import set_option
from dlperf.cli.shortcuts import Flag, with_flags

TABLE = {
    "workers": Flag(str, "Worker counts, e.g. 1,2."),
    "steps": Flag(int, "Timed steps."),
    "price": Flag(float, "Price per hour."),
    "synthetic": Flag(bool, "Random data."),
    "plots": Flag(bool, "Save figures.", negatable=True),
}


def command(keys: list[str]) -> tuple[typer.Typer, dict[str, Any]]:
    """A one-command app taking the flags of `keys` after its --set; what it got."""
    got: dict[str, Any] = {}
    app = typer.Typer(add_completion=False)

    @app.command()
    @with_flags(TABLE, keys)
    def study(
        set_: list[str] = set_option("scale.steps=5"),
        as_csv: bool = typer.Option(False, "--csv", help="As CSV."),
        **flags: Any,
    ) -> None:
        got.update(flags, set_=set_, as_csv=as_csv)

    return app, got


def test_flags_reach_the_command_typed_and_none_where_not_given() -> None:
    app, got = command(list(TABLE))
    args = ["--set", "a.b=1", "--workers", "1,2", "--steps", "7", "--price", "0.5"]
    done = CliRunner().invoke(app, [*args, "--no-plots", "--csv"])
    assert done.exit_code == 0, done.output
    assert got == {"set_": ["a.b=1"], "as_csv": True, "workers": "1,2", "steps": 7,
                   "price": 0.5, "synthetic": None, "plots": False}  # fmt: skip
    CliRunner().invoke(app, ["--synthetic", "--plots"])
    assert (got["synthetic"], got["plots"], got["steps"]) == (True, True, None)


def test_flags_sit_after_set_with_their_help() -> None:
    app, _ = command(["steps", "plots"])
    params = typer.main.get_command(app).params
    assert [p.opts for p in params] == [["--set"], ["--steps"], ["--plots"], ["--csv"]]
    steps, plots = params[1], params[2]
    assert isinstance(steps, TyperOption) and isinstance(plots, TyperOption)
    assert plots.secondary_opts == ["--no-plots"] and plots.help == "Save figures."
    assert steps.help == "Timed steps." and steps.default is None


def test_a_flag_not_in_the_table_is_refused() -> None:
    app, _ = command(["steps"])
    done = CliRunner().invoke(app, ["--workers", "2"])
    assert done.exit_code == 2 and "No such option: --workers" in done.output
