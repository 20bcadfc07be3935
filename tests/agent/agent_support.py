"""Helpers for the agent kit's tests: a config file writer and the tool log reader."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

ORDER_SCHEMA = ('{ type = "object", properties = { order = { type = "integer" } }, '
                'required = ["order"] }')

BASE_TOOLS: dict[str, dict[str, Any]] = {
    "lookup": {"call": "agent_tools:lookup", "policy": "allow", "effect": "read"},
    "refund": {"call": "agent_tools:refund", "policy": "allow", "effect": "write"},
    "refund_asked": {"call": "agent_tools:refund", "policy": "ask", "effect": "write",
                     "approval_ttl": 600},
    "wipe": {"call": "agent_tools:refund", "policy": "deny", "effect": "write"},
}

# Issue 23, item 1: the owner's read returns a stranger's note telling the model to write.
ATTACK_TOOLS: dict[str, dict[str, Any]] = {
    "lookup_order": {"call": "agent_tools:lookup_with_note", "policy": "allow", "effect": "read"},
    "open_ticket": {"call": "agent_tools:open_ticket", "policy": "allow", "effect": "write"},
    "send_invoice": {"call": "agent_tools:refund", "policy": "allow", "effect": "write"},
}


def calls(path: Path) -> list[dict[str, Any]]:
    """Every tool execution the test tools logged, in order."""
    return [json.loads(line) for line in path.read_text().splitlines() if line]


def _value(value: Any) -> str:
    if isinstance(value, str) and value.startswith("{ "):
        return value  # an inline table, written as such
    return json.dumps(value)


def write_config(path: Path, tools: dict[str, dict[str, Any]] | None = None, **agent: Any) -> Path:
    """The tests' owner speaks on ``chat``, trusted deliberately (unless ``trusted_sources``
    or the old ``untrusted_sources`` is given)."""
    if "untrusted_sources" not in agent:
        agent.setdefault("trusted_sources", ["chat"])
    lines = ["[agent]", 'model = "claude-scripted"', 'system = "You run errands."']
    lines += [f"{k} = {_value(v)}" for k, v in agent.items()]
    for name, spec in (BASE_TOOLS if tools is None else tools).items():
        lines += ["", f"[tools.{name}]", f'description = "{name}"']
        if "input_schema" not in spec:
            lines.append(f"input_schema = {ORDER_SCHEMA}")
        lines += [f"{k} = {_value(v)}" for k, v in spec.items()]
    path.write_text("\n".join(lines) + "\n")
    return path


def agent_env(config: Path, base_url: str, tool_log: Path) -> dict[str, str]:
    """What a worker needs to host the claude agent against the scripted model."""
    import os

    here = Path(__file__).parent
    return {"WAKEFUL_AGENT": "claude", "WAKEFUL_AGENT_CONFIG": str(config),
            "ANTHROPIC_BASE_URL": base_url, "ANTHROPIC_API_KEY": "test-key",
            "WAKEFUL_TEST_TOOL_LOG": str(tool_log),
            "PYTHONPATH": os.pathsep.join([str(here), os.environ.get("PYTHONPATH", "")])}
