"""``wakeful check`` on the claude agent's config, and ``wakeful demo agent`` end to end."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from agent_support import BASE_TOOLS, write_config

HERE = Path(__file__).parent


def _env(tmp_path: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("WAKEFUL_", "ANTHROPIC_"))}
    env.update({"WAKEFUL_HOME": str(tmp_path / "home"), **extra})
    return env


def _wakeful(env: dict[str, str], *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "cli.main", *args], env=env, capture_output=True,
                          text=True, timeout=timeout)


def test_check_names_the_file_and_the_tool(tmp_path: Path) -> None:
    bad = write_config(tmp_path / "bad.toml", {"refund": {**BASE_TOOLS["refund"], "policy": "sometimes"}})
    done = _wakeful(_env(tmp_path, WAKEFUL_AGENT="claude", WAKEFUL_AGENT_CONFIG=str(bad)), "check")
    assert done.returncode == 1
    assert f"{bad}: [tools.refund]: policy must be one of allow, deny, ask" in done.stderr
    good = write_config(tmp_path / "good.toml")
    env = _env(tmp_path, WAKEFUL_AGENT="claude", WAKEFUL_AGENT_CONFIG=str(good),
               PYTHONPATH=os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")]))
    done = _wakeful(env, "check")
    assert done.returncode == 0, done.stderr
    assert "tool refund_asked: ask, write, at-least-once, approval_ttl 600s" in done.stdout


def test_check_warns_on_trusted_webhook_sources_and_names_trusted_tools(tmp_path: Path) -> None:
    tools = {**BASE_TOOLS, "lookup": {**BASE_TOOLS["lookup"], "trusted_output": True}}
    config = write_config(tmp_path / "agent.toml", tools, trusted_sources=["chat", "github"])
    env = _env(tmp_path, WAKEFUL_AGENT="claude", WAKEFUL_AGENT_CONFIG=str(config),
               PYTHONPATH=os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")]))
    done = _wakeful(env, "check")
    assert done.returncode == 0, done.stderr
    assert "trusted sources: chat, github" in done.stdout
    assert "tool lookup: allow, read, trusted output" in done.stdout
    assert "tool refund: allow, write, at-least-once (" in done.stdout  # its output is data
    assert "warning: trusted_sources names webhook sources (github)" in done.stderr


@pytest.mark.processes
def test_demo_agent_plays_ask_yes_once_deny_and_expiry_offline(tmp_path: Path) -> None:
    done = _wakeful(_env(tmp_path), "demo", "agent", "--dir", str(tmp_path / "demo"), timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "a bundled scripted model, offline" in done.stdout
    assert "refunds executed: 1" in done.stdout and "ok: no refund of order 77" in done.stdout
    assert "Every step happened as described." in done.stdout
