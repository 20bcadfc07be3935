"""MCP servers as a tool source, in this process: the ``[mcp.NAME]`` config, the rules a
listing goes through (later tools denied, hints only stricter, names and descriptions
bounded), and a real stdio server (tests/agent/mcp_servers.py, the ``mcp`` SDK's own
``MCPServer``) started by the source: reads, a write's idempotency key in ``_meta``, the
environment the server gets. The processes tests are in test_mcp_processes.py."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from wakeful.agent import mcp
from wakeful.agent.config import ConfigError, load, parse
from wakeful.agent.tool import ToolCall
from wakeful.agent.tools import run

HERE = Path(__file__).parent
SERVER = str(HERE / "mcp_servers.py")


def _calls(state: Path) -> list[dict[str, Any]]:
    path = state / "calls.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def _stdio(state: Path, **extra: Any) -> dict[str, Any]:
    return {"agent": {"model": "m"}, "mcp": {"files": {
        "command": sys.executable, "args": [SERVER, "stdio", str(state)], "policy": "ask", "effect": "write",
        "tools": {"lookup_order": {"policy": "allow", "effect": "read"},
                  "close_account": {"policy": "allow", "effect": "read"},
                  "refund": {"policy": "allow", "effect": "write"},
                  "show_env": {"policy": "allow", "effect": "read"}}, **extra}}}


@pytest.fixture
def files(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """A config with one stdio server, parsed (which lists its tools: the server starts)."""
    monkeypatch.setenv("PASSED_TOKEN", "passed-" + "1" * 8)
    monkeypatch.setenv("WORKER_ONLY_SECRET", "never-in-the-server")
    cfg = parse(_stdio(tmp_path, env={"FILES_ROOT": "/srv"}, pass_env=["PASSED_TOKEN"], list_ttl=1), "agent.toml")
    yield cfg
    for source in cfg.sources.values():
        source.close()  # type: ignore[attr-defined]


def test_a_stdio_servers_tools_take_the_configs_rules_and_the_servers_hints_only_when_stricter(
        files: Any, tmp_path: Path) -> None:
    tools = files.tools
    assert {n: (t.policy, t.effect) for n, t in tools.items()} == {
        "lookup_order": ("allow", "read"),      # its table; readOnlyHint agrees
        "refund": ("allow", "write"),           # its table
        "close_account": ("allow", "write"),    # configured read, destructiveHint: a write
        "show_env": ("allow", "read"),
        "flaky_refund": ("ask", "write"),       # the first listing, no table: the server's default
        "noisy": ("ask", "write"),              # readOnlyHint never loosens the default write
    }
    assert all(t.source == "mcp.files" for t in tools.values())
    noisy = tools["noisy"].description
    assert len(noisy) == mcp.DESCRIPTION_MAX and "\u202e" not in noisy and "\u200b" not in noisy
    assert tools["lookup_order"].input_schema["required"] == ["order"]  # the server's schema


def test_a_read_runs_and_a_writes_key_goes_in_meta(files: Any, tmp_path: Path) -> None:
    read = run(files.tools["lookup_order"], {"order": 7}, ToolCall("toolu_1", "lookup_order", "ada", "k-read"), files)
    assert read == {"content": "order 7: shipped", "is_error": False}
    write = run(files.tools["refund"], {"order": 7}, ToolCall("toolu_2", "refund", "ada", "k-write"), files)
    assert write["is_error"] is False
    calls = _calls(tmp_path)
    assert [(c["tool"], c["key"]) for c in calls] == [("lookup_order", None), ("refund", "k-write")]


def test_the_server_gets_only_the_environment_its_table_names(files: Any) -> None:
    names = run(files.tools["show_env"], {}, ToolCall("toolu_3", "show_env", "ada", "k"), files)["content"].split()
    assert "FILES_ROOT" in names and "PASSED_TOKEN" in names
    assert "WORKER_ONLY_SECRET" not in names and not [n for n in names if n.startswith("WAKEFUL_")]
    assert set(names) <= {"FILES_ROOT", "PASSED_TOKEN", "HOME", "LOGNAME", "PATH", "SHELL", "TERM", "USER",
                          "LC_CTYPE"}  # LC_CTYPE: Python's own locale coercion in the child


def test_a_tool_the_server_adds_later_is_denied_until_configured(files: Any, tmp_path: Path) -> None:
    from wakeful.agent import policy
    from wakeful.cli.processes import wait_for

    assert "wipe" not in files.tools
    (tmp_path / "add_wipe").touch()
    wait_for(lambda: "wipe" in files.tools, 30, "the next listing")  # list_ttl = 1
    assert files.tools["wipe"].policy == "deny"
    assert "wipe" not in {t["name"] for t in policy.offered(files)}
    assert policy.decide(files, "wipe", {"order": 1}, ()).kind == "refuse"
    called = run(files.tools["wipe"], {"order": 1}, ToolCall("toolu_4", "wipe", "ada", "k-wipe"), files)
    assert called["is_error"] and "no configured tool" in called["content"]
    assert not [c for c in _calls(tmp_path) if c["tool"] == "wipe"]


def test_an_error_result_is_the_tools_error_and_structured_content_passes() -> None:
    from mcp.types import CallToolResult, TextContent

    with pytest.raises(mcp.MCPToolError, match="no such order"):
        mcp.result_value(CallToolResult(content=[TextContent(type="text", text="no such order")], is_error=True))
    assert mcp.result_value(CallToolResult(content=[], structured_content={"n": 1})) == {"n": 1}


def test_hints_make_a_tool_stricter_never_looser() -> None:
    from mcp.types import ToolAnnotations as A

    assert mcp.stricter_effect("read", A(readOnlyHint=False)) == "write"
    assert mcp.stricter_effect("read", A(readOnlyHint=True, destructiveHint=True)) == "write"
    assert mcp.stricter_effect("read", A(readOnlyHint=True)) == "read"
    assert mcp.stricter_effect("read", None) == "read"
    assert mcp.stricter_effect("write", A(readOnlyHint=True, destructiveHint=False)) == "write"


def test_a_servers_schema_is_taken_only_when_valid_and_bounded() -> None:
    assert mcp.checked_schema({"type": "object", "properties": {"a": {"type": "string"}}}) is not None
    assert mcp.checked_schema({"type": "array"}) is None
    assert mcp.checked_schema({"type": "object", "properties": {"a": {"type": 5}}}) is None
    assert mcp.checked_schema({"type": "object", "description": "x" * mcp.SCHEMA_MAX}) is None
    assert mcp.clean_description("a\u202eb\x00c\u200bd\n" + "e" * 5000).startswith("abcd\ne")


@pytest.mark.parametrize(("table", "message"), [
    ({"route": "m", "command": "x", "policy": "ask"}, "give route .* or command .*, exactly one"),
    ({"command": "x"}, "policy is required"),
    ({"command": "x", "policy": "maybe"}, "policy must be one of"),
    ({"command": "x", "policy": "ask", "colour": 1}, r"unknown key\(s\) colour"),
    ({"route": "m", "policy": "ask", "env": {"A": "b"}}, "env is for a stdio server"),
    ({"command": "x", "policy": "ask", "path": "/mcp"}, "path is for an HTTP server"),
    ({"command": "x", "policy": "ask", "pass_env": "TOKEN"}, "pass_env must be a list"),
    ({"command": "x", "policy": "ask", "tools": {"a b": {}}}, r"\[mcp.srv.tools.a b\]: 'a b' is not a tool name"),
    ({"command": "x", "policy": "ask", "tools": {"t": {"command": "y"}}}, r"\[mcp.srv.tools.t\]: unknown key"),
    ({"route": "nowhere", "policy": "ask"}, r"no \[routes.nowhere\] table"),
])
def test_a_wrong_table_is_one_line_naming_the_file_and_the_table(tmp_path: Path, table: dict[str, Any],
                                                                   message: str) -> None:
    lines = ["[agent]", 'model = "m"', "", "[routes.m]", 'upstream = "http://127.0.0.1:9"', 'secret_env = "X"',
             'allow = ["POST /mcp"]', "", "[mcp.srv]"]
    nested = {k: v for k, v in table.items() if k in ("tools", "env")}
    lines += [f"{k} = {json.dumps(v)}" for k, v in table.items() if k not in nested]
    if "env" in nested:
        lines.append("env = { " + ", ".join(f'{k} = "{v}"' for k, v in nested["env"].items()) + " }")
    for tool, spec in nested.get("tools", {}).items():
        lines += [f'[mcp.srv.tools."{tool}"]'] + [f"{k} = {json.dumps(v)}" for k, v in spec.items()]
    path = tmp_path / "agent.toml"
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(ConfigError, match=message) as caught:
        load(path)
    text = str(caught.value)
    assert text.startswith(f"{path}: [mcp.srv") and "\n" not in text


def test_an_http_servers_tools_are_its_configured_ones_until_a_grant_lets_it_list(tmp_path: Path) -> None:
    raw = {"agent": {"model": "m"}, "routes": {"m": {}}, "mcp": {"gh": {
        "route": "m", "path": "/mcp", "policy": "ask", "tools": {"search": {"policy": "allow", "effect": "read"}}}}}
    cfg = parse(raw, "<config>")
    assert {n: (t.policy, t.effect, t.grant_routes) for n, t in cfg.tools.items()} == {
        "search": ("allow", "read", ("m",))}
    assert "m" in cfg.run_routes()  # a run's grant covers the server: it lists there


def test_no_key_is_in_the_sources_repr(files: Any) -> None:
    source = files.sources["mcp.files"]
    assert "passed-" not in repr(source.server) and os.environ["PASSED_TOKEN"] not in repr(source.server)


def test_a_failed_exchange_is_an_outage_a_refusal_or_the_servers_error() -> None:
    from mcp import MCPError
    from mcp_types import REQUEST_TIMEOUT

    from wakeful.agent.egress import EgressError, Unavailable
    from wakeful.agent.outage import TryLater

    server = mcp._server("agent.toml", "srv", {"command": "x", "policy": "ask"})
    fenced = mcp.failure(server, RuntimeError("x"), mcp.Refusal(403, "fenced", "wakeful proxy: fenced", "tools/call"))
    assert isinstance(fenced, EgressError) and not isinstance(fenced, TryLater) and fenced.outcome == "fenced"
    busy = mcp.failure(server, RuntimeError("x"), mcp.Refusal(502, "upstream_down", "down", "tools/call"))
    assert isinstance(busy, Unavailable) and not busy.maybe_done  # the proxy could not connect: nothing sent
    cut = mcp.failure(server, RuntimeError("x"), mcp.Refusal(504, "upstream_timeout", "slow", "tools/call"))
    assert isinstance(cut, Unavailable) and cut.maybe_done
    listing = mcp.failure(server, RuntimeError("x"), mcp.Refusal(504, "upstream_timeout", "slow", "tools/list"))
    assert isinstance(listing, Unavailable) and not listing.maybe_done
    grouped = ExceptionGroup("g", [ExceptionGroup("h", [MCPError(-32602, "unknown tool: nope")])])
    error = mcp.failure(server, grouped)
    assert isinstance(error, mcp.MCPToolError) and "unknown tool: nope" in str(error)
    timed_out = mcp.failure(server, MCPError(REQUEST_TIMEOUT, "timed out"))
    assert isinstance(timed_out, TryLater) and timed_out.maybe_done
    assert not mcp.failure(server, FileNotFoundError("no such command")).maybe_done  # never started
    assert mcp.failure(server, TimeoutError("no answer in 65 s")).maybe_done


def test_a_stdio_command_that_does_not_start_is_an_outage_and_the_config_still_loads(tmp_path: Path) -> None:
    from wakeful.agent.outage import TryLater

    cfg = parse({"agent": {"model": "m"}, "mcp": {"gone": {
        "command": str(tmp_path / "no-such-server"), "policy": "allow", "effect": "read",
        "tools": {"lookup": {}}}}}, "agent.toml")
    assert set(cfg.tools) == {"lookup"}  # the listing failed (logged): its configured tool is known
    with pytest.raises(TryLater, match="cannot be reached or started"):
        run(cfg.tools["lookup"], {}, ToolCall("toolu_x", "lookup", "ada", "k"), cfg)


def test_a_listed_name_another_table_or_the_runtime_has_is_skipped(tmp_path: Path) -> None:
    from types import SimpleNamespace

    path = tmp_path / "agent.toml"
    path.write_text('[agent]\nmodel = "m"\n\n[mcp.srv]\ncommand = "/nonexistent"\npolicy = "allow"\n'
                    'effect = "read"\n\n[tools.refund]\ncall = "agent_tools:refund"\npolicy = "ask"\n')
    source = mcp.MCPSource(mcp._server(str(path), "srv", {"command": "/nonexistent", "policy": "allow",
                                                          "effect": "read"}))

    def remote(name: str) -> Any:
        return SimpleNamespace(name=name, description="", input_schema={"type": "object"}, annotations=None)

    source._take([remote("stay_silent"), remote("refund"), remote("lookup"), remote("bad name")])
    assert set(source._listed or {}) == {"lookup"}  # the runtime's, [tools.refund], and no valid name
