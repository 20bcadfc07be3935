"""What the operator views add for the claude agent: the tool and input of an approval
(``wakeful approvals``), and each run's model calls, tokens and tool decisions (``wakeful
runs``, read from the run log the agent keeps in its memory)."""

from __future__ import annotations

import json
from typing import Any


def approval_tools(store: Any, inbox: str | None) -> dict[tuple[str, str], tuple[str, str]]:
    """(inbox, request_id) -> (tool, input as compact JSON) for approvals of tool calls."""
    return {(e.inbox, e.tool_use_id): (e.tool, json.dumps(e.input, sort_keys=True, ensure_ascii=False))
            for e in store.effects.view(inbox)}


def run_details(store: Any, inbox: str) -> dict[tuple[int, tuple[int, ...]], dict[str, Any]]:
    """(generation, event ids) -> the agent's entry for that run: model_calls, input_tokens,
    output_tokens, decisions ({tool_use_id: "tool:decision"}), stop."""
    from wakeful.agent.claude import LOG_KEY

    entries = store.runs.memory(inbox).get(LOG_KEY) or []
    return {(e["generation"], tuple(sorted(e["events"]))): e for e in entries if isinstance(e, dict)}


def describe_run(entry: dict[str, Any] | None) -> list[Any]:
    if entry is None:
        return ["-", "-", "-"]
    decisions = ", ".join(sorted(entry.get("decisions", {}).values())) or "-"
    return [entry.get("model_calls", 0), f"{entry.get('input_tokens', 0)}/{entry.get('output_tokens', 0)}",
            decisions]
