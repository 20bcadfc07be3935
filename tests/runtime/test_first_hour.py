"""A new user's mistakes, met by the real ``wakeful`` command: each is one line that says what
is wrong and what to run, never a traceback and never a silent fallback."""

from __future__ import annotations

import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from databases import create_pg_database, drop_pg_database, service_missing
from runtime_support import base_env

WAKEFUL = str(Path(sys.executable).with_name("wakeful"))


def _wakeful(tmp_path: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([WAKEFUL, *args], cwd=tmp_path, capture_output=True, text=True, timeout=120,
                          env={**base_env(tmp_path), **env})


@pytest.fixture
def empty_pg_url() -> Iterator[str]:
    """A PostgreSQL database without wakeful's tables (as before `wakeful init`)."""
    name = f"wakeful_empty_{uuid.uuid4().hex[:10]}"
    try:
        url = create_pg_database(name)
    except Exception as exc:  # noqa: BLE001 - any connection failure means "not reachable"
        service_missing("PostgreSQL", exc)
    yield url
    drop_pg_database(name)


def _one_line(done: subprocess.CompletedProcess[str]) -> str:
    assert "Traceback" not in done.stderr, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    return lines[0]


def test_an_operator_command_on_a_store_without_tables_says_run_wakeful_init(tmp_path: Path,
                                                                           empty_pg_url: str) -> None:
    for command in (["status"], ["dead"], ["timers", "-i", "a"], ["ingest", "a", "chat", "1"]):
        done = _wakeful(tmp_path, *command, WAKEFUL_DATABASE_URL=empty_pg_url)
        assert done.returncode == 1, (command, done.stderr)
        assert _one_line(done) == "wakeful: the store's database has no tables yet: run `wakeful init`"
    done = _wakeful(tmp_path, "status")  # the embedded store, before anything migrated it
    assert _one_line(done) == "wakeful: the store's database has no tables yet: run `wakeful init`"


def test_an_unreachable_store_is_named_without_its_password(tmp_path: Path) -> None:
    done = _wakeful(tmp_path, "status", WAKEFUL_DATABASE_URL="postgresql+psycopg://wakeful:pw-hidden@127.0.0.1:1/x")
    assert done.returncode == 1
    line = _one_line(done)
    assert line.startswith("wakeful: cannot reach the store's database "
                           "(postgresql+psycopg://wakeful:***@127.0.0.1:1/x): ") and "pw-hidden" not in line


def test_check_fails_on_a_dead_broker_and_an_unmigrated_store_one_line_each(tmp_path: Path,
                                                                           empty_pg_url: str) -> None:
    done = _wakeful(tmp_path, "check", WAKEFUL_DATABASE_URL=empty_pg_url,
                    WAKEFUL_BROKER_URL="redis://:pw-hidden@127.0.0.1:1/0")
    assert done.returncode == 1
    assert done.stderr.strip().splitlines() == [
        "wakeful check: the store's database has no tables yet: run `wakeful init`",
        "wakeful check: cannot reach the broker (redis://:***@127.0.0.1:1/0): "
        "Error 111 connecting to 127.0.0.1:1. Connection refused."]
    assert "store postgresql+psycopg://" in done.stdout and "pw-hidden" not in done.stdout + done.stderr


def test_check_passes_on_the_embedded_default_before_any_start(tmp_path: Path) -> None:
    """The embedded SQLite store is migrated by the first process that starts."""
    done = _wakeful(tmp_path, "check")
    assert done.returncode == 0, done.stderr
    assert "(embedded: WAKEFUL_DATABASE_URL is not set)" in done.stdout and done.stdout.endswith("ok\n")


def test_check_names_an_mcp_server_that_does_not_start_and_passes_one_that_does(tmp_path: Path) -> None:
    """`wakeful check` starts each stdio MCP server once, as a worker would: a missing script
    is one line with what the server said, not a closed connection at the first run."""
    servers = Path(__file__).resolve().parents[1] / "agent" / "mcp_servers.py"
    config = tmp_path / "agent.toml"
    (tmp_path / "state").mkdir()

    def write(script: Path) -> None:
        config.write_text(f'[agent]\nmodel = "m"\n\n[mcp.files]\ncommand = "{sys.executable}"\n'
                          f'args = ["{script}", "stdio", "{tmp_path / "state"}"]\npolicy = "deny"\n')

    write(tmp_path / "no_such_server.py")
    done = _wakeful(tmp_path, "check", WAKEFUL_AGENT="claude", WAKEFUL_AGENT_CONFIG=str(config))
    assert done.returncode == 1
    line = _one_line(done)
    assert line.startswith("wakeful check: [mcp.files]: the server did not start and list its tools (")
    assert "No such file or directory" in line, line
    write(servers)
    done = _wakeful(tmp_path, "check", WAKEFUL_AGENT="claude", WAKEFUL_AGENT_CONFIG=str(config))
    assert done.returncode == 0, done.stderr
