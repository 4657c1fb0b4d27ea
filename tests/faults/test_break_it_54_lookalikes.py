"""Break-it round 54, fixer G7: a key, a choice, a number or a model name typed with a
character that only looks like an ASCII one.

T1 C1. A Cyrillic 'а' (U+0430) in 'trаin', 'аdamw' or 'smаllcnn', or an en dash (U+2013) for
the minus of '–0.1', as a copy from a chat, a PDF or a word processor brings in, was refused in
one line, exit 2, but the line quoted the text as typed: "unknown key 'trаin' (did you mean
'train'?)", "Input should be 'sgd' or 'adamw' (got 'аdamw')", "unknown model 'smаllcnn' (did
you mean smallcnn?)", "Input should be a valid number (got '–0.1')", which read as if dlperf
refused the valid spelling. Now the line names each character outside ASCII that what it was
refused for does not hold, by its code and Unicode name ("its 'а' is U+0430 CYRILLIC SMALL
LETTER A", "whose '–' is U+2013 EN DASH"): `parsing.did_you_mean` for keys and registry names,
`config.loading.validation_message` for choices and numbers. A line for ASCII input is as it
was, and text where any character is at home (a run's name) is not refused for one.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from tests.conftest import CliResult

Cli = Callable[..., CliResult]

BASE = """\
[model]
name = "smallcnn"
[data]
name = "digits"
limit = 64
[train]
epochs = 1
batch_size = 32
[run]
threads = 1
"""

A = "'а' is U+0430 CYRILLIC SMALL LETTER A"


@pytest.fixture
def base(tmp_path: Path) -> str:
    path = tmp_path / "base.toml"
    path.write_text(BASE)
    return str(path)


def refused(result: CliResult) -> str:
    """The one line a refusal printed, its exit code 2 and nothing on stdout."""
    assert result.code == 2, result
    lines = result.err.strip().splitlines()
    assert len(lines) == 1, result.err
    return lines[0]


@pytest.mark.parametrize(
    ("setting", "said"),
    [
        ("trаin.lr=0.1", f"unknown key 'trаin' (did you mean 'train'? its {A})"),
        (
            "train.optimizer=аdamw",
            f"train.optimizer: Input should be 'sgd' or 'adamw' (got 'аdamw', whose {A})",
        ),
        (
            "train.lr=–0.1",
            "train.lr: Input should be a valid number (got '–0.1', whose '–' is U+2013 EN DASH)",
        ),
    ],
    ids=["key", "choice", "number"],
)
def test_a_lookalike_in_a_key_a_choice_or_a_number_is_named(
    cli: Cli, base: str, setting: str, said: str
) -> None:
    line = refused(cli("config", "show", base, "--set", setting))
    assert line == f"error: {base} with --set: {said}"


def test_a_lookalike_in_a_model_name_is_named(cli: Cli, base: str) -> None:
    line = refused(cli("run", base, "--set", "model.name=smаllcnn"))
    assert line == f"error: unknown model 'smаllcnn' (did you mean smallcnn? its {A})"


@pytest.mark.parametrize(
    ("setting", "said"),
    [
        ("tran.lr=0.1", "unknown key 'tran' (did you mean 'train'?)"),
        (
            "train.optimizer=adam",
            "train.optimizer: Input should be 'sgd' or 'adamw' (got 'adam')",
        ),
        ("train.lr=x0.1", "train.lr: Input should be a valid number (got 'x0.1')"),
    ],
    ids=["key", "choice", "number"],
)
def test_an_ascii_line_is_as_it_was(cli: Cli, base: str, setting: str, said: str) -> None:
    assert (
        refused(cli("config", "show", base, "--set", setting))
        == f"error: {base} with --set: {said}"
    )


def test_text_at_home_outside_ascii_is_taken(cli: Cli, base: str) -> None:
    result = cli("config", "show", base, "--set", "run.name=trаin café")
    assert result.code == 0, result
    assert "trаin café" in result.out


def test_lookalikes_names_only_what_the_choices_lack() -> None:
    from dlperf.parsing import did_you_mean, lookalikes

    assert lookalikes("train") == ""
    assert lookalikes("café", ["café"]) == ""
    assert lookalikes("cafè", ["café"]) == "'è' is U+00E8 LATIN SMALL LETTER E WITH GRAVE"
    # a character already shown escaped (category C) is not named again; one that repr
    # escapes (a no-break space) or that would join the quote (a combining accent) is
    # written as its escape
    assert lookalikes("a\u200bb") == ""
    assert lookalikes("a\xa0b") == "'\\xa0' is U+00A0 NO-BREAK SPACE"
    assert lookalikes("e\u0301") == "'\\u0301' is U+0301 COMBINING ACUTE ACCENT"
    # each once, three at most, then how many more
    assert lookalikes("аа–") == f"{A} and '–' is U+2013 EN DASH"
    many = lookalikes("привет")
    assert many.startswith("'п' is U+043F CYRILLIC SMALL LETTER PE, 'р' is U+0440")
    assert many.endswith("and 3 more outside ASCII")
    assert did_you_mean("сpu", ["cpu", "cuda"], "see the list") == (
        "did you mean cpu? its 'с' is U+0441 CYRILLIC SMALL LETTER ES"
    )
    assert did_you_mean("ж", ["cpu"], "see the list") == (
        "see the list; its 'ж' is U+0436 CYRILLIC SMALL LETTER ZHE"
    )
