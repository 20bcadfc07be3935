"""A worker stopped past its lease, another takes the inbox over, the first wakes: its call
through the real proxy is refused (403, fenced) and never reaches the upstream; the new
holder's grant works."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from proxy_support import Stack

from wakeful.agent.egress import Egress
from wakeful.cli.processes import wait_for

pytestmark = [pytest.mark.postgres, pytest.mark.processes]
WORKER = str(Path(__file__).with_name("fenced_worker.py"))


def test_a_fenced_workers_late_call_is_refused_and_never_reaches_the_upstream(stack: Stack) -> None:
    inbox = "px-fenced"
    worker = subprocess.Popen([sys.executable, WORKER, stack.database_url, stack.proxy_url, inbox],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        first, status, generation = worker.stdout.readline().split()  # type: ignore[union-attr]
        assert (first, status) == ("first", "200")
        os.kill(worker.pid, signal.SIGSTOP)
        # its 2 s lease lapses while it is stopped; another worker takes the inbox over
        taken = wait_for(lambda: stack.store.acquire(inbox, "w2"), 30, "the takeover")
        assert taken == int(generation) + 1
        os.kill(worker.pid, signal.SIGCONT)
        worker.stdin.write("go\n")  # type: ignore[union-attr]
        worker.stdin.flush()  # type: ignore[union-attr]
        assert worker.stdout.readline().split() == ["late", "403", "fenced"]  # type: ignore[union-attr]
        assert worker.wait(timeout=30) == 0
    finally:
        if worker.poll() is None:
            os.kill(worker.pid, signal.SIGCONT)
            worker.kill()
    paths = stack.upstream.paths()
    assert "/shop/orders/before-the-stop" in paths and "/shop/orders/after-the-takeover" not in paths
    audit = [(e.generation, e.path, e.status, e.outcome) for e in stack.store.grants.audit(inbox)]
    assert audit == [(int(generation), "/orders/before-the-stop", 200, "ok"),
                     (int(generation), "/orders/after-the-takeover", 403, "fenced")]
    # the new holder's own grant goes through
    egress = Egress(stack.proxy_url, stack.store.grants.mint(inbox, "w2", taken, ["shop"], 600))
    assert egress is not None
    with egress.http("shop") as http:
        assert http.get("/orders/new-holder").status_code == 200
