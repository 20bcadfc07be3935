"""Scenario 14: runs that share a process (issue 22 item 3), shared by CI, the soak and
tests/runtime/test_runtime_dense_faults.py; each phase with a sync agent and with an async
one (the soak runs both; CI's scenario test runs the sync one, the dense fault tests the async
one at 100 and 50 runs, 500 and 200 on demand).

A dense run worker (Celery's threads pool: every run in flight in one process) is
SIGKILLed with at least 50 runs inside the agent: a fresh worker runs each of their events
again, once, with the lost attempt counted. Then a poison event that ``os._exit``s arrives
beside 50 healthy inboxes in flight: its first run (a fresh event, in the shared process)
takes the worker down with them, and the supervisor starts it again; from then on every
retried event runs apart, so the poison's later crashes take only itself: it alone is dead
at the cap, each healthy event is done at its second attempt, and the restarted worker
lives on. The runs in flight are counted from the agent's ``in_agent`` lines, never guessed
with a sleep.
"""

from __future__ import annotations

import signal
import uuid
from typing import Any

from harness import Stack  # type: ignore[import-not-found]
from checker import read_jsonl  # type: ignore[import-not-found]

IN_FLIGHT = 50
THREADS = 64  # the dense worker's pool: room for every run in flight at once
SYNC_AGENT = "fault_agents:agent"
ASYNC_AGENT = "fault_agents:async_agent"  # the same, ``async def``: its waits on the worker's loop


def dense_worker(s: Stack, name: str, agent: str = SYNC_AGENT, threads: int = THREADS) -> Any:
    worker = s.worker(name, pool="threads", concurrency=threads, extra_env={"WAKEFUL_AGENT": agent})
    s.ready(worker)
    return worker


def _in_agent(s: Stack, inboxes: set[str], after: int) -> set[str]:
    """Inboxes whose run is (or was) inside the agent, announced after line ``after``."""
    return {line["inbox"] for line in read_jsonl(s.fault_log)[after:]
            if line.get("point") == "in_agent" and line.get("inbox") in inboxes}


def _wait_in_flight(s: Stack, inboxes: list[str], after: int) -> None:
    names = set(inboxes)
    s.wait(lambda: _in_agent(s, names, after) == names,
           f"{len(names)} runs inside the agent at once", timeout=120)


def _feed_waiting(s: Stack, inboxes: list[str], retry_sleep: float) -> None:
    # The first run waits far longer than the scenario needs (it is killed in there); a
    # retry waits ``retry_sleep``, as a model call does.
    s.feed([(inbox, "chat", "m-1", {"sleep": 120, "sleep_retry": retry_sleep}) for inbox in inboxes])


def killed_in_flight(s: Stack, n: int = IN_FLIGHT, agent: str = SYNC_AGENT) -> dict[str, int]:
    """SIGKILL a dense worker with ``n`` runs inside the agent; a fresh one recovers them.
    Returns the phase's own counts (each 0 when it held)."""
    tag = uuid.uuid4().hex[:4]
    threads = max(THREADS, n + 16)  # a run in flight holds a thread of the pool, async or not
    worker = dense_worker(s, f"runs-dense-{tag}", agent, threads)
    inboxes = [f"inflight-{tag}-{i}" for i in range(n)]
    mark = s.log_length()
    _feed_waiting(s, inboxes, retry_sleep=0.5)
    _wait_in_flight(s, inboxes, mark)
    s.kill(worker, signal.SIGKILL)
    fresh = dense_worker(s, f"runs-dense-{tag}-fresh", agent, threads)
    # Each lost run is retried apart (a process of its own, 32 at a time): seconds per dozen.
    s.wait(lambda: s.settled(inboxes), "every run lost in the kill run again", timeout=max(120, n))
    s.kill(fresh, signal.SIGKILL)  # idle now: the next phase's worker is the only one
    events = [e for inbox in inboxes for e in s.store.events(inbox)]
    done_runs = {inbox: [r for r in s.store.operator.run_log(inbox) if r.outcome == "done"] for inbox in inboxes}
    return {
        "inflight_not_done": sum(1 for e in events if e.status != "done"),
        "inflight_attempts_not_two": sum(1 for e in events if e.attempts != 2),
        "inflight_done_runs_not_one": sum(1 for runs in done_runs.values() if len(runs) != 1),
    }


def poison_beside(s: Stack, n: int = IN_FLIGHT, agent: str = SYNC_AGENT) -> dict[str, int]:
    """A poison event that exits its process, fed while ``n`` healthy runs are inside the
    agent of one dense worker. Returns the phase's own counts (each 0 when it held)."""
    tag = uuid.uuid4().hex[:4]
    dense_worker(s, f"runs-dense-{tag}", agent, max(THREADS, n + 16))
    crashes_before = len(s.crashes)
    healthy = [f"beside-{tag}-{i}" for i in range(n)]
    mark = s.log_length()
    _feed_waiting(s, healthy, retry_sleep=2)
    _wait_in_flight(s, healthy, mark)
    poison = f"poison-{tag}"
    s.feed([(poison, "webhook", "poison", {"exit": True})])
    s.wait(lambda: s.settled(healthy + [poison]), "the poison dead and its neighbours done",
           timeout=max(180, 2 * n))
    # The worker is still serving: a new event after the poison's last crash is run.
    late = f"late-{tag}"
    s.feed([(late, "chat", "after-poison", {"n": 1})])
    s.wait(lambda: s.settled([late]), "an event after the poison")
    s.supervise()
    crashes = len(s.crashes) - crashes_before
    for proc in s.procs.procs:  # the worker and its restarts: the next phase brings its own
        if proc.name.startswith(f"runs-dense-{tag}") and proc.alive():
            s.kill(proc)
    [p] = s.store.events(poison)
    events = [e for inbox in healthy for e in s.store.events(inbox)]
    return {
        "poison_not_dead_at_cap": int(p.status != "dead" or p.attempts != s.setting("max_attempts")),
        "healthy_not_done": sum(1 for e in events if e.status != "done"),
        "healthy_attempts_above_two": sum(1 for e in events if e.attempts > 2),
        # One crash: the poison's first run, fresh, in the shared process. Its retries die
        # in processes of their own.
        "worker_crashes_not_one": abs(crashes - 1),
    }


def dense_worker_faults(make_stack, rng, scale: int = 1,  # type: ignore[no-untyped-def]
                        agents: tuple[str, ...] = (SYNC_AGENT, ASYNC_AGENT)):
    """Both phases with each agent: a sync one, whose runs wait in the pool's threads, and an
    async one, whose runs wait on the worker process's event loop."""
    from scenarios import Result, _drain  # type: ignore[import-not-found]

    s = make_stack()
    control, beat = s.control(), s.beat()
    s.ready(control, beat)
    counts: dict[str, int] = {}
    for _ in range(scale):
        for agent in agents:
            for phase in (killed_in_flight, poison_beside):
                for name, value in phase(s, agent=agent).items():
                    counts[name] = counts.get(name, 0) + value
    _drain(s, timeout=120)
    counts.update(s.counts())
    rounds = scale * len(agents)
    return Result(counts, injected={"sigkill_dense": rounds, "poison_exit": rounds},
                  measured={"events": len(s.inputs.keys), "dead": len(s.store.dead()),
                            "crashes": len(s.crashes)})
