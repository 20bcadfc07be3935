"""The Procfile and docker-compose.yml describe the same processes, and compose is valid."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
from databases import service_missing
import yaml

ROOT = Path(__file__).resolve().parents[2]
SECRETS = {"POSTGRES_PASSWORD": "pg-secret", "REDIS_PASSWORD": "redis-secret",
           "WAKEFUL_FLOWER_BASIC_AUTH": "admin:flower-secret"}


def procfile() -> dict[str, str]:
    entries = {}
    for line in (ROOT / "Procfile").read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            name, command = line.split(":", 1)
            entries[name.strip()] = command.strip()
    return entries


def compose() -> dict:
    return yaml.safe_load((ROOT / "docker-compose.yml").read_text())


def test_procfile_has_the_process_types() -> None:
    from wakeful.cli.processes import RUN_CONCURRENCY, RUN_POOL

    assert list(procfile()) == ["web", "worker", "control", "beat", "flower", "proxy"]
    assert f"-P {RUN_POOL} -c {RUN_CONCURRENCY}" in procfile()["worker"]  # what the tests run
    assert procfile()["flower"] == "wakeful flower"  # the launcher that refuses to start open


def test_every_procfile_process_is_a_compose_service_with_the_same_command() -> None:
    services = compose()["services"]
    for name, command in procfile().items():
        assert name in services, f"Procfile process {name!r} has no compose service"
        assert services[name]["command"] == command, name


def test_compose_runs_postgres_and_redis_with_passwords_and_health_checks() -> None:
    services = compose()["services"]
    assert services["postgres"]["environment"]["POSTGRES_PASSWORD"].startswith("${POSTGRES_PASSWORD:?")
    # the password reaches redis-server on stdin, never on its command line
    assert 'requirepass "$$REDISCLI_AUTH"' in " ".join(services["redis"]["command"])
    for name in ("postgres", "redis", "web", "worker", "control"):
        assert "healthcheck" in services[name], name
    for name in procfile():
        deps = services[name]["depends_on"]
        assert deps["postgres"]["condition"] == "service_healthy"
        assert deps["redis"]["condition"] == "service_healthy"
        assert deps["init"]["condition"] == "service_completed_successfully"
    # Published ports are bound to loopback only.
    for service in services.values():
        for port in service.get("ports", []):
            assert str(port).startswith("127.0.0.1:"), port


def test_docker_compose_config_accepts_the_file(monkeypatch: pytest.MonkeyPatch) -> None:
    if shutil.which("docker-compose") is None:  # .ci/run installs it; a laptop may not have it
        service_missing("docker-compose (v1, client-side validation)", "not installed")
    for key, value in SECRETS.items():
        monkeypatch.setenv(key, value)
    ok = subprocess.run(["docker-compose", "-f", str(ROOT / "docker-compose.yml"), "config", "-q"],
                        capture_output=True, text=True, timeout=60)
    assert ok.returncode == 0, ok.stderr
    monkeypatch.delenv("REDIS_PASSWORD")
    missing = subprocess.run(["docker-compose", "-f", str(ROOT / "docker-compose.yml"), "config",
                              "-q"], capture_output=True, text=True, timeout=60)
    assert missing.returncode != 0 and "REDIS_PASSWORD" in missing.stderr
