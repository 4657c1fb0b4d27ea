"""Break-it round 58, fixer G2: the report's config values, and a tracked run's rate units.

- T2 C2 (wrong number): the run page's Config table (and its "keys set away from their
  defaults" list) showed each value to 4 significant digits with no title holding the value
  set: lr 0.12345 and 0.12346 both read 0.1235, 123456789.5 read 123,456,790, and an
  experiment's lr 0.050001 was listed as set away from the default while reading 0.05, the
  default. A config value is an input: it is now shown as set, a float as its shortest
  round-trip repr (0.12345, 0.050001, 123456789.5), as `runs show` writes it. `runs compare`
  showed a config float whole only where 4 digits made two alike: lr 0.050001 beside 0.1 read
  0.05; a config row's numbers are now shown whole where one's cell would not read back as
  set.
- T2 C5: a tracked run's `train/samples_per_s` read `0.0004 train/samples/s` (its metric
  prefix taken for the unit's noun) and `train/throughput` had no unit (`1e+20`), in
  `runs show` and the report alike. The unit is now read from the key's last part after a
  `/` as after a `.`: `0.0004 samples/s` and `1e+20 samples/s` (0.0004 is the value logged).
"""

from __future__ import annotations

from collections.abc import Callable

import dlperf
from dlperf.config import Experiment
from dlperf.formatting import scaled, unit
from dlperf.report.site import pages
from dlperf.report.site.html import quantity
from tests.conftest import CliResult

Cli = Callable[..., CliResult]


def _cell(value: str) -> str:
    return f'<td class="value">{value}</td>'


# --- C2: config values as set ----------------------------------------------------------------


def test_tracked_config_values_read_as_set_and_apart() -> None:
    """Two tracked runs' configs that differ read apart on their pages, each value whole."""
    shown = [
        pages.config({"train": {"lr": lr}, "big": 123456789.5, "tiny": 1e-05}, whole=True)
        for lr in (0.12345, 0.12346)
    ]
    assert shown[0] != shown[1]
    assert _cell("0.12345") in shown[0] and _cell("0.12346") in shown[1]
    assert _cell("123456789.5") in shown[0] and _cell("1e-05") in shown[0]
    assert "0.1235" not in shown[0] and "123,456,790" not in shown[0]


def test_a_key_set_near_its_default_reads_as_set_not_as_the_default() -> None:
    """lr 0.050001 is listed among the keys set away from their defaults as 0.050001, not as
    0.05 (the default, which the folded list shows as 0.05)."""
    stored = Experiment().to_dict()
    default = stored["train"]["lr"]
    stored["train"]["lr"] = 0.050001
    changed, _, folded = pages.config(stored).partition("<details>")
    assert default == 0.05
    assert "<th>train.lr</th>" + _cell("0.050001") in changed
    assert "<th>train.lr</th>" not in folded
    same = pages.config(Experiment().to_dict())
    assert "<th>train.lr</th>" + _cell("0.05") in same


def test_runs_compare_shows_config_numbers_whole(cli: Cli, db: str) -> None:
    for lr in (0.050001, 0.1):
        with dlperf.track("cfg", config={"train": {"lr": lr}}, store=db) as run:
            run.log(1, loss=lr)
    r = cli("runs", "compare", "1", "2")
    assert r.code == 0, r.err
    row = next(line for line in r.out.splitlines() if line.startswith("train.lr"))
    assert "0.050001" in row and "0.1" in row, row


# --- C5: a tracked rate key's unit -----------------------------------------------------------


def test_a_tracked_keys_unit_is_read_from_its_last_part() -> None:
    assert unit("final.train/samples_per_s") == "samples/s"
    assert unit("final.train/throughput") == "samples/s"
    assert unit("final.train/step_time_s") == "s"
    assert unit("final.train/loss") is None
    # the dotted spelling, and dlperf's own keys, read as before
    assert unit("final.train.samples_per_s") == "samples/s"
    assert unit("phases.data") == "s" and unit("scoring_images_per_s") == "images/s"
    assert scaled("final.train/samples_per_s", 0.0004) == "0.0004 samples/s"
    assert quantity("final.train/throughput", 1e20) == "1e+20 samples/s"
    assert quantity("final.train/throughput", 1234.4) == "1,234 samples/s"


def test_runs_show_of_a_tracked_rate(cli: Cli, db: str) -> None:
    with dlperf.track("units", store=db) as run:
        run.log(1, loss=1.0, samples_per_s=0.0004, throughput=1e20)
    r = cli("runs", "show", "1")
    assert r.code == 0, r.err
    assert "0.0004 samples/s" in r.out and "1e+20 samples/s" in r.out
    assert "train/samples/s" not in r.out
