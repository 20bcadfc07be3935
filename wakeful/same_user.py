"""Closing a process to the other processes of its user (Linux): ``closed_to_same_user``.

A stdio MCP server is the worker's child and runs as the worker's user; so does any other
program of that user. Without this, such a process reads ``/proc/<pid>/environ`` of every
wakeful process: the database URL, the approval and webhook secrets, the proxy's route keys.
So every long-running wakeful process closes itself at its start (the workers and beat,
tasks/application.py; the web edge; the proxy), and a worker again right before it starts a
stdio server (wakeful/agent/mcp.py).
"""

from __future__ import annotations

import ctypes
import logging
import os
import sys

log = logging.getLogger("wakeful")
PR_SET_DUMPABLE = 4  # <linux/prctl.h>


def closed_to_same_user() -> None:
    """Make this process non-dumpable (Linux): its ``/proc/<pid>/environ``, ``mem``, ``fd``
    ... become root's and ptrace is refused, so a process of the same user (a stdio server)
    cannot read its environment or memory. The flag is the process's (every thread, and
    children forked later; an exec'd program gets its own back). It also stops core dumps and
    same-user debuggers (py-spy, gdb: run them as root); root with CAP_SYS_PTRACE (or
    CAP_SYS_ADMIN, CAP_PERFMON) still reads it (docs/security.md). Elsewhere: nothing."""
    if not sys.platform.startswith("linux"):
        return
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) != 0:
        log.warning("prctl(PR_SET_DUMPABLE, 0) failed (%s): a process of the same user can read this "
                    "process's environment", os.strerror(ctypes.get_errno()))
