"""``Store``: the contract of docs/design.md section 4, a small front over per-concern parts.

The contract's calls are methods here; every other call is on a part, reached as an
attribute (``store.runs``, ``store.effects``, ``store.operator``, ...; docs/store.md lists
which holds what). The front and every part share one ``Transactions`` (``store.transactions``:
the engine, the settings, the pinned connection), so each call is one short transaction
opened the same way. A call validates its input before it opens the transaction and never
calls out of the process while it is open (``dispatch`` sends between two of them).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from sqlalchemy import Engine

from . import approvals, inbox as inbox_rules, leases, operator, outbox, steps, timers, validate
from .db import clock, create
from .dialects import Dialect
from .approvals import Approvals
from .console import Console
from .effects import Effects
from .grants import Grants
from .hook_secrets import HookSecrets
from .inbox import Intake
from .operator import Operator
from .outbox import Outgoing
from .records import Event, Fired, InboxStatus, Outcome, OutboxRow, OutgoingMessage, TimerRow
from .spend import Spend
from .timers import Wakes
from .transactions import Transactions
from .runs import Runs
from wakeful.settings import StoreSettings


class Store:
    def __init__(self, engine: Engine, settings: StoreSettings | None = None) -> None:
        self.transactions = Transactions(engine, settings)
        self.engine = engine
        self.settings = self.transactions.settings
        # The parts (docs/store.md): every call that is not the contract's.
        self.runs = Runs(self.transactions)
        self.wakes = Wakes(self.transactions)
        self.intake = Intake(self.transactions)
        self.approvals = Approvals(self.transactions)
        self.outgoing = Outgoing(self.transactions)
        self.effects = Effects(self.transactions)
        self.operator = Operator(self.transactions)
        self.hook_secrets = HookSecrets(self.transactions)
        self.spend = Spend(self.transactions)
        self.grants = Grants(self.transactions)
        self.console = Console(self.transactions)  # the operator's console (docs/console.md)

    @classmethod
    def connect(cls, url: str, *, pool_size: int = 2, max_overflow: int = 4, pooler: str = "",
                **settings: Any) -> "Store":
        """``sqlite:///path`` or ``postgresql+psycopg://...``; ``settings`` are the fields of
        ``StoreSettings`` (lease_ttl, max_attempts, outbox_gap, batch_limit, backoff_base, ...).
        ``pooler="transaction"`` when the URL points at PgBouncer in transaction mode.
        ``pool_size`` + ``max_overflow`` bound the connections this process opens."""
        unknown = set(settings) - StoreSettings.names()
        if unknown:
            raise TypeError(f"unknown store settings: {', '.join(sorted(unknown))}")
        store_settings = StoreSettings(**settings)
        return cls(create(url, pool_size=pool_size, max_overflow=max_overflow,
                          lock_timeout=store_settings.lock_timeout, pooler=pooler), store_settings)

    def migrate(self) -> None:
        """Alembic upgrade to head (also ``wakeful db upgrade``)."""
        from .migrate import create_plan_functions, plan_functions, upgrade

        upgrade(self.engine)
        if Dialect.of(self.engine).plan_functions:
            # The head's plan functions (store/plans.py) again, as the migrations wrote them:
            # one dropped by hand is back after ``wakeful init``.
            with self.transactions.transaction() as conn:
                create_plan_functions(conn, plan_functions())

    def behind(self) -> str | None:
        """Why this store cannot be used until ``migrate`` runs (one line naming the command),
        or None when its schema is the code's."""
        from .migrate import behind

        return behind(self.engine)

    def dispose(self) -> None:
        self.transactions.dispose()

    # -- inbox ---------------------------------------------------------------------------

    def ingest(self, inbox: str, source: str, source_id: str, payload: dict[str, Any], *,
               now: int | None = None) -> bool:
        """Store an event once. False for a duplicate; ``InvalidEvent`` for bad input."""
        validate.inbox(inbox)
        validate.outside_key(source, source_id)
        validate.payload(payload, self.settings.max_payload_bytes)
        with self.transactions.statement() as conn:
            return inbox_rules.insert_event(conn, inbox, source, source_id, payload, now)

    # -- one worker per inbox ------------------------------------------------------------

    def acquire(self, inbox: str, holder: str, *, now: int | None = None) -> int | None:
        validate.inbox(inbox)
        validate.name("holder", holder, 255)
        return self.transactions.deciding(
            lambda conn: steps.acquire(conn, self.settings, inbox, holder, now).generation, held=None)

    def renew(self, inbox: str, holder: str, gen: int, *, now: int | None = None) -> bool:
        with self.transactions.transaction() as conn:
            return leases.renew(conn, self.settings, inbox, holder, gen, now)

    def release(self, inbox: str, holder: str, gen: int, *, now: int | None = None,
                force: bool = False) -> bool:
        """False (lease kept) while claimable events remain, unless ``force``: then the
        caller must ring the inbox's doorbell itself."""
        with self.transactions.transaction() as conn:
            return leases.release(conn, inbox, holder, gen, now, force)

    def claim(self, inbox: str, holder: str, gen: int, *, now: int | None = None) -> list[Event]:
        with self.transactions.transaction() as conn:
            return steps.claim(conn, self.settings, inbox, holder, gen, now)

    def finish(self, inbox: str, holder: str, gen: int, event_ids: Iterable[int],
               outcome: Outcome | None = None, error: str | None = None, *,
               retry_after: int | None = None, now: int | None = None) -> bool:
        """The contract's name for ``store.runs.finish``: one door for a run's finish."""
        return self.runs.finish(inbox, holder, gen, event_ids, outcome, error, retry_after=retry_after, now=now)

    # -- timers --------------------------------------------------------------------------

    def add_timer(self, inbox: str, timer_id: str, due: int | None, payload: dict[str, Any], *,
                  every: int | None = None, cron: str | None = None, tz: str | None = None,
                  key: tuple[str, str] | None = None, misfire: str = "coalesce",
                  now: int | None = None) -> None:
        validate.inbox(inbox)
        if key is not None:
            key = validate.outside_key(*key)
        with self.transactions.transaction() as conn:
            timers.add(conn, self.settings, inbox, timer_id, due, payload, every=every, cron=cron,
                       tz=tz, key=key, misfire=misfire, now=clock(conn, now))

    def cancel_timer(self, inbox: str, timer_id: str) -> bool:
        with self.transactions.transaction() as conn:
            return timers.cancel(conn, inbox, timer_id)

    def run_scheduler(self, *, now: int | None = None, limit: int | None = None) -> list[Fired]:
        """Due timers to events, ``limit`` timers per transaction, until none is due."""
        batch = limit or self.settings.scheduler_batch
        fired: list[Fired] = []
        while True:
            with self.transactions.transaction() as conn:
                at = clock(conn, now)
                due = timers.due_now(conn, at, batch)
                fired.extend(timers.fire(conn, self.settings, due, at))
            if len(due) < batch:
                return fired

    # -- approvals -----------------------------------------------------------------------

    def request_approval(self, inbox: str, request_id: str, action: str, expires_in: int, *,
                         now: int | None = None) -> None:
        validate.inbox(inbox)
        with self.transactions.transaction() as conn:
            approvals.request(conn, self.settings, inbox, request_id, action, expires_in, clock(conn, now))

    def answer_approval(self, inbox: str, request_id: str, answer: str, *, by: str | None = None,
                        now: int | None = None) -> str:
        """The outcome that stands: "yes"/"no", "expired", or "unknown" (never requested).
        ``by``: who answered (the approver whose signed link was used, or ``cli``)."""
        with self.transactions.transaction() as conn:
            return approvals.answer(conn, self.settings, inbox, request_id, answer, clock(conn, now), by)

    # -- outbox --------------------------------------------------------------------------

    def dispatch(self, inbox: str, send: Callable[[OutgoingMessage], Any], *, now: int | None = None) -> int:
        """Send the held messages as one; returns how many were sent (0 inside the gap). A
        send that raises is raised here, its messages held for the next dispatch."""
        done = outbox.dispatch(self.transactions, [inbox], send, now)
        if inbox in done.failed:
            raise done.failed[inbox]
        return done.sent

    # -- the contract's views and operator actions ----------------------------------------

    def events(self, inbox: str, *, status: str | None = None) -> list[Event]:
        with self.transactions.transaction() as conn:
            return inbox_rules.events_of(conn, inbox, status)

    def outbox(self, inbox: str) -> list[OutboxRow]:
        with self.transactions.transaction() as conn:
            return outbox.view(conn, inbox)

    def timers(self, inbox: str) -> list[TimerRow]:
        with self.transactions.transaction() as conn:
            return timers.view(conn, inbox)

    def dead(self, inbox: str | None = None) -> list[Event]:
        with self.transactions.transaction() as conn:
            return inbox_rules.dead(conn, inbox)

    def requeue(self, event_id: int) -> Event | None:
        """A dead event back to pending, attempts reset; None if no dead event has that id."""
        with self.transactions.transaction() as conn:
            requeued = inbox_rules.requeue(conn, None, event_id)
        return requeued[0] if requeued else None

    def status(self, inbox: str, *, now: int | None = None) -> InboxStatus:
        with self.transactions.transaction() as conn:
            return operator.status(conn, inbox, clock(conn, now))

    def purge(self, older_than: int, *, now: int | None = None) -> dict[str, int]:
        return operator.purge(self.transactions, older_than, now)
