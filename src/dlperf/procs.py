"""Processes by pid, from /proc where there is one: whether one still runs, and what
identifies one across machines, pid reuse and reboots. Standard library only: the launcher's
guard and the store's readers both use it."""

from __future__ import annotations

import ctypes
import os
import signal
import socket
import sys
from pathlib import Path
from typing import Any

_PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


def proc_stat(pid: int) -> tuple[str, int] | None:
    """(state, start time in clock ticks after boot) of a process, from /proc (Linux)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat[stat.rfind(")") + 2 :].split()  # the name in parentheses may hold spaces
    try:
        return fields[0], int(fields[19])  # fields 3 and 22 of proc(5)
    except (IndexError, ValueError):
        return None


def alive(pid: int) -> bool:
    """True while `pid` runs (a zombie counts as gone: it runs nothing)."""
    stat = proc_stat(pid)
    if stat is not None:
        return stat[0] not in ("Z", "X")
    try:  # no /proc (macOS), or it ended just now
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # alive, another user's
        return True
    return True


def die_with_parent() -> None:
    """Have Linux SIGKILL this process when its parent exits (strictly: the parent's thread
    that forked it); a no-op on other systems."""
    if not sys.platform.startswith("linux"):
        return
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_PDEATHSIG) failed")


def _boot_id() -> str | None:
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip() or None
    except OSError:
        return None


def this_process() -> dict[str, Any]:
    """What identifies the running process across machines, pid reuse and reboots."""
    pid = os.getpid()
    stat = proc_stat(pid)
    return {
        "host": socket.gethostname(),
        "pid": pid,
        "start": stat[1] if stat else None,
        "boot_id": _boot_id(),
    }


def process_alive(process: dict[str, Any]) -> bool | None:
    """Whether the process `this_process()` described is still running: None when this
    machine cannot tell (another host, nothing recorded). A pid now held by another process
    (another start time) or a zombie counts as gone, as does any pid after a reboot."""
    pid = process.get("pid")
    if process.get("host") != socket.gethostname() or not isinstance(pid, int) or pid < 1:
        return None
    boot = _boot_id()
    if process.get("boot_id") and boot and process["boot_id"] != boot:
        return False
    if not alive(pid):
        return False
    stat = proc_stat(pid)  # None: no /proc, or it ended just now (it was alive a moment ago)
    return stat is None or process.get("start") is None or stat[1] == process["start"]
