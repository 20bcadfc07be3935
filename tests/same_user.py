"""A process of the same user as wakeful's, without the capabilities that read any process
(as a container's default root, or any non-root user): what a stdio MCP server is. Used to show
that wakeful's processes are closed to it (wakeful/same_user.py)."""

from __future__ import annotations

import ctypes
import subprocess
import sys

PR_CAPBSET_DROP = 24  # <linux/prctl.h>
READ_ANY_PROCESS = (19, 21, 38)  # CAP_SYS_PTRACE, CAP_SYS_ADMIN, CAP_PERFMON (<linux/capability.h>)


def without_capabilities_that_read_any_process() -> None:
    """In a child before it execs: none of ``READ_ANY_PROCESS`` for it or its children
    (dropping is refused without CAP_SETPCAP: then there is none to drop)."""
    libc = ctypes.CDLL(None, use_errno=True)
    for capability in READ_ANY_PROCESS:
        libc.prctl(PR_CAPBSET_DROP, capability, 0, 0, 0)


def environ_as_seen_by_the_same_user(pid: int) -> str:
    """``/proc/<pid>/environ`` as such a process reads it: its text, or the error it got."""
    code = (f"try:\n    print(open('/proc/{pid}/environ', 'rb').read().decode(errors='replace'))\n"
            f"except OSError as exc:\n    print(type(exc).__name__)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                          preexec_fn=without_capabilities_that_read_any_process)
    return done.stdout.strip()
