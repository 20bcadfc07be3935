"""A bad agent config is a clear error naming the file and the tool; a good one loads."""

from __future__ import annotations

from pathlib import Path

import pytest

from wakeful.agent.config import ConfigError, load
from agent_support import BASE_TOOLS, write_config


@pytest.mark.parametrize("change, says", [
    ({"policy": "maybe"}, "[tools.refund]: policy must be one of allow, deny, ask"),
    ({"call": "no_such_module:refund"}, "[tools.refund]: call 'no_such_module:refund' does not import"),
    ({"input_schema": '{ type = "object", properties = 5 }'}, "[tools.refund]: input_schema is not a valid JSON Schema"),
    ({"call": None}, "[tools.refund]: no way to run it"),
    ({"delivery": "twice"}, "[tools.refund]: delivery must be at_least_once or at_most_once"),
    ({"effect": "maybe"}, "[tools.refund]: effect must be read or write"),
    ({"polcy": "allow"}, "[tools.refund]: unknown key(s) polcy"),
    ({"approval_ttl": 0}, "[tools.refund]: approval_ttl must be a positive whole number"),
])
def test_a_bad_tool_is_named_with_its_file(tmp_path: Path, change: dict, says: str) -> None:
    spec = {**BASE_TOOLS["refund"], **change}
    spec = {k: v for k, v in spec.items() if v is not None}
    path = write_config(tmp_path / "bad.toml", {"refund": spec})
    with pytest.raises(ConfigError) as err:
        load(path)
    assert str(err.value).startswith(f"{path}: ") and says in str(err.value)


def test_the_runtime_tools_and_bad_agent_tables_are_refused(tmp_path: Path) -> None:
    path = write_config(tmp_path / "a.toml", {"stay_silent": BASE_TOOLS["lookup"]})
    with pytest.raises(ConfigError, match="stay_silent.*offers itself"):
        load(path)
    path.write_text("[agent]\nsystem = 'x'\n")
    with pytest.raises(ConfigError, match="`model` is required"):
        load(path)
    path.write_text("[agent\n")
    with pytest.raises(ConfigError, match="not valid TOML"):
        load(path)
    with pytest.raises(ConfigError, match="cannot read"):
        load(tmp_path / "missing.toml")


def test_a_good_config_loads_with_its_defaults_and_ignores_routes(tmp_path: Path) -> None:
    path = write_config(tmp_path / "good.toml", trusted_sources=["chat", "timer"])
    with path.open("a") as f:
        f.write('\n[routes.shop]\nupstream = "https://shop.example.com"\n')
    cfg = load(path)
    assert cfg.model == "claude-scripted" and cfg.trusted_sources == ("chat", "timer")
    assert not cfg.tools["lookup"].trusted_output
    assert cfg.tools["refund"].delivery == "at-least-once" and cfg.tools["refund_asked"].approval_ttl == 600
    assert cfg.tools["wipe"].policy == "deny"


def test_a_runs_grant_covers_the_model_and_inline_reads_never_a_write_only_route(tmp_path: Path) -> None:
    path = tmp_path / "agent.toml"
    path.write_text("""
[agent]
model = "m"
[routes.anthropic]
[routes.crm]
[routes.bank]
[tools.lookup]
call = "agent_tools:lookup"
routes = ["crm"]
policy = "allow"
effect = "read"
[tools.pay]
call = "agent_tools:refund"
routes = ["bank"]
policy = "allow"
effect = "write"
""")
    cfg = load(path)
    assert cfg.run_routes() == ["anthropic", "crm"]  # bank only ever in the pay effect's grant
    assert cfg.tools["pay"].grant_routes == ("bank",)
    path.write_text(path.read_text().replace('routes = ["bank"]', 'routes = ["vault"]'))
    with pytest.raises(ConfigError, match=r"\[tools.pay\]: no \[routes.vault\] table"):
        load(path)


def test_the_old_untrusted_sources_key_is_refused_with_what_to_write_instead(tmp_path: Path) -> None:
    """Issue 23, item 2: the old key, read silently, would keep trusting every other source."""
    path = write_config(tmp_path / "old.toml", untrusted_sources=["mail"])
    with pytest.raises(ConfigError) as err:
        load(path)
    assert "trusted_sources = [" in str(err.value) and "\n" not in str(err.value)


def test_nothing_is_trusted_unless_named_and_a_runtime_source_cannot_be(tmp_path: Path) -> None:
    path = tmp_path / "bare.toml"
    path.write_text('[agent]\nmodel = "m"\n')
    assert load(path).trusted_sources == ()
    path = write_config(tmp_path / "tool.toml", trusted_sources=["tool"])
    with pytest.raises(ConfigError, match="trusted_output = true"):
        load(path)
    path = write_config(tmp_path / "flag.toml", {"lookup": {**BASE_TOOLS["lookup"], "trusted_output": "yes"}})
    with pytest.raises(ConfigError, match=r"\[tools.lookup\]: trusted_output must be true or false"):
        load(path)


def test_the_webhook_sources_are_one_list_the_web_edge_uses() -> None:
    """``wakeful check`` warns on trusting these; the web edge ingests under exactly these."""
    from store.tables import HOOK_KINDS
    from wakeful.web.receivers import SENDERS

    assert sorted(s.source for s in SENDERS.values()) == sorted(HOOK_KINDS)
