"""``WAKEFUL_PROXY_PROCESSES=2``: the real ``wakeful proxy`` serves the one address from two
processes (uvicorn's workers), each closed to its user's other processes and replaced when it
dies; a bad value stops it before it listens. Which process answered is what ``/healthz`` says
(``process``), on the same connection as the request it served."""

from __future__ import annotations

import http.client
import json
import os
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import pytest
from proxy_support import WAKEFUL, Stack, proxy_env

from same_user import environ_as_seen_by_the_same_user, without_capabilities_that_read_any_process
from wakeful.cli.processes import free_port, wait_for

pytestmark = [pytest.mark.postgres, pytest.mark.processes,
              pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc and prctl are Linux's")]


@dataclass
class Proxies:
    url: str
    parent: subprocess.Popen
    log: Path

    def children(self) -> set[int]:
        pid = self.parent.pid
        return {int(c) for task in Path(f"/proc/{pid}/task").iterdir()
                for c in (task / "children").read_text().split()}

    def listening(self) -> bool:
        try:
            return self.process() > 0
        except httpx.HTTPError:
            return False

    def process(self) -> int:
        """The process that answers a fresh connection's /healthz."""
        assert self.parent.poll() is None, self.log.read_text()[-3000:]
        return int(httpx.get(self.url + "/healthz", timeout=10).json()["process"])

    def processes_answering(self, n: int, timeout: float = 30) -> set[int]:
        """Fresh connections until ``n`` processes answered; those processes."""
        seen: set[int] = set()

        def enough() -> bool:
            seen.add(self.process())
            return len(seen) >= n

        wait_for(enough, timeout, f"{n} processes answering")
        return seen


@pytest.fixture(scope="module")
def proxies(stack: Stack) -> Iterator[Proxies]:
    # Started as a container's default root would be (test_proxy_same_user.py): its children
    # then have no capability that reads any process, and only their own flag closes them.
    url = f"http://127.0.0.1:{free_port()}"
    env = proxy_env(stack.home, stack.database_url, stack.home / "agent.toml", url, WAKEFUL_PROXY_PROCESSES="2",
                    WAKEFUL_TEST_SHOP_TOKEN=stack.shop_secret, WAKEFUL_TEST_ANTHROPIC_KEY=stack.anthropic_secret)
    log = stack.home / "logs" / "proxy-two.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "ab") as out:
        parent = subprocess.Popen([WAKEFUL, "proxy"], env=env, stdout=out, stderr=subprocess.STDOUT,
                                  stdin=subprocess.DEVNULL, start_new_session=True,
                                  preexec_fn=without_capabilities_that_read_any_process)
    proxies = Proxies(url, parent, log)
    try:
        wait_for(proxies.listening, 60, "the proxy's /healthz")
        yield proxies
    finally:
        parent.terminate()  # the parent stops its children, then itself
        try:
            parent.wait(timeout=20)
        except subprocess.TimeoutExpired:
            pass
        try:
            os.killpg(parent.pid, signal.SIGKILL)  # whatever it left behind
        except ProcessLookupError:
            pass
        parent.wait()


def _forward_on_one_connection(proxies: Proxies, grant: str, n: int) -> int:
    """/healthz, then an allowed request on the same connection: the process that served it."""
    host, port = urlsplit(proxies.url).hostname, urlsplit(proxies.url).port
    conn = http.client.HTTPConnection(host, port, timeout=10)
    try:
        conn.request("GET", "/healthz")
        answer = conn.getresponse()
        process = json.loads(answer.read())["process"]
        local = conn.sock.getsockname()
        conn.request("GET", f"/shop/orders/{n}", headers={"X-Wakeful-Grant": grant})
        answer = conn.getresponse()
        answer.read()
        assert conn.sock is not None and conn.sock.getsockname() == local, "the request went on a new connection"
        assert answer.status == 200
        return process
    finally:
        conn.close()


def test_two_processes_answer_the_one_address_and_each_request_leaves_one_audit_row(
        stack: Stack, proxies: Proxies) -> None:
    grant = stack.grant("px-two", ["shop"])
    served_by: list[int] = []  # the process of each request, in order

    def both_served() -> bool:
        served_by.append(_forward_on_one_connection(proxies, grant, len(served_by)))
        return len(set(served_by)) >= 2

    wait_for(both_served, 30, "allowed requests served by two processes")
    assert set(served_by) <= proxies.children()  # the parent's children, not the parent
    sent = [f"/orders/{n}" for n in range(len(served_by))]
    assert sorted(e.path for e in stack.store.grants.audit("px-two", limit=1000)) == sorted(sent)
    assert sorted(p.removeprefix("/shop") for p in stack.upstream.paths() if p.startswith("/shop/orders/")) \
        == sorted(sent)  # each went upstream once


def test_each_process_is_closed_to_the_same_user(stack: Stack, proxies: Proxies) -> None:
    serving = proxies.processes_answering(2)
    for pid in {proxies.parent.pid, *serving}:
        seen = environ_as_seen_by_the_same_user(pid)
        assert stack.shop_secret not in seen and seen == "PermissionError", (pid, seen[:200])


def test_a_killed_process_is_replaced_and_the_address_keeps_answering(proxies: Proxies) -> None:
    before = proxies.processes_answering(2)
    children = proxies.children()
    killed = min(before)
    os.kill(killed, signal.SIGKILL)
    wait_for(lambda: killed not in proxies.children() and proxies.children() - children, 30,
             "a new child in place of the killed one")
    after = proxies.processes_answering(2)
    assert killed not in after and after - before  # the replacement answers beside the survivor
    assert proxies.parent.poll() is None


@pytest.mark.parametrize("value", ["0", "two"])
def test_a_bad_number_of_processes_stops_it_before_it_listens(stack: Stack, value: str) -> None:
    port = free_port()
    env = proxy_env(stack.home, stack.database_url, stack.home / "agent.toml", f"http://127.0.0.1:{port}",
                    WAKEFUL_PROXY_PROCESSES=value, WAKEFUL_TEST_SHOP_TOKEN=stack.shop_secret,
                    WAKEFUL_TEST_ANTHROPIC_KEY=stack.anthropic_secret)
    done = subprocess.run([WAKEFUL, "proxy"], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2, done.stderr
    [line] = done.stderr.splitlines()
    assert line.startswith("wakeful proxy: WAKEFUL_PROXY_PROCESSES must be a positive integer"), line
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(("127.0.0.1", port), timeout=5).close()
