"""Command-line interface: one thin function per command, grouped one module per command.

Heavy libraries (torch, torchvision, SciPy) are imported inside the commands so that
`dlperf --help` answers at once.
"""

from __future__ import annotations

import sys

# Importing a command module registers its commands on `app`.
from dlperf.cli import analyze as _analyze  # noqa: F401
from dlperf.cli import converge as _converge  # noqa: F401
from dlperf.cli import deploy as _deploy  # noqa: F401
from dlperf.cli import detect as _detect  # noqa: F401
from dlperf.cli import models as _models  # noqa: F401
from dlperf.cli import run as _run  # noqa: F401
from dlperf.cli import runs as _runs  # noqa: F401
from dlperf.cli import scale as _scale  # noqa: F401
from dlperf.cli import serve as _serve  # noqa: F401
from dlperf.cli.app import app, state
from dlperf.errors import CheckFailed, UserError


def main() -> None:
    try:
        app()
    except UserError as e:
        if state.debug:
            raise
        print(f"error: {e}", file=sys.stderr)
        sys.exit(e.exit_code)
    except CheckFailed as e:
        print(f"check failed: {e}", file=sys.stderr)
        sys.exit(e.exit_code)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        sys.exit(130)
