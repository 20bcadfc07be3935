"""A worker paused *inside* its finish transaction (after the fenced check, before COMMIT).

The inbox row stays locked (``SELECT ... FOR UPDATE``) until PostgreSQL ends that session:
``idle_in_transaction_session_timeout`` (store/db.py). Correctness holds — nobody
can act on that inbox meanwhile, and the late COMMIT either lands (nobody took over) or
fails (session killed). But liveness: the sweep rings that inbox (its lease has lapsed on
the clock), and every run worker that takes the ring blocks in ``start_run`` on the row lock,
so a single paused process could stall *other* inboxes for up to a minute. Measured: both
healthy workers sat 22-23 s in ``start_run`` on the row lock (until the test resumed the
paused one), and four other inboxes' events waited with them.

Found here and fixed in the store: every PostgreSQL statement of the store waits at most
``lock_timeout`` (5 s) for a row lock, ``acquire``/``start_run`` answer "held" when it runs
out (the sweep rings again), and ``idle_in_transaction_session_timeout`` is 15 s.
"""

from __future__ import annotations

import signal
import time

import pytest

pytestmark = [pytest.mark.processes, pytest.mark.postgres, pytest.mark.redis]


def test_a_worker_paused_in_its_finish_does_not_stall_other_inboxes(make_stack) -> None:
    s = make_stack(WAKEFUL_LEASE_TTL="2", WAKEFUL_SWEEP_INTERVAL="0.5")
    control, beat = s.control(), s.beat()
    paused = s.worker("runs-paused", faults="before_finish_commit:sleep=2")
    s.ready(control, beat, paused)
    s.feed([("stuck", "chat", "m-1", {"say": "held in a transaction"})])
    s.wait(lambda: s.announced("before_finish_commit", "sleep"), "the worker inside its finish")
    s.kill(paused, signal.SIGSTOP)
    healthy = [s.worker("runs-a"), s.worker("runs-b")]
    s.ready(*healthy)
    time.sleep(3)  # the lease has lapsed; the sweep rings "stuck" to the healthy workers
    others = [f"other{i}" for i in range(4)]
    s.feed([(inbox, "chat", "m-1", {"say": "hello"}) for inbox in others])
    try:
        # Not a speed claim: a bound well under the 60 s idle-in-transaction timeout.
        s.wait(lambda: s.settled(others), "other inboxes done while one worker is paused", timeout=20)
    finally:
        s.kill(paused, signal.SIGCONT)
    s.wait(lambda: s.settled(), "everything settled once the paused worker goes on", timeout=90)
    counts = s.counts()
    assert {k: v for k, v in counts.items() if v} == {}
