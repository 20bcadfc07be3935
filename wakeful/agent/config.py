"""The built-in agent's configuration: a TOML file named by ``WAKEFUL_AGENT_CONFIG``.

``[agent]`` says which model and how (``model``, ``system``, ``max_tokens``,
``max_model_calls``, ``trusted_sources`` ...); one ``[tools.NAME]`` table per tool says what
the model may call and what the runtime does with it (``policy``, ``effect``, ``delivery``,
``trusted_output`` ...). Tools come from sources (wakeful/agent/sources.py), one table kind per
source kind: ``[tools.NAME]`` (a Python callable or an HTTP route, wakeful/agent/tools.py),
``[mcp.NAME]``, ``[wakes]``. ``[limits]`` bounds what one run may ask for, whatever the loop.
Trust is granted here, never assumed (docs/design.md section 11): an event
of a source not named in ``trusted_sources``, and the answer of a tool not declared
``trusted_output``, are data that make writes wait for a human's yes. ``[routes.*]`` tables
belong to the egress proxy and are not read here.

Everything is checked when the file is loaded (a worker's start, ``wakeful check``): an
unknown key or policy, a ``call`` that does not import, an invalid JSON Schema, a tool with no
way to run, two tables declaring one tool name. The error names the file and the table.
See docs/agent.md for every key. ``[agent]`` is the built-in claude agent's; a config read
only for its tools (by the tool kit of another agent, wakeful/agent/kit.py) may leave it out.
"""

from __future__ import annotations

import os
import re
import threading
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import jsonschema

from wakeful.settings import agent_config_path, read_toml
from store.tables import HOOK_KINDS
from store.validate import RUNTIME_SOURCES

from store.spend import Budget

from wakeful.agent import budgets
from wakeful.agent.loading import BUILTIN, builtin, importable_from
from wakeful.agent.sources import ToolSource, parser_for, table_of
from wakeful.agent.tool import Tool

ENV = "WAKEFUL_AGENT_CONFIG"
POLICIES = ("allow", "deny", "ask")
EFFECTS = ("read", "write")
DELIVERIES = {"at_least_once": "at-least-once", "at_most_once": "at-most-once"}
# A run's egress grant (the model's route, inline reads' routes) outlives no run: the lease
# ends it at a takeover, this bounds it otherwise (WAKEFUL_RUN_TIME_LIMIT defaults to 600 s).
RUN_GRANT_TTL = 900
# The tools the runtime itself offers the model (wakeful/agent/claude.py): a config may not reuse them.
RUNTIME_TOOLS = ("stay_silent", "mark_urgent")
# The [wakes] tools (wakeful/agent/wakes.py): the runtime's too, never another source's.
WAKES_TOOLS = ("schedule_wake", "cancel_wake", "list_wakes")
# Names no source but the runtime's may take, with or without a [wakes] table, in a first
# listing or a later one: a source taking one would switch the runtime's tool off.
RESERVED_NAMES = frozenset(RUNTIME_TOOLS + WAKES_TOOLS)
TOOL_NAME = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")  # what the Messages API accepts

_AGENT_KEYS = {"model", "system", "max_tokens", "max_model_calls", "trusted_sources", "timeout",
               "max_retries", "conversation_budget", "effect_timeout", "approver"}
# What every tool's table may say, whatever its source (tool_settings below).
TOOL_SETTINGS = {"policy", "effect", "description", "input_schema", "approval_ttl", "delivery", "trusted_output",
                 "approver"}


class ConfigError(ValueError):
    """The agent's configuration is wrong; the message names the file and the tool."""


@dataclass(frozen=True)
class RunLimits:
    """``[limits]``: what one run may ask for, in every loop (wakeful/agent/policy.py counts).
    One input is all a stranger needs: a comment holding 40 ``call`` lines once raised 40
    approvals, and sent 40 signed links, from one event."""

    # Tool uses one run may make: eight model calls (max_model_calls) of four tools each; a
    # run that needs more is rare, a flood from one input is not.
    tool_uses_per_run: int = 32
    # Approvals one run may request: each is a signed link sent to a human, and a human
    # asked more than five things at once stops reading them.
    approvals_per_run: int = 5


_LIMITS_KEYS = {"tool_uses_per_run", "approvals_per_run"}


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
    # Every tool source of the config, by name (wakeful/agent/sources.py), in the file's order.
    sources: dict[str, ToolSource] = field(default_factory=dict)
    # The names of the [routes.*] tables (the egress proxy's; their contents are not read
    # here): with "anthropic" among them the model is reached through the proxy.
    routes: tuple[str, ...] = ()
    # [budget]: daily ceilings and prices (wakeful/agent/budgets.py, store/spend.py).
    budget: Budget = field(default_factory=budgets.default)
    # [limits]: what one run may ask for (tool uses, approvals).
    limits: RunLimits = field(default_factory=RunLimits)

    @property
    def tools(self) -> dict[str, Tool]:
        """Every tool the sources offer now, by name: the one view the policy, the offered
        list, the loops and the executor read. Names are unique (checked at load; a name a
        source lists later that another already has is left to the first)."""
        tools: dict[str, Tool] = {}
        for source in self.sources.values():
            for tool in source.tools():
                tools.setdefault(tool.name, tool)
        return tools

    def source_of(self, tool: Tool) -> ToolSource | None:
        return self.sources.get(tool.source)

    def offered_taint(self, offered: Iterable[dict[str, Any]]) -> list[str]:
        """What offering these tools (``policy.offered``'s specs) taints the conversation with:
        for each tool whose source took its definition from outside the config, what the source
        says (``definition_taint(tool)``; a source without one wrote its tools' text itself),
        each once. A loop taints with it where it offers the tools, before the model reads them."""
        taints: list[str] = []
        for spec in offered:
            tool = self.tools.get(spec["name"])
            said = getattr(self.source_of(tool), "definition_taint", None) if tool is not None else None
            taint = said(tool) if callable(said) else None
            if taint and taint not in taints:
                taints.append(taint)
        return taints

    def run_routes(self) -> list[str]:
        """What a run's own grant covers: the model's route and the routes of the tools that
        run inline (allowed reads). A write's routes are granted to its effect alone, after
        the commit (and the yes), so nothing in a run can reach them."""
        inline = {r for t in self.tools.values() if t.policy == "allow" and t.effect == "read"
                  for r in t.grant_routes}
        return sorted(inline | set(self.listing_routes()) | ({"anthropic"} & set(self.routes)))

    def listing_routes(self) -> list[str]:
        """The routes sources list their tools through (an MCP server's: wakeful/agent/mcp.py): a run
        that tells a model its tools needs a grant for them."""
        return sorted({r for s in self.sources.values() for r in getattr(s, "run_routes", ())})

    def trusted_webhook_sources(self) -> list[str]:
        """Trusted sources the web edge ingests under: whoever can get a signed webhook sent
        (a stranger's comment on GitHub, a customer's payment note) speaks as the owner."""
        return [s for s in self.trusted_sources if s in HOOK_KINDS]


def load(path: str | os.PathLike[str] | None = None) -> AgentConfig:
    """Read and check the file (``WAKEFUL_AGENT_CONFIG`` by default)."""
    path = str(path or agent_config_path())
    if not path:
        raise ConfigError(f"{ENV} is not set: the claude agent and the tool kit read a TOML config (see docs/agent.md)")
    raw = read_toml(path, ConfigError)
    importable_from(Path(path).parent, os.getcwd())  # call = "mytools:fn" next to the config
    return parse(raw, path)


_lock = threading.Lock()
_current: AgentConfig | None = None


def current(required: bool = True) -> AgentConfig | None:
    """This process's config (``WAKEFUL_AGENT_CONFIG``), loaded and checked once: what the
    claude agent, the tool kit of any other agent (wakeful/agent/kit.py) and the effect executor
    read. None when the variable is not set and ``required`` is false."""
    global _current
    with _lock:
        if _current is None:
            if not required and not agent_config_path():
                return None
            _current = load()
        return _current


def for_worker(agent_spec: str) -> AgentConfig | None:
    """What a worker hosting ``agent_spec`` (``WAKEFUL_AGENT``) loads at its start: the config
    the claude agent requires, or any other agent's tools when ``WAKEFUL_AGENT_CONFIG`` is set
    (its tool kit and the effect executor read them)."""
    claude = builtin(agent_spec) == BUILTIN["claude"]
    cfg = current(required=claude)
    if cfg is not None and not cfg.model and claude:
        raise ConfigError(f"{cfg.path}: the claude agent needs an [agent] table with `model`")
    return cfg


def parse(raw: dict[str, Any], path: str = "<config>") -> AgentConfig:
    kinds = [k for k in raw if k not in ("agent", "routes", "budget", "limits")]
    unknown = [k for k in kinds if parser_for(k) is None]
    if unknown:
        raise ConfigError(f"{path}: unknown table(s) {', '.join(sorted(unknown))}")
    values = _agent_values(path, raw.get("agent"))
    routes = raw.get("routes", {})
    values["routes"] = tuple(sorted(routes)) if isinstance(routes, dict) else ()
    values["sources"] = _sources(path, kinds, raw, values["routes"])
    try:
        values["budget"] = budgets.parse(path, raw.get("budget"), values["model"])
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    values["limits"] = _limits(path, raw.get("limits"))
    return AgentConfig(**values)


def _limits(path: str, table: Any) -> RunLimits:
    """The ``[limits]`` table; left out, the defaults."""
    if table is None:
        return RunLimits()
    if not isinstance(table, dict):
        raise ConfigError(f"{path}: [limits] must be a table (tool_uses_per_run, approvals_per_run)")
    no_unknown_keys(path, "[limits]", table, _LIMITS_KEYS)
    return RunLimits(**{k: positive_int(path, "[limits]", k, v) for k, v in table.items()})


def _agent_values(path: str, agent: Any) -> dict[str, Any]:
    """The ``[agent]`` table: the claude agent's. Left out, the config is only tools (for the
    tool kit of another agent); the claude agent refuses it for want of a model."""
    if agent is None:
        return {"path": path, "model": ""}
    if not isinstance(agent, dict):
        raise ConfigError(f"{path}: [agent] must be a table with at least `model`")
    if "untrusted_sources" in agent:  # read silently, it would leave every other source trusted
        raise ConfigError(f"{path}: [agent] untrusted_sources is gone: every source is untrusted unless "
                          "named; write trusted_sources = [...] with the sources whose text is yours")
    no_unknown_keys(path, "[agent]", agent, _AGENT_KEYS)
    values: dict[str, Any] = {"path": path}
    values["model"] = text(path, "[agent]", agent, "model", required=True)
    values["system"] = text(path, "[agent]", agent, "system", default="")
    for key in ("max_tokens", "max_model_calls", "conversation_budget", "effect_timeout"):
        if key in agent:
            values[key] = positive_int(path, "[agent]", key, agent[key])
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
    return values


def _sources(path: str, kinds: list[str], raw: dict[str, Any], routes: tuple[str, ...]) -> dict[str, ToolSource]:
    """Each table kind's sources, in the file's order; tool names unique across them."""
    sources: dict[str, ToolSource] = {}
    declared: dict[str, str] = {}  # tool name -> the table that declares it
    for kind in kinds:
        parse_table = parser_for(kind)
        assert parse_table is not None
        for source in parse_table(path, raw[kind]):
            if source.name in sources:
                raise ConfigError(f"{path}: [{kind}]: a second tool source named {source.name!r}")
            sources[source.name] = source
            for tool in source.tools():
                where = table_of(source, tool)
                if tool.name in declared:
                    raise ConfigError(f"{path}: {declared[tool.name]} and {where} both declare a tool "
                                      f"named {tool.name!r}; tool names are unique")
                if tool.name in RESERVED_NAMES and source.name != "wakes":
                    raise ConfigError(f"{path}: {where}: {tool.name!r} is a tool the runtime offers itself")
                missing = sorted(set(tool.grant_routes) - set(routes))
                if missing:
                    raise ConfigError(f"{path}: {where}: no [routes.{missing[0]}] table for it")
                declared[tool.name] = where
    return sources


def _trusted_sources(path: str, sources: Any) -> tuple[str, ...]:
    if not isinstance(sources, list) or not all(isinstance(s, str) and s for s in sources):
        raise ConfigError(f"{path}: [agent] trusted_sources must be a list of source names")
    answers = sorted(set(sources) & (RUNTIME_SOURCES - {"timer"}))  # a timer's text is an event's
    if answers:
        raise ConfigError(f"{path}: [agent] trusted_sources: {answers[0]!r} carries tool results and "
                          "answers, never an event's text; trust a tool's answers with "
                          "trusted_output = true on its [tools.NAME]")
    return tuple(sources)


def tool_settings(path: str, where: str, spec: dict[str, Any], default_policy: str | None = None,
                  default_effect: str = "write") -> dict[str, Any]:
    """What every tool's table says whatever its source (``TOOL_SETTINGS``), checked, as
    ``Tool`` fields; ``where`` names the table in errors. A source kind with a default per
    server passes it as ``default_policy`` / ``default_effect``."""
    policy = spec.get("policy", default_policy)
    if policy not in POLICIES:
        raise ConfigError(f"{path}: {where}: policy must be one of {', '.join(POLICIES)}, got {policy!r}")
    effect = spec.get("effect", default_effect)
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
    ttl = positive_int(path, where, "approval_ttl", spec.get("approval_ttl", 3600))
    trusted_output = spec.get("trusted_output", False)
    if not isinstance(trusted_output, bool):
        raise ConfigError(f"{path}: {where}: trusted_output must be true or false")
    settings = {"policy": policy, "effect": effect, "delivery": DELIVERIES[delivery], "approval_ttl": ttl,
                "description": text(path, where, spec, "description", default=""), "input_schema": schema,
                "trusted_output": trusted_output}
    if "approver" in spec:
        settings["approver"] = _approver(path, where, spec["approver"])
    return settings


def _approver(path: str, where: str, value: Any) -> str:
    from store.approvals import approver

    try:
        return approver(value)
    except ValueError as exc:
        raise ConfigError(f"{path}: {where}: {exc}") from None


def checked_table(path: str, where: str, spec: Any, known: set[str], name: str | None = None,
                  named: str = "a tool name") -> dict[str, Any]:
    """``spec`` as one config table: a table, with only ``known`` keys and, given a ``name``,
    a name the Messages API accepts (``named`` says what it names)."""
    if not isinstance(spec, dict):
        raise ConfigError(f"{path}: {where} must be a table")
    if name is not None and not TOOL_NAME.match(name):
        raise ConfigError(f"{path}: {where}: {named} is 1-64 letters, digits, _ or -")
    no_unknown_keys(path, where, spec, known)
    return spec


def no_unknown_keys(path: str, where: str, table: dict[str, Any], known: set[str]) -> None:
    unknown = set(table) - known
    if unknown:
        raise ConfigError(f"{path}: {where}: unknown key(s) {', '.join(sorted(unknown))}")


def text(path: str, where: str, table: dict[str, Any], key: str, required: bool = False,
          default: str = "") -> str:
    if key not in table:
        if required:
            raise ConfigError(f"{path}: {where}: `{key}` is required")
        return default
    value = table[key]
    if not isinstance(value, str) or (required and not value.strip()):
        raise ConfigError(f"{path}: {where}: `{key}` must be a{' non-empty' if required else ''} string")
    return value


def positive_int(path: str, where: str, key: str, value: Any) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
        raise ConfigError(f"{path}: {where}: {key} must be a positive whole number, got {value!r}")
    return value
