"""dlperf.store.names on its own: the names a command will make are checked against the
store's column lengths before any work, the worst one told with how short the given name
must be."""

from __future__ import annotations

import pytest

from dlperf.errors import UserError
from dlperf.store.names import Made, at_most, check_made_names, given, limit


def test_run_name_else_the_models_and_what_a_line_calls_it() -> None:
    assert given("mine", "resnet20") == ("mine", "run.name")
    assert given(None, "resnet20") == ("resnet20", "model name 'resnet20'")
    assert given("", "resnet20") == ("resnet20", "model name 'resnet20'")


def test_the_limits_are_the_200_characters_the_docs_give() -> None:
    assert limit("run") == limit("study") == 200  # docs/sweep.md: "the store's 200 characters"


def test_names_that_fit_pass() -> None:
    name = "n" * (limit("run") - 10)
    check_made_names(
        name, "run.name", [Made("run", name + " " * 10, "a label")], at_most("run.name")
    )


def test_the_name_furthest_over_is_told_with_the_room_left() -> None:
    name = "n" * 190
    made = [
        Made("run", name + " x" * 3, "point label 'x x x'"),  # 196: fits
        Made("run", name + " 2 workers", "point label '2 workers'"),  # 200: fits
        Made("run", name + " 16 workers ddp", "point label '16 workers ddp'"),  # 205: worst
    ]
    with pytest.raises(UserError) as caught:
        check_made_names(name, "run.name", made, at_most("run.name"), "scale: ")
    assert caught.value.message == (
        "scale: run.name of 190 characters + point label '16 workers ddp' makes run names of "
        f"205 characters; the run store keeps at most {limit('run')}"
    )
    assert caught.value.hint == "give a run.name of at most 185 characters"


def test_an_addition_too_long_by_itself_says_no_length_would_do() -> None:
    assert at_most("sweep name")(0) == (
        "what the command adds to sweep name is too long for the store by itself"
    )
    assert at_most("sweep name")(187) == "give a sweep name of at most 187 characters"
