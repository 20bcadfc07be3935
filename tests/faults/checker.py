"""The fault checker: after the system has drained, count what the faults cost.

Plain functions over a ``Store`` (read straight from its tables) and the logs a scenario
kept: the inputs it fed in, the claim log the workers wrote at the ``after_claim`` fault
point (``WAKEFUL_FAULTS_LOG``), and the lines the outbox channel wrote. Every count is a
number of violations: 0 is the claim, or what the scenario injected on purpose.
"""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sqlalchemy import select

from store import Store, StoreSettings
from store.retries import OUTAGE_REASON
from store.tables import events, outbox, runs

COUNTS = (
    "events_lost",            # fed in, but missing or not finished (done/dead) after the drain
    "events_untraceable",     # stored, but no input, timer or approval explains it
    "events_done_twice",      # in more than one committed "done" run
    "runs_overlapping",       # committed runs of one inbox by different generations overlap
    "attempts_not_claims",    # an event's attempts + waits differ from the claims logged for it
    "dead_below_cap",         # dead with fewer than max_attempts claims (an outage aside)
    "dead_outage_below_horizon",  # dead for an outage that had lasted less than the horizon
    "live_above_cap",         # not dead, yet claimed more than max_attempts times
    "dead_never_alone",       # dead, yet never run alone (claimed by itself, in a process of its own)
    "timer_slot_twice",       # one timer occurrence stored twice (or two within one period)
    "outbox_key_changed",     # one dispatch key delivered with different content
    "outbox_resent_at_most_once",  # an at-most-once key delivered more than once
    "outbox_message_twice",   # one outbox row delivered under two keys
    "outbox_gap_broken",      # a non-urgent send inside the gap after the previous one
)


@dataclass
class Inputs:
    """What a scenario fed in: event keys, and sources it expects the system to create."""

    keys: set[tuple[str, str, str]] = field(default_factory=set)  # (inbox, source, source_id)
    generated_sources: set[str] = field(default_factory=lambda: {"timer", "approval"})

    def add(self, inbox: str, source: str, source_id: str) -> None:
        self.keys.add((inbox, source, source_id))


def read_jsonl(path: Path | str) -> list[dict[str, Any]]:
    p = Path(path)
    if not p.exists():
        return []
    out = []
    for line in p.read_text().splitlines():
        if line.strip():
            try:
                out.append(json.loads(line))
            except ValueError:
                pass  # a line cut by SIGKILL mid-write: not a complete record
    return out


def claim_counts(fault_log: Iterable[dict[str, Any]]) -> Counter[int]:
    """Claims per event id, from the workers' ``after_claim`` lines."""
    claims: Counter[int] = Counter()
    for line in fault_log:
        if line.get("point") == "after_claim":
            claims.update(int(i) for i in line.get("events", []))
    return claims


def claimed_alone(fault_log: Iterable[dict[str, Any]]) -> set[int]:
    """Event ids run alone at least once: claimed in a batch of their own (an ``after_claim``
    of one) and not run inline in a process shared with other runs (an ``agent_call`` line
    with ``apart`` false; a prefork worker writes none: each run has a process)."""
    alone: Counter[int] = Counter()
    for line in fault_log:
        ids = line.get("events", [])
        if len(ids) == 1 and line.get("point") == "after_claim":
            alone[int(ids[0])] += 1
        elif len(ids) == 1 and line.get("point") == "agent_call" and not line.get("apart"):
            alone[int(ids[0])] -= 1
    return {event for event, n in alone.items() if n > 0}


def check(store: Store, *, inputs: Inputs, max_attempts: int,
          fault_log: list[dict[str, Any]] | None = None,
          sent: list[dict[str, Any]] | None = None, delivery: str = "at-least-once",
          outbox_gap: int | None = None, inboxes: set[str] | None = None,
          outage_horizon: int = StoreSettings().outage_horizon) -> dict[str, int]:
    """All the counts for one scenario; ``inboxes`` limits them to those (default: all)."""
    with store.engine.connect() as conn:
        ev = conn.execute(select(events.c.id, events.c.inbox, events.c.source, events.c.source_id,
                                 events.c.status, events.c.attempts, events.c.waits, events.c.error,
                                 events.c.outage_since, events.c.finished, events.c.payload)).all()
        rl = conn.execute(select(runs.c.id, runs.c.inbox, runs.c.generation, runs.c.started,
                                 runs.c.finished, runs.c.outcome, runs.c.event_ids)).all()
        ob = conn.execute(select(outbox.c.id, outbox.c.inbox, outbox.c.urgent, outbox.c.dispatch_key,
                                 outbox.c.claimed_at, outbox.c.sent_at)).all()
    if inboxes is not None:
        ev = [e for e in ev if e.inbox in inboxes]
        rl = [r for r in rl if r.inbox in inboxes]
        ob = [o for o in ob if o.inbox in inboxes]
        sent = [s for s in (sent or []) if s.get("inbox") in inboxes]
        inputs = Inputs({k for k in inputs.keys if k[0] in inboxes}, inputs.generated_sources)
    counts = dict.fromkeys(COUNTS, 0)
    counts.update(_events(ev, inputs, max_attempts, outage_horizon))
    counts.update(_runs(rl))
    if fault_log is not None:
        claims = claim_counts(fault_log)
        # A run that said "try later" gave its claim's attempt back and counted a wait instead.
        counts["attempts_not_claims"] = sum(1 for e in ev if e.attempts + e.waits != claims.get(e.id, 0))
        # A retried event is claimed alone and, in a dense worker, run apart: an event parked
        # dead without ever failing alone may have been killed by a neighbour.
        alone = claimed_alone(fault_log)
        counts["dead_never_alone"] = sum(1 for e in ev if e.status == "dead" and e.id not in alone)
    counts["timer_slot_twice"] = _timers(ev)
    counts.update(_outbox(sent or [], ob, delivery, outbox_gap))
    return counts


def _events(ev: list[Any], inputs: Inputs, max_attempts: int, outage_horizon: int) -> dict[str, int]:
    stored = {(e.inbox, e.source, e.source_id): e for e in ev}
    lost = sum(1 for k in inputs.keys if k not in stored or stored[k].status not in ("done", "dead"))
    lost += sum(1 for e in ev if e.source in inputs.generated_sources
                and e.status not in ("done", "dead"))
    untraceable = sum(1 for k, e in stored.items()
                      if k not in inputs.keys and e.source not in inputs.generated_sources)
    return {
        "events_lost": lost,
        "events_untraceable": untraceable,
        "dead_below_cap": sum(1 for e in ev if e.status == "dead" and e.attempts < max_attempts
                              and not _outage(e)),
        "dead_outage_below_horizon": sum(1 for e in ev if e.status == "dead" and _outage(e)
                                         and e.finished - e.outage_since < outage_horizon),
        "live_above_cap": sum(1 for e in ev if e.status != "dead" and e.attempts > max_attempts),
    }


def _outage(e: Any) -> bool:
    return (e.error or "").startswith(f"{OUTAGE_REASON}:")


def _runs(rl: list[Any]) -> dict[str, int]:
    done_in: Counter[int] = Counter()
    by_inbox: dict[str, list[Any]] = defaultdict(list)
    for r in rl:
        if r.outcome == "done":
            done_in.update(r.event_ids)
        by_inbox[r.inbox].append(r)
    overlapping = 0
    for inbox_runs in by_inbox.values():
        inbox_runs.sort(key=lambda r: r.id)  # commit order
        for a, b in zip(inbox_runs, inbox_runs[1:]):
            if b.generation < a.generation:  # a later commit by an older generation
                overlapping += 1
        for i, a in enumerate(inbox_runs):
            for b in inbox_runs[i + 1:]:
                if a.generation != b.generation and a.started < b.finished and b.started < a.finished:
                    overlapping += 1
    return {"events_done_twice": sum(1 for n in done_in.values() if n > 1),
            "runs_overlapping": overlapping}


def _timers(ev: list[Any]) -> int:
    slots: dict[tuple[str, str], list[int]] = defaultdict(list)
    twice = 0
    for e in ev:
        if e.source != "timer" or "@" not in e.source_id:
            continue
        timer_id, _, at = e.source_id.rpartition("@")
        slots[(e.inbox, timer_id)].append(int(at))
        scheduled = (e.payload or {}).get("scheduled_for")
        if scheduled is not None and int(scheduled) != int(at):
            twice += 1  # the key and the payload disagree on the slot
    for ats in slots.values():
        twice += len(ats) - len(set(ats))
    return twice


def _outbox(sent: list[dict[str, Any]], ob: list[Any], delivery: str,
            gap: int | None) -> dict[str, int]:
    bodies: dict[str, set[str]] = defaultdict(set)
    deliveries: Counter[str] = Counter()
    keys_of_row: dict[int, set[str]] = defaultdict(set)
    for line in sent:
        bodies[line["key"]].add(line["body"])
        deliveries[line["key"]] += 1
        for mid in line.get("message_ids", []):
            keys_of_row[int(mid)].add(line["key"])
    counts = {
        "outbox_key_changed": sum(1 for b in bodies.values() if len(b) > 1),
        "outbox_resent_at_most_once": (sum(n - 1 for n in deliveries.values())
                                       if delivery == "at-most-once" else 0),
        "outbox_message_twice": sum(1 for k in keys_of_row.values() if len(k) > 1),
        "outbox_gap_broken": 0,
    }
    if gap is not None:
        counts["outbox_gap_broken"] = _gap_broken(ob, gap)
    return counts


def _gap_broken(ob: list[Any], gap: int) -> int:
    """Per inbox, in the order dispatches were decided: a non-urgent dispatch claimed less than
    ``gap`` after the previous dispatch was marked sent (both on the database's clock)."""
    sends: dict[str, dict[str, dict[str, Any]]] = defaultdict(dict)
    for o in ob:
        if o.dispatch_key is None or o.sent_at is None:
            continue
        s = sends[o.inbox].setdefault(o.dispatch_key, {"claimed": o.claimed_at or o.sent_at,
                                                       "sent": o.sent_at, "urgent": False})
        s["urgent"] = s["urgent"] or bool(o.urgent)
        s["sent"] = max(s["sent"], o.sent_at)
    broken = 0
    for per_key in sends.values():
        ordered = sorted(per_key.values(), key=lambda s: (s["claimed"], s["sent"]))
        for a, b in zip(ordered, ordered[1:]):
            if not b["urgent"] and b["claimed"] - a["sent"] < gap:
                broken += 1
    return broken


def table(rows: dict[str, dict[str, int]]) -> str:
    """Scenario x count, as a Markdown table (what docs/faults.md shows)."""
    names = [c for c in COUNTS if any(r.get(c) for r in rows.values())] or list(COUNTS[:4])
    head = "| scenario | " + " | ".join(names) + " |"
    out = [head, "|" + "---|" * (len(names) + 1)]
    for scenario, r in rows.items():
        out.append(f"| {scenario} | " + " | ".join(str(r.get(c, 0)) for c in names) + " |")
    return "\n".join(out)
