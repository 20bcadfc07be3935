"""Deployment: the proxy is a Procfile process and a compose service; in compose it alone gets
the route secrets, and the agent's worker has no network way out but through it."""

from __future__ import annotations

from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]


def test_the_proxy_is_a_process_and_the_only_service_with_a_route_secret() -> None:
    assert "proxy: wakeful proxy" in (ROOT / "Procfile").read_text().splitlines()
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    services = compose["services"]
    assert services["proxy"]["command"] == "wakeful proxy"
    with_key = [name for name, svc in services.items() if "ANTHROPIC_API_KEY" in (svc.get("environment") or {})]
    assert with_key == ["proxy"]
    assert services["proxy"]["environment"]["WAKEFUL_PROXY_URL"] == "http://0.0.0.0:8780"
    assert services["worker"]["environment"]["WAKEFUL_PROXY_URL"] == "http://proxy:8780"
    assert "WAKEFUL_BROKER_URL" not in services["proxy"]["environment"]  # the store only


def test_the_workers_network_has_no_way_out_but_the_proxy() -> None:
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    assert compose["networks"]["default"] == {"internal": True}
    services = compose["services"]
    assert services["worker"].get("networks", ["default"]) == ["default"]
    assert "egress" in services["proxy"]["networks"] and "default" in services["proxy"]["networks"]
