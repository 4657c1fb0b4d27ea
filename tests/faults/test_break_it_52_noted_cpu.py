"""Break-it round 52, T3 C2 (wrong number): `serve` stopped by its CPU-time limit said "the
CPU-time limit (ulimit -t) stopped the command after 0 s of CPU". The server takes its stop
signals itself (it drains its queue on one) and tells `stopping.noted`, which recorded the
signal but not the CPU time used, as `stopping`'s own handler does. Both record it now.
"""

from __future__ import annotations

import subprocess
import sys

# Under a soft CPU-time limit set here (no test waits on the kernel's clock), a process that
# has used 1 s of CPU is told of SIGXCPU as the server's handler tells it.
NOTED = """
import resource, signal, time
from dlperf import stopping

stopping.install()
resource.setrlimit(resource.RLIMIT_CPU, (3600, resource.RLIM_INFINITY))
while time.process_time() < 1.0:
    pass
stopping.noted(signal.SIGXCPU)
print(stopping.cause())
print(stopping.exit_code(0))
"""


def test_a_cpu_limit_the_server_took_says_the_cpu_time_used() -> None:
    done = subprocess.run(
        [sys.executable, "-c", NOTED], capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr
    cause, code = done.stdout.splitlines()
    # before: "... stopped the command after 0 s of CPU (SIGXCPU, exit 152): ..."
    assert "the CPU-time limit (ulimit -t) stopped the command after 1 s of CPU" in cause, cause
    assert code == "152"
