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
