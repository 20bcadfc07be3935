"""A bad setting, met by real processes: every one answers with one line that names the
variable and what it accepts, and exit status 2, never a traceback; importing any module of
ours with the same environment raises nothing (wakeful/settings.py is read at a process's start,
never at import)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from runtime_support import base_env

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
BAD = {
    "WAKEFUL_OUTBOX_GAP=x": "WAKEFUL_OUTBOX_GAP must be a whole number >= 0, got 'x'",
    "WAKEFUL_OUTBOX_GAP=-1": "WAKEFUL_OUTBOX_GAP must be a whole number >= 0, got '-1'",
    "WAKEFUL_AGENT=claud": "WAKEFUL_AGENT must be module:callable (or claude, demo), got 'claud'",
}
PROCESSES = {
    "wakeful check": [str(BIN / "wakeful"), "check"],
    "worker": [sys.executable, "-m", "celery", "-A", "tasks.application", "worker", "-l", "INFO",
               "-P", "solo", "--without-mingle", "--without-gossip"],
    "proxy": [str(BIN / "wakeful"), "proxy"],
}


@pytest.mark.parametrize("process", list(PROCESSES))
@pytest.mark.parametrize("setting", list(BAD))
def test_a_bad_setting_is_one_line_and_exit_2(tmp_path: Path, process: str, setting: str) -> None:
    name, _, value = setting.partition("=")
    done = subprocess.run(PROCESSES[process], cwd=tmp_path, capture_output=True, text=True, timeout=120,
                          env={**base_env(tmp_path), name: value})
    assert done.returncode == 2, done.stderr
    lines = (done.stdout + done.stderr).strip().splitlines()
    assert len(lines) == 1 and lines[0].endswith(BAD[setting]), done.stdout + done.stderr
    assert not (tmp_path / "home").exists()  # stopped before it made anything


def test_importing_every_module_with_a_bad_setting_raises_nothing(tmp_path: Path) -> None:
    modules = sorted(".".join(path.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")
                     for package in ("store", "tasks", "wakeful")
                     for path in (ROOT / package).rglob("*.py")
                     if "migrations" not in path.parts and path.name != "__main__.py")
    modules += ["beat_schedule"]
    code = f"import importlib\nfor m in {modules!r}:\n    importlib.import_module(m)\nprint('ok')"
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120,
                          env={**base_env(tmp_path), "WAKEFUL_OUTBOX_GAP": "x", "WAKEFUL_AGENT": "claud",
                               "WAKEFUL_WEB_MAX_BODY": "lots", "WAKEFUL_PROXY_URL": "ftp://x"})
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr
