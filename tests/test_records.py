import pytest

from dlperf.records import ContractError, RunSummary


def test_run_summary_round_trips_and_refuses_unknown_fields() -> None:
    summary = RunSummary(test_accuracy=0.9, epochs=2, phases={"data": 0.1})
    assert RunSummary.from_dict(summary.to_dict()) == summary
    with pytest.raises(ContractError, match="unknown field"):
        RunSummary.from_dict({"epochs": 1, "nonsense": 2})


def test_a_stored_summary_reads_with_defaults_and_without_fields_unknown_here() -> None:
    old = RunSummary.stored({"test_accuracy": 0.5, "written_by_a_newer_dlperf": 1})
    assert old == RunSummary(test_accuracy=0.5) and old.steps_per_epoch is None
