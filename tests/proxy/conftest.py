"""One real proxy process (``wakeful proxy``) per test module, on a PostgreSQL database of its
own, in front of a fake upstream on loopback. The two canary secrets are in the proxy's
environment only: this process keeps them to check what the upstream received."""

from __future__ import annotations

import secrets
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from databases import create_pg_database, drop_pg_database
from proxy_support import WAKEFUL, Stack, Upstream, proxy_env, wait_healthy

from wakeful.cli.processes import Processes, free_port
from store import Store


def routes_toml(upstream: str, closed_port: int) -> str:
    return f"""
[agent]
model = "claude-test"

[routes.shop]
upstream = "{upstream}/shop"
secret_env = "WAKEFUL_TEST_SHOP_TOKEN"
allow = ["GET /orders/", "POST /refunds", "GET /stream", "GET /slow", "GET /big", "GET /gzip", "GET /br",
         "GET /xgzip", "GET /encoded/"]

[routes.anthropic]
upstream = "{upstream}/anthropic"
secret_env = "WAKEFUL_TEST_ANTHROPIC_KEY"
header = "x-api-key"
allow = ["POST /v1/messages"]

[routes.down]
upstream = "http://127.0.0.1:{closed_port}"
secret_env = "WAKEFUL_TEST_SHOP_TOKEN"
allow = ["GET /"]
"""


@pytest.fixture(scope="module")
def stack(pg_template: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    name = f"wakeful_px_{uuid.uuid4().hex[:12]}"
    database_url = create_pg_database(name, template=pg_template)
    home = tmp_path_factory.mktemp("proxy")
    upstream = Upstream().start()
    config = home / "agent.toml"
    config.write_text(routes_toml(upstream.url, free_port()))
    shop_secret = "shop-canary-" + secrets.token_hex(16)
    anthropic_secret = "sk-ant-canary-" + secrets.token_hex(16)
    url = f"http://127.0.0.1:{free_port()}"
    procs = Processes(proxy_env(home, database_url, config, url), home / "logs")
    proc = procs.start("proxy", [WAKEFUL, "proxy"], extra_env={
        "WAKEFUL_TEST_SHOP_TOKEN": shop_secret, "WAKEFUL_TEST_ANTHROPIC_KEY": anthropic_secret})
    store = Store.connect(database_url, lease_ttl=60)
    try:
        wait_healthy(url, proc)
        yield Stack(store, upstream, url, proc, procs, shop_secret, anthropic_secret, database_url, home)
    finally:
        procs.stop_all()
        upstream.stop()
        store.dispose()
        drop_pg_database(name)
