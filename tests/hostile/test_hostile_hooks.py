"""Per-inbox webhook secrets against a running ``python -m wakeful.web``: set with the ``wakeful``
command, in force without a restart, and a sender of one inbox cannot write into another."""

from __future__ import annotations

import subprocess
import sys
import time
import uuid
from pathlib import Path

import httpx
import pytest
from hostile_support import github_signed, stack_env

from wakeful.cli.processes import Processes, free_port, wait_for
from store import Store
from store.hook_secrets import new_key
from wakeful.web.hooks import REFRESH_SECONDS

pytestmark = [pytest.mark.postgres, pytest.mark.processes]

GLOBAL = "global-github-secret"


def wakeful(env: dict[str, str], *args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "wakeful.cli.main", *args], env=env, input=stdin,
                          capture_output=True, text=True, timeout=120)


def test_per_inbox_secrets_in_a_running_web_process(pg_url: str, tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    port = free_port()
    env = stack_env(home, pg_url, "", WAKEFUL_SECRETS_KEY=new_key(), WAKEFUL_GITHUB_SECRETS=GLOBAL,
                    WAKEFUL_WEB_PORT=str(port))
    del env["WAKEFUL_BROKER_URL"]  # the embedded broker under home: `wakeful init` makes it
    assert wakeful(env, "init").returncode == 0
    procs = Processes(env=env, logdir=home / "logs")
    web = procs.start("web", [sys.executable, "-m", "wakeful.web"], ready_marker="Application startup complete")
    a, b, c = (f"{n}-{uuid.uuid4().hex[:6]}" for n in "abc")
    try:
        procs.wait_ready(web, timeout=60)
        url = f"http://127.0.0.1:{port}"

        def post(inbox: str, secret: str) -> int:
            body, headers = github_signed(secret, {"n": uuid.uuid4().hex})
            return httpx.post(f"{url}/hooks/github/{inbox}", content=body, headers=headers,
                              timeout=10).status_code

        assert post(a, GLOBAL) == 202  # no secrets of its own yet: the global one applies
        done = wakeful(env, "hooks", "set", a, "github", "secret-of-a")
        assert done.returncode == 0, done.stderr
        set_at = time.monotonic()
        # B's secrets from stdin: they never show in `ps` or the shell history
        assert wakeful(env, "hooks", "set", b, "github", stdin="secret-of-b\n").returncode == 0
        wait_for(lambda: post(a, "secret-of-a") == 202, 3 * REFRESH_SECONDS, "A's own secret in force")
        took = time.monotonic() - set_at
        print(f"a new secret was in force {took:.1f}s after `wakeful hooks set`")
        assert post(b, "secret-of-a") == 401  # A's sender cannot write into B
        assert post(b, "secret-of-b") == 202
        assert post(a, GLOBAL) == 401 and post(c, GLOBAL) == 202
        listed = wakeful(env, "hooks", "list")
        assert a in listed.stdout and "secret-of" not in listed.stdout + listed.stderr
        assert wakeful(env, "hooks", "remove", a).returncode == 0
        wait_for(lambda: post(a, GLOBAL) == 202, 3 * REFRESH_SECONDS, "A back on the global secret")
        assert "verify deliveries to EVERY inbox without secrets of its own" in web.text()
        assert web.alive()
    finally:
        procs.stop_all()
    store = Store.connect(pg_url)
    try:
        assert {e.inbox for e in store.events(b)} == {b} and len(store.events(b)) == 1
    finally:
        store.dispose()
