"""The agent the fault scenarios plug in (``WAKEFUL_AGENT=fault_agents:agent``).

Quick and deterministic, with payload switches for the poison scenario:

- ``raise``: raise (a run that fails every time);
- ``exit``: ``os._exit`` (an event that kills whichever worker reads it);
- ``hang``: sleep this many seconds without a heartbeat (a stuck tool call, past the lease
  and the run's soft time limit);
- ``work``: seconds of work with a heartbeat every 0.2 s;
- ``sleep``: wait this many seconds without a heartbeat (a model call: the runtime keeps the
  lease), ``sleep_retry`` seconds instead on a retry; each wait is announced first in the
  fault log (``{"point": "in_agent", ...}``), so a scenario can count the runs in flight;
- ``hold``: wait (announced like ``sleep``) until the file this names exists: a model call
  that answers when the test says so;
- ``say``: the run writes one outbox message with this text (``urgent`` too, optionally);
- ``gc``: the run writes one outbox message saying how this process's cyclic collector is
  set (its thresholds and how many objects it keeps frozen), as JSON;
- ``ask``: one call to the model (the real SDK, no retries of its own, against the scripted
  Messages API at ``WAKEFUL_TEST_MODEL_URL``), whose reply is the run's message; the API
  away is the claude agent's "try later" (agent.claude.model_reply).

``async_agent`` is the same agent written ``async def`` (``WAKEFUL_AGENT=fault_agents:async_agent``):
its ``sleep`` and ``hold`` are awaited on the worker process's event loop, as an agent on an
async SDK awaits its model; every other switch is the sync agent's.
"""

from __future__ import annotations

import gc
import json
import os
import time

from store import Message, Outcome

from wakeful.agent import Run


def agent(run: Run, waited: bool = False) -> Outcome:
    messages = []
    for event in run.events:
        p = event.payload or {}
        if p.get("raise"):
            raise RuntimeError(f"poison event {event.source_id}")
        if p.get("exit"):
            os._exit(13)
        if p.get("hang"):
            time.sleep(float(p["hang"]))
        if p.get("sleep") and not waited:
            _announce_in_agent(run, event)
            time.sleep(_sleep_of(p, event))
        if p.get("hold") and not waited:
            _announce_in_agent(run, event)
            while not os.path.exists(str(p["hold"])):
                time.sleep(0.05)
        if p.get("work"):
            end = time.monotonic() + float(p["work"])
            while time.monotonic() < end:
                time.sleep(0.2)
                run.heartbeat()
        if p.get("say"):
            messages.append(Message(str(p["say"]), urgent=bool(p.get("urgent"))))
        if p.get("gc"):
            messages.append(Message(json.dumps({"thresholds": gc.get_threshold(), "frozen": gc.get_freeze_count()})))
        if p.get("ask"):
            messages.append(Message(_ask(str(p["ask"]))))
    return Outcome(messages=messages)


async def async_agent(run: Run) -> Outcome:
    import asyncio

    for event in run.events:
        p = event.payload or {}
        if p.get("exit"):
            os._exit(13)  # on the loop: the process goes, with every run it carries
        if p.get("sleep"):
            _announce_in_agent(run, event)
            await asyncio.sleep(_sleep_of(p, event))
        if p.get("hold"):
            _announce_in_agent(run, event)
            while not os.path.exists(str(p["hold"])):
                await asyncio.sleep(0.05)
    return agent(run, waited=True)


def _sleep_of(p: dict, event) -> float:  # type: ignore[no-untyped-def, type-arg]
    return float(p["sleep"] if event.attempts < 2 else p.get("sleep_retry", p["sleep"]))


def _announce_in_agent(run: Run, event) -> None:  # type: ignore[no-untyped-def]
    from tasks import faults

    faults._announce("in_agent", "log", event.attempts, {"inbox": run.inbox, "event": event.id})


_client = None


def _ask(text: str) -> str:
    global _client
    import anthropic

    from wakeful.agent.claude import model_reply

    if _client is None:
        _client = anthropic.Anthropic(base_url=os.environ["WAKEFUL_TEST_MODEL_URL"], api_key="fault-test",
                                      max_retries=0, timeout=10)
    reply = model_reply(_client, model="claude-scripted", max_tokens=64,
                        messages=[{"role": "user", "content": text}])
    return "".join(b.text for b in reply.content if b.type == "text")
