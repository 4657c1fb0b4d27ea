"""`python -m dlperf`, and the `dlperf` command (`main`). The stop signals are taken before
the command's modules are imported, so that one landing during start-up ends the command as
one landing during its work does (dlperf.stopping)."""

from typing import NoReturn

from dlperf import stopping


def _command() -> int:
    from dlperf.cli import outcome  # Typer, rich and every command's module

    return outcome()


def _warn(line: str) -> None:
    from dlperf.cli import say

    say(line)


def main() -> NoReturn:
    stopping.run(_command, process=True, warn=_warn)


if __name__ == "__main__":
    main()
