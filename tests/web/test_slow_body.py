"""A body sent slowly after complete headers (issue 54): ``python -m wakeful.web`` answers 408
and closes once WAKEFUL_WEB_REQUEST_TIMEOUT passes since the request began, however steadily
the client keeps dribbling; /healthz answers meanwhile. Real process, real sockets."""

from __future__ import annotations

import time
from pathlib import Path

import httpx

from store import Store
from wakeful.cli.processes import wait_for

from slow_clients import dribble_until_closed, dribbling
from test_uvicorn import start, stop

# Complete headers of a webhook whose 100,000-byte body (under the 1 MiB limit) never arrives
# whole: the receiver reads the body before it can check a signature.
HEAD = (b"POST /hooks/github/dribbled HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
        b"X-Hub-Signature-256: sha256=00\r\nContent-Length: 100000\r\n\r\n{")


def test_a_body_dribbled_after_complete_headers_gets_408_and_is_closed(web_db_url: str, web_store: Store,
                                                                       tmp_path: Path) -> None:
    server = start(web_db_url, tmp_path, WAKEFUL_WEB_REQUEST_TIMEOUT="2")
    try:
        started = time.monotonic()
        socks = dribbling(server.url, HEAD, 20)
        assert httpx.get(server.url + "/healthz", timeout=30).status_code == 200
        said = dribble_until_closed(socks)
        elapsed = time.monotonic() - started
        assert None not in said, f"{said.count(None)} of {len(said)} dribbling requests still open after 60 s"
        assert all(s.startswith(b"HTTP/1.1 408 ") for s in said), said[:3]  # type: ignore[union-attr]
        assert elapsed < 30, elapsed
        # The operator sees them as refusals (within the refusals' write budget), no body kept.
        slow = wait_for(lambda: [r for r in web_store.operator.rejections() if r.inbox == "dribbled"], 30,
                        "the dribbled requests' refusals")
        assert {(r.reason.split(":")[0], r.excerpt) for r in slow} == {("408 incomplete_body", None)}
        assert "Traceback" not in server.output() and "Exception in ASGI" not in server.output(), server.output()
    finally:
        stop(server)
