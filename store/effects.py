"""Effects: a tool call that changes something, committed by a run's finish, executed after it.

The rules (docs/design.md section 9):

- An effect exists only once a fenced finish committed it (``add``, from ``outcomes.apply``),
  keyed ``(inbox, tool_use_id)``. A worker fenced off mid-run commits nothing, so the tool
  uses it proposed never run.
- An effect that needs a human is ``asked``: the same finish requests the approval under the
  tool use id and puts the request in the outbox (urgent, with a link marker that the
  dispatcher turns into a signed link). The run that reads the answer settles it (``settle``):
  yes -> ``ready``; no -> ``refused``; expired -> ``expired``. Only ``ready`` ever runs.
- The executor takes a ready effect in one transaction (``begin``: executing, attempts + 1),
  calls the tool outside any transaction, and records the result in another (``record``:
  done, and the result ingested as the event ``("tool", tool_use_id)`` that wakes the agent).
  An executor that died leaves the row ``executing``; once that is older than
  ``stale_after`` the next ``begin`` takes it again (at-least-once, same idempotency key) or
  marks it ``interrupted`` and tells the agent (at-most-once: never called twice).
- A tool whose upstream is down says "try later" (``postpone``): the effect is ready again
  after the outage delay (store/retries.py) and tried under the same idempotency key, up to
  the outage horizon; an at-most-once effect the upstream may have acted on is reported
  ``interrupted`` instead.

The source ``tool`` is written only here, by the runtime (never by an outside sender).
"""

from __future__ import annotations

import hashlib
import json
import time
from typing import Any

from sqlalchemy import Connection, and_, func, or_, select, update

from . import approvals, display, outbox, retries, validate
from . import inbox as inbox_rules
from .db import clock, insert
from .records import AT_LEAST_ONCE, AT_MOST_ONCE, Effect, EffectRow, InvalidOutcome
from .tables import effects
from .transactions import Transactions

SOURCE = "tool"
# In an approval request's body: replaced by a signed link where the outbox is dispatched
# (tasks/approval_links.py), so the worker that writes it never holds the signing key.
LINK_MARKER = "[[wakeful-approval-link:{}]]"
LINK_MARKER_PREFIX = "[[wakeful-approval-link:"
TOOL_MAX = 128
WORDS_MAX = 2000


def idempotency_key(inbox: str, tool_use_id: str) -> str:
    """Stable for one tool use, whatever executor tries it and how often."""
    digest = hashlib.sha256(json.dumps([inbox, tool_use_id]).encode()).hexdigest()
    return f"wakeful-tool-{digest[:40]}"


def defang(text: str) -> str:
    """Text from the model or a tool cannot carry a link marker of its own."""
    return text.replace("[[wakeful-approval-link", "[ [wakeful-approval-link")


# -- inside a run's finish ------------------------------------------------------------------

def apply(conn: Connection, s: Any, inbox: str, effects_: list[Effect], answered: list[str],
          generation: int, now: int) -> None:
    """A finish's part: commit the proposed effects, settle the answered ones."""
    for effect in effects_:
        add(conn, s, inbox, effect, generation, now)
    for tool_use_id in answered:
        settle(conn, inbox, str(tool_use_id), now)


def add(conn: Connection, s: Any, inbox: str, effect: Effect, generation: int, now: int) -> None:
    """Commit a proposed effect (and, with ``approval_ttl``, its approval request)."""
    if not isinstance(effect, Effect):
        raise InvalidOutcome(f"an Outcome's effects are Effect records, got {type(effect).__name__}")
    tool_use_id = validate.name("tool_use_id", effect.tool_use_id, 200)
    tool = validate.name("tool", effect.tool, TOOL_MAX)
    payload = validate.payload(effect.input, s.max_payload_bytes)
    if effect.delivery not in (AT_LEAST_ONCE, AT_MOST_ONCE):
        raise InvalidOutcome(f"effect delivery must be {AT_LEAST_ONCE!r} or {AT_MOST_ONCE!r}")
    ttl = effect.approval_ttl
    if ttl is not None and (not isinstance(ttl, int) or isinstance(ttl, bool) or ttl <= 0):
        raise InvalidOutcome(f"approval_ttl must be a positive number of seconds, got {ttl!r}")
    routed = approvals.approver(effect.approver) if ttl is not None else approvals.SELF
    words = defang(validate.text_value("words", effect.words or ""))[:WORDS_MAX]
    why = defang(validate.text_value("why", effect.why or ""))[:WORDS_MAX]
    stored = conn.execute(
        insert(conn, effects).values(
            inbox=inbox, tool_use_id=tool_use_id, tool=tool, input=payload, words=words, why=why,
            idempotency_key=idempotency_key(inbox, tool_use_id), delivery=effect.delivery,
            status="asked" if ttl is not None else "ready", attempts=0, generation=generation,
            created=now, updated=now)
        .on_conflict_do_nothing(index_elements=["inbox", "tool_use_id"])
        .returning(effects.c.tool_use_id)
    ).scalar()
    if stored is None or ttl is None:
        return
    approvals.request(conn, s, inbox, tool_use_id, f"{tool} {_compact(payload)}", ttl, now, routed)
    _send_request(conn, inbox, tool_use_id, tool, payload, words, why, now + ttl, routed, now)


def settle(conn: Connection, inbox: str, tool_use_id: str, now: int) -> str | None:
    """An asked effect after its answer: ready on yes, refused on no, expired on expiry.
    Returns the effect's status (None: no such effect)."""
    row = conn.execute(select(effects.c.status).where(
        effects.c.inbox == inbox, effects.c.tool_use_id == tool_use_id).with_for_update()).one_or_none()
    if row is None:
        return None
    if row.status != "asked":
        return row.status
    answer = approvals.standing(conn, inbox, tool_use_id)
    status = {"yes": "ready", "no": "refused", "expired": "expired"}.get(answer or "")
    if status is None:
        return row.status
    conn.execute(update(effects).where(effects.c.inbox == inbox, effects.c.tool_use_id == tool_use_id)
                 .values(status=status, updated=now))
    if approvals.approver_of(conn, inbox, tool_use_id) != approvals.SELF:
        _tell_requester(conn, inbox, tool_use_id, status, now)
    return status


def _send_request(conn: Connection, inbox: str, tool_use_id: str, tool: str, payload: dict[str, Any], words: str,
                  why: str, deadline: int, routed: str, now: int) -> None:
    """The approval request (with the link marker) to its approver; for another approver
    than the inbox's own user, the requester gets a notice without the link."""
    fields = {"inbox": inbox, "request_id": tool_use_id, "tool": tool, "input": payload, "words": words,
              "why": why, "deadline": deadline, "approver": routed}
    body = _approval_body(tool, payload, words, why, tool_use_id, deadline,
                          for_inbox=None if routed == approvals.SELF else inbox)
    where, _, name = routed.partition(":")
    if routed == approvals.SELF:
        outbox.write(conn, inbox, body, now, kind="approval", urgent=True, fields=fields)
        return
    if where == "inbox":
        outbox.write(conn, name, body, now, kind="approval", urgent=True, fields=fields)
    else:
        outbox.write(conn, inbox, body, now, kind="approval", urgent=True, fields=fields, channel=name)
    when = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(deadline))
    outbox.write(conn, inbox, f'The agent asked to run the tool "{display.escaped(tool)}"; it waits for '
                              f"approval (until {when}). You will be told what was decided.",
                 now, kind="notice", urgent=True,
                 fields={"request_id": tool_use_id, "tool": tool, "status": "waiting", "deadline": deadline})


# An effect's status after the answer: the decision as the requester's notice names it.
_DECIDED = {"ready": ("approved", "was approved; it runs now"),
            "refused": ("refused", "was refused; it does not run"),
            "expired": ("expired", "was not answered in time; it does not run")}


def _tell_requester(conn: Connection, inbox: str, tool_use_id: str, status: str, now: int) -> None:
    tool = conn.execute(select(effects.c.tool).where(
        effects.c.inbox == inbox, effects.c.tool_use_id == tool_use_id)).scalar() or ""
    decided, said = _DECIDED[status]
    outbox.write(conn, inbox, f'The request to run the tool "{display.escaped(tool)}" {said}.', now,
                 kind="notice", urgent=True, fields={"request_id": tool_use_id, "tool": tool, "status": decided})


def _compact(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def _approval_body(tool: str, payload: dict[str, Any], words: str, why: str, tool_use_id: str,
                   deadline: int, for_inbox: str | None = None) -> str:
    """The request as channels send it, by the approval page's rule (store/display.py)."""
    when = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(deadline))
    shown = display.for_approval(payload, words)
    flags = "".join(f"\n- {flag}" for flag in shown.flags)
    warning = f"\n{display.FLAGS_LABEL}{flags}" if flags else ""
    said = f"\n{display.WORDS_LABEL} {shown.words}" if shown.words else ""
    asked = f"\n{display.WHY_LABEL} {display.escaped(why)}" if why else ""
    # defanged whole: a key named in a flag is the model's text too
    shown_text = defang(f"{shown.input}{warning}{said}{asked}")
    whose = f" (inbox {display.escaped(for_inbox)})" if for_inbox is not None else ""
    return (f'Approval needed{whose}: the agent wants to run the tool "{display.escaped(tool)}" with this '
            f"input:\n{shown_text}\nAnswer before {when}: {LINK_MARKER.format(tool_use_id)}")


# -- the executor ---------------------------------------------------------------------------

def begin(conn: Connection, inbox: str, tool_use_id: str, stale_after: int, now: int) -> EffectRow | None:
    """Take an effect to execute it: ready, or executing by an executor silent for
    ``stale_after`` seconds (at-least-once). None when it is not ours to run; an at-most-once
    effect found stale is marked interrupted and the agent told, never run again."""
    row = conn.execute(select(effects).where(
        effects.c.inbox == inbox, effects.c.tool_use_id == tool_use_id).with_for_update()).one_or_none()
    if row is None:
        return None
    stale = row.status == "executing" and row.updated + stale_after <= now
    if row.status != "ready" and not stale:
        return None
    if stale and row.delivery == AT_MOST_ONCE:
        finish(conn, inbox, tool_use_id, row.tool, {
            "content": "the tool call was interrupted and, being at-most-once, was not tried again: "
                       "it may or may not have taken effect", "is_error": True}, "interrupted", now)
        return None
    conn.execute(update(effects).where(effects.c.inbox == inbox, effects.c.tool_use_id == tool_use_id)
                 .values(status="executing", attempts=row.attempts + 1, updated=now))
    return _row(row, status="executing", attempts=row.attempts + 1, updated=now)


def record(conn: Connection, inbox: str, tool_use_id: str, attempt: int, result: dict[str, Any],
           now: int) -> bool:
    """The executor's result (``{"content", "is_error"}``) for attempt ``attempt``: done, and
    ingested as the event that wakes the agent. False when another attempt took it over."""
    row = conn.execute(select(effects.c.status, effects.c.attempts, effects.c.tool).where(
        effects.c.inbox == inbox, effects.c.tool_use_id == tool_use_id).with_for_update()).one_or_none()
    if row is None or row.status != "executing" or row.attempts != attempt:
        return False
    finish(conn, inbox, tool_use_id, row.tool, result, "done", now)
    return True


def postpone(conn: Connection, s: Any, inbox: str, tool_use_id: str, attempt: int, reason: str,
             retry_after: int, maybe_done: bool, now: int) -> str | None:
    """Attempt ``attempt``'s tool said "try later" (its upstream is down): the effect's
    status after it. ``ready`` again after the outage delay (same idempotency key);
    ``interrupted`` for an at-most-once effect the upstream may have acted on
    (``maybe_done``); past the outage horizon ``done`` with an error result, the agent told.
    None when another attempt took it over."""
    mine = and_(effects.c.inbox == inbox, effects.c.tool_use_id == tool_use_id)
    row = conn.execute(select(effects.c.status, effects.c.attempts, effects.c.tool, effects.c.delivery)
                       .where(mine).with_for_update()).one_or_none()
    if row is None or row.status != "executing" or row.attempts != attempt:
        return None
    if maybe_done and row.delivery == AT_MOST_ONCE:
        finish(conn, inbox, tool_use_id, row.tool, {
            "content": f"the tool's upstream failed ({reason}) after the call may have reached it; "
                       "being at-most-once it was not tried again: it may or may not have taken effect",
            "is_error": True}, "interrupted", now)
        return "interrupted"
    values, past = retries.waiting_values(s, effects, retry_after, now)
    if conn.execute(select(past).where(mine)).scalar():
        finish(conn, inbox, tool_use_id, row.tool, {
            "content": f"given up: the tool's upstream stayed down past the outage horizon "
                       f"({s.outage_horizon} s); last: {reason}", "is_error": True}, "done", now)
        return "done"
    conn.execute(update(effects).where(mine).values(status="ready", updated=now, **values))
    return "ready"


def refuse(conn: Connection, inbox: str, tool_use_id: str, reason: str, now: int) -> bool:
    """A ready effect the executor will not run (its tool was removed or denied since): the
    agent is told, nothing runs."""
    row = conn.execute(select(effects.c.status, effects.c.tool).where(
        effects.c.inbox == inbox, effects.c.tool_use_id == tool_use_id).with_for_update()).one_or_none()
    if row is None or row.status not in ("ready", "executing"):
        return False
    finish(conn, inbox, tool_use_id, row.tool, {"content": reason, "is_error": True}, "refused", now)
    return True


def finish(conn: Connection, inbox: str, tool_use_id: str, tool: str, result: dict[str, Any],
           status: str, now: int) -> None:
    conn.execute(update(effects).where(effects.c.inbox == inbox, effects.c.tool_use_id == tool_use_id)
                 .values(status=status, result=result, updated=now))
    inbox_rules.insert_event(conn, inbox, SOURCE, tool_use_id,
                             {"tool_use_id": tool_use_id, "tool": tool, **result}, now)


def runnable(conn: Connection, stale_after: int, now: int, inbox: str | None, limit: int) -> list[tuple[str, str]]:
    """(inbox, tool_use_id) of effects ``begin`` would take now, oldest first."""
    query = select(effects.c.inbox, effects.c.tool_use_id).where(or_(
        and_(effects.c.status == "ready", effects.c.not_before <= now),
        and_(effects.c.status == "executing", effects.c.updated <= now - stale_after)))
    if inbox is not None:
        query = query.where(effects.c.inbox == inbox)
    return [(r.inbox, r.tool_use_id) for r in conn.execute(query.order_by(effects.c.updated).limit(limit))]


def view(conn: Connection, inbox: str | None, tool_use_id: str | None = None) -> list[EffectRow]:
    query = select(effects)
    if inbox is not None:
        query = query.where(effects.c.inbox == inbox)
    if tool_use_id is not None:
        query = query.where(effects.c.tool_use_id == tool_use_id)
    return [_row(r) for r in conn.execute(query.order_by(effects.c.created, effects.c.tool_use_id))]


def _row(r: Any, **changed: Any) -> EffectRow:
    values = {c: getattr(r, c) for c in ("inbox", "tool_use_id", "tool", "input", "words", "why",
                                         "idempotency_key", "delivery", "status", "attempts",
                                         "generation", "result", "created", "updated")}
    values.update(changed)
    values["words"] = values["words"] or ""
    values["why"] = values["why"] or ""
    return EffectRow(**values)


# The memory key under which an agent keeps its running totals (model calls, tokens, tool
# decisions) for /metrics: named here, with the query that sums them, so the web edge reads
# them without loading an agent. The value is the key stores already hold (the built-in
# agent's first name for it): renaming it would zero every inbox's totals.
AGENT_TOTALS_KEY = "claude_totals"


def figures(conn: Connection) -> dict[str, Any]:
    """For /metrics: effects by status, and the sums of the numbers (and of one level of
    nested counts) that each inbox's memory keeps under ``AGENT_TOTALS_KEY``."""
    from .tables import memory

    by_status = {r.status: r.n for r in conn.execute(
        select(effects.c.status, func.count().label("n")).group_by(effects.c.status))}
    totals: dict[str, Any] = {}
    for (value,) in conn.execute(select(memory.c.value).where(memory.c.key == AGENT_TOTALS_KEY)):
        for name, number in (value or {}).items():
            if isinstance(number, dict):
                nested = totals.setdefault(name, {})
                for sub, n in number.items():
                    nested[sub] = nested.get(sub, 0) + int(n)
            elif isinstance(number, int):
                totals[name] = totals.get(name, 0) + number
    return {"effects": by_status, "totals": totals}


class Effects:
    """The executor's and the views' calls (``store.effects``), one short transaction each."""

    def __init__(self, transactions: Transactions) -> None:
        self.transactions = transactions

    def begin(self, inbox: str, tool_use_id: str, *, stale_after: int, now: int | None = None) -> EffectRow | None:
        with self.transactions.transaction() as conn:
            return begin(conn, inbox, tool_use_id, stale_after, clock(conn, now))

    def record(self, inbox: str, tool_use_id: str, attempt: int, result: dict[str, Any], *,
               now: int | None = None) -> bool:
        with self.transactions.transaction() as conn:
            return record(conn, inbox, tool_use_id, attempt, result, clock(conn, now))

    def postpone(self, inbox: str, tool_use_id: str, attempt: int, reason: str, *, retry_after: int = 0,
                 maybe_done: bool = False, now: int | None = None) -> str | None:
        with self.transactions.transaction() as conn:
            return postpone(conn, self.transactions.settings, inbox, tool_use_id, attempt, reason, retry_after,
                            maybe_done, clock(conn, now))

    def refuse(self, inbox: str, tool_use_id: str, reason: str, *, now: int | None = None) -> bool:
        with self.transactions.transaction() as conn:
            return refuse(conn, inbox, tool_use_id, reason, clock(conn, now))

    def runnable(self, *, stale_after: int, inbox: str | None = None, limit: int = 100,
                 now: int | None = None) -> list[tuple[str, str]]:
        with self.transactions.transaction() as conn:
            return runnable(conn, stale_after, clock(conn, now), inbox, limit)

    def view(self, inbox: str | None = None, tool_use_id: str | None = None) -> list[EffectRow]:
        with self.transactions.transaction() as conn:
            return view(conn, inbox, tool_use_id)

    def figures(self) -> dict[str, Any]:
        with self.transactions.transaction() as conn:
            return figures(conn)

    def get(self, inbox: str, tool_use_id: str) -> EffectRow | None:
        rows = self.view(inbox, tool_use_id)
        return rows[0] if rows else None
