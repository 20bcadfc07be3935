"""docker-compose.yml gives each secret only to the services that use it, and no password
is interpolated into a command line."""

from __future__ import annotations

from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]


def test_each_secret_only_where_it_is_used() -> None:
    services = yaml.safe_load((ROOT / "docker-compose.yml").read_text())["services"]

    def holders(needle: str) -> set[str]:
        return {name for name, s in services.items()
                if any(needle in str(v) for v in (s.get("environment") or {}).values())}

    # the proxy opens the store (grants, audit), never the broker
    assert holders("${POSTGRES_PASSWORD") == {"postgres", "init", "web", "worker", "control", "proxy"}
    assert holders("${REDIS_PASSWORD") == {"redis", "web", "worker", "control", "beat", "flower"}
    assert holders("WAKEFUL_APPROVAL_SECRET") == {"web", "control"}
    assert holders("WAKEFUL_SECRETS_KEY") == holders("WAKEFUL_GITHUB_SECRETS") == {"web"}
    assert holders("WAKEFUL_FLOWER_BASIC_AUTH") == {"flower"}
    for name, s in services.items():
        command = " ".join(s["command"]) if isinstance(s.get("command"), list) else str(s.get("command"))
        assert "PASSWORD" not in command and "${" not in command, name
    assert 'requirepass "$$REDISCLI_AUTH"' in " ".join(services["redis"]["command"])
