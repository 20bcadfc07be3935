"""A stdio MCP server cannot read the environment of the worker that started it (issue 54,
item 8): on Linux the process that starts one is made non-dumpable first, so its
``/proc/<pid>/environ`` (and mem, fd, ...) is closed to a process of the same user.

A real "worker" process (it loads the agent config, which starts the stdio server, and calls
its tool) holds a fake ``WAKEFUL_DATABASE_URL`` and ``ANTHROPIC_API_KEY``; the server
(tests/agent/mcp_peeking.py) tries ``/proc/<its parent>/environ``. Run as root, the worker is
started without the capabilities that read any process anyway (``CAP_SYS_PTRACE``, and on a
recent kernel ``CAP_SYS_ADMIN`` or ``CAP_PERFMON``), as a container's default root is: with
one of them nothing short of another user stops it (docs/mcp.md)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from same_user import without_capabilities_that_read_any_process

PEEKING = str(Path(__file__).parent / "mcp_peeking.py")
# The worker: what a worker does at its start (load the config: the stdio server starts and is
# listed), then one call of the server's tool; prints the tool's answer and its own pid.
WORKER = """
import json, os, sys
from wakeful.agent.config import load
from wakeful.agent.tool import ToolCall
from wakeful.agent.tools import run
cfg = load(sys.argv[1])
answer = run(cfg.tools["parent_environ"], {}, ToolCall("toolu_1", "parent_environ", "ada", "k"), cfg)
print(json.dumps({"pid": os.getpid(), "answer": answer}))
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc and prctl are Linux's")
def test_a_stdio_server_cannot_read_its_workers_environment(tmp_path: Path) -> None:
    config = tmp_path / "agent.toml"
    config.write_text(f"""
[mcp.peek]
command = {json.dumps(sys.executable)}
args = [{json.dumps(PEEKING)}]
policy = "allow"
effect = "read"
""")
    database_url = "postgresql://wakeful:db-canary-5f1e@127.0.0.1/wakeful"
    api_key = "sk-ant-canary-" + "7" * 20
    env = {"PATH": os.environ["PATH"], "HOME": os.environ.get("HOME", "/"), "WAKEFUL_DATABASE_URL": database_url,
           "ANTHROPIC_API_KEY": api_key}
    done = subprocess.run([sys.executable, "-c", WORKER, str(config)], env=env, capture_output=True, text=True,
                          timeout=120, preexec_fn=without_capabilities_that_read_any_process, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    worker = json.loads(done.stdout.strip().splitlines()[-1])
    assert not worker["answer"]["is_error"], worker["answer"]
    peeked = json.loads(worker["answer"]["content"])
    assert peeked["ppid"] == worker["pid"]  # the server's parent is the worker that holds the secrets
    assert "WAKEFUL_DATABASE_URL" not in peeked["names"] and "ANTHROPIC_API_KEY" not in peeked["names"]
    assert peeked["error"].startswith("PermissionError")
    assert database_url not in done.stdout + done.stderr and api_key not in done.stdout + done.stderr
