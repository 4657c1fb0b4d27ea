"""dlperf.store.studies: which study a rerun of a sweep or a distillation continues, read
without writing."""

from __future__ import annotations

import pytest

from dlperf.errors import UserError
from dlperf.store import RunStore
from dlperf.store.studies import choose_study, studies_named


@pytest.fixture
def studies(store: RunStore) -> dict[str, int]:
    return {
        "old": store.create_study("lr", "sweep"),
        "other kind": store.create_study("lr", "distill"),
        "other name": store.create_study("wd", "sweep"),
        "new": store.create_study("lr", "sweep"),
    }


def test_the_studies_of_a_name_and_kind_newest_first(
    store: RunStore, studies: dict[str, int]
) -> None:
    assert studies_named(store, "lr", "sweep") == [studies["new"], studies["old"]]
    assert studies_named(store, "lr", "distill") == [studies["other kind"]]
    assert studies_named(store, "momentum", "sweep") == []


def test_a_rerun_continues_the_newest_study_unless_told(
    store: RunStore, studies: dict[str, int]
) -> None:
    assert choose_study(store, "lr", "sweep", None, False) == studies["new"]
    assert choose_study(store, "lr", "sweep", None, True) is None  # --new
    assert choose_study(store, "momentum", "sweep", None, False) is None  # none yet
    assert choose_study(store, "lr", "sweep", studies["old"], False) == studies["old"]
    # --resume takes the id whatever the study's name
    assert choose_study(store, "lr", "sweep", studies["other name"], False) == studies["other name"]


def test_a_study_to_resume_must_exist_and_be_of_the_kind(
    store: RunStore, studies: dict[str, int]
) -> None:
    with pytest.raises(UserError, match="give --resume STUDY_ID or --new, not both"):
        choose_study(store, "lr", "sweep", studies["old"], True)
    with pytest.raises(
        UserError, match=f"study {studies['other kind']} is a distill study, not a sweep study"
    ):
        choose_study(store, "lr", "sweep", studies["other kind"], False)
    with pytest.raises(UserError, match="no study 99 in the store"):
        choose_study(store, "lr", "sweep", 99, False)


def test_choosing_writes_nothing(store: RunStore, studies: dict[str, int]) -> None:
    choose_study(store, "momentum", "sweep", None, False)
    assert studies_named(store, "momentum", "sweep") == []
    assert len(store.list_runs()) == 0
