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
    return subprocess.run([sys.executable, "-m", "wakeful.cli.main", *args], env=env, capture_output=True,
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
    assert "ok: exactly one refund of order 990" in done.stdout  # the same config under Pydantic AI
    assert "Every step happened as described." in done.stdout


def test_a_tool_module_next_to_the_config_and_an_agent_in_the_working_directory_import_without_pythonpath(
        tmp_path: Path) -> None:
    """The ``wakeful`` script, as a user runs it: no PYTHONPATH, and no ``python -m`` putting
    the working directory on ``sys.path``."""
    configs, work = tmp_path / "configs", tmp_path / "work"
    configs.mkdir()
    work.mkdir()
    (configs / "localtools.py").write_text("def shout(input, call):\n    return str(input).upper()\n")
    (configs / "agent.toml").write_text(
        '[agent]\nmodel = "m"\n\n[tools.shout]\ncall = "localtools:shout"\npolicy = "allow"\n'
        'effect = "read"\ndescription = "Shout"\n')
    (work / "myagent.py").write_text("def agent(run):\n    return None\n")
    wakeful = str(Path(sys.executable).with_name("wakeful"))
    env = {k: v for k, v in _env(tmp_path).items() if k != "PYTHONPATH"}
    for agent in ("claude", "myagent:agent"):
        done = subprocess.run([wakeful, "check"], cwd=work, capture_output=True, text=True, timeout=120,
                              env={**env, "WAKEFUL_AGENT": agent, "WAKEFUL_AGENT_CONFIG": str(configs / "agent.toml")})
        assert done.returncode == 0, (agent, done.stdout, done.stderr)
        assert "tool shout: allow, read" in done.stdout, (agent, done.stdout)


def test_check_answers_a_bad_setting_with_one_line_and_exit_2(tmp_path: Path) -> None:
    for variable, value in (("WAKEFUL_AGENT", "claud"), ("WAKEFUL_LEASE_TTL", "soon")):
        done = _wakeful(_env(tmp_path, **{variable: value}), "check")
        assert done.returncode == 2, (variable, done.stderr)
        assert done.stderr.count("\n") == 1 and variable in done.stderr, done.stderr
        assert "Traceback" not in done.stderr
