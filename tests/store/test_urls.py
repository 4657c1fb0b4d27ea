"""dlperf.store.urls on its own: every password in a store URL printed as ***, wherever it is
written, and nothing else touched."""

from __future__ import annotations

import pytest

from dlperf.store.urls import MASK, masked_url, secret_option


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("postgresql+psycopg://u:pw@db/lab", "postgresql+psycopg://u:***@db/lab"),
        # an unescaped @ in the password: SQLAlchemy takes its tail for the host
        ("postgresql://u:p@ss@db:5432/lab", "postgresql://u:***@db:5432/lab"),
        ("postgresql://db/lab?password=x&sslmode=require", "postgresql://db/lab?password=***&sslmode=require"),
        ("postgresql://db/lab?sslpassword=s", "postgresql://db/lab?sslpassword=***"),
        ("mysql://db/lab?PASSWD=s", "mysql://db/lab?PASSWD=***"),
        # a string SQLAlchemy cannot read is masked by the patterns alone
        ("not a url://u:sec@h/p?token=t", "not a url://u:***@h/p?token=***"),
        ("sqlite:////tmp/a.db", "sqlite:////tmp/a.db"),
        ("postgresql://u@db/lab?sslmode=require", "postgresql://u@db/lab?sslmode=require"),
    ],
)  # fmt: skip
def test_every_password_is_masked_and_nothing_else(url: str, shown: str) -> None:
    assert masked_url(url) == shown


def test_a_secret_option_is_known_by_a_part_of_its_name_escaped_or_not() -> None:
    assert secret_option("password") and secret_option("SslPassword")
    assert secret_option("Pass%77ord") and secret_option("api_token")
    assert not secret_option("sslmode") and not secret_option("options")


def test_only_secret_options_are_masked_not_a_path_or_a_value_naming_one() -> None:
    """Only the value of an option whose name is a secret's is hidden: a path holding
    "password", or another option's value that says it, stays readable."""
    assert MASK not in masked_url("sqlite:////tmp/password/a.db")
    assert masked_url("postgresql://u:pw@db/lab?options=-csearch_path%3Dpassword") == (
        "postgresql://u:***@db/lab?options=-csearch_path%3Dpassword"
    )
