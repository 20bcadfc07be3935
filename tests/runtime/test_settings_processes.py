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
    # A typo'd name is not ignored (the store would silently stay on its embedded default).
    "WAKEFUL_DATABSE_URL=postgresql://u:pw@127.0.0.1:1/x":
        "WAKEFUL_DATABSE_URL is not a wakeful setting; did you mean WAKEFUL_DATABASE_URL?",
    "WAKEFUL_OUTBOX_GAPP=10": "WAKEFUL_OUTBOX_GAPP is not a wakeful setting; did you mean WAKEFUL_OUTBOX_GAP?",
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


def test_a_worker_says_at_its_start_which_store_and_broker_it_uses(tmp_path: Path) -> None:
    """The line that makes a store left on its embedded default plain to see; a password in
    a URL is never shown."""
    env = {**base_env(tmp_path), "WAKEFUL_DATABASE_URL": "postgresql+psycopg://wakeful:pw-not-shown@127.0.0.1:1/x"}
    worker = subprocess.Popen(PROCESSES["worker"] + ["-n", "runs@%h"], cwd=tmp_path, env=env, text=True,
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        assert worker.stderr is not None
        said = next((line for line in worker.stderr if line.startswith("wakeful ")), "")
    finally:
        worker.kill()
        worker.wait()
    assert said.startswith("wakeful runs: store postgresql+psycopg://wakeful:***@127.0.0.1:1/x, broker sqla+sqlite:///")
    assert "(embedded: WAKEFUL_BROKER_URL is not set)" in said and "pw-not-shown" not in said
