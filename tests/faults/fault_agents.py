"""The agent the fault scenarios plug in (``WAKEFUL_AGENT=fault_agents:agent``).

Quick and deterministic, with payload switches for the poison scenario:

- ``raise``: raise (a run that fails every time);
- ``exit``: ``os._exit`` (an event that kills whichever worker reads it);
- ``hang``: sleep this many seconds without a heartbeat (a stuck tool call, past the lease
  and the run's soft time limit);
- ``work``: seconds of work with a heartbeat every 0.2 s;
- ``say``: the run writes one outbox message with this text (``urgent`` too, optionally).
"""

from __future__ import annotations

import os
import time

from store import Message, Outcome

from agent import Run


def agent(run: Run) -> Outcome:
    messages = []
    for event in run.events:
        p = event.payload or {}
        if p.get("raise"):
            raise RuntimeError(f"poison event {event.source_id}")
        if p.get("exit"):
            os._exit(13)
        if p.get("hang"):
            time.sleep(float(p["hang"]))
        if p.get("work"):
            end = time.monotonic() + float(p["work"])
            while time.monotonic() < end:
                time.sleep(0.2)
                run.heartbeat()
        if p.get("say"):
            messages.append(Message(str(p["say"]), urgent=bool(p.get("urgent"))))
    return Outcome(messages=messages)
