"""Break-it round 29, P2 cause I and P3 cause C1: the ensemble on a few points, the β table's
cells.

C1 (P2 I). The default ensemble on 4 points of 1 / (0.05 k + 1) + 0.2 said the curve levels
off "between 0.5948 and 0.5948" (90%): Weibull and MMF, 4 parameters each, pass through all
4 points, where the likelihood has no bound. Such a family is left out until the points
outnumber its parameters, and a plateau interval is never narrower than its grid cell.
C2 (P3 C1). `converge fit --to-csv` wrote a stored run's model name "=cmd|' /C calc'!A0" raw
into a cell that a spreadsheet runs as a formula, and read its depth as 0 from "A0". Cells
starting = + - @ tab or CR now start with ' (OWASP); depth is read from names such as resnet56.
"""

from __future__ import annotations

import csv
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

import dlperf
from dlperf.converge import ensemble, regress
from tests.conftest import CliResult

Cli = Callable[..., CliResult]


@pytest.mark.parametrize("n", [4, 5, 6])
def test_the_ensemble_on_a_few_points_puts_the_plateau_in_a_real_interval(n: int) -> None:
    """1 / (0.05 k + 1) + 0.2 at steps 1..n, as `converge predict --csv` reads it (5
    decimals): the plateau is 0.2. Before: 4 points, 0.5948 in [0.5948, 0.5948] (Weibull 95%);
    5, 0.645 in [0.03, 0.645]; 6, 0.20005 in [0.20005, 0.20121]."""
    k = np.arange(1.0, n + 1)
    post = ensemble.fit(k, np.round(1 / (0.05 * k + 1) + 0.2, 5))
    p = ensemble.predict(post, 0.5, "loss")
    low, high = p.plateau_interval
    assert low < 0.2 < high and low < p.plateau < high, (p.plateau, p.plateau_interval)
    left_out = "mmf, weibull left out: as many parameters as points"
    assert (left_out in ensemble.basis(post)) == (n == 4), ensemble.basis(post)
    assert p.verdict == "cannot tell"  # 0.5 at step 47, past 3× the steps seen


def test_a_family_alone_with_as_many_parameters_as_points_is_refused() -> None:
    with pytest.raises(dlperf.UserError, match="4 points cannot weigh weibull"):
        ensemble.fit([1, 2, 3, 4], [1.0, 0.8, 0.7, 0.65], families=("weibull",))


# --- C2 (P3 C1): stored text goes into the β table as text, not as a formula ------------------


def test_the_beta_table_keeps_a_formula_like_model_name_as_text(
    cli: Cli, db: str, tmp_path: Path
) -> None:
    """Before: the cell read =cmd|' /C calc'!A0 and depth 0."""
    for name in ("=cmd|' /C calc'!A0", "resnet56"):
        with dlperf.track("r", config={"model": {"name": name}}, store=db) as run:
            for s in range(1, 41):
                run.log(s, loss=1 / (0.05 * s + 1) + 0.2)
    out = tmp_path / "t.csv"
    r = cli("converge", "fit", "1", "2", "--key", "train/loss", "--to-csv", str(out))
    assert r.code == 0, r.err
    rows = list(csv.DictReader(out.open(newline="")))
    assert [(row["model"], row["depth"]) for row in rows] == [
        ("'=cmd|' /C calc'!A0", ""),
        ("resnet56", "56"),
    ]
    assert float(rows[0]["beta2"]) == pytest.approx(0.2, abs=1e-3)  # numbers stay numbers


def test_depth_is_read_from_a_name_of_letters_and_a_number() -> None:
    names = ["resnet56", "resnet_56", "vgg16", "efficientnet_b0", "vit_b_16", "mobilenet_v2",
             "=cmd|' /C calc'!A0", "resnet0", None]  # fmt: skip
    assert [regress.depth_of(n) for n in names] == [56, 56, 16, None, None, None, None, None, None]
