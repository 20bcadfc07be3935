"""The tools of ``wakeful demo agent``: an order lookup (a read), a refund (a write, asked
first) and an account deletion (denied). The refund appends each execution to
``$WAKEFUL_HOME/refunds.jsonl`` so the demo can count them."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from wakeful.agent.tool import ToolCall
from wakeful.settings import RuntimeSettings


def lookup_order(tool_input: dict[str, Any], call: ToolCall) -> dict[str, Any]:
    return {"order": tool_input["order"], "status": "delivered", "total": 42.5}


def refund(tool_input: dict[str, Any], call: ToolCall) -> str:
    path = RuntimeSettings.from_env().home / "refunds.jsonl"
    with path.open("a", encoding="utf-8") as f:
        f.write(json.dumps({"order": tool_input["order"], "key": call.idempotency_key,
                            "tool_use_id": call.id}) + "\n")
    return f"refunded order {tool_input['order']}"


def delete_account(tool_input: dict[str, Any], call: ToolCall) -> str:
    raise AssertionError("denied by policy: never called")


CONFIG = """\
[agent]
model = "{model}"
system = "You run Ada's errands. Use the tools; ask nothing twice."
max_tokens = 1024
max_model_calls = 6
trusted_sources = ["chat"]  # Ada's own messages; every other source's text is data

[tools.lookup_order]
call = "wakeful.agent.demo_tools:lookup_order"
policy = "allow"
effect = "read"
description = "Look an order up by number"
input_schema = {{ type = "object", properties = {{ order = {{ type = "integer" }} }}, required = ["order"] }}

[tools.refund]
call = "wakeful.agent.demo_tools:refund"
policy = "ask"
effect = "write"
approval_ttl = {ttl}
description = "Refund an order"
input_schema = {{ type = "object", properties = {{ order = {{ type = "integer" }} }}, required = ["order"] }}

[tools.delete_account]
call = "wakeful.agent.demo_tools:delete_account"
policy = "deny"
effect = "write"
description = "Delete the customer's account"
"""
