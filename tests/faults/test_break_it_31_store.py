"""Break-it round 31, part P3, fixer C: the run store's URL, `--kind`, and the MLflow export.

C1. A password holding an unescaped `/` was printed in clear in every line naming the store
    (`postgresql://:***@dlperf:se/cr/et@h/db`): the userinfo is found as SQLAlchemy finds it,
    the password being all up to its first @.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from dlperf.store.urls import masked_url
from tests.conftest import CliResult

Cli = Callable[..., CliResult]


# C1


@pytest.mark.parametrize(
    ("url", "masked"),
    [
        ("postgresql+psycopg://dlperf:se/cr/et@h/db", "postgresql+psycopg://dlperf:***@h/db"),
        ("postgresql://u:x/y@/db?host=/tmp", "postgresql://u:***@/db?host=/tmp"),
        ("postgresql://u:p?w#x:y@h:5/db", "postgresql://u:***@h:5/db"),
        ("postgresql://u:p/w@ss@h/db", "postgresql://u:***@h/db"),  # an unescaped @ too
        ("postgresql://u:p/w@h:port/db", "postgresql://u:***@h:port/db"),  # SQLAlchemy refuses
        ("postgresql://u:pw@h/d@b", "postgresql://u:***@h/d@b"),
    ],
)
def test_a_password_holding_a_slash_is_masked(url: str, masked: str) -> None:
    assert masked_url(url) == masked


def test_the_store_line_masks_a_password_holding_a_slash(cli: Cli) -> None:
    """The driver's own error names the store: port 1 on loopback refuses the connection."""
    result = cli("--db", "postgresql+psycopg://dlperf:se/cr/et@127.0.0.1:1/db", "runs", "list")
    assert result.code == 2, (result.out, result.err)
    assert "se/cr" not in result.err
    assert "postgresql+psycopg://dlperf:***@127.0.0.1:1/db" in result.err
