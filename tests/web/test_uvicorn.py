"""The web edge as the Procfile runs it: ``python -m wakeful.web`` (uvicorn) on a loopback port,
with the runtime's own settings, doorbell and broker check, against a real store."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import anyio
import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from slow_clients import half_sent, half_sent_after_a_request, still_open
from web_support import APPROVAL_SECRET, GITHUB_SECRET, STRIPE_SECRET, WEBHOOK_SECRET
from store import Store
from wakeful.approval_tokens import approval_link
from web_signing import body_of, github_headers, stripe_headers

ROOT = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    def __init__(self, proc: subprocess.Popen, url: str, log: Path) -> None:  # type: ignore[type-arg]
        self.proc, self.url, self.log = proc, url, log

    def output(self) -> str:
        return self.log.read_text(errors="replace")


def start(db_url: str, home: Path, init: bool = True, **extra: str) -> Server:
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("WAKEFUL_")}
    env.update({
        "WAKEFUL_DATABASE_URL": db_url,
        "WAKEFUL_HOME": str(home / "var"),  # the embedded broker lives here, not in the repo
        "WAKEFUL_GITHUB_SECRETS": f"old-secret,{GITHUB_SECRET}",
        "WAKEFUL_STRIPE_SECRETS": STRIPE_SECRET,
        "WAKEFUL_WEBHOOK_SECRETS": WEBHOOK_SECRET,
        "WAKEFUL_APPROVAL_SECRET": APPROVAL_SECRET,
        "WAKEFUL_WEB_PORT": str(port),
        "PYTHONPATH": str(ROOT),
        **extra,
    })
    if init:
        # What `wakeful up` does before starting the Procfile: migrate, create the embedded broker.
        done = subprocess.run([sys.executable, "-c", "from wakeful.cli.main import main; main()", "init"],
                              cwd=home, env=env, capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stdout + done.stderr
    log = home / "web.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen([sys.executable, "-m", "wakeful.web"], cwd=home, env=env, stdout=out, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    server = Server(proc, url, log)
    deadline = time.monotonic() + 30
    while True:
        try:
            httpx.get(url + "/healthz", timeout=10)
            return server
        except httpx.TransportError:
            if proc.poll() is not None or time.monotonic() > deadline:
                proc.kill()
                pytest.fail(f"python -m wakeful.web did not start:\n{server.output()}")
            time.sleep(0.1)


def stop(server: Server) -> None:
    server.proc.send_signal(signal.SIGTERM)
    try:
        server.proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        server.proc.kill()
        server.proc.wait()


@pytest.fixture(scope="module")
def server(web_db_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    server = start(web_db_url, tmp_path_factory.mktemp("uvicorn"))
    yield server
    stop(server)


@pytest.fixture(scope="module")
def store(web_db_url: str) -> Iterator[Store]:
    s = Store.connect(web_db_url)
    yield s
    s.dispose()


def test_healthz_with_the_runtime_broker(server: Server) -> None:
    r = httpx.get(server.url + "/healthz", timeout=10)
    assert r.status_code == 200, (r.text, server.output())
    assert r.json() == {"store": "ok", "broker": "ok"}
    # It said at its start which store and broker it uses (issue 57), the store's password hidden.
    said = next(line for line in server.output().splitlines() if line.startswith("wakeful web: store "))
    assert "(embedded: WAKEFUL_BROKER_URL is not set)" in said and "(embedded: WAKEFUL_DATABASE_URL" not in said


def test_signed_delivery_over_tcp(server: Server, store: Store, inbox: str) -> None:
    body = body_of({"action": "opened", "number": 1})
    headers = github_headers(GITHUB_SECRET, body, event="pull_request")
    r = httpx.post(f"{server.url}/hooks/github/{inbox}", content=body, headers=headers, timeout=10)
    assert r.status_code == 202, (r.text, server.output())
    [event] = store.events(inbox)
    assert event.payload["type"] == "pull_request"
    assert "doorbell" not in server.output()  # the runtime's ring went through (it logs when not)


def test_same_delivery_100_times_concurrently_over_tcp(server: Server, store: Store, inbox: str) -> None:
    body = body_of({"id": "evt_tcp", "type": "charge.succeeded"})
    headers = stripe_headers(STRIPE_SECRET, body)

    async def fire() -> list[int]:
        limits = httpx.Limits(max_connections=100, max_keepalive_connections=0)
        async with httpx.AsyncClient(limits=limits, timeout=60) as client:
            codes: list[int] = []

            async def one() -> None:
                r = await client.post(f"{server.url}/hooks/stripe/{inbox}", content=body, headers=headers)
                codes.append(r.status_code)

            async with anyio.create_task_group() as tg:
                for _ in range(100):
                    tg.start_soon(one)
            return codes

    codes = anyio.run(fire)
    assert sorted(codes) == [200] * 99 + [202], (sorted(codes), server.output()[-2000:])
    assert len(store.events(inbox)) == 1


def test_declared_oversize_body_refused_before_it_is_sent(server: Server, store: Store, inbox: str) -> None:
    host, port = server.url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=10) as s:
        s.sendall(
            f"POST /hooks/github/{inbox} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            f"Content-Length: 1000000000\r\nX-Hub-Signature-256: sha256=00\r\n\r\n{{\"a\":".encode()
        )
        # we never send the other ~1 GB: the answer must come anyway
        answer = s.recv(4096).decode(errors="replace")
    assert answer.startswith("HTTP/1.1 413"), answer
    assert store.events(inbox) == []
    assert store.operator.rejections(limit=1)[0].reason.startswith("413 too_large")


def test_tokens_stay_out_of_the_access_log(server: Server, store: Store, inbox: str) -> None:
    inbox = f"team/{inbox}"  # a slash, percent-encoded in the link
    store.request_approval(inbox, "r/1", "ship it", 600)
    link = approval_link(inbox, "r/1", base_url=server.url, expires_in=600, secret=APPROVAL_SECRET)
    token = link.split("token=")[1]
    page = httpx.get(link, timeout=10)
    assert page.status_code == 200, page.text
    r = httpx.post(link, data={"answer": "yes"}, timeout=10)
    assert r.json()["outcome"] == "yes"
    assert store.events(inbox)[0].source_id == "r/1"
    time.sleep(0.2)  # let the log line reach the file (not a timing assertion)
    out = server.output()
    assert "POST /approvals/team/" in out  # the access log is on...
    assert token not in out and token.split(".")[1] not in out  # ...and never shows the token
    for secret in (GITHUB_SECRET, STRIPE_SECRET, WEBHOOK_SECRET, APPROVAL_SECRET):
        assert secret not in out


def test_broker_down_health_says_so_and_deliveries_still_land(web_db_url: str, store: Store, inbox: str,
                                                              tmp_path: Path) -> None:
    # Nothing listens on port 1: the health check reports it, a delivery is still stored
    # and answered 2xx (the doorbell is lost; the runtime's sweep rings later).
    server = start(web_db_url, tmp_path, init=False, WAKEFUL_BROKER_URL="redis://127.0.0.1:1/0",
                   WAKEFUL_WEB_HEALTH_TIMEOUT="1")
    try:
        r = httpx.get(server.url + "/healthz", timeout=15)
        assert r.status_code == 503, r.text
        assert r.json()["store"] == "ok" and r.json()["broker"] != "ok"
        body = body_of({"n": 1})
        r = httpx.post(f"{server.url}/hooks/github/{inbox}", content=body,
                       headers=github_headers(GITHUB_SECRET, body), timeout=30)
        assert r.status_code == 202, (r.text, server.output())
        assert len(store.events(inbox)) == 1
        metrics = httpx.get(server.url + "/metrics", timeout=10).text
        rings = {s.labels["outcome"]: s.value for f in text_string_to_metric_families(metrics)
                 if f.name == "wakeful_web_doorbells" for s in f.samples}
        assert sum(rings.values()) == 1, rings  # one ring tried; returned, late or failed
    finally:
        stop(server)


def test_requests_whose_headers_never_finish_are_dropped(web_db_url: str, tmp_path: Path) -> None:
    """Issue 23 item 9: 300 half-sent requests (and a keep-alive connection that stops halfway
    through its second request) are closed once WAKEFUL_WEB_HEADER_TIMEOUT passes, and
    /healthz answers meanwhile."""
    server = start(web_db_url, tmp_path, WAKEFUL_WEB_HEADER_TIMEOUT="1")
    try:
        socks = half_sent(server.url, 300) + [half_sent_after_a_request(server.url)]
        assert httpx.get(server.url + "/healthz", timeout=30).status_code == 200
        left = still_open(socks)
        assert left == 0, f"{left} of {len(socks)} half-sent requests still open after 60 s"
    finally:
        stop(server)
