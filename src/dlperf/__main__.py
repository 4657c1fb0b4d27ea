"""`python -m dlperf` is the `dlperf` command."""

from dlperf.cli import main

main()
