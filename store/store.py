"""``Store``: the contract of DESIGN.md section 4, one short transaction per call.

Each method validates its input before it opens a transaction, runs one rule module's
function inside ``transaction(...)``, and never calls out of the process while the
transaction is open (``dispatch`` sends between two of them).
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from sqlalchemy import Connection, Engine, text
from sqlalchemy.exc import OperationalError

from . import approvals, backlog, inbox as inbox_rules, leases, operator, outbox, runlog, runs, timers, validate
from . import counters as counter_rules
from . import grants as grant_rules
from . import hook_secrets as hook_secret_rules
from . import memory as memory_rules
from . import spend as spend_rules
from . import errors
from .db import clock, create, lock_timed_out, transaction
from .dialects import Dialect
from .records import (
    Approval,
    Dispatched,
    Event,
    Fired,
    InboxStatus,
    InvalidCall,
    InvalidEvent,
    Outcome,
    OutboxRow,
    OutgoingMessage,
    Rejection,
    RunRecord,
    RunStart,
    RunStep,
    TimerRow,
)
from settings import StoreSettings


# A pinned connection idle longer than this is checked again (see ``Store.pinned``).
PINNED_IDLE_SECONDS = 1.0


class Store:
    def __init__(self, engine: Engine, settings: StoreSettings | None = None) -> None:
        self.engine = engine
        self.settings = settings or StoreSettings()
        self._pinned = threading.local()

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
            with self._transaction() as conn:
                create_plan_functions(conn, plan_functions())

    def dispose(self) -> None:
        self.engine.dispose()

    @contextmanager
    def pinned(self) -> Iterator[None]:
        """Run this thread's store calls on one pooled connection until the block ends.

        A worker task makes several short transactions (``start_run``, ``finish_and_claim``
        ...): pinned, back-to-back ones share one checkout, so one pre-ping round trip. After
        the connection sat idle longer than ``PINNED_IDLE_SECONDS`` (an agent's long step) it
        goes back to the pool and the next call checks one out again, pre-ping included, so a
        database restart during a long run costs nothing. Nested blocks reuse the outer one."""
        local = self._pinned
        if getattr(local, "conn", None) is not None:
            yield
            return
        local.conn, local.idle_since = self.engine.connect(), time.monotonic()
        try:
            yield
        finally:
            conn, local.conn = local.conn, None
            conn.close()

    @contextmanager
    def unpinned(self) -> Iterator[None]:
        """Inside a ``pinned`` block: give the pinned connection back to the pool for the
        length of this block (an agent's run: seconds of waiting on a model), and pin a fresh
        one at its end. A run holds a connection only inside a transaction, so a process with
        a thousand runs in flight needs a pool the size of its transactions, not of its runs."""
        local = self._pinned
        if getattr(local, "conn", None) is None:
            yield
            return
        local.conn.close()
        local.conn = None
        try:
            yield
        finally:
            local.conn, local.idle_since = self.engine.connect(), time.monotonic()

    @contextmanager
    def _transaction(self) -> Iterator[Connection]:
        with errors.mapped():
            with self._transaction_unmapped() as conn:
                yield conn

    @contextmanager
    def _transaction_unmapped(self) -> Iterator[Connection]:
        local = self._pinned
        if getattr(local, "conn", None) is None:
            with transaction(self.engine) as conn:
                yield conn
            return
        if time.monotonic() - local.idle_since > PINNED_IDLE_SECONDS:
            local.conn.close()
            local.conn = self.engine.connect()
        try:
            with local.conn.begin():
                yield local.conn
        finally:
            local.idle_since = time.monotonic()

    @contextmanager
    def _statement(self) -> Iterator[Connection]:
        """For one statement that is a whole transaction (an ingest). On PostgreSQL it runs
        in autocommit: the statement commits itself, one round trip instead of three (BEGIN,
        the statement, COMMIT), and as durable. Elsewhere, and on a pinned connection, it is
        an ordinary transaction."""
        if not Dialect.of(self.engine).autocommit_statements or getattr(self._pinned, "conn", None) is not None:
            with self._transaction() as conn:
                yield conn
            return
        with errors.mapped(), self.engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
            yield conn

    def clock(self) -> int:
        """The database's clock, integer seconds: the one every stored time is read on."""
        with self._transaction() as conn:
            return clock(conn, None)

    def ping(self) -> None:
        """Raises if the database cannot be reached."""
        with self.engine.connect() as conn:
            conn.execute(text("SELECT 1"))

    # -- inbox ---------------------------------------------------------------------------

    def ingest(self, inbox: str, source: str, source_id: str, payload: dict[str, Any], *,
               now: int | None = None) -> bool:
        """Store an event once. False for a duplicate; ``InvalidEvent`` for bad input."""
        validate.inbox(inbox)
        validate.outside_key(source, source_id)
        validate.payload(payload, self.settings.max_payload_bytes)
        with self._statement() as conn:
            return inbox_rules.insert_event(conn, inbox, source, source_id, payload, now)

    def ingest_many(self, items: Iterable[tuple[str, str, str, dict[str, Any]]], *,
                    now: int | None = None) -> list[bool]:
        """Many ``(inbox, source, source_id, payload)`` in one short transaction; True per
        item stored. Every item is checked first: one bad item raises ``InvalidEvent``
        (naming its index) and nothing is stored."""
        batch = list(items)
        for n, item in enumerate(batch):
            try:
                inbox, source, source_id, payload = item
                validate.inbox(inbox)
                validate.outside_key(source, source_id)
                validate.payload(payload, self.settings.max_payload_bytes)
            except (TypeError, ValueError) as exc:
                raise InvalidEvent(f"item {n}: {exc}") from None
        with self._transaction() as conn:
            return inbox_rules.insert_events(conn, batch, now)

    # -- one worker per inbox ------------------------------------------------------------

    def acquire(self, inbox: str, holder: str, *, now: int | None = None) -> int | None:
        validate.inbox(inbox)
        validate.name("holder", holder, 255)
        try:
            with self._transaction() as conn:
                return runs.acquire(conn, self.settings, inbox, holder, now).generation
        except OperationalError as exc:
            if lock_timed_out(exc):
                return None  # a stuck transaction holds the inbox: as good as held
            raise

    def renew(self, inbox: str, holder: str, gen: int, *, now: int | None = None) -> bool:
        with self._transaction() as conn:
            return leases.renew(conn, self.settings, inbox, holder, gen, now)

    def renew_many(self, held: Iterable[tuple[str, str, int]], *, now: int | None = None
                   ) -> set[tuple[str, str, int]]:
        """``renew`` for every (inbox, holder, generation) given, in one statement: the ones
        still live are extended and returned; the rest were lost (a process's lease keeper
        renews all its runs in flight this way, one round trip per tick)."""
        held = list(held)
        if not held:
            return set()
        with self._transaction() as conn:
            return leases.renew_many(conn, self.settings, held, now)

    def release(self, inbox: str, holder: str, gen: int, *, now: int | None = None,
                force: bool = False) -> bool:
        """False (lease kept) while claimable events remain, unless ``force``: then the
        caller must ring the inbox's doorbell itself."""
        with self._transaction() as conn:
            return leases.release(conn, inbox, holder, gen, now, force)

    def claim(self, inbox: str, holder: str, gen: int, *, now: int | None = None) -> list[Event]:
        with self._transaction() as conn:
            return runs.claim(conn, self.settings, inbox, holder, gen, now)

    def finish(self, inbox: str, holder: str, gen: int, event_ids: Iterable[int],
               outcome: Outcome | None = None, error: str | None = None, *,
               retry_after: int | None = None, now: int | None = None) -> bool:
        """The run's events done with its Outcome, or failed with ``error``. With
        ``retry_after`` (seconds, 0 for "the backoff decides") the failure is an outage's, the
        agent's "try later": the attempt is given back and the events wait it out, up to the
        outage horizon (store/retries.py)."""
        error = _failure(error, retry_after)
        with self._transaction() as conn:
            return runs.finish(conn, self.settings, inbox, holder, gen, event_ids, outcome, error, now,
                               retry_after)

    def start_run(self, inbox: str, holder: str, *, now: int | None = None) -> RunStart:
        """``acquire`` then ``claim`` in one transaction, which also reads the inbox's memory
        for the run: ``RunStart(generation or None, first batch, memory)``."""
        validate.inbox(inbox)
        validate.name("holder", holder, 255)
        try:
            with self._transaction() as conn:
                return runs.start(conn, self.settings, inbox, holder, now)
        except OperationalError as exc:
            if lock_timed_out(exc):
                return RunStart(None, [])  # a stuck transaction holds the inbox: as good as held
            raise

    def start_next_run(self, holder: str, *, skip: Iterable[str] = (), now: int | None = None
                       ) -> tuple[str, RunStart] | None:
        """``start_run`` on the inbox with the oldest ready event and no live lease (not one in
        ``skip``): ``(inbox, RunStart)``, or None when no inbox is ready to take."""
        validate.name("holder", holder, 255)
        try:
            with self._transaction() as conn:
                return backlog.take_next(conn, self.settings, holder, skip, now)
        except OperationalError as exc:
            if lock_timed_out(exc):
                return None
            raise

    def finish_and_claim(self, inbox: str, holder: str, gen: int, event_ids: Iterable[int],
                         outcome: Outcome | None = None, error: str | None = None, *,
                         retry_after: int | None = None, now: int | None = None,
                         take_next: Iterable[str] | None = None) -> RunStep:
        """``finish``, then the next ``claim`` (lease extended) or, when nothing is claimable,
        the ``release``: one transaction instead of three.

        ``take_next`` (a draining worker's inboxes to skip): after a release, the same
        transaction goes on as ``start_next_run`` and puts what it took in ``RunStep.next``,
        one commit per drained wake instead of two. Should that commit's reply be lost, the
        retried finish is refused (the lease is already given up) and the inbox taken waits
        out its lease, as after a crash."""
        error = _failure(error, retry_after)
        skip = None if take_next is None else list(take_next)
        # Nothing to skip: the release and the next inbox's lock are one statement.
        merged = skip == []
        resign = backlog.LOG_RESIGN_AND_TAKE if merged else runlog.LOG_AND_RESIGN_OR_EXTEND
        with self._transaction() as conn:
            step, row = runs.finish_and_claim(conn, self.settings, inbox, holder, gen, event_ids,
                                              outcome, error, now, resign, retry_after)
            if step.released and skip is not None:
                taken = backlog.take_next(conn, self.settings, holder, skip, now, row if merged else None)
                return dataclasses.replace(step, next=taken)
            return step

    # -- timers --------------------------------------------------------------------------

    def add_timer(self, inbox: str, timer_id: str, due: int | None, payload: dict[str, Any], *,
                  every: int | None = None, cron: str | None = None, tz: str | None = None,
                  key: tuple[str, str] | None = None, misfire: str = "coalesce",
                  now: int | None = None) -> None:
        validate.inbox(inbox)
        if key is not None:
            key = validate.outside_key(*key)
        with self._transaction() as conn:
            timers.add(conn, self.settings, inbox, timer_id, due, payload, every=every, cron=cron,
                       tz=tz, key=key, misfire=misfire, now=clock(conn, now))

    def cancel_timer(self, inbox: str, timer_id: str) -> bool:
        with self._transaction() as conn:
            return timers.cancel(conn, inbox, timer_id)

    def run_scheduler(self, *, now: int | None = None, limit: int | None = None) -> list[Fired]:
        """Due timers to events, ``limit`` timers per transaction, until none is due."""
        batch = limit or self.settings.scheduler_batch
        fired: list[Fired] = []
        while True:
            with self._transaction() as conn:
                at = clock(conn, now)
                due = timers.due_now(conn, at, batch)
                fired.extend(timers.fire(conn, self.settings, due, at))
            if len(due) < batch:
                return fired

    # -- approvals -----------------------------------------------------------------------

    def request_approval(self, inbox: str, request_id: str, action: str, expires_in: int, *,
                         now: int | None = None) -> None:
        validate.inbox(inbox)
        with self._transaction() as conn:
            approvals.request(conn, self.settings, inbox, request_id, action, expires_in, clock(conn, now))

    def answer_approval(self, inbox: str, request_id: str, answer: str, *, by: str | None = None,
                        now: int | None = None) -> str:
        """The outcome that stands: "yes"/"no", "expired", or "unknown" (never requested).
        ``by``: who answered (the approver whose signed link was used, or ``cli``)."""
        with self._transaction() as conn:
            return approvals.answer(conn, self.settings, inbox, request_id, answer, clock(conn, now), by)

    def approver_inboxes(self, *inboxes: str) -> list[str]:
        """The operator inboxes that hold requests for these inboxes' approvals still waiting."""
        with self._transaction() as conn:
            return approvals.approver_inboxes(conn, inboxes)

    def approvals(self, inbox: str | None = None, *, pending_only: bool = True) -> list[Approval]:
        with self._transaction() as conn:
            return approvals.view(conn, inbox, pending_only)

    # -- outbox --------------------------------------------------------------------------

    def dispatch(self, inbox: str, send: Callable[[OutgoingMessage], Any], *, now: int | None = None) -> int:
        """Send the held messages as one; returns how many were sent (0 inside the gap). A
        send that raises is raised here, its messages held for the next dispatch."""
        done = outbox.dispatch(self._transaction, self.settings, [inbox], send, now)
        if inbox in done.failed:
            raise done.failed[inbox]
        return done.sent

    def dispatch_many(self, inboxes: Iterable[str], send: Callable[[OutgoingMessage], Any], *,
                      now: int | None = None) -> Dispatched:
        """``dispatch`` for many inboxes at once, a claim and a mark per hundred of them; an
        inbox whose send raises is named in ``failed`` and the others go on."""
        return outbox.dispatch(self._transaction, self.settings, list(inboxes), send, now)

    def outbox_due(self, *, now: int | None = None, limit: int = 1000) -> list[str]:
        with self._transaction() as conn:
            return outbox.due_inboxes(conn, self.settings, clock(conn, now), limit)

    # -- views and operator actions ------------------------------------------------------

    def event(self, event_id: int) -> Event | None:
        """One event by id, whatever its status; None if there is none."""
        with self._transaction() as conn:
            return inbox_rules.event(conn, event_id)

    def events(self, inbox: str, *, status: str | None = None) -> list[Event]:
        with self._transaction() as conn:
            return inbox_rules.events_of(conn, inbox, status)

    def outbox(self, inbox: str) -> list[OutboxRow]:
        with self._transaction() as conn:
            return outbox.view(conn, inbox)

    def timers(self, inbox: str) -> list[TimerRow]:
        with self._transaction() as conn:
            return timers.view(conn, inbox)

    def memory(self, inbox: str) -> dict[str, Any]:
        with self._transaction() as conn:
            return memory_rules.read(conn, inbox)

    def runs(self, inbox: str, *, limit: int = 100) -> list[RunRecord]:
        with self._transaction() as conn:
            return operator.run_log(conn, inbox, limit)

    def dead(self, inbox: str | None = None) -> list[Event]:
        with self._transaction() as conn:
            return inbox_rules.dead(conn, inbox)

    def requeue(self, event_id: int) -> Event | None:
        """A dead event back to pending, attempts reset; None if no dead event has that id."""
        with self._transaction() as conn:
            requeued = inbox_rules.requeue(conn, None, event_id)
        return requeued[0] if requeued else None

    def requeue_inbox(self, inbox: str) -> list[Event]:
        """Every dead event of ``inbox`` back to pending, attempts reset."""
        with self._transaction() as conn:
            return inbox_rules.requeue(conn, inbox, None)

    def metrics(self, *, now: int | None = None) -> dict[str, Any]:
        """Events pending/running/dead, oldest pending age, outbox held, timers overdue,
        rejections by origin, counters: across all inboxes."""
        with self._transaction() as conn:
            return operator.metrics(conn, clock(conn, now))

    def attention(self, *, now: int | None = None, limit: int = 20) -> list[InboxStatus]:
        """Inboxes with dead events first, then those with the oldest waiting work."""
        with self._transaction() as conn:
            return operator.attention(conn, clock(conn, now), limit)

    def incidents(self, since: int) -> dict[str, list[Any]]:
        """Events parked dead and approvals expired since ``since``: the daily summary."""
        with self._transaction() as conn:
            return operator.incidents(conn, since)

    def status(self, inbox: str, *, now: int | None = None) -> InboxStatus:
        with self._transaction() as conn:
            return operator.status(conn, inbox, clock(conn, now))

    def sweep_candidates(self, *, now: int | None = None, limit: int = 1000) -> list[str]:
        with self._transaction() as conn:
            return inbox_rules.sweep_candidates(conn, clock(conn, now), limit)

    def purge(self, older_than: int, *, now: int | None = None) -> dict[str, int]:
        return operator.purge(self._transaction, self.settings, older_than, now)

    def record_rejection(self, origin: str, reason: str, *, inbox: Any = None, source: Any = None,
                         source_id: Any = None, excerpt: Any = None, now: int | None = None) -> None:
        """Keep refused input where an operator can see it: bounded, never the whole body."""
        with self._transaction() as conn:
            inbox_rules.record_rejection(conn, origin, reason, inbox, source, source_id, excerpt, now)

    def rejections(self, *, limit: int = 100) -> list[Rejection]:
        with self._transaction() as conn:
            return inbox_rules.rejections(conn, limit)

    # -- per-inbox webhook secrets (store/hook_secrets.py: sealed with ``cipher``) --------

    def set_hook_secrets(self, inbox: str, kind: str, secrets: Sequence[str], *, cipher: Any,
                         now: int | None = None) -> None:
        """Replace the secrets ``inbox`` verifies ``kind`` deliveries with (1 or 2)."""
        values = hook_secret_rules.check(inbox, kind, secrets)
        sealed = hook_secret_rules.seal(cipher, inbox, kind, values)
        with self._transaction() as conn:
            hook_secret_rules.put(conn, inbox, kind, sealed, now)

    def remove_hook_secrets(self, inbox: str, kind: str | None = None) -> int:
        """Rows removed: one kind, or every kind of the inbox."""
        with self._transaction() as conn:
            return hook_secret_rules.remove(conn, inbox, kind)

    def hook_secrets(self, *, cipher: Any) -> dict[str, dict[str, tuple[str, ...]]]:
        """Every inbox's secrets by kind; a row the cipher cannot open is ``()`` (verifies
        nothing: the inbox fails closed)."""
        with self._transaction() as conn:
            stored = hook_secret_rules.rows(conn)
        out: dict[str, dict[str, tuple[str, ...]]] = {}
        for inbox, kind, sealed, _ in stored:
            try:
                out.setdefault(inbox, {})[kind] = hook_secret_rules.unseal(cipher, inbox, kind, sealed)
            except hook_secret_rules.SecretsKeyError:
                out.setdefault(inbox, {})[kind] = ()
        return out

    def hook_secret_list(self, *, cipher: Any = None) -> list[hook_secret_rules.HookSecretRow]:
        """(inbox, kind, how many secrets, updated) per row: never a secret. The count is -1
        when no cipher is given or it cannot open the row."""
        with self._transaction() as conn:
            stored = hook_secret_rules.rows(conn)
        out = []
        for inbox, kind, sealed, updated in stored:
            try:
                count = len(hook_secret_rules.unseal(cipher, inbox, kind, sealed)) if cipher else -1
            except hook_secret_rules.SecretsKeyError:
                count = -1
            out.append(hook_secret_rules.HookSecretRow(inbox, kind, count, updated))
        return out

    def rekey_hook_secrets(self, *, cipher: Any) -> int:
        """Re-encrypt every row under the cipher's first key (``MultiFernet.rotate``)."""
        with self._transaction() as conn:
            stored = hook_secret_rules.rows(conn)
            for inbox, kind, sealed, updated in stored:
                hook_secret_rules.unseal(cipher, inbox, kind, sealed)  # refuses a foreign row
                hook_secret_rules.put(conn, inbox, kind, cipher.rotate(sealed.encode("ascii")).decode("ascii"),
                                      updated)
        return len(stored)

    def counters(self) -> dict[str, int]:
        with self._transaction() as conn:
            return counter_rules.read(conn)

    # -- budgets: what the model cost per inbox and agent per UTC day (store/spend.py) ----

    def count_spend(self, inbox: str, budget: spend_rules.Budget, usage: spend_rules.Usage, *,
                    now: int | None = None) -> None:
        """One model call's usage, counted for the inbox and the agent. Not fenced: a call a
        run made before it lost its lease was paid for all the same."""
        validate.inbox(inbox)
        with self._transaction() as conn:
            spend_rules.count(conn, inbox, budget, usage, now)

    def check_budget(self, inbox: str, holder: str, gen: int, budget: spend_rules.Budget, *,
                     now: int | None = None) -> spend_rules.Verdict:
        """May (holder, gen)'s run make a model call now? A refusal is recorded (the
        operator's incident) and tells the inbox's user once a day, fenced by the lease."""
        with self._transaction() as conn:
            return spend_rules.check(conn, inbox, holder, gen, budget, now)

    def spend(self, inbox: str | None = None, *, now: int | None = None) -> list[spend_rules.SpendRow]:
        """Today's spend: the inbox's row (when given) and every agent's."""
        with self._transaction() as conn:
            return spend_rules.today(conn, inbox, now)

    def spend_incidents(self, since: int) -> list[spend_rules.SpendRow]:
        """Budgets (an inbox's, an agent's) that refused a model call since ``since``."""
        with self._transaction() as conn:
            return spend_rules.incidents(conn, since)

    # -- the egress proxy's grants and audit trail (store/grants.py) ---------------------

    def mint_grant(self, inbox: str, holder: str, gen: int, routes: Iterable[str], ttl: int, *,
                   tool_use_id: str | None = None, attempt: int | None = None,
                   now: int | None = None) -> str | None:
        """A grant token for ``routes`` (None when refused): a run's grant needs the live lease
        (holder, gen); an effect's (``tool_use_id``) needs that effect executing."""
        names = grant_rules.check_mint_input(inbox, holder, gen, routes, ttl, tool_use_id, attempt)
        with self._transaction() as conn:
            return grant_rules.mint(conn, inbox, holder, gen, names, ttl, tool_use_id, attempt, now)

    def check_grant(self, token: str | None, route: str, *, now: int | None = None) -> grant_rules.GrantCheck:
        """May a request on ``route`` carrying ``token`` go upstream (one statement)."""
        with self._transaction() as conn:
            return grant_rules.check(conn, token, route, now)

    def record_egress(self, check: grant_rules.GrantCheck, route: str, method: str, path: str,
                      status: int, size: int = 0, duration_ms: int = 0, outcome: str | None = None, *,
                      now: int | None = None) -> None:
        """One audit row for a proxied or refused request (never headers or bodies)."""
        with self._transaction() as conn:
            grant_rules.record(conn, check, route, method, path, status, size, duration_ms, outcome, now)

    def audit(self, inbox: str | None = None, *, limit: int = 100) -> list[grant_rules.AuditEntry]:
        with self._transaction() as conn:
            return grant_rules.view(conn, inbox, limit)


def _failure(error: str | None, retry_after: int | None) -> str | None:
    """A finish's error, checked against its ``retry_after`` (a "try later" is a failure too)."""
    if retry_after is None:
        return error
    if not isinstance(retry_after, int) or isinstance(retry_after, bool) or retry_after < 0:
        raise InvalidCall(f"retry_after must be a whole number of seconds >= 0, got {retry_after!r}")
    return error or "try later"
