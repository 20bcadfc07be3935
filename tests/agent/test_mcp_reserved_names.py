"""The runtime's tool names are never an MCP server's (issue 54, item 7): ``stay_silent``,
``mark_urgent`` and every ``[wakes]`` tool (``schedule_wake``, ``cancel_wake``,
``list_wakes``), whether the server lists one at once or later, with or without a ``[wakes]``
table; skipped and logged once. A real stdio server (tests/agent/mcp_shifting.py)."""

from __future__ import annotations

import json
import logging
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from wakeful.agent import wakes
from wakeful.agent.config import WAKES_TOOLS, AgentConfig, ConfigError, parse
from wakeful.cli.processes import wait_for

SHIFTING = str(Path(__file__).parent / "mcp_shifting.py")


def _listings(state: Path) -> int:
    path = state / "lists.jsonl"
    return len(path.read_text().splitlines()) if path.exists() else 0


@pytest.fixture
def configs(tmp_path: Path) -> Iterator[Callable[..., AgentConfig]]:
    """A config whose ``[mcp.evil]`` comes first in the file (the table first keeps a name),
    then ``[wakes]`` unless left out."""
    made: list[AgentConfig] = []

    def make(with_wakes: bool = True) -> AgentConfig:
        raw: dict[str, Any] = {"agent": {"model": "m"}, "mcp": {"evil": {
            "command": sys.executable, "args": [SHIFTING, str(tmp_path)], "policy": "allow", "effect": "read",
            "list_ttl": 1}}}
        if with_wakes:
            raw["wakes"] = {"policy": "allow"}
        made.append(parse(raw, "agent.toml"))
        return made[-1]

    yield make
    for cfg in made:
        cfg.sources["mcp.evil"].close()  # type: ignore[attr-defined]


def test_a_wakes_tool_name_a_server_lists_later_stays_the_runtimes(
        configs: Callable[..., AgentConfig], tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    cfg = configs()
    assert cfg.tools["list_wakes"].source == wakes.SOURCE
    caplog.set_level(logging.WARNING, "wakeful.agent.mcp")
    (tmp_path / "changes.json").write_text(json.dumps({"add": ["list_wakes"]}))
    seen = _listings(tmp_path)
    wait_for(lambda: (cfg.tools, _listings(tmp_path) > seen + 2)[1], 30, "three more listings")
    listed = cfg.tools["list_wakes"]
    assert (listed.source, listed.policy) == (wakes.SOURCE, "allow")  # the [wakes] tool, still offered
    warned = [r.getMessage() for r in caplog.records if "'list_wakes'" in r.getMessage()]
    assert len(warned) == 1, warned  # once, not at every listing
    assert warned[0].startswith("[mcp.evil]: a tool named 'list_wakes'") and "the runtime's" in warned[0]


@pytest.mark.parametrize("with_wakes", [True, False])
def test_a_runtime_tool_name_in_the_first_listing_is_skipped(
        configs: Callable[..., AgentConfig], tmp_path: Path, with_wakes: bool) -> None:
    (tmp_path / "changes.json").write_text(json.dumps({"add": ["schedule_wake", "stay_silent", "cancel_wake"]}))
    cfg = configs(with_wakes)  # no "both declare" error: the server's are skipped
    mcp_names = {n for n, t in cfg.tools.items() if t.source == "mcp.evil"}
    assert mcp_names == {"weather"}
    assert {n for n, t in cfg.tools.items() if t.source == wakes.SOURCE} == (set(WAKES_TOOLS) if with_wakes
                                                                              else set())


@pytest.mark.parametrize("name", ["list_wakes", "stay_silent"])
def test_a_python_tool_may_not_take_a_runtime_tools_name_either(name: str) -> None:
    """Reserved against every source: a [tools.NAME] table too, with or without [wakes]."""
    raw = {"agent": {"model": "m"},
           "tools": {name: {"call": "agent_tools:lookup", "policy": "allow", "effect": "read"}}}
    with pytest.raises(ConfigError, match=f"{name!r} is a tool the runtime offers itself"):
        parse(raw, "agent.toml")
