"""Break-it round 37, torchrun's launch (fixer F5).

C6. torchrun's agent stopped by SIGTERM mid-point (its workers training) catches it, stops
    its workers and raises torch's SignalException. The point's error, the study's last line
    and the stored run error were "torchrun failed: SignalException: Process 2321 got signal:
    15" and then the last 12 lines of torchrun.log: the agent's traceback, cut mid-frame at a
    caret line. It is "torchrun failed (stopped by SIGTERM)", as a SIGKILL is "torchrun failed
    (killed by SIGKILL)"; and no traceback frame or caret line is ever in torchrun's tail.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from dlperf.distributed.launch import error_lines

TORCH = "/venv/lib/python3.11/site-packages/torch/distributed"
# torchrun.log of the repro (paths shortened): the agent SIGTERMed while its workers trained
AGENT_STOPPED = f"""\
W1129 14:49:40.360000 2321 torch/distributed/elastic/agent/server/api.py:753] Received 15 death \
signal, shutting down workers
W1129 14:49:40.361000 2321 torch/distributed/elastic/multiprocessing/api.py:1028] Sending process \
2436 closing signal SIGTERM
Traceback (most recent call last):
  File "<frozen runpy>", line 198, in _run_module_as_main
  File "{TORCH}/launcher/api.py", line 377, in launch_agent
    result = agent.run()
             ^^^^^^^^^^^
  File "{TORCH}/elastic/metrics/api.py", line 134, in wrapper
    result = f(*args, **kwargs)
             ^^^^^^^^^^^^^^^^^^
  File "{TORCH}/elastic/agent/server/api.py", line 923, in _invoke_run
    time.sleep(monitor_interval)
  File "{TORCH}/elastic/multiprocessing/api.py", line 86, in _terminate_process_handler
    raise SignalException(f"Process {{os.getpid()}} got signal: {{sigval}}", sigval=sigval)
torch.distributed.elastic.multiprocessing.api.SignalException: Process 2321 got signal: 15
"""


@pytest.mark.parametrize(("number", "name"), [(15, "SIGTERM"), (1, "SIGHUP"), (3, "SIGQUIT")])
def test_c6_torchrun_stopped_by_a_signal_is_one_line_naming_it(
    tmp_path: Path, number: int, name: str
) -> None:
    # before: "torchrun failed: SignalException: Process 2321 got signal: 15" and 12 lines
    # of torch's traceback, from a caret line on
    log = tmp_path / "torchrun.log"
    log.write_text(AGENT_STOPPED.replace("signal: 15", f"signal: {number}"))
    assert error_lines(tmp_path, log, 1) == f"torchrun failed (stopped by {name})"


def test_c6_torchruns_tail_holds_no_traceback_frame(tmp_path: Path) -> None:
    """Another exception of torchrun's own: its first line names it, its tail is what the
    log said around the traceback, none of the traceback's frames, source or carets."""
    log = tmp_path / "torchrun.log"
    raised = "torch.distributed.elastic.rendezvous.api.RendezvousTimeoutError: timed out"
    log.write_text(AGENT_STOPPED.rpartition("torch.distributed")[0] + raised + "\n")
    lines = error_lines(tmp_path, log, 1).splitlines()
    assert lines[0] == "torchrun failed: RendezvousTimeoutError: timed out"
    assert lines[1:] == [*AGENT_STOPPED.splitlines()[:2], raised]
