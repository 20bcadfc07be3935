"""MCP servers as a tool source: ``[mcp.NAME]`` tables of the agent config (docs/mcp.md).

```toml
[mcp.github]                       # streamable HTTP, through the egress proxy
route = "github_mcp"               # a [routes.github_mcp] holding the server's token
path = "/mcp"                      # the MCP endpoint below the route (its allowlist covers it)
policy = "ask"                     # the server's default for the tools it lists
effect = "write"

[mcp.github.tools.search_issues]   # one tool's own settings (any key of a [tools.NAME] but a way to run it)
policy = "allow"
effect = "read"

[mcp.files]                        # stdio: one server process per worker process
command = "python"
args = ["-m", "files_server"]
env = { FILES_ROOT = "/srv/files" }   # the environment it gets: this, and pass_env's names
pass_env = ["FILES_TOKEN"]            # copied from the worker's environment, nothing else
policy = "allow"
effect = "read"
```

What guards what:

- **The list is the server's, the rules are the config's.** Tools are listed when the source
  is first used (a stdio server at the worker's start; an HTTP one at the first run, under the
  run's grant) and again every ``list_ttl`` seconds. The tools of that first listing take the
  server's default policy and effect; a tool with its own table takes that; a tool the server
  adds later, without a table, is denied: never offered, refused if called.
- **Annotations are hints from an untrusted party**: ``readOnlyHint = false`` or
  ``destructiveHint = true`` make a tool configured ``read`` a write; ``readOnlyHint = true``
  never makes a write a read.
- **Names and descriptions are untrusted text**: a name must already fit the Messages API's
  pattern (``prefix`` + name, 1-64 of ``[a-zA-Z0-9_-]``; other tools are skipped, never
  renamed) and never be one of the runtime's own (``RESERVED_NAMES``); a description is cut to
  ``DESCRIPTION_MAX`` characters with control, format and bidi characters removed; an input
  schema must be a valid JSON Schema of an object under ``SCHEMA_MAX`` characters. A tool's
  own table may pin ``description`` and ``input_schema`` (``PINNABLE``): the operator's text.
- **A stranger's text in view taints**: a tool offered with the server's text (a table that
  does not pin both) taints the conversation (``definition_taint``, read by the loops through
  wakeful/agent/sources.py), so every write waits for a human's yes.
- **The definition first listed holds**: a tool whose description or input schema (what its
  table does not pin) changes after this process first listed it is withheld until an
  operator accepts it (a restart pins what the server lists then), logged once.
- **A write's idempotency key** goes in the ``tools/call`` request's ``_meta`` under
  ``META_KEY`` (the same on every try of one tool use); results are text from outside, data
  to the model like any tool's answer.
- **No key in the worker**: an HTTP server is reached only through ``wakeful proxy`` with the
  current grant (the run's, bound to its lease, or the effect attempt's); its token is the
  route's secret. A stdio server gets only the environment its table names (and the SDK's
  safe base: HOME, LOGNAME, PATH, SHELL, TERM, USER), and on Linux cannot read the worker's
  own (``/proc/<pid>/environ``): the process that starts one is made non-dumpable first.

The MCP SDK is asyncio; the worker is not. Every MCP exchange of a process runs on one event
loop in a daemon thread of that process (``_Loop``), started on first use and made anew in a
forked child, which never shares its parent's stdio servers.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import hashlib
import json
import logging
import os
import tempfile
import threading
import time
import unicodedata
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import jsonschema

from wakeful.settings import SettingsError, read_toml
from wakeful.same_user import closed_to_same_user
from wakeful.agent.config import (RESERVED_NAMES, TOOL_NAME, TOOL_SETTINGS, ConfigError, checked_table, positive_int,
                          tool_settings)
from wakeful.agent.outage import NOT_ACTED_ON, is_transient, retry_after
from wakeful.agent.sources import ToolSource, register_table
from wakeful.agent.tool import Tool

log = logging.getLogger("wakeful.agent.mcp")

# Where a write's idempotency key goes in ``tools/call``'s ``_meta``: a reverse-DNS prefix of
# our own (MCP reserves the prefixes whose second label is ``modelcontextprotocol`` or ``mcp``).
META_KEY = "dev.wakeful/idempotency-key"
DESCRIPTION_MAX = 1024  # characters of a server's tool description the model is shown
SCHEMA_MAX = 16_000  # characters of a server's input schema (as JSON) accepted
TOOLS_MAX = 200  # tools taken from one server's listing; the rest are skipped
LIST_TTL = 300  # seconds between listings of a server's tools
LIST_RETRY = 10  # seconds before a failed listing is tried again
CALL_TIMEOUT = 60.0  # seconds for one exchange with a server (a listing, a call)
# What of a tool's definition a table may pin in place of the server's text (what the model
# reads about the tool besides its name): pinned, it is the operator's, and taints nothing.
PINNABLE = frozenset({"description", "input_schema"})
_SERVER_KEYS = {"route", "path", "command", "args", "env", "pass_env", "cwd", "stderr", "prefix", "list_ttl",
                "timeout", "tools"} | (TOOL_SETTINGS - PINNABLE)
_TABLE_KEYS = TOOL_SETTINGS


class MCPToolError(Exception):
    """The server answered the call with ``isError`` (its text, untrusted) or a JSON-RPC error."""


# -- the config ------------------------------------------------------------------------------

@dataclass(frozen=True)
class Server:
    """One ``[mcp.NAME]`` table, checked."""

    name: str
    table: str  # "[mcp.NAME]", for messages
    defaults: dict[str, Any]  # Tool fields for a tool of the first listing without a table
    overrides: dict[str, dict[str, Any]]  # server tool name -> Tool fields of its own table
    pinned: dict[str, set[str]]  # server tool name -> the fields its table set itself
    route: str | None = None
    path: str = "/mcp"
    command: str | None = None
    args: tuple[str, ...] = ()
    env: dict[str, str] = field(default_factory=dict, repr=False)
    pass_env: tuple[str, ...] = ()
    cwd: str | None = None
    stderr: str = "discard"
    prefix: str = ""
    list_ttl: int = LIST_TTL
    timeout: float = CALL_TIMEOUT
    # Names the model already knows from elsewhere (RESERVED_NAMES, the file's [tools.NAME]
    # tables): a listed tool by one of these names is skipped, never a second.
    taken: frozenset[str] = frozenset()


def parse(path: str, tables: Any) -> list[ToolSource]:
    """``[mcp.NAME]`` tables: one source per server."""
    if not isinstance(tables, dict):
        raise ConfigError(f"{path}: [mcp] must hold one [mcp.NAME] table per server")
    return [MCPSource(_server(path, name, spec)) for name, spec in tables.items()]


def _server(path: str, name: str, spec: Any) -> Server:
    where = f"[mcp.{name}]"
    spec = checked_table(path, where, spec, _SERVER_KEYS, name, named="a server name")
    if ("route" in spec) == ("command" in spec):
        raise ConfigError(f"{path}: {where}: give route (streamable HTTP through the proxy) or command (stdio), "
                          "exactly one")
    if "policy" not in spec:
        raise ConfigError(f"{path}: {where}: policy is required: the default for the tools the server lists")
    defaults_raw = {k: spec[k] for k in TOOL_SETTINGS if k in spec}
    defaults = tool_settings(path, where, defaults_raw)
    overrides, pinned = {}, {}
    tables = spec.get("tools", {})
    if not isinstance(tables, dict):
        raise ConfigError(f"{path}: {where}: tools must hold one [mcp.{name}.tools.TOOL] table per tool")
    for tool_name, table in tables.items():
        tool_where = f"[mcp.{name}.tools.{tool_name}]"
        table = checked_table(path, tool_where, table, _TABLE_KEYS)
        overrides[tool_name] = tool_settings(path, tool_where, {**defaults_raw, **table})
        pinned[tool_name] = set(table)
    prefix = _string(path, where, spec, "prefix", "")
    for tool_name in tables:
        if not TOOL_NAME.match(prefix + tool_name):
            raise ConfigError(f"{path}: [mcp.{name}.tools.{tool_name}]: {prefix + tool_name!r} is not a tool name "
                              "the model accepts (1-64 letters, digits, _ or -)")
    values: dict[str, Any] = {"name": name, "table": where, "defaults": defaults, "overrides": overrides,
                              "pinned": pinned, "prefix": prefix,
                              "taken": RESERVED_NAMES | (_declared(path, "tools") or frozenset())}
    if "list_ttl" in spec:
        values["list_ttl"] = positive_int(path, where, "list_ttl", spec["list_ttl"])
    if "timeout" in spec:
        timeout = spec["timeout"]
        if not isinstance(timeout, int | float) or isinstance(timeout, bool) or timeout <= 0:
            raise ConfigError(f"{path}: {where}: timeout must be a positive number of seconds")
        values["timeout"] = float(timeout)
    if "route" in spec:
        values.update(_http_keys(path, where, spec))
    else:
        values.update(_stdio_keys(path, where, spec))
    return Server(**values)


def _http_keys(path: str, where: str, spec: dict[str, Any]) -> dict[str, Any]:
    stdio_only = sorted({"args", "env", "pass_env", "cwd", "stderr"} & set(spec))
    if stdio_only:
        raise ConfigError(f"{path}: {where}: {stdio_only[0]} is for a stdio server (command); an HTTP server's "
                          "token is its route's secret, in the proxy")
    route = _string(path, where, spec, "route", "")
    endpoint = _string(path, where, spec, "path", "/mcp")
    if not route or not endpoint.startswith("/") or any(c in endpoint for c in "?# "):
        raise ConfigError(f"{path}: {where}: route must name a [routes.NAME] and path be the MCP endpoint "
                          "below it (\"/mcp\")")
    routes = _declared(path, "routes")
    if routes is not None and route not in routes:
        raise ConfigError(f"{path}: {where}: no [routes.{route}] table for it (the proxy route that holds "
                          "the server's token)")
    return {"route": route, "path": endpoint}


def _declared(path: str, kind: str) -> frozenset[str] | None:
    """The names of the file's ``[kind.NAME]`` tables (a source is parsed from its own tables
    only); None when the config is not a file (parsed from a dict)."""
    try:
        raw = read_toml(path)
    except SettingsError:
        return None
    tables = raw.get(kind)
    return frozenset(tables) if isinstance(tables, dict) else frozenset()


def _stdio_keys(path: str, where: str, spec: dict[str, Any]) -> dict[str, Any]:
    if "path" in spec:
        raise ConfigError(f"{path}: {where}: path is for an HTTP server (route)")
    command = _string(path, where, spec, "command", "")
    args, pass_env = spec.get("args", []), spec.get("pass_env", [])
    env = spec.get("env", {})
    if not command:
        raise ConfigError(f"{path}: {where}: command must be the program that serves MCP on stdio")
    if not isinstance(args, list) or not all(isinstance(a, str) for a in args):
        raise ConfigError(f"{path}: {where}: args must be a list of strings")
    if not isinstance(env, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in env.items()):
        raise ConfigError(f"{path}: {where}: env must be a table of NAME = \"value\" strings")
    if not isinstance(pass_env, list) or not all(isinstance(v, str) and v for v in pass_env):
        raise ConfigError(f"{path}: {where}: pass_env must be a list of environment variable names")
    stderr = spec.get("stderr", "discard")
    if stderr not in ("discard", "inherit"):
        raise ConfigError(f"{path}: {where}: stderr must be discard or inherit, got {stderr!r}")
    cwd = spec.get("cwd")
    if cwd is not None and not isinstance(cwd, str):
        raise ConfigError(f"{path}: {where}: cwd must be a directory path")
    return {"command": command, "args": tuple(args), "env": dict(env), "pass_env": tuple(pass_env), "cwd": cwd,
            "stderr": stderr}


def _string(path: str, where: str, spec: dict[str, Any], key: str, default: str) -> str:
    value = spec.get(key, default)
    if not isinstance(value, str):
        raise ConfigError(f"{path}: {where}: {key} must be a string")
    return value


# -- the source ------------------------------------------------------------------------------

class MCPSource:
    """One MCP server's tools, as the config rules them (module docstring)."""

    def __init__(self, server: Server) -> None:
        self.server = server
        self.name = f"mcp.{server.name}"
        self._lock = threading.Lock()
        self._listing = threading.Lock()  # one listing at a time; the others keep the last one
        self._listed: dict[str, Tool] | None = None  # model's name -> Tool, once listed
        self._upstream_names: dict[str, str] = {}  # model's name -> the server's name
        self._first: frozenset[str] | None = None  # the server's names at the first listing
        # The server's name -> the hashes of its definition (what PINNABLE fields the table
        # leaves to the server) when this process first took it: a rug pull keeps the name.
        self._definitions: dict[str, dict[str, str]] = {}
        self._said: set[str] = set()  # later tools already logged
        self._warned: set[str] = set()  # what a listing warned of already (listings repeat)
        self._listed_at = 0.0
        self._failed_at = 0.0
        self._connection = (HttpConnection(server) if server.route else StdioConnection(server))
        _SOURCES.append(self)

    def forked(self) -> None:
        """In a forked child: locks another thread of the parent may have held are new (its
        listing stays: the child starts with what the parent listed)."""
        self._lock, self._listing = threading.Lock(), threading.Lock()

    # ToolSource

    def tools(self) -> list[Tool]:
        self._refresh_if_due()
        with self._lock:
            return list((self._listed if self._listed is not None else self._configured()).values())

    def call(self, tool: Tool, input: dict[str, Any], call: Any) -> Any:
        with self._lock:
            listed = self._listed if self._listed is not None else self._configured()
        known = listed.get(tool.name)
        if known is None or known.policy == "deny":  # never offered: a name added since, or never ours
            raise LookupError(f"the MCP server {self.server.name!r} has no configured tool {tool.name!r}")
        name = self._upstream_names.get(tool.name) or tool.name.removeprefix(self.server.prefix)
        meta = {META_KEY: call.idempotency_key} if known.effect == "write" else None
        result = self._connection.call_tool(name, input, meta)
        return result_value(result)

    def table_of(self, tool: Tool) -> str:
        name = self._upstream_names.get(tool.name) or tool.name.removeprefix(self.server.prefix)
        return f"[mcp.{self.server.name}.tools.{name}]" if name in self.server.overrides else self.server.table

    def definition_taint(self, tool: Tool) -> str | None:
        """What offering ``tool`` puts in the model's view that no one trusted said: the
        server's text (its name, description, input schema), unless the tool's table pins
        ``PINNABLE`` (docs/mcp.md). None for a tool the operator wrote whole."""
        name = self._upstream_names.get(tool.name) or tool.name.removeprefix(self.server.prefix)
        if PINNABLE <= self.server.pinned.get(name, set()):
            return None
        return f"tool descriptions from the MCP server {self.server.name}"

    @property
    def run_routes(self) -> tuple[str, ...]:
        """A run's grant covers the server's route: the run lists the tools (and runs reads)."""
        return (self.server.route,) if self.server.route else ()

    def close(self) -> None:
        self._connection.close()

    # the listing

    def _configured(self) -> dict[str, Tool]:
        """Before the first listing: the tools with a table of their own (so an executor that
        has not listed yet still runs a configured write)."""
        s = self.server
        return {s.prefix + name: self._tool(s.prefix + name, fields, None) for name, fields in s.overrides.items()}

    def _refresh_if_due(self) -> None:
        now = time.monotonic()
        with self._lock:
            due = self._listed is None or now - self._listed_at >= self.server.list_ttl
            if not due or now - self._failed_at < LIST_RETRY or not self._connection.can_list():
                return
        if not self._listing.acquire(blocking=False):
            return  # another thread lists; this one keeps what is there
        try:  # taken under the listing's lock too: the first definitions are one listing's
            try:
                listed = self._connection.list_tools()
            except Exception as exc:  # noqa: BLE001 - a server away keeps the last listing; said once
                with self._lock:
                    self._failed_at = time.monotonic()
                log.warning(LISTING_FAILED, self.server.table, type(exc).__name__,
                            str(exc)[:300], "keeping the last listing" if self._listed is not None else
                            "only its configured tools are known")
                return
            self._take(listed)
        finally:
            self._listing.release()

    def _take(self, listed: list[Any]) -> None:
        s = self.server
        names = [t.name for t in listed[:TOOLS_MAX] if isinstance(t.name, str)]
        first = self._first if self._first is not None else frozenset(names)
        tools, upstream = {}, {}
        for remote in listed[:TOOLS_MAX]:
            name, exposed = str(remote.name), s.prefix + str(remote.name)
            if not TOOL_NAME.match(exposed):
                self._warn_once(f"name:{name[:80]}", "%s: a tool named %r is not a name the model accepts; skipped",
                                name[:80])
                continue
            if exposed in s.taken:
                whose = "the runtime's own" if exposed in RESERVED_NAMES else "another table's"
                self._warn_once(f"taken:{exposed}", "%s: a tool named %r is %s; skipped", exposed, whose)
                continue
            if name in s.overrides:
                fields = s.overrides[name]
            elif name in first:
                fields = s.defaults
            else:  # added since the first listing: denied until configured
                fields = {**s.defaults, "policy": "deny"}
            definition = self._definition(name, remote)
            changed = [k for k, v in self._definitions.get(name, definition).items() if definition.get(k) != v]
            if changed:  # a rug pull: the same name, new text for the model
                fields = {**fields, "policy": "deny"}
                self._warn_once(f"changed:{name}:{sorted(definition.items())}",
                                "%s: the tool %r changed %s since this process first listed it; withheld until an "
                                "operator accepts it: restart the worker to take what the server lists then, or pin "
                                "description and input_schema in [mcp.%s.tools.%s]",
                                name, " and ".join(_CHANGED[k] for k in sorted(changed)), s.name, name)
            tool = self._tool(exposed, fields, None if changed else remote)  # withheld: none of the new text
            if tool is not None:
                tools[exposed], upstream[exposed] = tool, name
                self._definitions.setdefault(name, definition)
        added = sorted(n for n in upstream.values() if n not in first and n not in s.overrides and n not in self._said)
        self._said.update(added)
        if added:
            log.warning("%s: tool(s) %s appeared after the first listing; denied until configured",
                        s.table, ", ".join(repr(n[:64]) for n in added[:10]))
        with self._lock:
            self._listed, self._upstream_names, self._first = tools, upstream, first
            self._listed_at, self._failed_at = time.monotonic(), 0.0

    def _definition(self, name: str, remote: Any) -> dict[str, str]:
        """The server's text of a tool the model reads (the ``PINNABLE`` fields its table
        leaves to the server), each field hashed: kept per tool, compared at each listing."""
        said = {"description": getattr(remote, "description", None) or "",
                "input_schema": getattr(remote, "input_schema", None)}
        return {k: hashlib.sha256(json.dumps(v, sort_keys=True, default=str).encode()).hexdigest()
                for k, v in said.items() if k not in self.server.pinned.get(name, set())}

    def _warn_once(self, key: str, message: str, *args: Any) -> None:
        """A listing's warning (``message`` after the table's name), once per process: the
        listing comes again every list_ttl seconds, the warning need not."""
        if key in self._warned:
            return
        self._warned.add(key)
        log.warning(message, self.server.table, *args)

    def _tool(self, exposed: str, fields: dict[str, Any], remote: Any) -> Tool | None:
        """A Tool from the config's fields and, once listed, the server's tool (``remote``):
        its description and schema where the table pins none, its hints made only stricter."""
        s = self.server
        name = exposed.removeprefix(s.prefix)
        pinned = s.pinned.get(name, set())
        fields = dict(fields)
        if remote is not None:
            if "description" not in pinned:
                fields["description"] = clean_description(getattr(remote, "description", None) or "")
            if "input_schema" not in pinned:
                schema = checked_schema(getattr(remote, "input_schema", None))
                if schema is None:
                    self._warn_once(f"schema:{name}", "%s: the tool %r has no usable input schema; skipped", name[:64])
                    return None
                fields["input_schema"] = schema
            fields["effect"] = stricter_effect(fields["effect"], getattr(remote, "annotations", None))
        if not fields.get("description"):
            fields["description"] = f"{name} (from the MCP server {s.name})"
        return Tool(name=exposed, source=self.name, routes=(s.route,) if s.route else (), **fields)


_CHANGED = {"description": "its description", "input_schema": "its input schema"}  # for the warning


def stricter_effect(configured: str, annotations: Any) -> str:
    """The server's hints may turn a read into a write, never a write into a read."""
    if configured == "write" or annotations is None:
        return configured
    if getattr(annotations, "read_only_hint", None) is False or getattr(annotations, "destructive_hint", None) is True:
        return "write"
    return configured


def clean_description(text: str) -> str:
    """A server's description as the model may see it: control, format (zero-width, bidi)
    and unassigned characters removed, cut to ``DESCRIPTION_MAX``."""
    kept = "".join(c for c in str(text) if c in "\n\t" or unicodedata.category(c)[0] != "C")
    return kept[:DESCRIPTION_MAX].strip()


def checked_schema(schema: Any) -> dict[str, Any] | None:
    """The server's input schema when it is a valid JSON Schema of an object, small enough."""
    if not isinstance(schema, dict) or schema.get("type") != "object":
        return None
    try:
        if len(json.dumps(schema)) > SCHEMA_MAX:
            return None
        jsonschema.Draft202012Validator.check_schema(schema)
    except (TypeError, ValueError, RecursionError, jsonschema.SchemaError):
        return None
    return schema


def result_value(result: Any) -> Any:
    """A ``CallToolResult`` as a tool's answer: its text blocks joined (other blocks named,
    not passed), else its structured content; ``isError`` raises with the server's text."""
    parts = []
    for block in getattr(result, "content", None) or []:
        kind = getattr(block, "type", "?")
        if kind == "text":
            parts.append(str(block.text))
        elif kind == "resource" and isinstance(getattr(block.resource, "text", None), str):
            parts.append(block.resource.text)
        else:
            parts.append(f"[{kind} content not shown]")
    text = "\n".join(parts)
    if getattr(result, "is_error", False):
        raise MCPToolError(text or "the server reported an error")
    structured = getattr(result, "structured_content", None)
    if not parts and structured is not None:
        return structured
    return text


# -- connections -------------------------------------------------------------------------------

class _Loop:
    """This process's event loop for MCP, in a daemon thread; a forked child makes its own."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None

    def run(self, make: Callable[[], Awaitable[Any]], timeout: float) -> Any:
        future = asyncio.run_coroutine_threadsafe(make(), self._started())  # type: ignore[arg-type]
        try:
            return future.result(timeout)
        except concurrent.futures.TimeoutError:
            future.cancel()
            raise TimeoutError(f"no answer in {timeout:g} s") from None

    def _started(self) -> asyncio.AbstractEventLoop:
        with self._lock:
            if self._loop is None:
                loop = asyncio.new_event_loop()
                threading.Thread(target=loop.run_forever, name="wakeful-mcp", daemon=True).start()
                self._loop = loop
            return self._loop

    def forked(self) -> None:
        self._lock = threading.Lock()
        self._loop = None  # the parent's thread is not in the child


_LOOP = _Loop()
_CONNECTIONS: list[StdioConnection] = []
_SOURCES: list[MCPSource] = []


def _forked() -> None:
    _LOOP.forked()
    for each in [*_CONNECTIONS, *_SOURCES]:
        each.forked()


os.register_at_fork(after_in_child=_forked)


@dataclass
class Refusal:
    """The first answer of an HTTP exchange that was not a success: the SDK reports only that
    the server answered with an error, so the status is kept here."""

    status: int = 0
    outcome: str = ""
    reason: str = ""
    method: str = ""
    after: float | None = None


class HttpConnection:
    """Streamable HTTP through the egress proxy, under the current grant: each exchange is a
    connection of its own (a grant is a run's or an effect attempt's, never the process's).

    A listing negotiates (the SDK's ``auto``: ``server/discover``, else the initialize
    handshake); a 2026-07-28 server's discovery is kept for the calls until the next listing
    or a failure, so a call is one request through the proxy, not two."""

    def __init__(self, server: Server) -> None:
        self.server = server
        self.discovered: Any = None  # the server's DiscoverResult, from the last listing

    def can_list(self) -> bool:
        from wakeful.agent import egress

        return egress.current() is not None

    def list_tools(self) -> list[Any]:
        self.discovered = None
        return self._exchange(_all_tools)

    def call_tool(self, name: str, input: dict[str, Any], meta: dict[str, Any] | None) -> Any:
        return self._exchange(lambda client: client.call_tool(name, input, meta=meta))

    def close(self) -> None:
        pass

    def _exchange(self, use: Callable[[Any], Awaitable[Any]]) -> Any:
        from wakeful.agent import egress

        current = egress.current()
        if current is None:
            raise egress.EgressError(0, f"no egress grant for route {self.server.route!r}: the runtime did not set "
                                        "one (agent.egress.using) for this run or effect")
        url = f"{current.proxy_url}/{self.server.route}{self.server.path}"
        refusal = Refusal()
        try:
            return _LOOP.run(lambda: _over_http(url, current.grant, self.server.timeout, refusal, use, self),
                             self.server.timeout + 5)
        except Exception as exc:  # sorted: an outage, a refusal, the server's error
            self.discovered = None  # the next exchange negotiates again
            raise failure(self.server, exc, refusal) from None


async def _over_http(url: str, grant: str, timeout: float, refusal: Refusal,
                     use: Callable[[Any], Awaitable[Any]], connection: HttpConnection) -> Any:
    import httpx2
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client

    from wakeful.agent.egress import GRANT_HEADER

    async def keep(response: Any) -> None:
        if response.is_success or refusal.status:
            return
        await response.aread()
        refusal.status, refusal.outcome = response.status_code, response.headers.get("x-wakeful-refused", "")
        refusal.reason, refusal.after = _reason(response), retry_after(response.headers)
        refusal.method = _method(response.request)

    async with httpx2.AsyncClient(headers={GRANT_HEADER: grant}, timeout=httpx2.Timeout(timeout),
                                  trust_env=False, event_hooks={"response": [keep]}) as http:
        known = connection.discovered
        mode = known.supported_versions[0] if known is not None else "auto"
        async with Client(streamable_http_client(url, http_client=http), read_timeout_seconds=timeout,
                          cache=None, mode=mode, prior_discover=known) as client:
            if known is None and client.session.discover_result is not None:
                found = client.session.discover_result
                connection.discovered = found.model_copy(update={"supported_versions": [client.protocol_version]})
            return await use(client)


def failure(server: Server, exc: BaseException, refusal: Refusal | None = None) -> Exception:
    """What a failed exchange means. An outage (``Unavailable``, a ``TryLater``: the proxy, the
    server or its process away, 429, 5xx, a timeout; ``maybe_done`` unless nothing can have
    been sent); a refusal (the proxy's 403 ``fenced``, any other 4xx: the tool's error, with
    the reason); or the server's own JSON-RPC error (the tool's error, with its text)."""
    from mcp_types import CONNECTION_CLOSED, REQUEST_TIMEOUT

    from wakeful.agent.egress import EgressError, Unavailable

    where = f"MCP server {server.name!r}"
    if refusal is not None and refusal.status:
        reason = f"{where}: {refusal.reason or 'HTTP ' + str(refusal.status)}"
        if not is_transient(refusal.status):
            return EgressError(refusal.status, reason, refusal.outcome)
        sent = refusal.method == "tools/call" and refusal.outcome != "upstream_down"
        return Unavailable(refusal.status, reason, refusal.outcome, after=refusal.after,
                           maybe_done=sent and refusal.status not in NOT_ACTED_ON)
    leaf = _leaf(exc)
    name = type(leaf).__name__
    if name == "MCPError" and getattr(leaf, "code", None) not in (REQUEST_TIMEOUT, CONNECTION_CLOSED):
        return MCPToolError(f"{where}: {str(getattr(leaf, 'message', leaf))[:500]}")
    spawn = isinstance(leaf, OSError) and not isinstance(leaf, TimeoutError) and refusal is None
    if name == "ConnectError" or spawn:  # nothing can have reached the server
        return Unavailable(0, f"{where}: cannot be reached or started ({name}: {str(leaf)[:200]})")
    return Unavailable(0, f"{where}: the exchange broke off ({name}: {str(leaf)[:200]})", maybe_done=True)


class StdioConnection:
    """A server process of this worker process, started on first use and kept; started again
    after it exits. Its environment is the table's ``env`` and ``pass_env`` only."""

    def __init__(self, server: Server) -> None:
        self.server = server
        self._client: Any = None
        self._closing: asyncio.Event | None = None
        self._starting: asyncio.Lock | None = None
        _CONNECTIONS.append(self)

    def can_list(self) -> bool:
        return True

    def list_tools(self) -> list[Any]:
        return self._exchange(_all_tools)

    def call_tool(self, name: str, input: dict[str, Any], meta: dict[str, Any] | None) -> Any:
        return self._exchange(lambda client: client.call_tool(name, input, meta=meta))

    def forked(self) -> None:
        self._client = self._closing = self._starting = None  # the parent's process stays the parent's

    def close(self) -> None:
        if self._closing is not None and self._client is not None:
            closing = self._closing
            _LOOP.run(lambda: _set(closing), 10)

    def _exchange(self, use: Callable[[Any], Awaitable[Any]]) -> Any:
        try:
            return _LOOP.run(lambda: self._use(use), self.server.timeout + 5)
        except Exception as exc:  # sorted: the process away (an outage), the server's error
            raise failure(self.server, exc) from None

    async def _use(self, use: Callable[[Any], Awaitable[Any]]) -> Any:
        client = await self._client_now()
        return await use(client)

    async def _client_now(self) -> Any:
        if self._starting is None:
            self._starting = asyncio.Lock()
        async with self._starting:
            if self._client is None:
                ready: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
                self._closing = asyncio.Event()
                asyncio.get_running_loop().create_task(self._hold(ready, self._closing))
                await ready
            return self._client

    async def _hold(self, ready: asyncio.Future[Any], closing: asyncio.Event) -> None:
        """Enter the client, keep it open until closed or broken (the SDK's task groups must be
        left by the task that entered them)."""
        from mcp import Client, StdioServerParameters
        from mcp.client.stdio import stdio_client

        s = self.server
        closed_to_same_user()
        params = _stdio_parameters(s)
        errlog = open(os.devnull, "w") if s.stderr == "discard" else None  # noqa: SIM115 - closed below
        try:
            transport = stdio_client(params, errlog=errlog) if errlog else stdio_client(params)
            async with Client(transport, read_timeout_seconds=s.timeout, cache=None) as client:
                self._client = client
                ready.set_result(client)
                await closing.wait()
        except BaseException as exc:  # noqa: BLE001 - the caller hears it; the next use starts it again
            if not ready.done():
                ready.set_exception(exc if isinstance(exc, Exception) else RuntimeError(repr(exc)))
            else:
                log.warning("%s: the server process ended (%s)", s.table, type(_leaf(exc)).__name__)
        finally:
            self._client = None
            if errlog:
                errlog.close()


LISTING_FAILED = "%s: listing its tools failed (%s: %s); %s"


def _stdio_parameters(s: Server) -> Any:
    """How a stdio server is started: its command, and only the table's ``env`` and
    ``pass_env`` names for its environment."""
    from mcp import StdioServerParameters

    env = {**s.env, **{k: os.environ[k] for k in s.pass_env if k in os.environ}}
    return StdioServerParameters(command=s.command or "", args=list(s.args), env=env, cwd=s.cwd)


def startable(source: Any) -> str | None:
    """For ``wakeful check``: whether an MCP source's stdio server starts and lists its tools
    (None), or one line why not, with the last line the server wrote to stderr (a missing
    script's "No such file"). A server over HTTP is reached through the proxy under a run's
    grant, so it is not started here (None)."""
    if not isinstance(source, MCPSource) or source.server.route:
        return None
    from mcp import Client
    from mcp.client.stdio import stdio_client

    s = source.server

    async def list_once(errlog: Any) -> None:
        async with Client(stdio_client(_stdio_parameters(s), errlog=errlog), read_timeout_seconds=s.timeout,
                          cache=None) as client:
            await _all_tools(client)

    with tempfile.TemporaryFile("w+", encoding="utf-8", errors="replace") as errlog:
        try:
            asyncio.run(asyncio.wait_for(list_once(errlog), s.timeout + 5))
            return None
        except Exception as exc:  # noqa: BLE001 - whatever stopped it, said in one line
            errlog.seek(0)
            said = [line.strip() for line in errlog.read().splitlines() if line.strip()]
            leaf = _leaf(exc)
            why = said[-1] if said else f"{type(leaf).__name__}: {leaf}"
            return f"{s.table}: the server did not start and list its tools ({why[:300]})"


async def _all_tools(client: Any) -> list[Any]:
    tools, cursor = [], None
    for _ in range(20):  # pages; a paginator that never ends cannot hang a listing
        page = await client.list_tools(cursor=cursor)
        tools.extend(page.tools)
        cursor = page.next_cursor
        if not cursor or len(tools) >= TOOLS_MAX:
            break
    return tools


async def _set(event: asyncio.Event) -> None:
    event.set()


def _leaf(exc: BaseException) -> BaseException:
    """The first exception inside (nested) exception groups."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return exc


def _method(request: Any) -> str:
    try:
        body = json.loads(request.content or b"{}")
    except (ValueError, TypeError, RuntimeError):
        return ""
    return str(body.get("method", "")) if isinstance(body, dict) else ""


def _reason(response: Any) -> str:
    try:
        body = response.json()
        message = body.get("error", {}).get("message") if isinstance(body, dict) else None
        if isinstance(message, str) and message:
            return message[:500]
    except (ValueError, AttributeError):
        pass
    return (response.text or response.reason_phrase or "")[:500]


register_table("mcp", parse)
