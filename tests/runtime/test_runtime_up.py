"""`wakeful up`: the Procfile through honcho, on the embedded default, end to end."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from runtime_support import base_env, processes_with_home

pytestmark = pytest.mark.processes


def test_wakeful_up_runs_the_procfile_and_an_event_gets_its_run(tmp_path: Path) -> None:
    env = {**base_env(tmp_path), "WAKEFUL_SCAN_INTERVAL": "0.5", "WAKEFUL_SWEEP_INTERVAL": "0.5",
           "WAKEFUL_DISPATCH_INTERVAL": "0.5",
           "WAKEFUL_OUTBOX_CHANNEL": f"jsonl:{tmp_path / 'sent.jsonl'}"}
    home = Path(env["WAKEFUL_HOME"])
    wakeful = str(Path(sys.executable).with_name("wakeful"))
    log = open(tmp_path / "up.log", "wb")
    up = subprocess.Popen([wakeful, "up", "worker", "control", "beat"], env=env, cwd=tmp_path,
                          stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.monotonic() + 90
        while b"ready." not in (tmp_path / "up.log").read_bytes():
            assert up.poll() is None, (tmp_path / "up.log").read_text()
            assert time.monotonic() < deadline, (tmp_path / "up.log").read_text()
            time.sleep(0.1)
        ingest = subprocess.run([wakeful, "ingest", "alice", "chat", "m-1", '{"text": "hello"}'],
                                env=env, cwd=tmp_path, capture_output=True, text=True, timeout=60)
        assert ingest.stdout.strip() == "stored", ingest.stderr
        while not (tmp_path / "sent.jsonl").exists():
            assert up.poll() is None, (tmp_path / "up.log").read_text()
            assert time.monotonic() < deadline, (tmp_path / "up.log").read_text()
            time.sleep(0.1)
        sent = json.loads((tmp_path / "sent.jsonl").read_text().splitlines()[0])
        assert (sent["inbox"], sent["body"]) == ("alice", "hello")
    finally:
        os.kill(up.pid, signal.SIGINT)  # Ctrl-C: honcho stops every process it started
        try:
            up.wait(timeout=30)
        finally:
            os.killpg(up.pid, signal.SIGKILL) if up.poll() is None else None
            log.close()
    deadline = time.monotonic() + 15
    while processes_with_home(home) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert processes_with_home(home) == []


def _environ(pid: int) -> dict[str, str]:
    raw = Path(f"/proc/{pid}/environ").read_bytes()
    return dict(item.split("=", 1) for item in raw.decode(errors="replace").split("\0") if "=" in item)


def test_wakeful_up_gives_a_route_secret_to_the_proxy_alone(tmp_path: Path) -> None:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    config = tmp_path / "agent.toml"
    config.write_text('[agent]\nmodel = "m"\n\n[routes.shop]\nupstream = "http://127.0.0.1:9"\n'
                      'secret_env = "SHOP_TOKEN"\nallow = ["GET /"]\n')
    secret = "route-secret-for-the-proxy-only-0123456789"
    env = {**base_env(tmp_path), "SHOP_TOKEN": secret, "WAKEFUL_AGENT_CONFIG": str(config),
           "WAKEFUL_PROXY_URL": f"http://127.0.0.1:{port}"}
    home = Path(env["WAKEFUL_HOME"])
    wakeful = str(Path(sys.executable).with_name("wakeful"))
    log_path = tmp_path / "up.log"
    with open(log_path, "wb") as log:
        up = subprocess.Popen([wakeful, "up", "worker", "proxy"], env=env, cwd=tmp_path,
                              stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.monotonic() + 90

        def started() -> dict[str, dict[str, str]]:
            found = {}
            for pid in processes_with_home(home):
                try:
                    cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
                    found[cmdline] = _environ(pid)
                except OSError:
                    continue
            return found

        while True:
            procs = started()
            workers = {c: e for c, e in procs.items() if "celery" in c and "worker" in c}
            proxies = {c: e for c, e in procs.items() if "proxy" in c and "celery" not in c}
            if b"ready." in log_path.read_bytes() and workers and proxies:
                break
            assert up.poll() is None, log_path.read_text()
            assert time.monotonic() < deadline, log_path.read_text()
            time.sleep(0.2)
        assert all(e.get("SHOP_TOKEN") == secret for e in proxies.values())
        assert [c for c, e in workers.items() if "SHOP_TOKEN" in e] == []
    finally:
        os.kill(up.pid, signal.SIGINT)
        try:
            up.wait(timeout=30)
        finally:
            os.killpg(up.pid, signal.SIGKILL) if up.poll() is None else None
    deadline = time.monotonic() + 15
    while processes_with_home(home) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert processes_with_home(home) == []


def test_wakeful_up_skips_the_proxy_when_the_agent_config_has_no_routes(tmp_path: Path) -> None:
    """The README's own agent.toml has tools and no [routes.*]: the proxy has nothing to serve,
    so `up` says it skips it and starts the rest (it used to exit 2)."""
    config = tmp_path / "agent.toml"
    config.write_text('[agent]\nmodel = "m"\n')
    procfile = tmp_path / "Procfile"
    procfile.write_text("worker: celery -A tasks worker -Q wakeful.runs -n runs@%h -P solo -l INFO\n"
                        "proxy: wakeful proxy\n")
    env = {**base_env(tmp_path), "WAKEFUL_AGENT_CONFIG": str(config)}
    home = Path(env["WAKEFUL_HOME"])
    wakeful = str(Path(sys.executable).with_name("wakeful"))
    log_path = tmp_path / "up.log"
    with open(log_path, "wb") as log:
        up = subprocess.Popen([wakeful, "up", "--procfile", str(procfile)], env=env, cwd=tmp_path,
                              stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.monotonic() + 90
        while b"ready." not in log_path.read_bytes():
            assert up.poll() is None, log_path.read_text()
            assert time.monotonic() < deadline, log_path.read_text()
            time.sleep(0.1)
        said = log_path.read_text()
        assert "wakeful up: skipping proxy (the agent config has no [routes.*] table: nothing to serve)" in said
        assert "proxy.1" not in said
    finally:
        os.kill(up.pid, signal.SIGINT)
        try:
            up.wait(timeout=30)
        finally:
            os.killpg(up.pid, signal.SIGKILL) if up.poll() is None else None
    deadline = time.monotonic() + 15
    while processes_with_home(home) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert processes_with_home(home) == []
