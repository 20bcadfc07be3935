"""The built-in demo agent: no model, just enough behaviour to show every rule.

It answers each run with one message summarising the batch (three quick messages make one
run and one reply), and reacts to a few payload fields so the demo and the tests can stage
the article's story:

- ``text``: something said; quoted back in the reply.
- ``fail``: raise with that text (a poison event: every run that touches it fails).
- ``crash``: end the worker process abruptly (a payload that kills whoever reads it).
- ``slow_first_attempt``: on the first attempt only, hang this many seconds without a
  heartbeat (a slow model call: the runtime keeps the lease; a worker killed or paused
  meanwhile loses it, and another worker takes over).
- ``work``: seconds of work with a heartbeat every 0.2 s (a long run that keeps its lease).
- ``every``: start a recurring timer (``timer_id``, default "tick") every N seconds.
- ``approval``: ``{"id", "action", "expires_in"}``: ask a human before acting.
- ``urgent``: the reply bypasses the outbox gap.
- ``silent``: no reply for this event.

Webhooks stored by the web edge (``{"type", "body"}``) are summarised by their type.
Timer ticks and approval answers/expiries come back as events of source ``timer`` and
``approval``. Memory keeps a run counter and the last run's facts (with the wall-clock time
the agent was called, which the demo uses to report wake-up latency).
"""

from __future__ import annotations

import os
import time
from typing import Any

from store import ApprovalRequest, Event, Message, Outcome, Timer

from wakeful.agent.run import Run


def agent(run: Run) -> Outcome:
    woke_at = time.time()
    lines: list[str] = []
    approvals: list[ApprovalRequest] = []
    timers: list[Timer] = []
    urgent = False
    for event in run.events:
        payload: dict[str, Any] = event.payload or {}
        _misbehave(run, event, payload)
        urgent = urgent or bool(payload.get("urgent"))
        if event.source == "approval":
            lines.append(_approval_line(payload))
        elif event.source == "timer":
            lines.append(_tick_line(payload))
        elif isinstance(payload.get("body"), dict) and "type" in payload:
            lines.append(_webhook_line(event, payload))
        elif not payload.get("silent"):
            lines.append(str(payload.get("text", f"{event.source}/{event.source_id}")))
        if payload.get("every"):
            timers.append(Timer(timer_id=str(payload.get("timer_id", "tick")),
                                payload={"note": payload.get("text", "tick")},
                                every=int(payload["every"])))
        if isinstance(payload.get("approval"), dict) and event.source != "approval":
            req = payload["approval"]
            approvals.append(ApprovalRequest(request_id=str(req["id"]), action=str(req["action"]),
                                             expires_in=int(req.get("expires_in", 3600))))
            lines.append(f"asked for approval of {req['action']!r} ({req['id']})")
    memory = {
        "runs": int(run.memory.get("runs", 0)) + 1,
        "last_run": {"woke_at": woke_at, "generation": run.generation,
                     "event_ids": [e.id for e in run.events]},
    }
    messages: list[str | Message] = []
    if lines:
        body = lines[0] if len(lines) == 1 else f"{len(lines)} things: " + " | ".join(lines)
        messages.append(Message(body, urgent=urgent))
    return Outcome(messages=messages, approvals=approvals, timers=timers, memory=memory)


def _misbehave(run: Run, event: Event, payload: dict[str, Any]) -> None:
    if payload.get("crash"):
        os._exit(70)  # no cleanup, no finish: as if the payload killed the process
    if payload.get("slow_first_attempt") and event.attempts == 1:
        time.sleep(float(payload["slow_first_attempt"]))
    if payload.get("work"):
        deadline = time.monotonic() + float(payload["work"])
        while time.monotonic() < deadline:
            time.sleep(0.2)
            run.heartbeat()
    if payload.get("fail"):
        raise RuntimeError(str(payload["fail"]))


def _approval_line(payload: dict[str, Any]) -> str:
    answer = payload.get("answer")
    if answer == "yes":
        return f"{payload.get('approval')}: approved, doing it"
    if answer == "expired":
        return f"{payload.get('approval')}: nobody answered in time, not doing {payload.get('action')!r}"
    return f"{payload.get('approval')}: declined ({answer}), not doing it"


def _webhook_line(event: Event, payload: dict[str, Any]) -> str:
    # What the web edge stores: {"type": <the sender's event type>, "body": <its JSON>}.
    body = payload["body"]
    what = " ".join(str(body[k]) for k in ("action", "number") if k in body)
    return f"{event.source} {payload.get('type') or 'event'} {what}".strip()


def _tick_line(payload: dict[str, Any]) -> str:
    skipped = payload.get("skipped") or 0
    note = payload.get("note", "tick")
    return f"{note} (scheduled {payload.get('scheduled_for')}, skipped {skipped})"
