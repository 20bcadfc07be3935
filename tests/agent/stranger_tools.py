"""Tools for tests/agent/test_policy_strangers.py whose answers carry what the store cannot
hold, as an upstream a stranger writes to may answer."""

from __future__ import annotations

from typing import Any

from wakeful.agent.tool import ToolCall

# A NUL and a lone surrogate: PostgreSQL's text and jsonb refuse both.
UNSTORABLE = "a\x00b\ud800c"


def answer_unstorable(tool_input: dict[str, Any], call: ToolCall) -> dict[str, Any]:
    return {"order": tool_input["order"], "note": UNSTORABLE}


def fail_unstorable(tool_input: dict[str, Any], call: ToolCall) -> str:
    raise ValueError(UNSTORABLE)
