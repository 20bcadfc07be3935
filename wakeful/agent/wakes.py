"""Wakes the model sets: ``schedule_wake``, ``cancel_wake`` and ``list_wakes`` (a ``[wakes]``
table; without one they are not offered). docs/agent.md, "Wakes the model sets".

A wake is a timer of the inbox (store/timers.py, id ``wake:<tool_use_id>``) whose event
(source ``timer``) carries the model's note back to it. It is an Outcome change, never a
call made during the run: a run's ``schedule_wake`` and ``cancel_wake`` become the Outcome's
``timers`` and ``cancel_timers``, written by its fenced finish, so a fenced run's wakes never
exist. The policy governs them like any tool (wakeful/agent/policy.py): the two writes follow the
table's ``policy`` (and a tainted conversation turns ``allow`` into ``ask``); with ``ask`` the
call is an effect, and the effect executor writes the timer after the yes, in a transaction
fenced by the effect's attempt (store.timers.Wakes). ``list_wakes`` is a read (allowed
unless the table denies), answered from ``Run.timers()`` and this run's own changes.

The limits, each refused with an error tool_result that names it and says why (nothing is
written): ``min_delay`` (60 s) between now and a wake, and between a cron wake's
occurrences, so a loop of self-wakes cannot spin; ``max_pending`` (20) live wakes per inbox,
so they cannot pile up.
"""

from __future__ import annotations

import contextvars
import json
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from croniter import croniter

from store import Event, Timer, validate
from wakeful.settings import StoreSettings
from store.timers import WAKE_PREFIX, next_cron

from wakeful.agent.config import POLICIES, WAKES_TOOLS, ConfigError, no_unknown_keys, positive_int
from wakeful.agent.sources import ToolSource, register_table
from wakeful.agent.tool import Tool

SOURCE = "wakes"
NOTE_MAX = 2000
CRON_LOOKAHEAD = 48  # occurrences checked for the shortest gap of a cron wake
# The farthest a one-off wake may be set: past it a model's typo (seconds for days) would
# sit unnoticed for years; the store's due time is a 64-bit integer of seconds anyway.
MAX_AHEAD = 10 * 366 * 86400
_KEYS = {"policy", "min_delay", "max_pending", "approval_ttl"}
MAX_PAYLOAD = StoreSettings().max_payload_bytes

SCHEDULE_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "after_seconds": {"type": "integer", "minimum": 1, "maximum": MAX_AHEAD,
                          "description": "Wake once, this many seconds from now."},
        "at": {"type": "string", "description": "Wake once at this time, ISO 8601 "
               "(2026-12-24T09:00:00+01:00; without an offset, in tz)."},
        "cron": {"type": "string", "description": "Wake on this cron schedule "
                 "(minute hour day-of-month month day-of-week), in tz, until cancelled."},
        "tz": {"type": "string", "description": "IANA time zone (Europe/Berlin) for cron and for "
               "an `at` without an offset; UTC by default."},
        "note": {"type": "string", "maxLength": NOTE_MAX,
                 "description": "What to do when woken: it comes back to you with the wake."},
    },
    "required": ["note"],
    "additionalProperties": False,
}
CANCEL_SCHEMA: dict[str, Any] = {
    "type": "object", "properties": {"id": {"type": "string", "description": "The id schedule_wake returned."}},
    "required": ["id"], "additionalProperties": False}
LIST_SCHEMA: dict[str, Any] = {"type": "object", "properties": {}, "additionalProperties": False}

DESCRIPTIONS = {
    "schedule_wake": "Wake yourself later: once after_seconds from now, once at a time, or on a cron "
                     "schedule in a time zone. The note comes back to you when the wake fires. "
                     "Give exactly one of after_seconds, at, cron. Returns the wake's id.",
    "cancel_wake": "Cancel a pending wake by the id schedule_wake returned.",
    "list_wakes": "List the wakes you set that are still pending for this inbox.",
}
assert tuple(DESCRIPTIONS) == WAKES_TOOLS  # the names config.RESERVED_NAMES keeps for these tools


class WakeRefused(Exception):
    """A wake the limits or its input refuse: the model hears the message; nothing is written."""


@dataclass(frozen=True)
class Limits:
    # Seconds from now to a wake, and between two occurrences of a cron wake: a run that
    # wakes itself at once, again and again, would spend model calls in a loop.
    min_delay: int = 60
    # Live wakes of one inbox: each costs a run when it fires, and a model may forget them.
    max_pending: int = 20


class WakesSource:
    """The ``[wakes]`` table's three tools. ``call`` is the effect executor's path (a write
    asked and approved); in a run, :class:`RunWakes` answers them."""

    name = SOURCE

    def __init__(self, tools: list[Tool], limits: Limits) -> None:
        self._tools, self.limits = tools, limits

    def tools(self) -> list[Tool]:
        return self._tools

    def table_of(self, tool: Tool) -> str:
        return "[wakes]"

    def call(self, tool: Tool, input: dict[str, Any], call: Any) -> Any:
        store = _store.get()
        if store is None:
            raise RuntimeError(f"{tool.name} is written by the runtime's effect executor; "
                               "outside it, a run's wakes go into its Outcome (agent.wakes.RunWakes)")
        book = store.wakes
        if tool.name == "schedule_wake":
            timer = plan(input, self.limits, call.id, now=int(time.time()))
            status = book.write(call.inbox, call.id, call.attempt, timer, self.limits.max_pending)
            if status == "limit":
                raise WakeRefused(pending_limit(self.limits))
            if status == "superseded":
                raise RuntimeError("this attempt no longer holds the effect; nothing was written")
            return f"scheduled {timer.timer_id}: {timer.payload['set']} (approved)"
        if tool.name == "cancel_wake":
            status = book.cancel(call.inbox, call.id, call.attempt, str(input["id"]))
            if status == "unknown":
                raise WakeRefused(f"no pending wake {input['id']!r}; nothing was cancelled (list_wakes shows them)")
            if status == "superseded":
                raise RuntimeError("this attempt no longer holds the effect; nothing was cancelled")
            return f"cancelled {input['id']}"
        return listing([_pending(t) for t in store.timers(call.inbox) if _is_live_wake(t)])


@contextmanager
def executing(store: Any) -> Iterator[None]:
    """The effect executor's store while it runs one effect (wakeful/agent/effects.py): where an
    approved wake is written, fenced by the effect's attempt."""
    token = _store.set(store)
    try:
        yield
    finally:
        _store.reset(token)


_store: contextvars.ContextVar[Any] = contextvars.ContextVar("wakeful_wakes_store", default=None)


def parse(path: str, table: Any) -> list[ToolSource]:
    """``[wakes]``: ``policy`` (required: allow, ask or deny) for schedule_wake and
    cancel_wake; list_wakes is a read, allowed unless the policy is deny."""
    if not isinstance(table, dict):
        raise ConfigError(f"{path}: [wakes] must be a table (policy = \"allow\", min_delay, max_pending)")
    no_unknown_keys(path, "[wakes]", table, _KEYS)
    policy = table.get("policy")
    if policy not in POLICIES:
        raise ConfigError(f"{path}: [wakes]: policy must be one of {', '.join(POLICIES)}, got {policy!r}")
    limits = Limits(**{k: positive_int(path, "[wakes]", k, table[k]) for k in ("min_delay", "max_pending")
                       if k in table})
    ttl = positive_int(path, "[wakes]", "approval_ttl", table.get("approval_ttl", 3600))

    def tool(name: str, schema: dict[str, Any], effect: str, tool_policy: str) -> Tool:
        return Tool(name=name, policy=tool_policy, effect=effect, description=DESCRIPTIONS[name],
                    input_schema=schema, approval_ttl=ttl, source=SOURCE, trusted_output=True)

    tools = [tool("schedule_wake", SCHEDULE_SCHEMA, "write", policy),
             tool("cancel_wake", CANCEL_SCHEMA, "write", policy),
             tool("list_wakes", LIST_SCHEMA, "read", "deny" if policy == "deny" else "allow")]
    return [WakesSource(tools, limits)]


register_table("wakes", parse)


# -- what a wake is -------------------------------------------------------------------------

def plan(input: dict[str, Any], limits: Limits, tool_use_id: str, now: int) -> Timer:
    """The timer ``schedule_wake`` asks for, or ``WakeRefused`` saying what is wrong. A
    delay counts from ``now``; in a run the finish writes it (``after``: from the commit)."""
    ways = [k for k in ("after_seconds", "at", "cron") if k in input]
    if len(ways) != 1:
        raise WakeRefused("give exactly one of after_seconds, at or cron; nothing was scheduled")
    zone = _zone(input.get("tz"))
    note = str(input.get("note", ""))
    too_soon = (f"a wake must be at least {limits.min_delay} s away (min_delay of [wakes]), so that "
                "wakes cannot follow each other in a loop; nothing was scheduled")
    timer_id = WAKE_PREFIX + tool_use_id
    payload: dict[str, Any] = {"wake": timer_id, "note": note}
    try:  # what the store would refuse at the finish (a NUL, a lone surrogate), refused now
        validate.payload(payload, MAX_PAYLOAD)
    except ValueError as exc:
        raise WakeRefused(f"note: {exc}; nothing was scheduled") from None
    if "after_seconds" in input:
        after = int(input["after_seconds"])
        if after < limits.min_delay:
            raise WakeRefused(f"after_seconds={after}: {too_soon}")
        payload["set"] = f"once, {after} s after it was set"
        return Timer(timer_id, payload, after=after)
    if "at" in input:
        due = _instant(str(input["at"]), zone)
        if due - now < limits.min_delay:
            raise WakeRefused(f"at={input['at']!r} is {due - now} s from now: {too_soon}")
        if due - now > MAX_AHEAD:
            raise WakeRefused(f"at={input['at']!r} is more than ten years away; nothing was scheduled")
        payload["set"] = f"once at {iso(due)}"
        return Timer(timer_id, payload, due=due)
    cron = str(input["cron"])
    # A year field (a seventh) would let the schedule end, and the scan cannot advance a
    # cron timer past its last occurrence.
    if not croniter.is_valid(cron) or len(cron.split()) > 6:
        raise WakeRefused(f"cron={cron!r} is not a valid cron expression (five fields, or six with "
                          "seconds last); nothing was scheduled")
    try:
        gap = _shortest_gap(cron, zone, now)
    except ValueError:  # croniter's CroniterBadDateError: it never fires (30 February)
        raise WakeRefused(f"cron={cron!r} never fires; nothing was scheduled") from None
    if gap < limits.min_delay:
        raise WakeRefused(f"cron={cron!r} fires {gap} s apart: {too_soon}")
    payload["set"] = f"on cron {cron!r} in {zone.key}"
    # Its first occurrence is min_delay from the commit at the soonest, like any wake's.
    return Timer(timer_id, payload, after=limits.min_delay, cron=cron, tz=zone.key)


def pending_limit(limits: Limits) -> str:
    return (f"this inbox already has {limits.max_pending} pending wakes, the most allowed (max_pending "
            "of [wakes]), so that wakes cannot pile up; cancel one (cancel_wake) or wait for one to "
            "fire; nothing was scheduled")


def _shortest_gap(cron: str, zone: ZoneInfo, now: int) -> int:
    at, gap = next_cron(cron, zone, now), None
    for _ in range(CRON_LOOKAHEAD):
        after = next_cron(cron, zone, at)
        gap = after - at if gap is None else min(gap, after - at)
        at = after
    return int(gap or 0)


def _zone(tz: Any) -> ZoneInfo:
    try:
        return ZoneInfo(str(tz or "UTC"))
    except (ZoneInfoNotFoundError, ValueError):
        raise WakeRefused(f"tz={tz!r} is not a known IANA time zone (Europe/Berlin, America/New_York, "
                          "UTC); nothing was scheduled") from None


def _instant(text: str, zone: ZoneInfo) -> int:
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise WakeRefused(f"at={text!r} is not an ISO 8601 time (2026-12-24T09:00:00+01:00); "
                          "nothing was scheduled") from None
    return int((moment if moment.tzinfo else moment.replace(tzinfo=zone)).timestamp())


def iso(epoch: int) -> str:
    return datetime.fromtimestamp(epoch, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _is_live_wake(timer: Any) -> bool:
    return timer.id.startswith(WAKE_PREFIX) and not timer.done


def _pending(timer: Any) -> dict[str, Any]:
    return {"id": timer.id, "next": iso(timer.due), "set": timer.payload.get("set", ""),
            "note": timer.payload.get("note", "")}


def listing(wakes: list[dict[str, Any]]) -> str:
    return json.dumps(wakes, ensure_ascii=False) if wakes else "no pending wakes"


# -- inside a run ---------------------------------------------------------------------------

@dataclass
class RunWakes:
    """One run's wakes: what it schedules (``timers``) and cancels (``cancelled``), for its
    Outcome, counted against the inbox's pending wakes read once (``Run.timers()``)."""

    run: Any  # agent.Run
    limits: Limits = field(default_factory=Limits)
    timers: list[Timer] = field(default_factory=list)
    cancelled: list[str] = field(default_factory=list)
    _stored: dict[str, dict[str, Any]] | None = None

    @classmethod
    def of(cls, cfg: Any, run: Any) -> RunWakes:
        source = cfg.sources.get(SOURCE)
        return cls(run, source.limits if isinstance(source, WakesSource) else Limits())

    def answer(self, kind: str, tool: Tool, input: dict[str, Any], tool_use_id: str) -> tuple[str, bool] | None:
        """The policy's decision ``kind`` for a wake tool, answered: ``(content, is_error)``;
        None for an ``ask`` that passed the checks (it becomes an effect, written after the
        yes). Nothing runs here: the Outcome carries it."""
        try:
            if tool.name == "list_wakes":
                return listing(self._listed()), False
            if tool.name == "cancel_wake" and kind == "ask":
                self._check_cancel(str(input["id"]))
                return None
            if tool.name == "cancel_wake":
                return self._cancel(str(input["id"])), False
            timer = plan(input, self.limits, tool_use_id, int(time.time()))
            if len(self._live()) + len(self.timers) >= self.limits.max_pending:
                raise WakeRefused(pending_limit(self.limits))
        except WakeRefused as exc:
            return f"refused: {exc}", True
        if kind == "ask":
            return None
        self.timers.append(timer)
        return (f"scheduled {timer.timer_id}: {timer.payload['set']}; written when this run "
                "commits (cancel_wake with this id removes it)"), False

    def _live(self) -> dict[str, dict[str, Any]]:
        if self._stored is None:
            self._stored = {t.id: _pending(t) for t in self.run.timers() if _is_live_wake(t)}
        return {k: v for k, v in self._stored.items() if k not in self.cancelled}

    def _listed(self) -> list[dict[str, Any]]:
        mine = [{"id": t.timer_id, "next": iso(t.due) if t.due is not None else "counted from this run's commit",
                 "set": t.payload["set"], "note": t.payload["note"]} for t in self.timers]
        return list(self._live().values()) + mine

    def _check_cancel(self, wake_id: str) -> None:
        if wake_id not in self._live() and not any(t.timer_id == wake_id for t in self.timers):
            raise WakeRefused(f"no pending wake {wake_id!r}; nothing was cancelled (list_wakes shows them)")

    def _cancel(self, wake_id: str) -> str:
        self._check_cancel(wake_id)
        mine = [t for t in self.timers if t.timer_id == wake_id]
        if mine:
            self.timers.remove(mine[0])
            return f"cancelled {wake_id} (set in this run, so never written)"
        self.cancelled.append(wake_id)
        return f"cancelled {wake_id}, when this run commits (an occurrence that fired already still arrives)"


def arrival(event: Event) -> str | None:
    """A wake's event as the model reads it; None for any other event. The note is the
    model's own words, not an outsider's: it is not wrapped as data and taints nothing. (A
    wake asked for while the conversation held untrusted text was a write like any other:
    asked, and a human saw the note; the conversation it comes back to keeps its taint.)"""
    payload = event.payload or {}
    if event.source != "timer" or not event.source_id.startswith(WAKE_PREFIX) or "wake" not in payload:
        return None
    due = payload.get("scheduled_for")
    late = ""
    if payload.get("skipped"):
        late = f"; {payload['skipped']} earlier occurrences were missed and folded into this one"
    when = iso(due) if isinstance(due, int) else "now"
    return (f"[wake {payload['wake']}, which you set ({payload.get('set', '')}), for {when}{late}. "
            f"Your note:]\n{payload.get('note', '')}")
