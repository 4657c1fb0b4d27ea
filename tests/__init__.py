"""dlperf's test suite."""

import os

# The suite's expected tables are those printed off a terminal (160 columns, docs/cli.md). A
# COLUMNS or LINES the suite inherits (pytest-xdist sets COLUMNS=80 in its workers; a user's
# shell may export it) would rewrap them: the tests that want a width set their own.
for _name in ("COLUMNS", "LINES"):
    os.environ.pop(_name, None)
