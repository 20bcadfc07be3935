"""The outbox: messages written with a run's completion, sent at most once per gap, merged.

**Kinds.** A message is a ``reply``, a ``notice`` or an ``approval`` (a request for a human's
yes, with its fields: tool, input, words, deadline; the dispatcher adds the signed link).

**Pacing** applies to what the agent says unprompted. One rule decides whether a held row may
go now (``_due``, used both by the dispatcher's claim and by the scan for due inboxes):

* a ``reply`` goes at once, inside the gap;
* an ``urgent`` message (an approval request is always urgent) goes at once and carries
  everything held with it, urgent bodies first;
* anything else waits until ``outbox_gap`` seconds have passed since the last send that
  held a non-reply (a reply's send does not close the gap).

**The reply rule.** A run asks for a reply with ``Message(kind="reply")``; the store grants it
while a reply is *owed*: some event from the person the inbox talks to, finished by a run,
has not been answered by a reply yet (``inboxes.replied_through``). The person's sources are
every source except the runtime's own (``approval``, ``timer``, ``tool``) and the web edge's
third-party webhooks (``github``, ``stripe``, ``standard``). So the answer that comes after a
tool call or an approval is still the reply to the question that started it, while a timer's
or a webhook's run speaks as a notice, paced. A reply not owed is stored as a notice.

A dispatch never holds a transaction across the send:

* at-least-once (the default): claim the held rows under a dispatch key and commit; send;
  mark them sent and commit. A crash between the two leaves the rows claimed; once the claim
  is older than ``dispatch_timeout`` the next dispatch resends them with the **same key**, so
  a channel that passes the key on (``Idempotency-Key``) lets the receiver drop the copy.
* at-most-once: mark the rows sent when claiming them, then send. A crash loses the message
  instead of repeating it.

Many inboxes are dispatched together (``DISPATCH_BATCH`` at a time): one transaction claims
them all, the sends follow one by one, one transaction marks what was sent. A send that
raises holds that inbox's messages again for the next dispatch (at-most-once: the one tried
is lost, as it would be alone) and the other inboxes go on.

Rows addressed to a named channel (an approver ``channel:NAME``) are sent apart from the
inbox's own messages, one message per channel, and never count as the inbox's send. Two
dispatchers serialize on the inbox row: the second finds the rows claimed and sends nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any

from sqlalchemy import Boolean, Connection, bindparam, case, func, or_, select, update

from . import leases, validate
from .db import clock
from .records import (AT_LEAST_ONCE, AT_MOST_ONCE, Dispatched, InvalidCall, InvalidOutcome, MessageKind, Message, OutboxItem, OutboxRow,
                      OutgoingMessage)
from wakeful.settings import StoreSettings
from .tables import HOOK_KINDS, events, inboxes, outbox
from .transactions import Transactions

HELD = outbox.c.sent_at.is_(None)
KINDS = tuple(MessageKind)
# Events from these sources are not the person the inbox talks to (see the reply rule).
NOT_THE_PERSON = tuple(sorted(validate.RUNTIME_SOURCES | set(HOOK_KINDS)))


# -- writing (inside a finish) ---------------------------------------------------------------

def write(conn: Connection, inbox: str, body: str, now: int, *, kind: str = "notice",
          urgent: bool = False, fields: dict[str, Any] | None = None, channel: str | None = None) -> None:
    """One row into ``inbox``'s outbox."""
    conn.execute(outbox.insert(), [_row(inbox, body, now, kind, urgent, fields, channel)])


def _row(inbox: str, body: str, now: int, kind: str, urgent: bool, fields: dict[str, Any] | None = None,
         channel: str | None = None) -> dict[str, Any]:
    if kind not in KINDS:
        raise InvalidOutcome(f"a message's kind is one of {', '.join(KINDS)}, got {kind!r}")
    return {"inbox": inbox, "body": validate.text_value("message body", body), "kind": kind,
            "urgent": bool(urgent), "fields": fields, "channel": channel, "created": now}


def write_messages(conn: Connection, inbox: str, messages: Sequence[str | Message], now: int,
                   event_ids: Sequence[int] = ()) -> None:
    """A run's messages (its batch: ``event_ids``); a ``reply`` stays one only while a reply
    is owed (the reply rule)."""
    messages = [m if isinstance(m, Message) else Message(m) for m in messages]
    for m in messages:
        if m.kind not in (MessageKind.REPLY, MessageKind.NOTICE):
            raise InvalidOutcome(f"a run's message is a reply or a notice, got kind {m.kind!r}")
    replying = any(m.kind == MessageKind.REPLY for m in messages) and _take_owed_reply(conn, inbox, event_ids)
    conn.execute(outbox.insert(), [_row(inbox, m.body, now, MessageKind.REPLY if replying and m.kind == MessageKind.REPLY else MessageKind.NOTICE,
                                        m.urgent) for m in messages])


def _from_the_person() -> tuple[Any, ...]:
    """The inbox's (``p_inbox``) done events from the person, after the last one answered."""
    inbox = bindparam("p_inbox")
    answered = select(func.coalesce(inboxes.c.replied_through, 0)).where(inboxes.c.inbox == inbox).scalar_subquery()
    return (events.c.inbox == inbox, events.c.status == "done", events.c.id > answered,
            events.c.source.not_in(NOT_THE_PERSON))


# Built once: a burst of replies each took the statements' construction more than their work.
_NEWEST_IN_BATCH = select(func.max(events.c.id)).where(
    events.c.id.in_(bindparam("p_ids", expanding=True)), *_from_the_person())
_NEWEST = select(func.max(events.c.id)).where(*_from_the_person())
_ANSWERED_THROUGH = update(inboxes).where(inboxes.c.inbox == bindparam("p_inbox")).values(
    replied_through=bindparam("p_newest"))


def _take_owed_reply(conn: Connection, inbox: str, event_ids: Sequence[int]) -> bool:
    """Whether a reply is owed; if so, mark the person's events up to the newest as answered.
    The run's own batch is looked at first (its rows by key); the inbox's history only when
    the batch holds nothing from the person (the answer after a tool call or an approval)."""
    newest = None
    if event_ids:
        newest = conn.execute(_NEWEST_IN_BATCH, {"p_inbox": inbox, "p_ids": list(event_ids)}).scalar()
    if newest is None:
        newest = conn.execute(_NEWEST, {"p_inbox": inbox}).scalar()
    if newest is None:
        return False
    conn.execute(_ANSWERED_THROUGH, {"p_inbox": inbox, "p_newest": newest})
    return True


# -- the one pacing rule ---------------------------------------------------------------------

def _due(s: StoreSettings, now: int) -> Any:
    """Whether a held row may be sent at ``now``: unclaimed and (a reply, urgent, for a named
    channel, or the gap passed); or claimed by a dispatcher that has gone quiet."""
    last_sent = select(inboxes.c.last_sent).where(inboxes.c.inbox == outbox.c.inbox).scalar_subquery()
    return case(
        (outbox.c.dispatch_key.is_(None),
         or_(outbox.c.kind == MessageKind.REPLY, outbox.c.urgent, outbox.c.channel.is_not(None),
             last_sent.is_(None), last_sent <= now - s.outbox_gap)),
        else_=or_(outbox.c.claimed_at.is_(None), outbox.c.claimed_at <= now - s.dispatch_timeout),
    ).cast(Boolean)


def due_inboxes(conn: Connection, s: StoreSettings, now: int, limit: int) -> list[str]:
    """Inboxes whose held messages a dispatch would send now (``_due``)."""
    query = (select(outbox.c.inbox).where(HELD, _due(s, now)).group_by(outbox.c.inbox)
             .order_by(outbox.c.inbox).limit(limit))
    return list(conn.execute(query).scalars())


# -- dispatching -----------------------------------------------------------------------------

# Inboxes claimed in one transaction and marked sent in one: a burst of runs rings one dispatch
# for hundreds of inboxes (tasks/doorbell.py), and one transaction per inbox made the control
# worker the limit (docs/performance.md). The number also bounds how many messages have been
# sent but are not yet marked (resent under the same key if the dispatcher dies meanwhile).
DISPATCH_BATCH = 100


def dispatch(transactions: Transactions, inboxes: Sequence[str],
             send: Callable[[OutgoingMessage], Any], now: int | None) -> Dispatched:
    delivery = getattr(send, "delivery", AT_LEAST_ONCE)
    if delivery not in (AT_LEAST_ONCE, AT_MOST_ONCE):
        raise InvalidCall(f"delivery must be {AT_LEAST_ONCE!r} or {AT_MOST_ONCE!r}, got {delivery!r}")
    names = sorted(set(inboxes))
    result = Dispatched()
    for at in range(0, len(names), DISPATCH_BATCH):
        _dispatch_batch(transactions, names[at:at + DISPATCH_BATCH], send, delivery, now, result)
    return result


def _dispatch_batch(transactions: Transactions, names: list[str],
                    send: Callable[[OutgoingMessage], Any], delivery: str, now: int | None,
                    result: Dispatched) -> None:
    with transactions.transaction() as conn:
        messages = _claim(conn, transactions.settings, names, delivery, now)
    sent: list[OutgoingMessage] = []
    tried: set[str] = set()  # the keys whose send was attempted
    try:
        for message in messages:
            if message.inbox in result.failed:  # its inbox's receiver is down: held again
                continue
            tried.add(message.key)
            try:
                send(message)
            except Exception as exc:  # one receiver down must not hold up the other inboxes
                result.failed[message.inbox] = exc
                continue
            sent.append(message)
            result.sent += len(message.message_ids)
    finally:  # also when interrupted: what was not sent is held again
        if messages:
            with transactions.transaction() as conn:
                _settle(conn, names, messages, sent, tried, delivery, now)


def _claim(conn: Connection, s: StoreSettings, names: list[str], delivery: str, now: int | None
           ) -> list[OutgoingMessage]:
    locked = _lock(conn, names)
    now = clock(conn, now)
    held = conn.execute(
        select(outbox.c.id, outbox.c.inbox, outbox.c.body, outbox.c.urgent, outbox.c.kind, outbox.c.fields,
               outbox.c.channel, outbox.c.dispatch_key, _due(s, now).label("due"))
        .where(outbox.c.inbox.in_(names), HELD)
        .order_by(outbox.c.inbox, outbox.c.id)
    ).all()
    groups: dict[tuple[str, str | None], list[Any]] = {}
    for r in held:
        groups.setdefault((r.inbox, r.channel), []).append(r)
    claimed = [_message(inbox, channel, *picked) for (inbox, channel), rows in groups.items()
               if (picked := _pick(rows)) is not None]
    values: dict[str, Any] = {"dispatch_key": bindparam("p_key"), "claimed_at": now}
    if delivery == AT_MOST_ONCE:
        values["sent_at"] = now
        _touch_last_sent(conn, claimed, now, locked)
    if claimed:
        conn.execute(update(outbox).where(outbox.c.id == bindparam("p_id")).values(**values),
                     [{"p_id": i, "p_key": m.key} for m in claimed for i in m.message_ids])
    return claimed


def _lock(conn: Connection, names: list[str]) -> set[str]:
    """Lock the inboxes' rows, in name order (two dispatchers never wait on each other in
    opposite orders; every other writer locks one inbox): a second dispatcher finds the rows
    claimed and sends nothing. A no-op on SQLite, where BEGIN IMMEDIATE serializes writers.
    The names whose rows exist (and are now locked)."""
    return set(conn.execute(select(inboxes.c.inbox).where(inboxes.c.inbox.in_(names))
                            .order_by(inboxes.c.inbox).with_for_update()).scalars())


def _settle(conn: Connection, names: list[str], messages: list[OutgoingMessage], sent: list[OutgoingMessage],
            tried: set[str], delivery: str, now: int | None) -> None:
    """After the sends. At-least-once: the sent rows marked sent, the rest released for the
    next dispatch, which resends them under the same keys. At-most-once: a send that was
    tried counts as sent (its rows were marked at the claim); the rows never tried are held
    again."""
    done = {m.key for m in sent}
    locked = _lock(conn, names)
    now = clock(conn, now)
    if delivery == AT_LEAST_ONCE:
        if sent:
            conn.execute(update(outbox).where(outbox.c.dispatch_key.in_(done), HELD).values(sent_at=now))
            _touch_last_sent(conn, sent, now, locked)
        if unsent := [m.key for m in messages if m.key not in done]:
            conn.execute(update(outbox).where(outbox.c.dispatch_key.in_(unsent), HELD).values(claimed_at=None))
    elif untried := [m.key for m in messages if m.key not in tried]:
        conn.execute(update(outbox).where(outbox.c.dispatch_key.in_(untried))
                     .values(sent_at=None, dispatch_key=None, claimed_at=None))


def _pick(rows: list[Any]) -> tuple[list[Any], str] | None:
    """The rows of one channel to send now, and their dispatch key."""
    claimed = [r for r in rows if r.dispatch_key is not None]
    if claimed:
        # An earlier dispatch claimed these and has not marked them sent: it is sending now,
        # or it died. Resend only once its claim is stale, and under the same key.
        return (claimed, claimed[0].dispatch_key) if all(r.due for r in claimed) else None
    due = [r for r in rows if r.due]
    if any(r.kind != MessageKind.REPLY for r in due):  # the gap is open or an urgent one waits: all go
        due = rows
    return (due, f"outbox-{due[0].id}") if due else None


def _message(inbox: str, channel: str | None, rows: list[Any], key: str) -> OutgoingMessage:
    rows = sorted(rows, key=lambda r: (not r.urgent, r.id))  # urgent first, then in order
    items = tuple(OutboxItem(r.id, r.kind, r.body, r.urgent, r.fields) for r in rows)
    return OutgoingMessage(inbox=inbox, key=key, body="\n\n".join(r.body for r in rows),
                           urgent=any(r.urgent for r in rows), message_ids=tuple(r.id for r in rows),
                           items=items, channel=channel)


def _touch_last_sent(conn: Connection, messages: list[OutgoingMessage], now: int, locked: set[str]) -> None:
    """The gap restarts with a send of the inbox's own that held more than replies.
    ``locked``: the inboxes whose rows this transaction has locked (``_lock``); the others
    (an approver's inbox never woken) get a row to hold ``last_sent``."""
    closing = sorted({m.inbox for m in messages
                      if m.channel is None and any(i.kind != MessageKind.REPLY for i in m.items)})
    leases.create_rows(conn, [name for name in closing if name not in locked])
    if closing:
        conn.execute(update(inboxes).where(inboxes.c.inbox.in_(closing)).values(last_sent=now))


def view(conn: Connection, inbox: str) -> list[OutboxRow]:
    rows = conn.execute(select(outbox).where(outbox.c.inbox == inbox).order_by(outbox.c.id))
    return [OutboxRow(r.id, r.inbox, r.body, r.urgent, r.created, r.sent_at, r.dispatch_key,
                      kind=r.kind, fields=r.fields, channel=r.channel) for r in rows]


class Outgoing:
    """The dispatcher's calls (``store.outgoing``); ``dispatch`` (one inbox) and the
    ``outbox`` view are the contract's calls on the Store."""

    def __init__(self, transactions: Transactions) -> None:
        self.transactions = transactions

    def due(self, *, now: int | None = None, limit: int = 1000) -> list[str]:
        """Inboxes whose held messages may be sent now."""
        with self.transactions.transaction() as conn:
            return due_inboxes(conn, self.transactions.settings, clock(conn, now), limit)

    def dispatch_many(self, inboxes: Iterable[str], send: Callable[[OutgoingMessage], Any], *,
                      now: int | None = None) -> Dispatched:
        """``dispatch`` for many inboxes at once, a claim and a mark per hundred of them; an
        inbox whose send raises is named in ``failed`` and the others go on."""
        return dispatch(self.transactions, list(inboxes), send, now)
