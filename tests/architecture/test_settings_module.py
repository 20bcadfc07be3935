"""wakeful/settings.py: one error class, one line per bad value naming the variable (or the keyword)
and what it accepts, never a secret's value; a bare constructor reads no environment; the
variables shared by the web edge and the workers are parsed once, to one type."""

from __future__ import annotations

from pathlib import Path

import pytest

from wakeful import errors
from wakeful.settings import (ProxySettings, RuntimeSettings, SettingsError, StoreSettings, WebSettings, read_toml)


def test_one_error_class_under_the_house_base() -> None:
    assert issubclass(SettingsError, errors.WakefulError) and issubclass(SettingsError, ValueError)


@pytest.mark.parametrize("cls, env, line", [
    (RuntimeSettings, {"WAKEFUL_OUTBOX_GAP": "x"}, "WAKEFUL_OUTBOX_GAP must be a whole number >= 0, got 'x'"),
    (RuntimeSettings, {"WAKEFUL_SCAN_INTERVAL": "0"},
     "WAKEFUL_SCAN_INTERVAL must be positive (a number of seconds), got '0'"),
    (RuntimeSettings, {"WAKEFUL_TASK_EVENTS": "maybe"},
     "WAKEFUL_TASK_EVENTS must be true or false (1/0, yes/no, on/off), got 'maybe'"),
    (WebSettings, {"WAKEFUL_WEB_MAX_BODY": "-5"}, "WAKEFUL_WEB_MAX_BODY must be a positive integer, got '-5'"),
    (ProxySettings, {"WAKEFUL_PROXY_REFUSALS_PER_SECOND": "none"},
     "WAKEFUL_PROXY_REFUSALS_PER_SECOND must be positive (a number per second), got 'none'"),
])
def test_a_bad_value_is_one_line_naming_the_variable_and_what_it_accepts(cls: type, env: dict[str, str],
                                                                          line: str) -> None:
    with pytest.raises(SettingsError) as raised:
        cls.from_env(env)
    assert str(raised.value) == line


def test_several_bad_values_are_still_one_line() -> None:
    with pytest.raises(SettingsError) as raised:
        RuntimeSettings.from_env({"WAKEFUL_LEASE_TTL": "0", "WAKEFUL_AGENT": "claud"})
    assert "\n" not in str(raised.value)
    assert "WAKEFUL_LEASE_TTL" in str(raised.value) and "WAKEFUL_AGENT" in str(raised.value)


def test_a_secret_value_is_never_shown() -> None:
    with pytest.raises(SettingsError) as raised:
        WebSettings.from_env({"WAKEFUL_WEBHOOK_SECRETS": "whsec_%%%notbase64%%%"})
    assert "notbase64" not in str(raised.value) and "WAKEFUL_WEBHOOK_SECRETS" in str(raised.value)
    with pytest.raises(SettingsError) as raised:
        RuntimeSettings(database_url=["postgresql+psycopg://u:hunter2@db/x"])  # not a string
    assert "hunter2" not in str(raised.value) and str(raised.value).startswith("database_url is not valid")
    settings = RuntimeSettings.from_env({"WAKEFUL_DATABASE_URL": "postgresql+psycopg://u:hunter2@db/x",
                                         "WAKEFUL_APPROVAL_SECRET": "hunter2,old"})
    assert "hunter2" not in repr(settings) and settings.approval_secrets == ("hunter2", "old")


def test_keywords_are_named_as_keywords_and_unknown_ones_refused() -> None:
    with pytest.raises(SettingsError, match="^max_attempts must be a positive integer, got 0$"):
        StoreSettings(max_attempts=0)
    with pytest.raises(SettingsError, match="lease_tll: unknown setting"):
        StoreSettings(lease_tll=5)


def test_a_bare_constructor_reads_no_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WAKEFUL_LEASE_TTL", "7")
    monkeypatch.setenv("WAKEFUL_OUTBOX_GAP", "x")
    assert RuntimeSettings().lease_ttl == 120 and StoreSettings().outbox_gap == 3600
    with pytest.raises(SettingsError, match="WAKEFUL_OUTBOX_GAP"):
        RuntimeSettings.from_env()


def test_the_shared_variables_are_one_parse_and_one_type() -> None:
    env = {"WAKEFUL_APPROVAL_SECRET": " new , old ,", "WAKEFUL_REJECTIONS_PER_SECOND": "2.5",
           "WAKEFUL_APPROVAL_TOKEN_TTL": "60", "WAKEFUL_PUBLIC_URL": "https://approve.example"}
    runtime, web = RuntimeSettings.from_env(env), WebSettings.from_env(env)
    for name in ("approval_secrets", "rejections_per_second", "approval_token_ttl", "public_url"):
        assert getattr(runtime, name) == getattr(web, name)
    assert runtime.approval_secrets == ("new", "old") and runtime.rejections_per_second == 2.5


def test_the_store_url_and_redis_url_rules() -> None:
    assert RuntimeSettings.from_env({"WAKEFUL_HOME": "/srv/w"}).store_url == "sqlite:////srv/w/wakeful.sqlite3"
    assert RuntimeSettings.from_env({}).redis_url is None
    socket = RuntimeSettings.from_env({"WAKEFUL_BROKER_URL": "redis+socket:///run/redis.sock"})
    assert socket.redis_broker and socket.redis_url == "unix:///run/redis.sock"
    assert RuntimeSettings.from_env({"WAKEFUL_BROKER_URL": "rediss://r:6380/0"}).redis_url == "rediss://r:6380/0"


def test_a_toml_file_that_cannot_be_read_is_one_line_naming_the_file_and_line(tmp_path: Path) -> None:
    bad = tmp_path / "agent.toml"
    bad.write_text('[agent]\nmodel = "x"\nsystem = \n')
    with pytest.raises(SettingsError) as raised:
        read_toml(bad)
    assert str(raised.value).startswith(f"{bad}: not valid TOML") and "line 3" in str(raised.value)
    assert "\n" not in str(raised.value)
    with pytest.raises(LookupError, match="missing.toml: cannot read the config"):
        read_toml(tmp_path / "missing.toml", error=type("Missing", (LookupError, ValueError), {}))


def test_the_agents_short_names_are_the_agent_packages() -> None:
    from wakeful.agent.loading import BUILTIN
    from wakeful.settings import BUILTIN_AGENTS

    assert set(BUILTIN) == set(BUILTIN_AGENTS)


def environment_reads(root: Path) -> list[str]:
    """Where product code reads a ``WAKEFUL_*`` variable from an environment mapping (a
    literal, or a module constant holding one, given to ``.get``/``getenv`` or a subscript),
    outside wakeful/settings.py: every setting is read in the one module."""
    import ast

    found = []
    for place in ("store", "tasks", "wakeful"):
        for path in sorted((root / place).rglob("*.py")):
            if path == root / "wakeful" / "settings.py" or "migrations" in path.parts:
                continue
            tree = ast.parse(path.read_text(encoding="utf-8"))
            constants = {t.id for node in ast.walk(tree) if isinstance(node, ast.Assign)
                         and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str)
                         and node.value.value.startswith("WAKEFUL_") for t in node.targets if isinstance(t, ast.Name)}

            def wakeful_name(node: ast.AST) -> bool:
                if isinstance(node, ast.Constant) and isinstance(node.value, str):
                    return node.value.startswith("WAKEFUL_")
                if isinstance(node, ast.JoinedStr) and node.values:
                    return wakeful_name(node.values[0])
                return isinstance(node, ast.Name) and node.id in constants

            for node in ast.walk(tree):
                read = ((isinstance(node, ast.Call) and isinstance(node.func, (ast.Attribute, ast.Name))
                         and getattr(node.func, "attr", getattr(node.func, "id", "")) in ("get", "getenv")
                         and node.args and wakeful_name(node.args[0]))
                        or (isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Load)
                            and wakeful_name(node.slice)))
                if read:
                    found.append(f"{path.relative_to(root)}:{node.lineno}")
    return found


# tasks/faults.py: the fault points' own variables (WAKEFUL_FAULTS, _LOG, _RELEASE), read by
# the fault tests' processes only; wakeful/telemetry.py: WAKEFUL_TRACES_TEST_DIR, the trace
# tests' exporter. Neither is a setting a deployment sets.
TEST_ONLY = ("tasks/faults.py", "wakeful/telemetry.py")


def test_every_wakeful_setting_is_read_in_the_settings_module() -> None:
    root = Path(__file__).resolve().parents[2]
    assert [r for r in environment_reads(root) if not r.startswith(TEST_ONLY)] == []


def test_the_check_sees_a_setting_read_elsewhere(tmp_path: Path) -> None:
    (tmp_path / "tasks" / "channels").mkdir(parents=True)
    (tmp_path / "tasks" / "channels" / "x.py").write_text(
        "import os\nENV = 'WAKEFUL_AGENT_CONFIG'\na = os.environ.get(ENV)\nb = os.environ['WAKEFUL_X']\n"
        "c = env.get(f'WAKEFUL_CHANNEL_{name}', '')\nd = os.environ.get('HOME')\n")
    assert environment_reads(tmp_path) == ["tasks/channels/x.py:3", "tasks/channels/x.py:4", "tasks/channels/x.py:5"]


def test_the_agent_config_and_named_channels_are_read_here() -> None:
    from wakeful.settings import agent_config_path, channel_spec, channel_variable

    assert agent_config_path({"WAKEFUL_AGENT_CONFIG": " /srv/agent.toml "}) == "/srv/agent.toml"
    assert agent_config_path({}) == "" and RuntimeSettings.from_env(
        {"WAKEFUL_AGENT_CONFIG": "a.toml"}).agent_config == "a.toml"
    assert channel_variable("ops") == "WAKEFUL_CHANNEL_OPS"
    assert channel_spec("ops", {"WAKEFUL_CHANNEL_OPS": " jsonl:/tmp/ops.jsonl "}) == "jsonl:/tmp/ops.jsonl"
    assert channel_spec("ops", {}) == ""
