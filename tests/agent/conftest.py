"""Fixtures for the agent kit: the scripted Messages API on loopback, a config file, the tool
log the test tools write to, and (for the process tests) the runtime tests' cluster on
PostgreSQL and Redis only."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from wakeful.agent.scripted import ScriptedModel
from agent_support import write_config as _write_config
from runtime.conftest import make_cluster, redis_db  # noqa: F401  (the runtime tests' harness)

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE))  # agent_tools, for the in-process tests


@pytest.fixture(params=[pytest.param("redis_pg", marks=[pytest.mark.postgres, pytest.mark.redis,
                                                        pytest.mark.processes])])
def backend(request: pytest.FixtureRequest) -> str:
    """The agent's process tests run on the production pair only (kept lean)."""
    return request.param


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


@pytest.fixture
def write_config(tmp_path: Path) -> Callable[..., Path]:
    def write(tools: dict[str, dict[str, Any]] | None = None, **agent: Any) -> Path:
        return _write_config(tmp_path / "agent.toml", tools, **agent)

    return write

