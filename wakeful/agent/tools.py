"""Running a configured tool: ``run`` (the one way every caller runs a tool: the claude
loop's inline reads, the tool kit, the executor), and the two sources of ``[tools.NAME]``
tables: Python callables and HTTP routes. What a tool is and the ``ToolCall`` it receives
are in wakeful/agent/tool.py.

A Python tool is ``call = "module:callable"`` taking ``(input: dict, call: ToolCall)`` and
returning a ``str`` or a JSON-able ``dict``. An HTTP tool is ``route`` / ``method`` /
``path``: the input is the JSON body (or the query of a GET), sent through the egress proxy.
An exception is the tool's error: the model gets it as an error ``tool_result`` (its type
and message, never a traceback), and the run worker's log one line of it, escaped by the
rule of store/display.py (its message is whatever the tool's upstream, or a stranger
behind it, wrote). ``TryLater`` (wakeful/agent/outage.py) is not an error but an
outage: it passes through, so a read in a run makes the run wait, and an effect waits to be
tried again under the same idempotency key.
"""

from __future__ import annotations

import importlib
import json
import logging
from typing import Any

from store.display import safe

from wakeful.agent.config import TOOL_SETTINGS, AgentConfig, ConfigError, checked_table, tool_settings
from wakeful.agent.conversation import storable
from wakeful.agent.loading import import_callable
from wakeful.agent.outage import TryLater
from wakeful.agent.sources import ToolSource, register_table
from wakeful.agent.tool import Tool, ToolCall

log = logging.getLogger("wakeful.agent.tools")
RESULT_MAX = 20_000  # characters of one tool result kept (and shown to the model)


def run(tool: Tool, input: dict[str, Any], call: ToolCall,
        where: AgentConfig | ToolSource | None = None) -> dict[str, Any]:
    """Call the tool through its source; ``{"content": str, "is_error": bool}`` whatever it
    does. ``where`` is the config holding the tool's source (or the source itself); left
    out, the tool is a Python or HTTP one, run by the built-in source it names."""
    source = _source(tool, where)
    try:
        if source is None:
            raise LookupError(f"no tool source {tool.source!r} is configured")
        value = source.call(tool, input, call)
    except TryLater:
        raise
    except Exception as exc:  # the tool's failure is the model's to hear about, not the run's
        message = storable(str(exc))
        # The name and the type are the config's and the code's; the id and the message are
        # not: escaped, they cannot break the line, forge a record or drive a terminal.
        log.warning("tool %s (%s) failed: %s: %s", tool.name, safe(call.id), type(exc).__name__, safe(message))
        return {"content": f"the tool failed: {type(exc).__name__}: {message}"[:RESULT_MAX], "is_error": True}
    return {"content": as_text(value), "is_error": False}


def _source(tool: Tool, where: AgentConfig | ToolSource | None) -> ToolSource | None:
    if isinstance(where, AgentConfig):
        return where.source_of(tool)
    if where is not None:
        return where
    return _BUILT_IN.get(tool.source)


def as_text(value: Any) -> str:
    """A tool's answer as text the model reads and the store keeps (``storable``: an
    upstream's NUL would otherwise fail the finish that stores it)."""
    if isinstance(value, str):
        text = value
    else:
        try:
            text = json.dumps(value, ensure_ascii=False, sort_keys=True, default=str)
        except (TypeError, ValueError):
            text = str(value)
    if len(text) > RESULT_MAX:
        text = text[:RESULT_MAX] + f"\n[cut: {len(text) - RESULT_MAX} more characters]"
    return storable(text)


# -- the [tools.NAME] sources ------------------------------------------------------------

class PythonSource:
    """``call = "module:callable"`` tools (and denied tools that name no way to run)."""

    name = "python"

    def __init__(self, tools: tuple[Tool, ...]) -> None:
        self._tools = list(tools)

    def tools(self) -> list[Tool]:
        return self._tools

    def call(self, tool: Tool, input: dict[str, Any], call: ToolCall) -> Any:
        if tool.call is None:
            raise LookupError(f"the tool {tool.name!r} names no call")
        return tool.function()(input, call)

    def table_of(self, tool: Tool) -> str:
        return f"[tools.{tool.name}]"


class HttpSource(PythonSource):
    """``route`` / ``method`` / ``path`` tools, through the egress proxy under the current
    grant (the run's, or the effect attempt's)."""

    name = "http"

    def call(self, tool: Tool, input: dict[str, Any], call: ToolCall) -> Any:
        return call.http(tool.route or "").request(tool.method, tool.path, input)


# What runs a bare Tool (one no config holds): its call or its route needs no state.
_BUILT_IN: dict[str, ToolSource] = {"python": PythonSource(()), "http": HttpSource(())}
_KEYS = TOOL_SETTINGS | {"call", "routes", "route", "method", "path"}


def parse_tools(path: str, table: Any) -> list[ToolSource]:
    """``[tools.NAME]`` tables: a Python source and an HTTP source."""
    if not isinstance(table, dict):
        raise ConfigError(f"{path}: [tools] must hold one [tools.NAME] table per tool")
    tools = [_tool(path, name, spec) for name, spec in table.items()]
    return [PythonSource(tuple(t for t in tools if t.source == "python")),
            HttpSource(tuple(t for t in tools if t.source == "http"))]


def _tool(path: str, name: str, spec: Any) -> Tool:
    where = f"[tools.{name}]"
    spec = checked_table(path, where, spec, _KEYS, name)
    tool = Tool(name=name, **tool_settings(path, where, spec), call=spec.get("call"), route=spec.get("route"),
                method=str(spec.get("method", "GET")).upper(), path=str(spec.get("path", "/")),
                routes=_route_names(path, where, spec))
    _check_runnable(path, where, tool)
    return tool


def _route_names(path: str, where: str, spec: dict[str, Any]) -> tuple[str, ...]:
    routes = spec.get("routes", [])
    if not isinstance(routes, list) or not all(isinstance(r, str) and r for r in routes):
        raise ConfigError(f"{path}: {where}: routes must be a list of route names")
    if routes and spec.get("call") is None:
        raise ConfigError(f"{path}: {where}: routes is for a Python tool (call); an HTTP tool names its route")
    return tuple(routes)


def _check_runnable(path: str, where: str, tool: Tool) -> None:
    if tool.call is not None and tool.route is not None:
        raise ConfigError(f"{path}: {where}: give either call or route, not both")
    if tool.call is not None:
        try:
            import_callable(tool.call)
        except Exception as exc:  # an import error of any kind is the config's problem
            raise ConfigError(f"{path}: {where}: call {tool.call!r} does not import "
                              f"({type(exc).__name__}: {exc})") from None
    elif tool.route is not None:
        try:
            importlib.import_module("wakeful.agent.egress")
        except ImportError:
            raise ConfigError(f"{path}: {where}: route {tool.route!r} needs the egress client "
                              "(wakeful/agent/egress.py), which this installation lacks") from None
    elif tool.policy != "deny":
        raise ConfigError(f"{path}: {where}: no way to run it: give call = \"module:callable\" "
                          "or route/method/path")


register_table("tools", parse_tools)
