"""Tool sources: where the tools an agent may call come from, and what runs one.

A source lists its tools (each a :class:`agent.tool.Tool`: name, description, input
schema, read or write, the policy the config gives it) and calls one. Python callables and
HTTP routes (``[tools.NAME]``, wakeful/agent/tools.py) are sources; so are MCP servers
(``[mcp.NAME]``) and the runtime's timers (``[wakes]``). Everything above a source is the
same for all of them: the policy (wakeful/agent/policy.py), the input's schema check, inline reads,
writes committed as effects and run once by the executor (wakeful/agent/effects.py), the audit.

The config (wakeful/agent/config.py) is one table per source kind. Each kind registers a parser
with :func:`register_table`; a kind wakeful ships (``BUILTIN_KINDS``) is imported the first
time a config names its table, so its module registers itself on import.

What a tool's definition says (its name, description, input schema) reaches the model as much
as any answer: a source that takes it from outside the config (an MCP server's) says so per
tool with ``definition_taint(tool)``, and ``AgentConfig.offered_taint`` is what the loops taint the
conversation with when they offer the tools (docs/design.md section 11).

A source's ``call`` returns a ``str`` or a JSON-able value. An exception is the tool's
error: the model hears it (its type and message) as an error tool_result. ``TryLater``
(wakeful/agent/outage.py) is not an error but an outage: it passes through, so a read in a run makes
the run wait, and an effect waits to be tried again under the same idempotency key.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any, Protocol, runtime_checkable

from wakeful.agent.tool import Tool, ToolCall


__all__ = ["BUILTIN_KINDS", "TableParser", "ToolSource", "parser_for", "register_table",
           "table_of"]


@runtime_checkable
class ToolSource(Protocol):
    """What runs a set of tools. ``name`` is unique in a config ("python", "http",
    "mcp.github", "wakes"), and every Tool it lists has ``source == name``."""

    name: str

    def tools(self) -> list[Tool]:
        """What it offers now (may be listed lazily, or again on a TTL). Read on every
        decision (``AgentConfig.tools``): keep it cheap, a list kept between listings."""
        ...

    def call(self, tool: Tool, input: dict[str, Any], call: ToolCall) -> Any:
        """Run ``tool`` (one this source listed) on ``input`` (already checked against its
        schema and the policy); ``call`` carries the tool use id, the inbox and the
        idempotency key (the same on every try of one tool use)."""
        ...


# parse(path, table) -> the sources of one config table; raises ConfigError naming the file
# and the table. ``table`` is the TOML value under the kind's key: for ``[tools.NAME]`` the
# dict of every tool table, for ``[wakes]`` the table itself.
TableParser = Callable[[str, Any], "list[ToolSource]"]

# The table kinds wakeful ships: the module that registers each, imported on first use.
BUILTIN_KINDS: dict[str, str] = {"tools": "wakeful.agent.tools", "mcp": "wakeful.agent.mcp", "wakes": "wakeful.agent.wakes"}
_PARSERS: dict[str, TableParser] = {}


def register_table(kind: str, parse: TableParser) -> None:
    """Make ``[kind]`` / ``[kind.NAME]`` tables of the agent config mean sources of tools."""
    _PARSERS[kind] = parse


def parser_for(kind: str) -> TableParser | None:
    """The parser of a table kind; None when no module registers it (or the module that
    should is not installed)."""
    if kind not in _PARSERS and kind in BUILTIN_KINDS:
        try:
            importlib.import_module(BUILTIN_KINDS[kind])
        except ModuleNotFoundError as exc:
            if exc.name != BUILTIN_KINDS[kind]:
                raise
    return _PARSERS.get(kind)


def table_of(source: ToolSource, tool: Tool) -> str:
    """The config table that declares ``tool``, for error messages: a source may say
    (``table_of(tool)``), otherwise it is ``[source name]``."""
    where = getattr(source, "table_of", None)
    return where(tool) if callable(where) else f"[{source.name}]"
