"""Each rule's predicate, written once: which events a worker may take, and whose lease is live.

Every statement that asks one of these questions (the claim, the release, the take of the next
inbox, the sweep, the fenced finish) builds its WHERE from here, so changing a rule is
changing one function. The predicates are SQLAlchemy expressions over ``e`` (the events
table or an alias of it) or a lease's columns; ``now`` and ``generation`` may be values,
bound parameters or SQL expressions.

The statuses are SQL literals (``tables.status_is``), never parameters: a prepared statement's
generic plan can then still prove the partial indexes usable.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import ColumnElement, and_, exists, or_

from .tables import inboxes, status_is


def due(e: Any, now: Any) -> ColumnElement[bool]:
    """Pending and past its backoff."""
    return and_(status_is("pending", of=e), e.c.not_before <= now)


def stale(e: Any, generation: Any) -> ColumnElement[bool]:
    """Left running by an older generation: its worker lost the lease mid-run (it crashed, or
    stalled past its lease), so the claim counts that run as a failed attempt."""
    return and_(status_is("running", of=e), e.c.claim_gen < generation)


def at_cap(e: Any, max_attempts: Any) -> ColumnElement[bool]:
    """Claimed ``max_attempts`` times already: never run again."""
    return e.c.attempts >= max_attempts


def claimable(e: Any, generation: Any, now: Any) -> ColumnElement[bool]:
    """What a claim by ``generation`` would take now, or park dead: due, or stale.
    ``generation`` None: due only (no generation has claimed yet)."""
    if generation is None:
        return due(e, now)
    return or_(due(e, now), stale(e, generation))


def ready(e: Any, generation: Any, now: Any, max_attempts: Any) -> ColumnElement[bool]:
    """What a claim by ``generation`` runs now: claimable and below the attempt cap."""
    return and_(claimable(e, generation, now), ~at_cap(e, max_attempts))


def buried(e: Any, generation: Any, max_attempts: Any) -> ColumnElement[bool]:
    """What a claim by ``generation`` parks dead instead of running: at the cap, and pending
    (whatever its backoff) or stale."""
    return and_(at_cap(e, max_attempts), or_(status_is("pending", of=e), stale(e, generation)))


def unattended(e: Any, now: Any) -> ColumnElement[bool]:
    """Work some worker should be doing, for an inbox with no live lease: due, or running
    (under no live lease, a run's events were left by a worker that lost it)."""
    return or_(due(e, now), status_is("running", of=e))


def lease_live(lease_until: Any, now: Any) -> Any:
    """A lease runs until ``lease_until`` inclusive. Works on values (a bool) and on SQL
    expressions (a predicate) alike; its negation is the lapsed lease a takeover may take."""
    return lease_until >= now


def leased(e: Any, now: Any) -> ColumnElement[bool]:
    """``e``'s inbox has a live lease."""
    return exists().where(inboxes.c.inbox == e.c.inbox, lease_live(inboxes.c.lease_until, now))


def held_by(lease: Any, holder: Any, generation: Any) -> ColumnElement[bool]:
    """``is_held`` in SQL, over a locked inbox row's columns (``lease``: a CTE's ``.c``)."""
    return and_(lease.holder == holder, lease.generation == generation, lease_live(lease.lease_until, lease.now))


def is_held(row: Any, holder: str, generation: int) -> bool:
    """Whether an inbox row read with the database's ``now`` shows a live lease of (holder,
    generation): the check every fenced write makes."""
    return row.holder == holder and row.generation == generation and lease_live(row.lease_until, row.now)

