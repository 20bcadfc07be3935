"""Tools for the agent fault scenario (scenario 12). Each execution is appended to
``$WAKEFUL_HOME/tools.jsonl`` (tool use id, idempotency key, attempt) before it returns, so
the checker counts executions per tool use id."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path
from typing import Any

from wakeful.agent.tool import ToolCall

CONFIG = """\
[agent]
model = "scripted"
timeout = 10
max_retries = 2
effect_timeout = 4
trusted_sources = ["chat"]  # the scenario's owner; its writes run without a yes

# The tools' answers are the scenario's own strings: trusted, so a later write still runs
# without a yes and every execution path stays under fault.
[tools.refund]
call = "fault_tools:refund"
policy = "allow"
effect = "write"
trusted_output = true

[tools.notify]
call = "fault_tools:refund"
policy = "allow"
effect = "write"
delivery = "at_most_once"
trusted_output = true

[tools.flaky]
call = "fault_tools:refund_then_die"
policy = "allow"
effect = "write"
trusted_output = true

[tools.flaky_once]
call = "fault_tools:refund_then_die"
policy = "allow"
effect = "write"
delivery = "at_most_once"
trusted_output = true
"""


def log_path() -> Path:
    return Path(os.environ["WAKEFUL_HOME"]) / "tools.jsonl"


def _log(tool_input: dict[str, Any], call: ToolCall) -> int:
    with log_path().open("a", encoding="utf-8") as f:
        f.write(json.dumps({"inbox": call.inbox, "id": call.id, "key": call.idempotency_key,
                            "tool": call.name, "attempt": call.attempt}) + "\n")
        f.flush()
        os.fsync(f.fileno())
    return sum(1 for line in log_path().read_text().splitlines() if f'"id": "{call.id}"' in line)


def refund(tool_input: dict[str, Any], call: ToolCall) -> str:
    _log(tool_input, call)
    return f"done {tool_input}"


def refund_then_die(tool_input: dict[str, Any], call: ToolCall) -> str:
    """The first try reaches the service; its executor dies before recording it."""
    if _log(tool_input, call) == 1:
        os.kill(os.getpid(), signal.SIGKILL)
    return f"done {tool_input}"
