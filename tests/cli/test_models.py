"""dlperf.cli.models: `dlperf models` and `dlperf datasets`, read from the shipped tables."""

from __future__ import annotations

import json
from collections.abc import Callable
from importlib import metadata

import pytest
from typer.testing import CliRunner

from dlperf.cli import app
from dlperf.cli import models as models_cli
from dlperf.shipped import dataset_table
from tests.cli.test_app import one_line_error
from tests.conftest import CliResult


@pytest.mark.parametrize("command", ["models", "datasets"])
def test_help_ends_with_an_example(command: str) -> None:
    done = CliRunner().invoke(app, [command, "--help"])
    assert done.exit_code == 0 and f"Example: dlperf {command}" in done.output


def test_models_json_lists_both_sources(cli: Callable[..., CliResult]) -> None:
    result = cli("models", "--json")
    assert result.code == 0, result.err
    names = json.loads(result.out)
    assert set(names) == {"dlperf", "torchvision"}
    assert {"smallcnn", "resnet20"} <= set(names["dlperf"])
    assert "resnet18" in names["torchvision"]


def test_models_prints_each_source_with_its_count_and_every_name(
    cli: Callable[..., CliResult],
) -> None:
    names = models_cli.model_names()
    out = cli("models").out
    words = out.replace(",", " ").split()  # a long list wraps between names, never inside one
    for source, listed in names.items():
        assert f"{source} ({len(listed)}): {listed[0]}," in out
        assert set(listed) <= set(words)


def test_a_stale_names_table_falls_back_to_the_registry(monkeypatch: pytest.MonkeyPatch) -> None:
    import dlperf.models

    table = {"torchvision_version": "0.0.0", "dlperf": ["from-table"], "torchvision": []}
    registry = {"dlperf": ["from-registry"], "torchvision": ["tv"]}
    monkeypatch.setattr(models_cli, "shipped", lambda path: table)
    monkeypatch.setattr(dlperf.models, "list_models", lambda: registry)
    assert models_cli.model_names() == registry  # written for another torchvision: not used
    table["torchvision_version"] = metadata.version("torchvision")
    assert models_cli.model_names() == {"dlperf": ["from-table"], "torchvision": []}


def test_datasets_json_is_the_shipped_table(cli: Callable[..., CliResult]) -> None:
    result = cli("datasets", "--json")
    assert result.code == 0, result.err
    assert json.loads(result.out) == json.loads(json.dumps(dataset_table()))
    assert "digits" in json.loads(result.out)


def test_datasets_table_shows_the_image_shape(cli: Callable[..., CliResult]) -> None:
    meta = dataset_table()["digits"]
    row = next(line for line in cli("datasets").out.splitlines() if line.startswith("digits "))
    assert "x".join(map(str, meta["shape"])) in row.split()


def test_an_unknown_option_is_one_line_and_exit_2(cli: Callable[..., CliResult]) -> None:
    one_line_error(cli("models", "--jsn"), "No such option: --jsn")
