"""Running a configured tool: the ``ToolCall`` a tool receives, and its result as a tool_result.

A Python tool is ``call = "module:callable"`` taking ``(input: dict, call: ToolCall)`` and
returning a ``str`` or a JSON-able ``dict``. An exception is the tool's error: the model gets
it as an error ``tool_result`` (its type and message, never a traceback). ``TryLater``
(agent/outage.py) is not an error but an outage: it passes through, so a read in a run makes
the run wait, and an effect waits to be tried again under the same idempotency key.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from typing import Any

from agent.config import Tool
from agent.outage import TryLater

log = logging.getLogger("wakeful.agent.tools")
RESULT_MAX = 20_000  # characters of one tool result kept (and shown to the model)


@dataclass(frozen=True)
class ToolCall:
    """One tool use, as the tool sees it."""

    id: str  # the model's tool_use id
    name: str
    inbox: str
    idempotency_key: str  # the same on every try of this tool use: pass it on to the service
    attempt: int = 1

    def http(self, route: str) -> Any:
        """A client for ``route`` through the egress proxy, bound to this call (agent/egress.py)."""
        from agent import egress  # type: ignore[attr-defined]  # provided by the egress proxy's kit

        return egress.client(route, self)


def run(tool: Tool, input: dict[str, Any], call: ToolCall) -> dict[str, Any]:
    """Call the tool; ``{"content": str, "is_error": bool}`` whatever it does."""
    try:
        if tool.call is not None:
            value = tool.function()(input, call)
        else:
            value = _http(tool, input, call)
    except TryLater:
        raise
    except Exception as exc:  # the tool's failure is the model's to hear about, not the run's
        log.warning("tool %s (%s) failed: %s: %s", tool.name, call.id, type(exc).__name__, exc)
        return {"content": f"the tool failed: {type(exc).__name__}: {exc}"[:RESULT_MAX], "is_error": True}
    return {"content": as_text(value), "is_error": False}


def _http(tool: Tool, input: dict[str, Any], call: ToolCall) -> Any:
    """An HTTP tool: the input as the JSON body (or the query of a GET) through the egress proxy."""
    client = call.http(tool.route or "")
    return client.request(tool.method, tool.path, input)


def as_text(value: Any) -> str:
    if isinstance(value, str):
        text = value
    else:
        try:
            text = json.dumps(value, ensure_ascii=False, sort_keys=True, default=str)
        except (TypeError, ValueError):
            text = str(value)
    if len(text) > RESULT_MAX:
        text = text[:RESULT_MAX] + f"\n[cut: {len(text) - RESULT_MAX} more characters]"
    return text
