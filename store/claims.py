"""The claim: which of an inbox's events the lease holder's next run takes.

The article's rules, all in the claim's one statement, so each holds at every claim whatever
happened before it (a takeover, a release, a call whose reply was lost):

- rows an older generation left running count as a failed attempt: their worker lost the
  lease mid-run (it crashed, or stalled past its lease), so they are ready again;
- attempts are counted at claim (a worker that crashes never records a failure), and a row
  that reached ``max_attempts`` is parked ``dead`` by the claim that finds it (pending, or
  left running by an older generation) instead of being run again;
- a retried event (attempts > 0) is claimed alone, oldest first, so a poison event cannot
  drag healthy ones down; otherwise every ready event up to ``batch_limit``, oldest first.

Rows this generation claimed itself are not claimed again (call it once per run, after the
previous run's finish); ``held`` reads them, for a retried call whose first reply was lost.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import BigInteger, Connection, Integer, Text, Update, and_, bindparam, case, exists, or_, select, union_all, update

from . import leases, plans, rules
from .dialects import Dialect
from .inbox import EVENT_COLUMNS, to_event
from .records import Event
from wakeful.settings import StoreSettings
from .tables import events, inboxes, status_is


def claim_batch(conn: Connection, s: StoreSettings, inbox: str, generation: int, now: int) -> list[Event]:
    """The next batch, for a caller that holds the inbox row and the lease. One statement."""
    return _claim(conn, CLAIM, s, inbox, generation, now, {})


def take_and_claim(conn: Connection, s: StoreSettings, inbox: str, holder: str, generation: int,
                   now: int, took_over: bool) -> list[Event]:
    """Write the lease ``leases.decide`` granted, then ``claim_batch``. On PostgreSQL the
    lease write rides in the claim's statement, as a data-modifying CTE: one round trip less
    on every wake. The inbox row is already locked, so the claim's snapshot, taken when that
    statement starts, sees every event committed before the lock was granted."""
    if not Dialect.of(conn).writes_in_ctes:
        leases.take(conn, s, inbox, now, holder, generation, took_over)
        return claim_batch(conn, s, inbox, generation, now)
    return _claim(conn, TAKE_AND_CLAIM, s, inbox, generation, now,
                  {"p_holder": holder, "p_until": now + s.lease_ttl, "p_took_over": int(took_over)})


def _claim(conn: Connection, statement: plans.Cached, s: StoreSettings, inbox: str, generation: int,
           now: int, params: dict[str, Any]) -> list[Event]:
    rows = plans.execute(conn, statement, {
        **params, "p_inbox": inbox, "p_gen": generation, "p_now": now, "p_limit": s.batch_limit,
        "p_max": s.max_attempts,
        "p_cap_error": f"too many attempts: claimed {s.max_attempts} times without a finish",
        "p_cap_prefix": f"too many attempts ({s.max_attempts}); last error: ",
    }).all()
    batch = (to_event(r) for r in rows if r.status == "running")  # the rest were parked dead
    return sorted(batch, key=lambda e: e.id)  # RETURNING order is arbitrary


def _claim_statement() -> Update:
    # Typed, so the statement can also be compiled into a function (store/plans.py).
    inbox = bindparam("p_inbox", type_=events.c.inbox.type)
    gen, now = bindparam("p_gen", type_=BigInteger()), bindparam("p_now", type_=BigInteger())
    # The batch is chosen from an alias, so no subquery correlates with the row being updated.
    c = events.alias("candidate")
    cap = bindparam("p_max")
    ready = and_(c.c.inbox == inbox, rules.ready(c, gen, now, cap))
    tried = and_(ready, c.c.attempts > 0)
    retry = select(c.c.id).where(tried).order_by(c.c.id).limit(1).subquery("retry")
    fresh = (select(c.c.id).where(ready, c.c.attempts == 0, ~exists().where(tried))
             .order_by(c.c.id).limit(bindparam("p_limit", type_=Integer())).subquery("fresh"))
    # The chosen ids, computed once (a CTE named four times below is materialized once):
    # spelled out in each CASE the statement was 7 KB, past the 4 KB up to which psycopg
    # caches a query's conversion, and re-parsing it cost ~1 ms of CPU on every wake.
    picked = union_all(select(retry.c.id), select(fresh.c.id)).cte("picked")
    # Over the row being updated, as it was before this statement.
    stale, buried = rules.stale(events, gen), rules.buried(events, gen, cap)
    chosen = events.c.id.in_(select(picked.c.id))
    return (
        update(events)
        .where(events.c.inbox == inbox, status_is("pending", "running"), or_(chosen, stale, buried))
        .values(
            status=case((buried, "dead"), (chosen, "running"), else_="pending"),
            # The rest (parked dead, or back to pending) get no new attempt and no new claim.
            attempts=case((chosen, events.c.attempts + 1), else_=events.c.attempts),
            claim_gen=case((chosen, gen), else_=events.c.claim_gen),
            claimed_at=case((chosen, now), else_=events.c.claimed_at),
            finished=case((buried, now), else_=events.c.finished),
            error=case(
                (~buried, events.c.error),
                (events.c.error.is_(None), bindparam("p_cap_error", type_=Text)),
                else_=bindparam("p_cap_prefix", type_=Text) + events.c.error,
            ),
        )
        .returning(*EVENT_COLUMNS)
    )


_HELD = (select(*EVENT_COLUMNS)
         .where(events.c.inbox == bindparam("p_inbox"), status_is("running"),
                events.c.claim_gen == bindparam("p_gen"))
         .order_by(events.c.id))


def held(conn: Connection, inbox: str, generation: int) -> list[Event]:
    """Rows ``generation`` claimed and has not finished."""
    return [to_event(r) for r in conn.execute(_HELD, {"p_inbox": inbox, "p_gen": generation})]


CLAIM = plans.cached("claim", _claim_statement())  # built once: see store.db.NOW
TAKE_AND_CLAIM = plans.cached("take_and_claim",
                              CLAIM.statement.add_cte(leases.TAKE.returning(inboxes.c.inbox).cte("take_lease")))
