"""dlperf: a performance lab for deep-learning training.

The public API (see docs/api.md): `analyze`, `run`, `track`, `Store`, `fit_curve`, and
`UserError` for bad input; `__version__` is the installed package's. Names load on first
use, so `import dlperf` does not import torch.
"""

from __future__ import annotations

import resource
import sys
from typing import TYPE_CHECKING, Any

# Under a file-size limit (ulimit -f), no bytecode cache is written: Python writes a module's
# .pyc with one write it does not check, so a limit of 64 KiB left a cut .pyc renamed into
# place, and every later import of that module, in any process of the environment, failed
# with "EOFError: marshal data too short" (found as a test under the limit imported MLflow
# first, from an environment installed without compiling).
if resource.getrlimit(resource.RLIMIT_FSIZE)[0] != resource.RLIM_INFINITY:
    sys.dont_write_bytecode = True

from dlperf import blas, stack
from dlperf.errors import UserError

# Before NumPy or SciPy loads: OpenBLAS sizes its pool as it loads, and SciPy's, short of
# address space under ulimit -v, hung in dlopen where no stop signal reaches (dlperf.blas).
blas.size_pools()
blas.guard_blas()
# Before any thread or child starts: under a small `ulimit -s` a deeply nested model crashed
# the process with SIGSEGV and no word (dlperf.stack).
stack.fit_recursion()

__all__ = ["Store", "UserError", "analyze", "fit_curve", "run", "track"]

if TYPE_CHECKING:
    from dlperf.api import Store, analyze, fit_curve, run, track


def __getattr__(name: str) -> Any:
    if name == "__version__":
        from dlperf.version import dlperf_version

        return dlperf_version()
    if name in __all__:
        from dlperf import api

        return getattr(api, name)
    raise AttributeError(f"module 'dlperf' has no attribute {name!r}")
