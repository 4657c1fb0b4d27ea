"""The error table: what the CLI turns into one line and an exit code."""

from __future__ import annotations


class UserError(Exception):
    """Bad input (config, data file, model name, request): one line, exit code 2."""

    exit_code = 2

    def __init__(self, message: str, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint

    def __str__(self) -> str:
        return f"{self.message} ({self.hint})" if self.hint else self.message


class NoSuchRun(UserError):
    """A run id the store does not hold (told apart from a store that cannot be read)."""


class CheckFailed(Exception):
    """A check the user asked for (parity, a threshold) failed: exit code 1."""

    exit_code = 1
