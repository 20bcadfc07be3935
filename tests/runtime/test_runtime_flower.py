"""Flower never starts open: 401 without credentials, 200 with them (a real Flower process)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from runtime_support import base_env

pytestmark = pytest.mark.processes


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wakeful(env: dict[str, str], *args: str, timeout: float = 30) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "wakeful.cli.main", *args], env=env,
                          capture_output=True, text=True, timeout=timeout)


def test_flower_refuses_to_start_without_credentials(tmp_path: Path) -> None:
    env = base_env(tmp_path)
    refused = _wakeful(env, "flower")
    assert refused.returncode != 0
    assert "refusing to start Flower without authentication" in refused.stderr
    weak = _wakeful({**env, "WAKEFUL_FLOWER_BASIC_AUTH": "admin:short"}, "flower")
    assert weak.returncode != 0 and "at least 8 characters" in weak.stderr
    open_api = _wakeful({**env, "WAKEFUL_FLOWER_BASIC_AUTH": "admin:long-enough-secret",
                         "FLOWER_UNAUTHENTICATED_API": "true"}, "flower")
    assert open_api.returncode != 0 and "FLOWER_UNAUTHENTICATED_API" in open_api.stderr
    # Started the plain Celery way, it refuses too.
    plain = subprocess.run([sys.executable, "-m", "celery", "-A", "tasks", "flower"], env=env,
                           capture_output=True, text=True, timeout=60)
    assert plain.returncode != 0
    assert "refusing to start Flower without authentication" in plain.stderr


@pytest.mark.redis
def test_flower_answers_401_without_credentials_and_200_with(tmp_path: Path, redis_db: int) -> None:
    port = _free_port()
    env = {**base_env(tmp_path), "WAKEFUL_BROKER_URL": f"redis://127.0.0.1:6379/{redis_db}",
           "WAKEFUL_FLOWER_BASIC_AUTH": "admin:correct-horse-battery",
           "WAKEFUL_FLOWER_PORT": str(port)}
    log = open(tmp_path / "flower.log", "wb")
    proc = subprocess.Popen([sys.executable, "-m", "wakeful.cli.main", "flower"], env=env, stdout=log,
                            stderr=subprocess.STDOUT, start_new_session=True)
    try:
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 60
        while True:
            try:
                first = httpx.get(url + "/", timeout=2)
                break
            except httpx.TransportError:
                assert proc.poll() is None, (tmp_path / "flower.log").read_text()
                assert time.monotonic() < deadline, (tmp_path / "flower.log").read_text()
                time.sleep(0.2)
        assert first.status_code == 401
        assert httpx.get(url + "/api/workers", timeout=5).status_code == 401
        assert httpx.get(url + "/", auth=("admin", "wrong"), timeout=5).status_code == 401
        ok = httpx.get(url + "/", auth=("admin", "correct-horse-battery"), timeout=10)
        assert ok.status_code == 200
        # The password reached Flower through its environment, not its command line.
        cmdline = Path(f"/proc/{proc.pid}/cmdline").read_bytes().decode(errors="replace")
        assert "correct-horse-battery" not in cmdline
    finally:
        os.killpg(proc.pid, 9)
        proc.wait(timeout=10)
        log.close()
