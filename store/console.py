"""The operator's console (wakeful/web/console/, docs/console.md): what it reads and the three
actions it takes, each a short transaction.

Reads: ``fleet`` (the inboxes that need attention first, with counts, and the last day's
charts), ``timeline`` (one inbox's events, runs, tool calls, approvals, messages and console
actions, newest first, paged) and ``search`` (by inbox, by an event's source key). Every
query follows an index, so its cost follows the rows it shows (or the live, dead and held
rows it counts), never the history: the bench (``python -m bench.console``, 100,000 inboxes
and 1,000,000 events) prints each plan. The indexes this needs beyond the hot path's are
declared below, next to the queries that use them, and created by migration 0013.

Actions: ``requeue`` (one dead event, or all of an inbox), ``answer`` (an approval, recorded
as answered by ``console:<name>``) and ``cancel_timer``. Each runs the store's own rule (the
one ``wakeful requeue`` / ``answer`` and ``store.cancel_timer`` run) and writes its audit row
(who, what, when, what came of it) in the same transaction: an action is never done without
its record, nor recorded without being done.

A page of the timeline is a merge of one stream per table, each read newest first by its own
key (ids; for effects and approvals their creation time and key), and the cursor carries one
bound per stream: a page never repeats or skips a row, whatever the times say.
"""

from __future__ import annotations

import base64
import heapq
import json
from dataclasses import dataclass, field, fields
from typing import Any

from sqlalchemy import (BigInteger, Column, Connection, Index, String, Table, and_, case, func, literal,
                        literal_column, or_, select, text, tuple_, union_all)

from . import approvals as approval_rules
from . import inbox as inbox_rules
from . import spend as spend_rules
from . import timers as timer_rules
from . import validate
from .db import clock
from .inbox import EVENT_COLUMNS, to_event
from .records import Approval, EffectRow, Event, InvalidCall, OutboxRow, RunRecord, TimerRow
from .tables import (INBOX_MAX, SOURCE_ID_MAX, Id, approvals, effects, events, inboxes, memory, metadata, outbox,
                     runs, spend, status_is, timers)
from .transactions import Transactions

# -- the schema the console adds (migration 0013) -------------------------------------------

# Who did what from the console, when, and what came of it: one row per action taken.
operator_actions = Table(
    "operator_actions",
    metadata,
    Column("id", Id, primary_key=True, autoincrement=True),
    Column("at", BigInteger, nullable=False),
    Column("actor", String(64), nullable=False),  # console:<user>
    Column("action", String(32), nullable=False),  # requeue, requeue_all, answer, cancel_timer
    Column("inbox", String(INBOX_MAX), nullable=False),
    Column("target", String(SOURCE_ID_MAX)),  # an event id, a request id, a timer id
    Column("detail", String(16)),  # the answer given
    Column("outcome", String(128), nullable=False),
    Index("ix_operator_actions_inbox", "inbox", "id"),
)
# An inbox's finished events, newest first (the live and dead ones have theirs already).
Index("ix_events_done", events.c.inbox, events.c.id, postgresql_where=text("status = 'done'"),
      sqlite_where=text("status = 'done'"))
# Search by an event's source key across inboxes (the unique key leads with the inbox).
Index("ix_events_source_id", events.c.source_id)
# An inbox's messages, newest first (the held-only index covers what waits to be sent).
Index("ix_outbox_inbox", outbox.c.inbox, outbox.c.id)
# Runs per minute over the last day (and retention's walk by age).
Index("ix_runs_finished", runs.c.finished)
# Approvals nobody has answered yet: their expiry timers, live (store/approvals.py).
Index("ix_timers_approvals", timers.c.due, postgresql_where=text("key_source = 'approval' AND NOT done"),
      sqlite_where=text("key_source = 'approval' AND done = 0"))
# The agents' spend per day: their rows only, not every inbox's.
Index("ix_spend_agent_day", spend.c.day, postgresql_where=text("scope = 'agent'"),
      sqlite_where=text("scope = 'agent'"))

# The memory key under which the built-in agent logs its last runs' model calls, tokens and
# tool decisions (wakeful/agent/claude.py LOG_KEY; tests/web/test_console.py keeps them equal).
AGENT_RUNS_KEY = "claude_runs"
ACTOR_MAX = 64
DAY = 86400
NEAR = 3600  # an approval this close to its deadline, or past it, is near
BUDGET_NEAR = 0.8  # a budget this much spent is near its ceiling
# Bounds of the ingest-to-agent latency histogram, seconds (the store keeps whole seconds).
LATENCY_BOUNDS = (0, 1, 2, 5, 10, 30, 60, 120, 300, 600, 1800, 3600, 4 * 3600, DAY)
APPROVAL_TIMER = approval_rules.timer_id("")
# An approval's expiry timer, live: the partial index's predicate as literals (so that a
# prepared statement's generic plan can still use it: tables.status_is says why).
WAITING_APPROVAL = and_(timers.c.key_source == literal_column(f"'{approval_rules.SOURCE}'"), timer_rules.LIVE)


# -- records --------------------------------------------------------------------------------

@dataclass(frozen=True)
class Action:
    """A console action, as audited."""

    id: int
    at: int
    actor: str
    action: str
    inbox: str
    target: str | None
    detail: str | None
    outcome: str


@dataclass(frozen=True)
class Done:
    """What an action did: its audit row, whether the inbox has new work to ring for, and the
    events a requeue put back (as they are now)."""

    action: Action
    ring: bool
    events: tuple[Event, ...] = ()


@dataclass(frozen=True)
class Trouble:
    """One inbox (or one approval) in an attention list."""

    inbox: str
    count: int
    at: int | None  # oldest, deadline, lapsed since, ... (see the kind)
    detail: str = ""  # a request id, a holder, a budget's figures


@dataclass(frozen=True)
class Attention:
    """One kind of trouble across the fleet: how many inboxes and items, and the first ones."""

    kind: str
    inboxes: int
    items: int
    rows: tuple[Trouble, ...]
    near: int = 0  # approvals: how many are due within NEAR seconds (or overdue)


@dataclass(frozen=True)
class Fleet:
    now: int
    totals: dict[str, int]
    attention: tuple[Attention, ...]
    runs_per_minute: tuple[tuple[int, int, int], ...]  # (minute, runs, of which errors), 1,440
    latency: tuple[tuple[int, int | None, int | None, int], ...]  # (hour, p50, p99, events), 24
    dead_per_day: tuple[tuple[int, int], ...]  # (day, events parked dead that day), 14
    spend_per_day: tuple[tuple[int, int, float, int], ...]  # (day, tokens, cost, calls), 14
    actions: tuple[Action, ...]  # the latest console actions


@dataclass(frozen=True)
class Item:
    """One step in an inbox's timeline. ``record``: an Event, RunRecord, EffectRow, Approval,
    OutboxRow or Action, by ``kind``."""

    kind: str
    at: int
    record: Any


@dataclass(frozen=True)
class Summary:
    """An inbox at a glance, counted from its live, dead and held rows (never its history)."""

    holder: str | None  # the lease's holder, while its lease is live or lapsed unreleased
    generation: int
    lease_until: int | None
    pending: int
    running: int
    dead: int
    oldest_pending: int | None  # when the oldest pending event arrived
    outage: int  # pending events waiting out an outage
    outage_since: int | None
    held: int  # messages not sent yet
    last_sent: int | None


@dataclass(frozen=True)
class Page:
    inbox: str
    now: int
    items: tuple[Item, ...]
    older: str | None  # the cursor of the next page; None on the last
    summary: Summary
    timers: tuple[TimerRow, ...]  # live ones, next due first
    dead: tuple[Event, ...]
    pending_approvals: tuple[Approval, ...]
    spend_today: tuple[Any, ...]  # store.spend.SpendRow: the inbox's, then each agent's
    spend_per_day: tuple[tuple[int, int, float, int], ...]  # the inbox's (day, tokens, cost, calls)
    # (generation, event ids) -> the agent's log entry for that run: model calls, tokens and
    # tool decisions ({tool_use_id: "tool:decision"}), when the agent keeps one
    decisions: dict[tuple[int, tuple[int, ...]], dict[str, Any]] = field(default_factory=dict)
    asked: frozenset[str] = frozenset()  # tool use ids of this page's effects that asked a human


@dataclass(frozen=True)
class Found:
    query: str
    inbox: str | None  # the query named an inbox the store knows
    events: tuple[Event, ...]  # events whose source key is the query, newest first


# -- the fleet --------------------------------------------------------------------------------

def fleet(conn: Connection, now: int, limit: int) -> Fleet:
    return Fleet(now, _totals(conn, now), _attention(conn, now, limit), _runs_per_minute(conn, now),
                 _latency(conn, now), _dead_per_day(conn, now), _spend_per_day(conn, now, None),
                 _latest_actions(conn, limit))


def _totals(conn: Connection, now: int) -> dict[str, int]:
    live = dict(conn.execute(select(events.c.status, func.count()).where(status_is("pending", "running"))
                             .group_by(events.c.status)).all())
    dead = conn.execute(select(func.count()).select_from(events).where(status_is("dead"))).scalar_one()
    oldest = conn.execute(select(func.min(events.c.id)).where(status_is("pending"))).scalar()
    oldest_at = conn.execute(select(events.c.created).where(events.c.id == oldest)).scalar() if oldest else None
    overdue = conn.execute(select(func.count()).select_from(timers).where(
        timer_rules.LIVE, timers.c.due <= now)).scalar_one()
    return {"pending": live.get("pending", 0), "running": live.get("running", 0), "dead": dead,
            "oldest_pending_age": now - oldest_at if oldest_at is not None else 0,
            "timers_overdue": overdue}


def _attention(conn: Connection, now: int, limit: int) -> tuple[Attention, ...]:
    return (_dead(conn, limit), _approvals_near(conn, now, limit), _lapsed(conn, now, limit),
            _outage(conn, limit), _held(conn, limit), _budgets(conn, now, limit), _waiting(conn, limit))


def _grouped(conn: Connection, kind: str, where: Any, at: Any, order: Any, limit: int, table: Table = events
             ) -> Attention:
    """Inboxes of the rows ``where`` picks, with their count and ``at``, first by ``order(n, at)``."""
    n = func.count().label("n")
    at = at.label("at")
    rows = conn.execute(select(table.c.inbox, n, at).where(where).group_by(table.c.inbox)
                        .order_by(*order(n, at), table.c.inbox).limit(limit)).all()
    inboxes_, items = conn.execute(select(func.count(func.distinct(table.c.inbox)), func.count())
                                   .select_from(table).where(where)).one()
    return Attention(kind, inboxes_, items, tuple(Trouble(r.inbox, r.n, r.at) for r in rows))


def _dead(conn: Connection, limit: int) -> Attention:
    return _grouped(conn, "dead", status_is("dead"), func.max(events.c.finished),
                    lambda n, at: (n.desc(), at.desc()), limit)


def _outage(conn: Connection, limit: int) -> Attention:
    return _grouped(conn, "outage", and_(status_is("pending"), events.c.outage_since.is_not(None)),
                    func.min(events.c.outage_since), lambda n, at: (at,), limit)


def _waiting(conn: Connection, limit: int) -> Attention:
    return _grouped(conn, "waiting", status_is("pending"), func.min(events.c.created), lambda n, at: (at,), limit)


def _held(conn: Connection, limit: int) -> Attention:
    return _grouped(conn, "held", outbox.c.sent_at.is_(None), func.min(outbox.c.created), lambda n, at: (at,), limit,
                    table=outbox)


def _approvals_near(conn: Connection, now: int, limit: int) -> Attention:
    """Approvals nobody has answered, soonest deadline first: their expiry timers are live
    (an answer settles its timer at once, store/approvals.py)."""
    rows = conn.execute(select(timers.c.inbox, timers.c.key_source_id, timers.c.due).where(WAITING_APPROVAL)
                        .order_by(timers.c.due, timers.c.inbox).limit(limit)).all()
    inboxes_, items, near = conn.execute(select(
        func.count(func.distinct(timers.c.inbox)), func.count(),
        _count(timers.c.due <= now + NEAR)).where(WAITING_APPROVAL)).one()
    return Attention("approvals", inboxes_, items, tuple(Trouble(r.inbox, 1, r.due, r.key_source_id) for r in rows),
                     near=int(near))


def _lapsed(conn: Connection, now: int, limit: int) -> Attention:
    """Inboxes with events left running under a lease past its TTL: the worker stopped
    renewing (killed, paused); the sweep hands the work to another."""
    running = select(events.c.inbox).where(status_is("running")).distinct().subquery()
    lapsed = and_(inboxes.c.holder.is_not(None), inboxes.c.lease_until < now)
    joined = inboxes.join(running, running.c.inbox == inboxes.c.inbox)
    rows = conn.execute(select(inboxes.c.inbox, inboxes.c.holder, inboxes.c.lease_until).select_from(joined)
                        .where(lapsed).order_by(inboxes.c.lease_until, inboxes.c.inbox).limit(limit)).all()
    count = conn.execute(select(func.count()).select_from(joined).where(lapsed)).scalar_one()
    return Attention("lapsed", count, count, tuple(Trouble(r.inbox, 1, r.lease_until, r.holder) for r in rows))


def _budgets(conn: Connection, now: int, limit: int) -> Attention:
    """Today's budgets (an inbox's, an agent's) at BUDGET_NEAR of a ceiling or past it."""
    day, share = spend_rules.day_of(now), int(BUDGET_NEAR * 10)
    tokens = spend.c.input_tokens + spend.c.output_tokens
    near = or_(spend.c.refused > 0, tokens * 10 >= spend.c.token_ceiling * share,
               spend.c.cost_nanos * 10 >= spend.c.cost_ceiling_nanos * share)
    inbox_rows = conn.execute(select(spend).where(spend.c.day == day, spend.c.scope == "inbox", near)
                              .order_by(spend.c.name).limit(limit)).mappings().all()
    agents = [row for row in spend_rules.today(conn, None, now) if _near(row)]  # summed over shards
    rows = [spend_rules._row(r) for r in inbox_rows] + agents
    count = conn.execute(select(func.count()).select_from(spend).where(
        spend.c.day == day, spend.c.scope == "inbox", near)).scalar_one() + len(agents)
    shown = tuple(Trouble(r.name if r.scope == "inbox" else f"agent {r.name}", r.refused, r.first_refused,
                          _budget_detail(r)) for r in rows[:limit])
    return Attention("budget", count, count, shown)


def _near(row: Any) -> bool:
    return bool(row.refused or (row.token_ceiling and row.tokens >= BUDGET_NEAR * row.token_ceiling)
                or (row.cost_ceiling and row.cost >= BUDGET_NEAR * row.cost_ceiling))


def _budget_detail(row: Any) -> str:
    tokens = f"{row.tokens:,} of {row.token_ceiling:,} tokens" if row.token_ceiling else f"{row.tokens:,} tokens"
    money = f"; {row.cost:.4f} of {row.cost_ceiling:.4f}" if row.cost_ceiling is not None else ""
    return tokens + money + (f"; {row.refused} call(s) refused" if row.refused else "")


def _runs_per_minute(conn: Connection, now: int) -> tuple[tuple[int, int, int], ...]:
    start = now - now % 60 - (DAY - 60)
    minute = (runs.c.finished // 60).label("minute")
    counted = {r.minute * 60: (r.n, r.errors) for r in conn.execute(
        select(minute, func.count().label("n"), _count(runs.c.outcome == "error").label("errors"))
        .where(runs.c.finished >= start).group_by(minute))}
    return tuple((m, *counted.get(m, (0, 0))) for m in range(start, start + DAY, 60))


def _latency(conn: Connection, now: int) -> tuple[tuple[int, int | None, int | None, int], ...]:
    """From an event's arrival to the claim that ran it last (whole seconds), per hour of the
    events finished in the last day: p50 and p99 from a histogram (the bucket's upper bound)."""
    start = now - now % 3600 - (DAY - 3600)
    waited = events.c.claimed_at - events.c.created
    bucket = case(*((waited <= b, i) for i, b in enumerate(LATENCY_BOUNDS)), else_=len(LATENCY_BOUNDS)).label("b")
    hour = (events.c.finished // 3600).label("hour")
    counts: dict[int, dict[int, int]] = {}
    for r in conn.execute(select(hour, bucket, func.count().label("n"))
                          .where(events.c.finished >= start, events.c.claimed_at.is_not(None))
                          .group_by(hour, bucket)):
        counts.setdefault(r.hour * 3600, {})[r.b] = r.n
    return tuple((h, _quantile(counts.get(h, {}), 0.5), _quantile(counts.get(h, {}), 0.99),
                  sum(counts.get(h, {}).values())) for h in range(start, start + DAY, 3600))


def _quantile(histogram: dict[int, int], q: float) -> int | None:
    total, seen = sum(histogram.values()), 0
    for b in sorted(histogram):
        seen += histogram[b]
        if seen >= q * total:
            return LATENCY_BOUNDS[b] if b < len(LATENCY_BOUNDS) else LATENCY_BOUNDS[-1] + 1
    return None


def _dead_per_day(conn: Connection, now: int) -> tuple[tuple[int, int], ...]:
    start = spend_rules.day_of(now) - 13 * DAY
    day = (events.c.finished // DAY).label("day")
    counted = dict(conn.execute(select(day, func.count()).where(status_is("dead"), events.c.finished >= start)
                                .group_by(day)).all())
    return tuple((d, counted.get(d // DAY, 0)) for d in range(start, start + 14 * DAY, DAY))


def _spend_per_day(conn: Connection, now: int, inbox: str | None) -> tuple[tuple[int, int, float, int], ...]:
    """Tokens, money and calls per UTC day, the last 14: the agents' (``inbox`` None), or one
    inbox's."""
    start = spend_rules.day_of(now) - 13 * DAY
    # The agents' rows by their partial index: its predicate as a literal, so a prepared
    # statement's generic plan can still use it (tables.status_is says why).
    whose = (spend.c.scope == literal_column("'agent'") if inbox is None
             else and_(spend.c.scope == "inbox", spend.c.name == inbox))
    counted = {r.day: (int(r.tokens or 0), int(r.cost or 0) / spend_rules.NANOS, int(r.calls or 0))
               for r in conn.execute(select(spend.c.day, func.sum(spend.c.input_tokens + spend.c.output_tokens)
                                            .label("tokens"), func.sum(spend.c.cost_nanos).label("cost"),
                                            func.sum(spend.c.calls).label("calls"))
                                     .where(whose, spend.c.day >= start).group_by(spend.c.day))}
    return tuple((d, *counted.get(d, (0, 0.0, 0))) for d in range(start, start + 14 * DAY, DAY))


def _latest_actions(conn: Connection, limit: int) -> tuple[Action, ...]:
    rows = conn.execute(select(operator_actions).order_by(operator_actions.c.id.desc()).limit(limit))
    return tuple(_action(r) for r in rows)


# -- one inbox's timeline ------------------------------------------------------------------------

# Steps of one second, in the order one causes the next: an operator's action, then what
# arrived, the run that read it, the tool calls and approvals it committed, what it said.
KINDS = ("action", "event", "run", "effect", "approval", "message")
_RANK = {kind: i for i, kind in enumerate(KINDS)}
PAGE_MAX = 200


def timeline(conn: Connection, inbox: str, cursor: str | None, limit: int, now: int) -> Page:
    bounds = decode(cursor)
    streams = [fetch(conn, inbox, bounds.get(kind), limit + 1) for kind, fetch in _STREAMS.items()]
    merged = heapq.merge(*streams, key=lambda s: (s[0].at, _RANK[s[0].kind]), reverse=True)
    taken = [step for step, _ in zip(merged, range(limit))]
    for item, bound in taken:
        bounds[item.kind] = bound
    more = sum(map(len, streams)) > len(taken)
    items = in_order([item for item, _ in taken])
    asked = frozenset(_asked(conn, inbox, [i.record.tool_use_id for i in items if i.kind == "effect"]))
    return Page(inbox, now, items, encode(bounds) if more else None, _summary(conn, inbox),
                _live_timers(conn, inbox), _dead_events(conn, inbox), _waiting_approvals(conn, inbox),
                tuple(spend_rules.today(conn, inbox, now)), _spend_per_day(conn, now, inbox),
                _decisions(conn, inbox), asked)


def in_order(items: list[Item]) -> tuple[Item, ...]:
    """Newest first; within one second (the store keeps whole seconds, and a webhook, its
    run, the tool call and the answer can all fall in one) in the order one step caused the
    next, placed by the event ids they follow: an event, then the run that read it, then what
    that run's finish wrote (its tool calls, their approvals, its messages); an answer given
    in the console just before the event it stored; actions among themselves in the order taken."""
    runs = [i.record for i in items if i.kind == "run"]
    effects = {i.record.tool_use_id: i.record for i in items if i.kind == "effect"}
    answers = {i.record.source_id: i.record.id for i in items if i.kind == "event" and i.record.source == "approval"}

    def run_at(at: int, generation: int | None = None) -> int:
        """Where the run that finished at ``at`` (of ``generation``; else the last) stands."""
        found = [max(r.event_ids, default=0) for r in runs if r.finished == at
                 and generation in (None, r.generation)]
        return max(found, default=0)

    def after(item: Item) -> int:
        r = item.record
        if item.kind == "event":
            return r.id
        if item.kind == "run":
            return max(r.event_ids, default=0)
        if item.kind == "effect":
            return run_at(r.created, r.generation)
        if item.kind in ("approval", "message"):
            asked = r.request_id if item.kind == "approval" else (r.fields or {}).get("request_id")
            effect = effects.get(asked)
            return run_at(effect.created, effect.generation) if effect is not None else run_at(item.at)
        return answers.get(r.target, 0) if r.action == "answer" else 0

    # Actions are numbered as they were taken: within one second a later one (a requeue after
    # an answer) stands at least where the one before it does, and above it.
    placed: dict[int, int] = {}
    last: tuple[int, int] = (-1, 0)  # (second, place) of the previous action
    for item in sorted((i for i in items if i.kind == "action"), key=lambda i: i.record.id):
        place = after(item)
        if last[0] == item.at:
            place = max(place, last[1])
        placed[item.record.id] = place
        last = (item.at, place)

    def key(i: Item) -> tuple[int, int, int, int]:
        if i.kind == "action":
            return i.at, placed[i.record.id], _RANK[i.kind], i.record.id
        return i.at, after(i), _RANK[i.kind], 0

    return tuple(sorted(items, key=key, reverse=True))


def encode(bounds: dict[str, Any]) -> str:
    return base64.urlsafe_b64encode(json.dumps(bounds, separators=(",", ":")).encode()).decode().rstrip("=")


def decode(cursor: str | None) -> dict[str, Any]:
    """A cursor back into its bounds; ``InvalidCall`` for anything ``encode`` did not make."""
    if not cursor:
        return {}
    try:
        bounds = json.loads(base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)))
    except ValueError:
        raise InvalidCall("not a timeline cursor") from None
    keyed = ("effect", "approval")
    if not isinstance(bounds, dict) or not all(
            k in _RANK and (isinstance(v, int) and not isinstance(v, bool) if k not in keyed else
                            isinstance(v, list) and len(v) == 2 and isinstance(v[0], int) and isinstance(v[1], str))
            for k, v in bounds.items()):
        raise InvalidCall("not a timeline cursor")
    return bounds


Step = tuple[Item, Any]  # an item and the bound that continues its stream after it


ID_MAX = 2 ** 63 - 1
# The events of an inbox newest first come from three indexes by (inbox, id), one per status
# group: the hot path's live and dead ones and the console's done one, which a finished event
# enters once (a full index would take an entry at each claim and finish as well).
EVENT_GROUPS = (("done",), ("pending", "running"), ("dead",))


def _keyset(table: Table, inbox: str, bound: int | None) -> Any:
    """``inbox``'s rows below ``bound`` as a range of (inbox, id): only an index by (inbox, id)
    reads it in order. (With ``inbox = :inbox`` the planner may walk the primary key backwards
    instead, betting on the inbox's rows being recent: for an inbox gone quiet, that is every
    newer row of every other inbox.)"""
    key = tuple_(table.c.inbox, table.c.id)
    return and_(key > tuple_(literal(inbox), literal(-1)), key < tuple_(literal(inbox), literal(bound or ID_MAX)))


def _newest(table: Table, inbox: str, bound: int | None, n: int, *where: Any) -> Any:
    return (select(table).where(_keyset(table, inbox, bound), *where)
            .order_by(table.c.inbox.desc(), table.c.id.desc()).limit(n))


def _by_id(table: Table, kind: str, at: str, record: Any) -> Any:
    """A stream of ``table``'s rows of an inbox, newest id first, below its bound."""

    def fetch(conn: Connection, inbox: str, bound: int | None, n: int) -> list[Step]:
        if table is events:
            parts = union_all(*(select(_newest(events, inbox, bound, n, status_is(*group)).subquery())
                                for group in EVENT_GROUPS)).subquery()
            query = select(parts).order_by(parts.c.id.desc()).limit(n)
        else:
            query = _newest(table, inbox, bound, n)
        return [(Item(kind, getattr(r, at), record(r)), r.id) for r in conn.execute(query)]

    return fetch


def _by_key(table: Table, kind: str, key: Any, record: Any, joined: Any = None) -> Any:
    """A stream of ``table``'s rows of an inbox, newest ``created`` first (then ``key``)."""

    def fetch(conn: Connection, inbox: str, bound: list[Any] | None, n: int) -> list[Step]:
        query = select(table, *joined[1:]).select_from(joined[0]) if joined else select(table)
        query = query.where(table.c.inbox == inbox)
        if bound is not None:
            created, last = bound
            query = query.where(or_(table.c.created < created, and_(table.c.created == created, key < last)))
        rows = conn.execute(query.order_by(table.c.created.desc(), key.desc()).limit(n))
        return [(Item(kind, r.created, record(r)), [r.created, getattr(r, key.name)]) for r in rows]

    return fetch


def _run(r: Any) -> RunRecord:
    return RunRecord(r.id, r.inbox, r.generation, r.holder, r.started, r.finished, r.outcome, tuple(r.event_ids),
                     r.error)


def _effect(r: Any) -> EffectRow:
    values = {f.name: getattr(r, f.name) for f in fields(EffectRow)}
    return EffectRow(**{**values, "words": r.words or "", "why": r.why or ""})


def _approval(r: Any) -> Approval:
    answered = r.payload or {}
    return Approval(r.inbox, r.request_id, r.action, r.deadline, r.created,
                    answered.get("answer") if r.payload is not None else None,
                    approver=r.approver or approval_rules.SELF, answered_by=answered.get("by"))


def _message(r: Any) -> OutboxRow:
    return OutboxRow(r.id, r.inbox, r.body, r.urgent, r.created, r.sent_at, r.dispatch_key, kind=r.kind,
                     fields=r.fields, channel=r.channel)


def _action(r: Any) -> Action:
    return Action(r.id, r.at, r.actor, r.action, r.inbox, r.target, r.detail, r.outcome)


_ANSWER = and_(events.c.inbox == approvals.c.inbox, events.c.source == approval_rules.SOURCE,
               events.c.source_id == approvals.c.request_id)
_STREAMS = {
    "action": _by_id(operator_actions, "action", "at", _action),
    "event": _by_id(events, "event", "created", to_event),
    "run": _by_id(runs, "run", "finished", _run),
    "effect": _by_key(effects, "effect", effects.c.tool_use_id, _effect),
    "approval": _by_key(approvals, "approval", approvals.c.request_id, _approval,
                        joined=(approvals.outerjoin(events, _ANSWER), events.c.payload)),
    "message": _by_id(outbox, "message", "created", _message),
}


def _summary(conn: Connection, inbox: str) -> Summary:
    lease = conn.execute(select(inboxes).where(inboxes.c.inbox == inbox)).one_or_none()
    pending, running, oldest, outage, outage_since = conn.execute(select(
        _count(status_is("pending")), _count(status_is("running")),
        func.min(case((status_is("pending"), events.c.created))),
        _count(and_(status_is("pending"), events.c.outage_since.is_not(None))),
        func.min(case((status_is("pending"), events.c.outage_since))),
    ).where(events.c.inbox == inbox, status_is("pending", "running"))).one()
    dead = conn.execute(select(func.count()).select_from(events).where(
        events.c.inbox == inbox, status_is("dead"))).scalar_one()
    held = conn.execute(select(func.count()).select_from(outbox).where(
        outbox.c.inbox == inbox, outbox.c.sent_at.is_(None))).scalar_one()
    return Summary(lease.holder if lease is not None else None, lease.generation if lease is not None else 0,
                   lease.lease_until if lease is not None and lease.holder else None, int(pending or 0),
                   int(running or 0), dead, oldest, int(outage or 0), outage_since, held,
                   lease.last_sent if lease is not None else None)


def _count(condition: Any) -> Any:
    return func.coalesce(func.sum(case((condition, 1), else_=0)), 0)


def _waiting_approvals(conn: Connection, inbox: str) -> tuple[Approval, ...]:
    waiting = select(timers.c.key_source_id).where(timers.c.inbox == inbox, WAITING_APPROVAL)
    rows = conn.execute(select(approvals).where(approvals.c.inbox == inbox, approvals.c.request_id.in_(waiting))
                        .order_by(approvals.c.deadline, approvals.c.request_id))
    return tuple(Approval(r.inbox, r.request_id, r.action, r.deadline, r.created, None,
                          approver=r.approver or approval_rules.SELF) for r in rows)


def _asked(conn: Connection, inbox: str, tool_use_ids: list[str]) -> list[str]:
    """Which of these tool uses asked a human first (their approval exists)."""
    if not tool_use_ids:
        return []
    return list(conn.execute(select(approvals.c.request_id).where(
        approvals.c.inbox == inbox, approvals.c.request_id.in_(tool_use_ids))).scalars())


def _live_timers(conn: Connection, inbox: str) -> tuple[TimerRow, ...]:
    rows = conn.execute(select(timers).where(timers.c.inbox == inbox, timer_rules.LIVE)
                        .order_by(timers.c.due, timers.c.timer_id).limit(PAGE_MAX))
    return tuple(TimerRow(id=r.timer_id, inbox=r.inbox, due=r.due, every=r.every, cron=r.cron, tz=r.tz,
                          misfire=r.misfire, payload=r.payload,
                          key=(r.key_source, r.key_source_id) if r.key_source else None, done=r.done) for r in rows)


def _dead_events(conn: Connection, inbox: str) -> tuple[Event, ...]:
    rows = conn.execute(select(*EVENT_COLUMNS).where(events.c.inbox == inbox, status_is("dead"))
                        .order_by(events.c.id.desc()).limit(PAGE_MAX))
    return tuple(to_event(r) for r in rows)


def _decisions(conn: Connection, inbox: str) -> dict[tuple[int, tuple[int, ...]], dict[str, Any]]:
    entries = conn.execute(select(memory.c.value).where(memory.c.inbox == inbox,
                                                        memory.c.key == AGENT_RUNS_KEY)).scalar()
    return {(e["generation"], tuple(sorted(e.get("events") or ()))): e for e in entries or ()
            if isinstance(e, dict) and isinstance(e.get("generation"), int)}


# -- search ---------------------------------------------------------------------------------------

def search(conn: Connection, query: str, limit: int) -> Found:
    """The inbox named ``query``, if the store knows it; the events whose source key is
    ``query`` (their source id, or ``source/source_id``), newest first."""
    key = events.c.source_id == query
    source, slash, source_id = query.partition("/")
    if slash and source and source_id:
        key = or_(key, and_(events.c.source == source, events.c.source_id == source_id))
    found = conn.execute(select(*EVENT_COLUMNS).where(key).order_by(events.c.id.desc()).limit(limit))
    return Found(query, query if known(conn, query) else None, tuple(to_event(r) for r in found))


def known(conn: Connection, inbox: str) -> bool:
    """Whether the store has heard of ``inbox``: a lease, an event, a timer or a message."""
    return any(conn.execute(select(table.c.inbox).where(table.c.inbox == inbox).limit(1)).first()
               for table in (inboxes, events, timers, outbox))


# -- actions --------------------------------------------------------------------------------------

def record(conn: Connection, actor: str, action: str, inbox: str, target: str | None, detail: str | None,
           outcome: str, now: int) -> Action:
    values = {"at": now, "actor": actor, "action": action, "inbox": inbox, "target": target, "detail": detail,
              "outcome": outcome[:128]}
    new_id = conn.execute(operator_actions.insert().values(**values).returning(operator_actions.c.id)).scalar_one()
    return Action(id=new_id, **values)


def requeue(conn: Connection, actor: str, inbox: str, event_id: int | None, now: int) -> Done:
    if event_id is None:
        requeued = inbox_rules.requeue(conn, inbox, None)
        outcome = f"requeued {len(requeued)} dead event(s)" if requeued else "no dead events: nothing requeued"
        return Done(record(conn, actor, "requeue_all", inbox, None, None, outcome, now), bool(requeued),
                    tuple(requeued))
    owner = conn.execute(select(events.c.inbox).where(events.c.id == event_id)).scalar()
    requeued = inbox_rules.requeue(conn, inbox, event_id) if owner == inbox else []
    outcome = ("requeued" if requeued else f"not in inbox {inbox}: nothing requeued" if owner != inbox
               else "not dead: nothing requeued")
    return Done(record(conn, actor, "requeue", inbox, str(event_id), None, outcome, now), bool(requeued),
                tuple(requeued))


def answer(conn: Connection, s: Any, actor: str, inbox: str, request_id: str, given: str, now: int) -> Done:
    outcome = approval_rules.answer(conn, s, inbox, request_id, given, now, by=actor)
    return Done(record(conn, actor, "answer", inbox, request_id, given, str(outcome), now), outcome != "unknown")


def cancel_timer(conn: Connection, actor: str, inbox: str, timer_id: str, now: int) -> Done:
    if timer_id.startswith(APPROVAL_TIMER):
        # Its approval would then never expire, and the run waiting on it never resume.
        outcome = "refused: an approval's expiry timer (answer the approval instead)"
    else:
        outcome = "cancelled" if timer_rules.cancel(conn, inbox, timer_id) else "no such timer"
    return Done(record(conn, actor, "cancel_timer", inbox, timer_id, None, outcome, now), False)


class Console:
    """The console's reads and actions (``store.console``), one short transaction each."""

    def __init__(self, transactions: Transactions) -> None:
        self.transactions = transactions

    def fleet(self, *, now: int | None = None, limit: int = 20) -> Fleet:
        with self.transactions.transaction() as conn:
            return fleet(conn, clock(conn, now), limit)

    def timeline(self, inbox: str, *, before: str | None = None, limit: int = 50, now: int | None = None) -> Page:
        """A page of ``inbox``'s timeline, newest first; ``before``: the ``older`` cursor of
        the page before (``InvalidCall`` for anything else)."""
        if not 0 < limit <= PAGE_MAX:
            raise InvalidCall(f"limit must be 1 to {PAGE_MAX}, got {limit!r}")
        with self.transactions.transaction() as conn:
            return timeline(conn, inbox, before, limit, clock(conn, now))

    def search(self, query: str, *, limit: int = 50) -> Found:
        with self.transactions.transaction() as conn:
            return search(conn, query, limit)

    def requeue(self, actor: str, inbox: str, event_id: int | None = None, *, now: int | None = None) -> Done:
        """A dead event of ``inbox`` (or, without ``event_id``, every one) back to pending."""
        self._check(actor, inbox)
        with self.transactions.transaction() as conn:
            return requeue(conn, actor, inbox, event_id, clock(conn, now))

    def answer(self, actor: str, inbox: str, request_id: str, given: str, *, now: int | None = None) -> Done:
        """``answer_approval`` with ``by=actor``; the audit row's outcome is the one that stands."""
        self._check(actor, inbox)
        validate.name("request_id", request_id, SOURCE_ID_MAX)
        with self.transactions.transaction() as conn:
            return answer(conn, self.transactions.settings, actor, inbox, request_id, given, clock(conn, now))

    def cancel_timer(self, actor: str, inbox: str, timer_id: str, *, now: int | None = None) -> Done:
        self._check(actor, inbox)
        validate.name("timer_id", timer_id, SOURCE_ID_MAX)
        with self.transactions.transaction() as conn:
            return cancel_timer(conn, actor, inbox, timer_id, clock(conn, now))

    def actions(self, inbox: str | None = None, *, limit: int = 50) -> list[Action]:
        """The latest console actions (of ``inbox``), newest first."""
        with self.transactions.transaction() as conn:
            query = select(operator_actions)
            if inbox is not None:
                query = query.where(operator_actions.c.inbox == inbox)
            return [_action(r) for r in conn.execute(query.order_by(operator_actions.c.id.desc()).limit(limit))]

    @staticmethod
    def _check(actor: str, inbox: str) -> None:
        validate.name("actor", actor, ACTOR_MAX)
        validate.inbox(inbox)
