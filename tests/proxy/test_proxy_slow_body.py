"""A body sent slowly after complete headers (issue 54) to the real `wakeful proxy`: with a live
grant (so the proxy reads the body to forward it), it answers 408 and closes once
WAKEFUL_PROXY_REQUEST_TIMEOUT passes since the request began, however steadily the caller
keeps dribbling; nothing half-sent goes upstream; /healthz answers meanwhile."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from proxy_support import WAKEFUL, Stack, proxy_env, wait_healthy
from slow_clients import dribble_until_closed, dribbling

from wakeful.cli.processes import Proc, Processes, free_port, wait_for

pytestmark = [pytest.mark.postgres, pytest.mark.processes]


@pytest.fixture
def prompt(stack: Stack, tmp_path: Path) -> Iterator[tuple[str, Proc]]:
    """A second proxy on the same database and routes, whose requests must be whole in 2 s."""
    url = f"http://127.0.0.1:{free_port()}"
    env = proxy_env(tmp_path, stack.database_url, stack.home / "agent.toml", url,
                    WAKEFUL_PROXY_REQUEST_TIMEOUT="2")
    procs = Processes(env, tmp_path / "logs")
    proc = procs.start("proxy", [WAKEFUL, "proxy"], extra_env={
        "WAKEFUL_TEST_SHOP_TOKEN": stack.shop_secret, "WAKEFUL_TEST_ANTHROPIC_KEY": stack.anthropic_secret})
    try:
        wait_healthy(url, proc)
        yield url, proc
    finally:
        procs.stop_all()


def test_a_body_dribbled_after_complete_headers_gets_408_and_is_closed(stack: Stack, prompt: tuple[str, Proc]) -> None:
    url, proc = prompt
    grant = stack.grant("px-dribble", ["shop"])
    seen = len(stack.upstream.requests)
    head = (f"POST /shop/refunds HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            f"X-Wakeful-Grant: {grant}\r\nContent-Length: 100000\r\n\r\n{{").encode()
    started = time.monotonic()
    socks = dribbling(url, head, 20)
    assert httpx.get(url + "/healthz", timeout=30).status_code == 200
    said = dribble_until_closed(socks)
    elapsed = time.monotonic() - started
    assert None not in said, f"{said.count(None)} of {len(said)} dribbling requests still open after 60 s"
    assert all(s.startswith(b"HTTP/1.1 408 ") for s in said), said[:3]  # type: ignore[union-attr]
    assert elapsed < 30, elapsed
    assert len(stack.upstream.requests) == seen  # a body cut short never goes upstream

    def audited() -> list[Any] | None:
        rows = stack.store.grants.audit("px-dribble")
        return rows if len(rows) >= len(socks) else None

    # Audited as the proxy's app saw it, each: the caller gone before its body was whole.
    audit = wait_for(audited, 30, "the dribbled requests' audit rows")
    assert {(e.status, e.outcome) for e in audit} == {(499, "client_gone")}  # type: ignore[attr-defined]
    assert "Traceback" not in proc.text(), proc.text()[-3000:]
