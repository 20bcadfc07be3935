"""`wakeful demo`: the README's first command, on a machine with nothing configured."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from runtime_support import base_env, processes_with_home

pytestmark = pytest.mark.processes


def test_wakeful_demo_plays_the_story_and_stops_everything(tmp_path: Path) -> None:
    env = base_env(tmp_path)  # no WAKEFUL_ setting at all: the embedded default
    env["HOME"] = str(tmp_path)
    home = tmp_path / "demo"
    wakeful = Path(sys.executable).with_name("wakeful")
    out = subprocess.run([str(wakeful), "demo", "--dir", str(home)], env=env, cwd=tmp_path,
                         capture_output=True, text=True, timeout=240)
    assert out.returncode == 0, out.stdout + out.stderr
    text = out.stdout
    for line in ("1. A webhook delivered twice", "2. A burst of chat messages",
                 "3. A poison event", "4. A worker is killed (SIGKILL)", "5. A recurring timer",
                 "6. Approvals", "7. Three messages inside the outbox gap",
                 "Every step happened as described. Processes stopped."):
        assert line in text, text
    assert "-> 202; GitHub's redelivery -> 200 duplicate=True" in text  # through the web edge
    assert "-> 401 (bad_signature), nothing stored" in text
    assert "poison: dead, 3 attempts" in text
    assert "status done, attempts 2" in text
    assert "-> expired" in text
    assert "'update 1 | update 2'" in text
    assert processes_with_home(home) == []  # everything it started has stopped
    assert not home.exists()  # and it cleaned up after itself (no --keep)
    assert not (tmp_path / "var").exists()  # it never touched the user's ./var
