"""The tool source interface (wakeful/agent/sources.py): a table kind registers a parser, its tools
join the one view the policy and the executor read, a tool runs through its source, and a
name two tables declare is refused naming both."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from wakeful.agent import policy
from wakeful.agent.config import ConfigError, load, tool_settings
from wakeful.agent.sources import ToolSource, register_table
from wakeful.agent.tool import Tool, ToolCall
from wakeful.agent.tools import run
from agent_support import write_config


class EchoSource:
    """A source kind of the tests' own: ``[echo]`` with ``tools = [names]``, each a read."""

    name = "echo"

    def __init__(self, tools: list[Tool]) -> None:
        self._tools = tools
        self.calls: list[tuple[str, dict[str, Any], str]] = []

    def tools(self) -> list[Tool]:
        return self._tools

    def call(self, tool: Tool, input: dict[str, Any], call: ToolCall) -> Any:
        self.calls.append((tool.name, input, call.idempotency_key))
        if input.get("fail"):
            raise RuntimeError("the echo broke")
        return {"echo": input}


def parse_echo(path: str, table: Any) -> list[ToolSource]:
    if not isinstance(table, dict) or not isinstance(table.get("tools"), list):
        raise ConfigError(f"{path}: [echo]: tools must be a list of names")
    settings = tool_settings(path, "[echo]", {k: v for k, v in table.items() if k != "tools"},
                             default_policy="allow", default_effect="read")
    return [EchoSource([Tool(name=n, source="echo", **settings) for n in table["tools"]])]


register_table("echo", parse_echo)


def test_a_registered_kind_joins_the_one_view_and_runs_through_its_source(tmp_path: Path) -> None:
    path = write_config(tmp_path / "a.toml")
    path.write_text(path.read_text() + '\n[echo]\ntools = ["shout"]\n')
    cfg = load(path)
    assert cfg.tools["shout"].source == "echo" and cfg.tools["lookup"].source == "python"
    assert set(cfg.sources) == {"python", "http", "echo"}
    assert "shout" in [t["name"] for t in policy.offered(cfg)]
    assert policy.decide(cfg, "shout", {"a": 1}, ()).kind == "inline"
    call = ToolCall("toolu_1", "shout", "inbox-a", "key-1")
    assert run(cfg.tools["shout"], {"a": 1}, call, cfg) == {"content": '{"echo": {"a": 1}}', "is_error": False}
    failed = run(cfg.tools["shout"], {"fail": True}, call, cfg)
    assert failed["is_error"] and "RuntimeError: the echo broke" in failed["content"]
    source = cfg.sources["echo"]
    assert isinstance(source, EchoSource) and source.calls[0] == ("shout", {"a": 1}, "key-1")


def test_a_tool_name_two_tables_declare_is_refused_naming_both(tmp_path: Path) -> None:
    path = write_config(tmp_path / "clash.toml")
    path.write_text(path.read_text() + '\n[echo]\ntools = ["lookup"]\n')
    with pytest.raises(ConfigError) as err:
        load(path)
    assert str(err.value) == (f"{path}: [tools.lookup] and [echo] both declare a tool named 'lookup'; "
                              "tool names are unique")


def test_an_unknown_table_kind_and_a_source_kinds_errors_name_the_file(tmp_path: Path) -> None:
    path = write_config(tmp_path / "odd.toml")
    path.write_text(path.read_text() + "\n[gadgets.x]\nurl = 'y'\n")
    with pytest.raises(ConfigError, match=r"odd.toml: unknown table\(s\) gadgets"):
        load(path)
    path = write_config(tmp_path / "echo.toml")
    path.write_text(path.read_text() + '\n[echo]\ntools = ["shout"]\npolicy = "often"\n')
    with pytest.raises(ConfigError, match=r"echo.toml: \[echo\]: policy must be one of allow, deny, ask"):
        load(path)


def test_a_config_of_tools_alone_loads_for_any_agent_but_not_for_claude(tmp_path: Path) -> None:
    path = tmp_path / "tools.toml"
    path.write_text('[tools.lookup]\ncall = "agent_tools:lookup"\npolicy = "allow"\neffect = "read"\n')
    cfg = load(path)
    assert cfg.model == "" and list(cfg.tools) == ["lookup"]
    assert cfg.tools["lookup"].source == "python"


def test_a_bare_tool_runs_by_the_built_in_source_it_names() -> None:
    tool = Tool(name="lookup", policy="allow", effect="read", description="", input_schema={"type": "object"},
                call="agent_tools:lookup")
    assert tool.source == "python"
    assert Tool(name="x", policy="allow", effect="read", description="", input_schema={}, route="r").source == "http"
    mcp = Tool(name="x", policy="allow", effect="read", description="", input_schema={}, source="mcp.gh")
    result = run(mcp, {}, ToolCall("toolu_2", "x", "inbox-a", "key-2"))
    assert result["is_error"] and "no tool source 'mcp.gh' is configured" in result["content"]


def test_a_worker_loads_the_tools_for_any_agent_once_the_config_is_set(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """What a worker checks at its start (tasks/effects.py): the claude agent requires the
    config and its model; any other agent reads the tools when the variable is set."""
    import wakeful.agent.config as config_module
    from wakeful.agent.config import for_worker

    monkeypatch.delenv(config_module.ENV, raising=False)
    monkeypatch.setattr(config_module, "_current", None)
    assert for_worker("wakeful.examples.custom_loop:agent") is None
    with pytest.raises(ConfigError, match="WAKEFUL_AGENT_CONFIG is not set"):
        for_worker("claude")
    path = tmp_path / "tools.toml"
    path.write_text('[tools.lookup]\ncall = "agent_tools:lookup"\npolicy = "allow"\neffect = "read"\n')
    monkeypatch.setenv(config_module.ENV, str(path))
    cfg = for_worker("wakeful.examples.custom_loop:agent")
    assert cfg is not None and list(cfg.tools) == ["lookup"]
    with pytest.raises(ConfigError, match=r"tools.toml: the claude agent needs an \[agent\] table with `model`"):
        for_worker("claude")
    monkeypatch.setattr(config_module, "_current", None)
    path.write_text('[tools.lookup]\ncall = "agent_tools:lookup"\npolicy = "sometimes"\n')
    with pytest.raises(ConfigError, match=r"tools.toml: \[tools.lookup\]: policy must be one of"):
        for_worker("wakeful.examples.custom_loop:agent")
