"""The built-in agent's configuration: a TOML file named by ``WAKEFUL_AGENT_CONFIG``.

``[agent]`` says which model and how (``model``, ``system``, ``max_tokens``,
``max_model_calls``, ``trusted_sources`` ...); one ``[tools.NAME]`` table per tool says what
the model may call and what the runtime does with it (``policy``, ``effect``, ``delivery``,
``trusted_output`` ...). Trust is granted here, never assumed (DESIGN.md section 11): an event
of a source not named in ``trusted_sources``, and the answer of a tool not declared
``trusted_output``, are data that make writes wait for a human's yes. ``[routes.*]`` tables
belong to the egress proxy and are not read here.

Everything is checked when the file is loaded (a worker's start, ``wakeful check``): an
unknown key or policy, a ``call`` that does not import, an invalid JSON Schema, a tool with no
way to run. The error names the file and the tool. See docs/agent.md for every key.
"""

from __future__ import annotations

import importlib
import os
import re
import tomllib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import jsonschema

from store.tables import HOOK_KINDS
from store.validate import RUNTIME_SOURCES

from agent import import_callable

ENV = "WAKEFUL_AGENT_CONFIG"
POLICIES = ("allow", "deny", "ask")
EFFECTS = ("read", "write")
DELIVERIES = {"at_least_once": "at-least-once", "at_most_once": "at-most-once"}
# The tools the runtime itself offers the model (agent/claude.py): a config may not reuse them.
RUNTIME_TOOLS = ("stay_silent", "mark_urgent")
_TOOL_NAME = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")  # what the Messages API accepts

_AGENT_KEYS = {"model", "system", "max_tokens", "max_model_calls", "trusted_sources", "timeout",
               "max_retries", "conversation_budget", "effect_timeout", "approver"}
_TOOL_KEYS = {"call", "routes", "route", "method", "path", "policy", "effect", "description", "input_schema",
              "approval_ttl", "delivery", "trusted_output", "approver"}


class ConfigError(ValueError):
    """The agent's configuration is wrong; the message names the file and the tool."""


@dataclass(frozen=True)
class Tool:
    name: str
    policy: str  # allow, deny or ask
    effect: str  # read (runs inline, may run again after a crash) or write (after the commit)
    description: str
    input_schema: dict[str, Any]
    delivery: str = "at-least-once"
    approval_ttl: int = 3600
    call: str | None = None  # "module:callable"
    route: str | None = None  # an HTTP tool through the egress proxy (agent/egress.py)
    method: str = "GET"
    path: str = "/"
    routes: tuple[str, ...] = ()  # the routes a Python tool reaches with call.http(route)
    # Its answers reach the model as the owner's words (not data, no taint): declared only
    # for a tool whose output no outsider can write.
    trusted_output: bool = False
    # Who gets an ask's link (store/approvals.py): None takes [agent] approver.
    approver: str | None = None

    @property
    def grant_routes(self) -> tuple[str, ...]:
        """The egress routes a grant for this tool must cover."""
        return (self.route,) if self.route else self.routes

    def function(self) -> Callable[..., Any]:
        assert self.call is not None
        return import_callable(self.call)


@dataclass(frozen=True)
class AgentConfig:
    path: str
    model: str
    system: str = ""
    max_tokens: int = 1024
    # Model calls one run may make (a tool loop that never ends costs money, not just time).
    max_model_calls: int = 8
    # The event sources whose text is the owner's; every other source's is data (and taints).
    trusted_sources: tuple[str, ...] = ()
    # The SDK's timeout per request (seconds) and its retries: the lease keeper renews the
    # lease meanwhile, and the run's time limit bounds the whole.
    timeout: float = 60.0
    max_retries: int = 2
    # Size of the stored conversation (characters of its JSON); older turns go past it.
    conversation_budget: int = 60_000
    # An executing effect whose executor has been silent this long is taken again
    # (at-least-once) or reported interrupted (at-most-once).
    effect_timeout: int = 300
    # Who gets the link of an ask: "self" (the inbox's own user), "inbox:NAME" or "channel:NAME".
    approver: str = "self"
    tools: dict[str, Tool] = field(default_factory=dict)
    # The names of the [routes.*] tables (the egress proxy's; their contents are not read
    # here): with "anthropic" among them the model is reached through the proxy.
    routes: tuple[str, ...] = ()

    def run_routes(self) -> list[str]:
        """What a run's own grant covers: the model's route and the routes of the tools that
        run inline (allowed reads). A write's routes are granted to its effect alone, after
        the commit (and the yes), so nothing in a run can reach them."""
        inline = {r for t in self.tools.values() if t.policy == "allow" and t.effect == "read"
                  for r in t.grant_routes}
        return sorted(inline | ({"anthropic"} & set(self.routes)))

    def trusted_webhook_sources(self) -> list[str]:
        """Trusted sources the web edge ingests under: whoever can get a signed webhook sent
        (a stranger's comment on GitHub, a customer's payment note) speaks as the owner."""
        return [s for s in self.trusted_sources if s in HOOK_KINDS]


def load(path: str | os.PathLike[str] | None = None) -> AgentConfig:
    """Read and check the file (``WAKEFUL_AGENT_CONFIG`` by default)."""
    path = str(path or os.environ.get(ENV) or "")
    if not path:
        raise ConfigError(f"{ENV} is not set: the claude agent needs a TOML config (see docs/agent.md)")
    try:
        raw = tomllib.loads(Path(path).read_text(encoding="utf-8"))
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read the agent config ({exc.strerror})") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: not valid TOML ({exc})") from None
    return parse(raw, path)


def parse(raw: dict[str, Any], path: str = "<config>") -> AgentConfig:
    unknown = set(raw) - {"agent", "tools", "routes"}
    if unknown:
        raise ConfigError(f"{path}: unknown table(s) {', '.join(sorted(unknown))}")
    agent = raw.get("agent")
    if not isinstance(agent, dict):
        raise ConfigError(f"{path}: an [agent] table with at least `model` is required")
    if "untrusted_sources" in agent:  # read silently, it would leave every other source trusted
        raise ConfigError(f"{path}: [agent] untrusted_sources is gone: every source is untrusted unless "
                          "named; write trusted_sources = [...] with the sources whose text is yours")
    _no_unknown_keys(path, "[agent]", agent, _AGENT_KEYS)
    values: dict[str, Any] = {"path": path}
    values["model"] = _text(path, "[agent]", agent, "model", required=True)
    values["system"] = _text(path, "[agent]", agent, "system", default="")
    for key in ("max_tokens", "max_model_calls", "conversation_budget", "effect_timeout"):
        if key in agent:
            values[key] = _positive_int(path, "[agent]", key, agent[key])
    if "max_retries" in agent:
        retries = agent["max_retries"]
        if not isinstance(retries, int) or isinstance(retries, bool) or retries < 0:
            raise ConfigError(f"{path}: [agent] max_retries must be a whole number >= 0")
        values["max_retries"] = retries
    if "timeout" in agent:
        timeout = agent["timeout"]
        if not isinstance(timeout, int | float) or isinstance(timeout, bool) or timeout <= 0:
            raise ConfigError(f"{path}: [agent] timeout must be a positive number of seconds")
        values["timeout"] = float(timeout)
    values["trusted_sources"] = _trusted_sources(path, agent.get("trusted_sources", []))
    values["approver"] = _approver(path, "[agent]", agent.get("approver", "self"))
    tools = raw.get("tools", {})
    if not isinstance(tools, dict):
        raise ConfigError(f"{path}: [tools] must hold one [tools.NAME] table per tool")
    values["tools"] = {name: _tool(path, name, spec) for name, spec in tools.items()}
    routes = raw.get("routes", {})
    values["routes"] = tuple(sorted(routes)) if isinstance(routes, dict) else ()
    for tool in values["tools"].values():
        unknown_routes = set(tool.grant_routes) - set(values["routes"])
        if unknown_routes:
            raise ConfigError(f"{path}: [tools.{tool.name}]: no [routes.{sorted(unknown_routes)[0]}] table for it")
    return AgentConfig(**values)


def _trusted_sources(path: str, sources: Any) -> tuple[str, ...]:
    if not isinstance(sources, list) or not all(isinstance(s, str) and s for s in sources):
        raise ConfigError(f"{path}: [agent] trusted_sources must be a list of source names")
    answers = sorted(set(sources) & (RUNTIME_SOURCES - {"timer"}))  # a timer's text is an event's
    if answers:
        raise ConfigError(f"{path}: [agent] trusted_sources: {answers[0]!r} carries tool results and "
                          "answers, never an event's text; trust a tool's answers with "
                          "trusted_output = true on its [tools.NAME]")
    return tuple(sources)


def _tool(path: str, name: str, spec: Any) -> Tool:
    where = f"[tools.{name}]"
    if not isinstance(spec, dict):
        raise ConfigError(f"{path}: {where} must be a table")
    if not _TOOL_NAME.match(name):
        raise ConfigError(f"{path}: {where}: a tool name is 1-64 letters, digits, _ or -")
    if name in RUNTIME_TOOLS:
        raise ConfigError(f"{path}: {where}: {name!r} is a tool the runtime offers itself")
    _no_unknown_keys(path, where, spec, _TOOL_KEYS)
    policy = spec.get("policy")
    if policy not in POLICIES:
        raise ConfigError(f"{path}: {where}: policy must be one of {', '.join(POLICIES)}, got {policy!r}")
    effect = spec.get("effect", "write")
    if effect not in EFFECTS:
        raise ConfigError(f"{path}: {where}: effect must be read or write, got {effect!r}")
    delivery = spec.get("delivery", "at_least_once")
    if delivery not in DELIVERIES:
        raise ConfigError(f"{path}: {where}: delivery must be at_least_once or at_most_once, got {delivery!r}")
    schema = spec.get("input_schema", {"type": "object"})
    if not isinstance(schema, dict) or schema.get("type") != "object":
        raise ConfigError(f"{path}: {where}: input_schema must be a JSON Schema of type object")
    try:
        jsonschema.Draft202012Validator.check_schema(schema)
    except jsonschema.SchemaError as exc:
        raise ConfigError(f"{path}: {where}: input_schema is not a valid JSON Schema: {exc.message}") from None
    ttl = _positive_int(path, where, "approval_ttl", spec.get("approval_ttl", 3600))
    trusted_output = spec.get("trusted_output", False)
    if not isinstance(trusted_output, bool):
        raise ConfigError(f"{path}: {where}: trusted_output must be true or false")
    tool = Tool(name=name, policy=policy, effect=effect, delivery=DELIVERIES[delivery], approval_ttl=ttl,
                description=_text(path, where, spec, "description", default=""), input_schema=schema,
                call=spec.get("call"), route=spec.get("route"), method=str(spec.get("method", "GET")).upper(),
                path=str(spec.get("path", "/")), routes=_route_names(path, where, spec),
                trusted_output=trusted_output,
                approver=_approver(path, where, spec["approver"]) if "approver" in spec else None)
    _check_runnable(path, where, tool)
    return tool


def _approver(path: str, where: str, value: Any) -> str:
    from store.approvals import approver

    try:
        return approver(value)
    except ValueError as exc:
        raise ConfigError(f"{path}: {where}: {exc}") from None


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
            importlib.import_module("agent.egress")
        except ImportError:
            raise ConfigError(f"{path}: {where}: route {tool.route!r} needs the egress client "
                              "(agent/egress.py), which this installation lacks") from None
    elif tool.policy != "deny":
        raise ConfigError(f"{path}: {where}: no way to run it: give call = \"module:callable\" "
                          "or route/method/path")


def _no_unknown_keys(path: str, where: str, table: dict[str, Any], known: set[str]) -> None:
    unknown = set(table) - known
    if unknown:
        raise ConfigError(f"{path}: {where}: unknown key(s) {', '.join(sorted(unknown))}")


def _text(path: str, where: str, table: dict[str, Any], key: str, required: bool = False,
          default: str = "") -> str:
    if key not in table:
        if required:
            raise ConfigError(f"{path}: {where}: `{key}` is required")
        return default
    value = table[key]
    if not isinstance(value, str) or (required and not value.strip()):
        raise ConfigError(f"{path}: {where}: `{key}` must be a{' non-empty' if required else ''} string")
    return value


def _positive_int(path: str, where: str, key: str, value: Any) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
        raise ConfigError(f"{path}: {where}: {key} must be a positive whole number, got {value!r}")
    return value
