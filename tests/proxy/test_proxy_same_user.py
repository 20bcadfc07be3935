"""The proxy holds every route's key: a process of the same user (a stdio MCP server a worker
started, any other program of that user) cannot read its environment (issue 54, item 8;
wakeful/same_user.py). Both are started as a container's default root would be: without the
capabilities that read any process anyway."""

from __future__ import annotations

import secrets
import subprocess
import sys
import time

import httpx
import pytest
from proxy_support import WAKEFUL, proxy_env

from same_user import environ_as_seen_by_the_same_user, without_capabilities_that_read_any_process
from wakeful.cli.processes import free_port


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc and prctl are Linux's")
def test_a_process_of_the_same_user_cannot_read_the_proxys_keys(stack) -> None:  # type: ignore[no-untyped-def]
    url = f"http://127.0.0.1:{free_port()}"
    key = "shop-canary-" + secrets.token_hex(16)
    env = proxy_env(stack.home, stack.database_url, stack.home / "agent.toml", url,
                    WAKEFUL_TEST_SHOP_TOKEN=key, WAKEFUL_TEST_ANTHROPIC_KEY="sk-ant-" + secrets.token_hex(8))
    proxy = subprocess.Popen([WAKEFUL, "proxy"], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                             preexec_fn=without_capabilities_that_read_any_process)
    try:
        deadline = time.monotonic() + 60
        while True:  # listening: past its start, where it closes itself
            try:
                if httpx.get(url + "/healthz", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert proxy.poll() is None and time.monotonic() < deadline, "the proxy did not start"
            time.sleep(0.1)
        seen = environ_as_seen_by_the_same_user(proxy.pid)
        assert key not in seen and seen == "PermissionError", seen[:200]
    finally:
        proxy.kill()
        proxy.wait()
