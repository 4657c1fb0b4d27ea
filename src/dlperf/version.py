"""dlperf's version: the installed distribution's (pyproject.toml states it, once).

A leaf, so that the modules recording the version (system.py, deploy/routes.py) need not
import the package's lazy API in `dlperf/__init__.py`.
"""

from __future__ import annotations

from functools import cache
from importlib.metadata import PackageNotFoundError, version


@cache
def dlperf_version() -> str:
    try:
        return version("dlperf")
    except PackageNotFoundError:  # a source tree on PYTHONPATH, never installed
        return "0+unknown"
