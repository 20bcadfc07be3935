"""Shared fixtures for the agent kit: the scripted Messages API on loopback, a config file,
and the tool log the test tools write to."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from agent.scripted import ScriptedModel

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE))  # agent_tools, for the in-process tests

ORDER_SCHEMA = ('{ type = "object", properties = { order = { type = "integer" } }, '
                'required = ["order"] }')

BASE_TOOLS = {
    "lookup": {"call": "agent_tools:lookup", "policy": "allow", "effect": "read"},
    "refund": {"call": "agent_tools:refund", "policy": "allow", "effect": "write"},
    "refund_asked": {"call": "agent_tools:refund", "policy": "ask", "effect": "write",
                     "approval_ttl": 600},
    "wipe": {"call": "agent_tools:refund", "policy": "deny", "effect": "write"},
}


@pytest.fixture
def model() -> Iterator[ScriptedModel]:
    with ScriptedModel() as server:
        yield server


@pytest.fixture
def tool_log(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "tools.jsonl"
    path.touch()
    monkeypatch.setenv("WAKEFUL_TEST_TOOL_LOG", str(path))
    return path


def calls(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line]


def toml_value(value: Any) -> str:
    if isinstance(value, str) and value.startswith("{ "):
        return value  # an inline table, written as such
    return json.dumps(value)


@pytest.fixture
def write_config(tmp_path: Path) -> Callable[..., Path]:
    def write(tools: dict[str, dict[str, Any]] | None = None, **agent: Any) -> Path:
        lines = ["[agent]", 'model = "claude-scripted"', 'system = "You run errands."']
        lines += [f"{k} = {toml_value(v)}" for k, v in agent.items()]
        for name, spec in (BASE_TOOLS if tools is None else tools).items():
            lines += ["", f"[tools.{name}]", f'description = "{name}"',
                      f"input_schema = {ORDER_SCHEMA}"]
            lines += [f"{k} = {toml_value(v)}" for k, v in spec.items()]
        path = tmp_path / "agent.toml"
        path.write_text("\n".join(lines) + "\n")
        return path

    return write
