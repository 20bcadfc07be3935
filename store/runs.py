"""``Runs``: the calls a worker makes to run an inbox (``store.runs``).

A wake is two commits: ``start`` (acquire + claim + memory) and ``finish_and_claim`` (the
finish, then the next batch or the release; see docs/store.md). These are the runtime's only
doors to a run's finish: ``finish_and_claim``, and ``finish`` (the lease kept: a failed run
that must not release, the daily summary); ``Store.finish``, the contract's call, is
``finish``. Around them: the next inbox
a draining worker takes (``start_next``), the lease keeper's renewals (``renew_many``), the
sweep's scan (``sweep_candidates``) and the inbox's memory. Each call is one short
transaction through the store's ``Transactions``; the rules are in steps.py, backlog.py,
leases.py and inbox.py (a module of its own: backlog.py builds on steps.py).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from typing import Any

from . import backlog, leases, runlog, steps, validate
from . import inbox as inbox_rules
from . import memory as memory_rules
from .db import clock
from .records import Outcome, RunStart, RunStep
from .transactions import Transactions


class Runs:
    def __init__(self, transactions: Transactions) -> None:
        self.transactions = transactions

    def start(self, inbox: str, holder: str, *, now: int | None = None) -> RunStart:
        """``acquire`` then ``claim`` in one transaction, which also reads the inbox's memory
        for the run: ``RunStart(generation or None, first batch, memory)``."""
        validate.inbox(inbox)
        validate.name("holder", holder, 255)
        settings = self.transactions.settings
        return self.transactions.deciding(lambda conn: steps.start(conn, settings, inbox, holder, now),
                                          held=RunStart(None, []))

    def start_next(self, holder: str, *, skip: Iterable[str] = (), now: int | None = None
                   ) -> tuple[str, RunStart] | None:
        """``start`` on the inbox with the oldest ready event and no live lease (not one in
        ``skip``): ``(inbox, RunStart)``, or None when no inbox is ready to take."""
        validate.name("holder", holder, 255)
        settings = self.transactions.settings
        return self.transactions.deciding(lambda conn: backlog.take_next(conn, settings, holder, skip, now),
                                          held=None)

    def finish(self, inbox: str, holder: str, gen: int, event_ids: Iterable[int],
               outcome: Outcome | None = None, error: str | None = None, *,
               retry_after: int | None = None, now: int | None = None) -> bool:
        """The run's events done with its Outcome, or failed with ``error``, in one fenced
        transaction (False, nothing written, when fenced); the lease is kept. With
        ``retry_after`` (seconds, 0 for "the backoff decides") the failure is an outage's, the
        agent's "try later": the attempt is given back and the events wait it out, up to the
        outage horizon (store/retries.py)."""
        error = steps.failure(error, retry_after)
        with self.transactions.transaction() as conn:
            return steps.finish(conn, self.transactions.settings, inbox, holder, gen, event_ids, outcome, error,
                                now, retry_after)

    def finish_and_claim(self, inbox: str, holder: str, gen: int, event_ids: Iterable[int],
                         outcome: Outcome | None = None, error: str | None = None, *,
                         retry_after: int | None = None, now: int | None = None,
                         take_next: Iterable[str] | None = None) -> RunStep:
        """``finish``, then the next ``claim`` (lease extended) or, when nothing is claimable,
        the ``release``: one transaction instead of three.

        ``take_next`` (a draining worker's inboxes to skip): after a release, the same
        transaction goes on as ``start_next`` and puts what it took in ``RunStep.next``,
        one commit per drained wake instead of two. Should that commit's reply be lost, the
        retried finish is refused (the lease is already given up) and the inbox taken waits
        out its lease, as after a crash."""
        error = steps.failure(error, retry_after)
        skip = None if take_next is None else list(take_next)
        # Nothing to skip: the release and the next inbox's lock are one statement.
        merged = skip == []
        resign = backlog.LOG_RESIGN_AND_TAKE if merged else runlog.LOG_AND_RESIGN_OR_EXTEND
        settings = self.transactions.settings
        with self.transactions.transaction() as conn:
            step, row = steps.finish_and_claim(conn, settings, inbox, holder, gen, event_ids,
                                              outcome, error, now, resign, retry_after)
            if step.released and skip is not None:
                taken = backlog.take_next(conn, settings, holder, skip, now, row if merged else None)
                return dataclasses.replace(step, next=taken)
            return step

    def renew_many(self, held: Iterable[tuple[str, str, int]], *, now: int | None = None
                   ) -> set[tuple[str, str, int]]:
        """``renew`` for every (inbox, holder, generation) given, in one statement: the ones
        still live are extended and returned; the rest were lost (a process's lease keeper
        renews all its runs in flight this way, one round trip per tick)."""
        held = list(held)
        if not held:
            return set()
        with self.transactions.transaction() as conn:
            return leases.renew_many(conn, self.transactions.settings, held, now)

    def sweep_candidates(self, *, now: int | None = None, limit: int = 1000) -> list[str]:
        """Inboxes with work waiting and no live lease: the sweep rings them again."""
        with self.transactions.transaction() as conn:
            return inbox_rules.sweep_candidates(conn, clock(conn, now), limit)

    def memory(self, inbox: str) -> dict[str, Any]:
        """The inbox's memory as the last finish left it."""
        with self.transactions.transaction() as conn:
            return memory_rules.read(conn, inbox)
