"""Break-it round 39, fixer F7: T3's causes C5 and C6, options of `staleness` and `converge plan`
dropped without a word, and a reversed count range told as counts below 1.

C5. `staleness --learner L1=1,2 --horizon 5` and `converge plan ... --gpus -7` (no --cluster)
ran, exit 0, their normal tables: --horizon (help: "with --speeds") and --gpus (help: "among the
--cluster jobs") were dropped without a word, --gpus -7 not even range-checked, where the same
commands refused their other dependent options (`--learners and --set go with --train`,
`--cluster needs --gpus N`). So were, looked for beside them: --learner, --horizon,
--push-latency and --pull-latency with `staleness --train` (it trains on its --learners or
--speeds over the experiment's epochs, with no latency), and every single-job option of `plan`
(--curve, --speed, --speed-params, --target, --ps, --workers, --batch, --price-per-hour) with
--cluster (jobs.toml gives each job's; the allocator picks workers and servers). Now each is
refused in one line naming the options given and what they go with, exit 2, before any file is
read or run trained.
C6. `converge plan ... --workers 16-1` said "--workers needs counts ≥ 1, got '16-1'": both ends
are ≥ 1; the range is reversed, so it was empty. Now "--workers 16-1 is a reversed range (write
1-16)", exit 2.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from dlperf.errors import UserError
from dlperf.parsing import parse_range
from dlperf.store import RunStore
from tests.conftest import CliResult
from tests.faults.test_store_faults import one_line

Cli = Callable[..., CliResult]

SPEED_PARAMS = "theta0=0.01,theta1=0.1,theta2=0.2,theta3=0.01,theta4=0.01"
# A curve whose target is still to go: 1/(0.01k + 1) + 0.1 at step 0 is 1.1 loss.
CURVE = {"metric": "loss", "beta0": 0.01, "beta1": 1.0, "beta2": 0.1, "last_step": 0}


@pytest.fixture
def curve(cli: Cli, tmp_path: Path) -> str:
    """A curve file in the CLI's directory (the `cli` fixture's store is in tmp_path)."""
    path = tmp_path / "curve.json"
    path.write_text(json.dumps(CURVE))
    return str(path)


def _plan(curve: str, *args: str) -> tuple[str, ...]:
    return ("converge", "plan", "--curve", curve, "--speed-params", SPEED_PARAMS, "--batch",
            "256", "--target", "0.5", *args)  # fmt: skip


# --- C5: staleness ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "text"),
    [
        (["--learner", "L1=1,2", "--horizon", "5"], "--horizon goes with --speeds"),
        (["--learner", "L1=1,2", "--horizon", "-1"], "--horizon goes with --speeds"),
        (["--horizon", "5"], "--horizon goes with --speeds"),
        (["--learner", "L1=1", "--set", "train.lr=1"], "--set goes with --train EXP.toml"),
        (["--learners", "2", "--set", "a=1"], "--learners and --set go with --train EXP.toml"),
    ],
)
def test_staleness_refuses_an_option_without_the_one_it_goes_with(
    cli: Cli, args: list[str], text: str
) -> None:
    one_line(cli("staleness", *args), 2, f"error: {text}")


@pytest.mark.parametrize(
    ("args", "names"),
    [
        (["--learner", "L1=1,2"], "--learner goes"),
        (["--horizon", "5"], "--horizon goes"),
        (["--push-latency", "0.1", "--pull-latency", "0"], "--push-latency and --pull-latency go"),
        (
            ["--learner", "L1=1", "--horizon", "5", "--push-latency", "0"],
            "--learner, --horizon and --push-latency go",
        ),
    ],
)
def test_staleness_train_refuses_the_simulations_options(
    cli: Cli, store: RunStore, tiny_exp: Callable[..., Path], args: list[str], names: str
) -> None:
    """Refused before the experiment is read, let alone trained: nothing stored."""
    result = cli("staleness", "--train", str(tiny_exp(epochs=1)), "--learners", "2", *args)
    one_line(result, 2, f"error: {names} with a simulation, not --train", "no latency")
    assert store.list_runs() == []


def test_staleness_with_what_each_option_goes_with_still_runs(cli: Cli) -> None:
    result = cli("staleness", "--speeds", "L1=1,L2=0.5", "--horizon", "2", "--push-latency",
                 "0", "--json")  # fmt: skip
    assert result.code == 0, result.err
    assert json.loads(result.out)["summary"]["gradients"] == 3


# --- C5: converge plan ------------------------------------------------------------------------


@pytest.mark.parametrize("gpus", ["-7", "0", "8"])
def test_plan_refuses_gpus_without_cluster(cli: Cli, curve: str, gpus: str) -> None:
    one_line(cli(*_plan(curve, "--gpus", gpus)), 2, "error: --gpus goes with --cluster jobs.toml")
    one_line(cli("converge", "plan", "--gpus", gpus), 2, "error: --gpus goes with --cluster")


@pytest.mark.parametrize(
    ("args", "names"),
    [
        (["--curve", "c.json"], "--curve goes"),
        (["--target", "0.5", "--batch", "256"], "--target and --batch go"),
        (["--speed", "s.json", "--speed-params", "theta0=1"], "--speed and --speed-params go"),
        (["--ps", "1,2,4"], "--ps goes"),  # the default's value, given: still refused
        (["--workers", "1-16", "--price-per-hour", "0.9"], "--workers and --price-per-hour go"),
    ],
)
def test_plan_cluster_refuses_the_single_jobs_options(
    cli: Cli, args: list[str], names: str
) -> None:
    """Refused before jobs.toml is read (there is none here)."""
    result = cli("converge", "plan", "--cluster", "jobs.toml", "--gpus", "4", *args)
    one_line(result, 2, f"error: {names} with one job's plan, not --cluster", "jobs.toml gives")


def test_plan_without_ps_and_workers_still_plans_their_defaults(cli: Cli, curve: str) -> None:
    result = cli(*_plan(curve, "--json"))
    assert result.code == 0, result.err
    cells = {(a["ps"], a["workers"]) for a in json.loads(result.out)["allocations"]}
    assert cells == {(p, w) for p in (1, 2, 4) for w in range(1, 17)}


def test_help_still_shows_the_defaults(cli: Cli) -> None:
    """--ps, --workers and the latencies are None by default now, to tell given from not."""
    out = " ".join(cli("converge", "plan", "--help").out.split())
    assert "(default: 1,2,4)" in out and "(default: 1-16)" in out
    out = " ".join(cli("staleness", "--help").out.split())
    assert out.count("(default: 0)") == 2


# --- C6: a reversed range ---------------------------------------------------------------------


def test_plan_says_a_reversed_worker_range_is_reversed(cli: Cli, curve: str) -> None:
    result = cli(*_plan(curve, "--workers", "16-1"))
    one_line(result, 2, "error: --workers 16-1 is a reversed range (write 1-16)")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("16-1", "--workers 16-1 is a reversed range (write 1-16)"),
        ("1,8-4", "--workers 8-4 is a reversed range (write 4-8)"),
        ("5-0", "--workers needs counts ≥ 1, got '5-0'"),  # a reversal to write 0-5 is no fix
        ("0-4", "--workers needs counts ≥ 1, got '0-4'"),
        ("x", "--workers must look like 1-16 or 2,4,8, got 'x'"),
    ],
)
def test_parse_range_names_what_is_wrong(text: str, message: str) -> None:
    with pytest.raises(UserError) as caught:
        parse_range(text, "workers")
    assert str(caught.value) == message


def test_parse_range_still_reads_ranges_and_lists() -> None:
    assert parse_range("1-4,8", "workers") == [1, 2, 3, 4, 8]
    assert parse_range("2, 2-3", "ps") == [2, 3]
    assert parse_range("7-7", "ps") == [7]
