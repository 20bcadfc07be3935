"""Budgets: what the model cost, per inbox and per agent, per UTC day.

Every model call is counted from the ``usage`` the API returned, right after the call, in a
short transaction of its own (``count``) that is **not fenced**: a run that loses its lease
afterwards has its finish refused, but its calls were paid for and stay counted. The figures
live in the ``spend`` table (one row per inbox per day; the agent's day over ``SHARDS`` rows),
so a restart resets nothing.

The agent's day is sharded because every call of every inbox adds to it: one row would queue
a thousand counts answering within a second on its lock, each holding a pooled connection.
An inbox adds to the agent's shard ``shard_of(inbox)`` (always the same one; inbox rows are
shard 0), and a count locks its inbox row first, then that shard, so two counts never wait on
each other in opposite orders. Whatever reads the agent's figures reads them summed over its
shards (``check``, ``today``, ``incidents``, ``metrics``): a reader never sees a shard.

Before each call the agent asks ``check``: while today's spend is below every ceiling the
call goes out; once a ceiling is reached it is not made. So a ceiling is passed by at most
the calls already in flight when it was reached (one per run), never by a loop. A refusal is
counted on the row of each ceiling reached (``refused``, ``first_refused``: the operator's
incident) and, the first time in the day, writes one message to the inbox's outbox (the
user is told once a day, whatever the number of runs refused). For the agent the refusal is
written on the refused inbox's shard, so the agent's ``refused`` is the sum over its shards
(every call it refused, once) and its ``first_refused`` their earliest (its first refusal of
the day), as with one row; ``told`` is an inbox row's only. The refusal's writes are fenced
like a finish: a worker that lost its lease writes nothing and learns it.

A day is the UTC day on the database's clock (``now`` in tests); the next day's first
second starts from zero again. Money is counted only for a model with a price (per million
tokens, in whatever currency the price table uses), in billionths of that currency.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import (BigInteger, Connection, Insert, Select, SmallInteger, and_, bindparam, delete, distinct, func,
                        literal, select, true, tuple_, union_all, update)

from . import leases, validate
from .db import NOW, clock, insert
from .dialects import Dialect, for_, per_dialect
from .tables import outbox, spend
from .transactions import Transactions

DAY = 86400
SHARDS = 16  # rows per agent per day: counts of different inboxes rarely share a row lock
KEY = ["scope", "name", "day", "shard"]
ADDED = ("calls", "input_tokens", "output_tokens", "cost_nanos")  # what each count adds
NANOS = 1_000_000_000  # billionths of a currency unit: a token at $0.08/Mtok is 80 of them
DEFAULT_NOTICE = ("The assistant has reached its spending limit for today. Your message is kept "
                  "and will be answered after 00:00 UTC.")


@dataclass(frozen=True)
class Price:
    """Per million tokens. Cache writes and reads default to Anthropic's ratios to input
    (1.25x and 0.1x)."""

    input: float
    output: float
    cache_write: float | None = None
    cache_read: float | None = None


@dataclass(frozen=True)
class Usage:
    """One model call's usage, as the API reported it."""

    model: str
    input_tokens: int = 0
    output_tokens: int = 0
    cache_write_tokens: int = 0
    cache_read_tokens: int = 0

    @classmethod
    def of(cls, model: str, usage: Any) -> Usage:
        """From the SDK's ``reply.usage`` (or a dict): missing or null fields count 0."""
        def get(key: str) -> int:
            value = usage.get(key) if isinstance(usage, Mapping) else getattr(usage, key, 0)
            return max(0, int(value or 0))
        return cls(model, get("input_tokens"), get("output_tokens"),
                   get("cache_creation_input_tokens"), get("cache_read_input_tokens"))

    @classmethod
    def cache_in_input(cls, model: str, input_tokens: Any, output_tokens: Any, cache_write: Any = 0,
                       cache_read: Any = 0) -> Usage:
        """From a count whose input includes the cache's writes and reads (Pydantic AI's,
        LangChain's, OpenAI's), which are priced apart: missing or null fields count 0."""
        write, read = max(0, int(cache_write or 0)), max(0, int(cache_read or 0))
        return cls(model, max(0, int(input_tokens or 0) - write - read), max(0, int(output_tokens or 0)), write, read)

    @property
    def input_all(self) -> int:
        return self.input_tokens + self.cache_write_tokens + self.cache_read_tokens

    @property
    def tokens(self) -> int:
        return self.input_all + self.output_tokens


@dataclass(frozen=True)
class Budget:
    """Daily ceilings (None: no ceiling) and the price table. ``agent`` names the agent's
    row: every inbox served under that name counts towards its ceilings."""

    agent: str = "agent"
    inbox_tokens: int | None = None
    inbox_money: float | None = None
    agent_tokens: int | None = None
    agent_money: float | None = None
    prices: Mapping[str, Price] = field(default_factory=dict)
    notice: str = DEFAULT_NOTICE

    def cost_nanos(self, usage: Usage) -> int:
        """What the call cost (0 for a model without a price)."""
        price = self.prices.get(usage.model)
        if price is None:
            return 0
        write = price.input * 1.25 if price.cache_write is None else price.cache_write
        read = price.input * 0.1 if price.cache_read is None else price.cache_read
        per_million = (usage.input_tokens * price.input + usage.output_tokens * price.output
                       + usage.cache_write_tokens * write + usage.cache_read_tokens * read)
        return round(per_million * (NANOS // 1_000_000))

    def ceilings(self, scope: str) -> tuple[int | None, int | None]:
        """(tokens, money in nanos) for ``scope`` ("inbox" or "agent")."""
        tokens, money = ((self.inbox_tokens, self.inbox_money) if scope == "inbox"
                         else (self.agent_tokens, self.agent_money))
        return tokens, None if money is None else round(money * NANOS)

    def limited(self) -> bool:
        return any(v is not None for v in (self.inbox_tokens, self.inbox_money,
                                           self.agent_tokens, self.agent_money))


@dataclass(frozen=True)
class Verdict:
    """``check``'s answer. ``allowed``: the call may go out. Else ``held`` False means the
    lease was lost (nothing written); otherwise ``reached`` says which ceiling, ``told``
    whether this refusal wrote the day's message to the user."""

    allowed: bool
    # The next UTC day's first second: the budget is whole again. None for a budget with no
    # ceiling, whose check reads nothing (not even the database's clock).
    resumes_at: int | None
    held: bool = True
    reached: str = ""
    told: bool = False


@dataclass(frozen=True)
class SpendRow:
    scope: str
    name: str
    day: int
    calls: int
    input_tokens: int
    output_tokens: int
    cost: float  # in the price table's currency
    token_ceiling: int | None  # the ceilings in force at the last call counted
    cost_ceiling: float | None
    refused: int
    first_refused: int | None
    told: int | None

    @property
    def tokens(self) -> int:
        return self.input_tokens + self.output_tokens


def day_of(now: int) -> int:
    return now - now % DAY


def shard_of(inbox: str) -> int:
    """The agent's shard this inbox adds to: fixed by its name, the same in every process."""
    return zlib.crc32(inbox.encode()) % SHARDS


def count(conn: Connection, inbox: str, budget: Budget, usage: Usage, now: int | None) -> None:
    """Add one call's usage to today's row of the inbox and to the inbox's shard of the
    agent's day, in one statement that reads the clock once for both rows (one round trip:
    a thousand model calls answering within a second each count). The inbox row is written
    first, always: two counts never wait on each other in opposite orders."""
    (inbox_tokens, inbox_money), (agent_tokens, agent_money) = budget.ceilings("inbox"), budget.ceilings("agent")
    conn.execute(for_(COUNT, conn), {
        "p_now": now, "p_inbox": inbox, "p_agent": budget.agent, "p_shard": shard_of(inbox),
        "p_input_tokens": usage.input_all, "p_output_tokens": usage.output_tokens,
        "p_cost_nanos": budget.cost_nanos(usage), "p_inbox_tokens": inbox_tokens, "p_inbox_money": inbox_money,
        "p_agent_tokens": agent_tokens, "p_agent_money": agent_money})


def _count(dialect: Dialect) -> Insert:
    # Built once per engine. The clock is a CTE both rows read: evaluated once, so the two
    # rows never fall on two days at midnight.
    at = select(NOW.label("now")).cte("at")

    def row(scope: str, name: str, shard: Any, tokens: str, money: str) -> Select[Any]:
        return select(literal(scope, spend.c.scope.type).label("scope"), bindparam(name, type_=spend.c.name.type),
                      shard, at.c.now - at.c.now % DAY, literal(1, BigInteger()),
                      *(bindparam(f"p_{k}", type_=BigInteger()) for k in ADDED[1:]),
                      bindparam(tokens, type_=BigInteger()), bindparam(money, type_=BigInteger()), at.c.now)

    both = union_all(row("inbox", "p_inbox", literal(0, SmallInteger()), "p_inbox_tokens", "p_inbox_money"),
                     row("agent", "p_agent", bindparam("p_shard", type_=SmallInteger()), "p_agent_tokens",
                         "p_agent_money")).subquery("counted")
    # WHERE true: SQLite reads an upsert's SELECT without one as a join's ON. Ordered by
    # scope, descending: the inbox row first.
    rows = select(both).where(true()).order_by(both.c.scope.desc())
    columns = ("scope", "name", "shard", "day", *ADDED, "token_ceiling", "cost_ceiling_nanos", "updated")
    stmt = dialect.insert(spend).from_select(columns, rows)
    return stmt.on_conflict_do_update(
        index_elements=KEY,
        set_={**{k: spend.c[k] + stmt.excluded[k] for k in ADDED}, "token_ceiling": stmt.excluded.token_ceiling,
              "cost_ceiling_nanos": stmt.excluded.cost_ceiling_nanos, "updated": stmt.excluded.updated})


COUNT = per_dialect(_count)


def check(conn: Connection, inbox: str, holder: str, generation: int, budget: Budget,
          now: int | None) -> Verdict:
    """May the run of (holder, generation) on ``inbox`` make a model call now?"""
    at = clock(conn, now)
    day = day_of(at)
    if not budget.limited():
        return Verdict(True, day + DAY)
    keys = [("inbox", inbox, 0), ("agent", budget.agent, shard_of(inbox))]
    rows = {(r["scope"], r["name"]): r for r in _summed(conn.execute(select(spend).where(
        spend.c.day == day, and_(spend.c.scope == "inbox", spend.c.name == inbox)
        | and_(spend.c.scope == "agent", spend.c.name == budget.agent))))}
    reached = [(scope, name, shard, why) for scope, name, shard in keys
               if (why := _reached(rows.get((scope, name)), *budget.ceilings(scope)))]
    if not reached:
        return Verdict(True, day + DAY)
    if leases.holds(conn, inbox, holder, generation, now) is None:
        return Verdict(False, day + DAY, held=False)
    _touch(conn, "inbox", inbox, 0, day, at)  # the inbox row first, as a count locks them
    for scope, name, shard, _ in reached:
        if scope == "agent":
            _touch(conn, scope, name, shard, day, at)  # this inbox's shard may have no row yet
        conn.execute(update(spend).where(*_key(scope, name, shard, day)).values(
            refused=spend.c.refused + 1, first_refused=func.coalesce(spend.c.first_refused, at)))
    told = conn.execute(update(spend).where(*_key("inbox", inbox, 0, day), spend.c.told.is_(None))
                        .values(told=at)).rowcount == 1
    if told:
        # Urgent: the person's messages wait unanswered meanwhile, so the notice must not wait
        # out the outbox gap (up to an hour) too; once a day per inbox, it cannot flood.
        conn.execute(outbox.insert().values(inbox=inbox, body=validate.text_value("budget notice", budget.notice),
                                            urgent=True, created=at))
    said = "; ".join(f"{scope} {name!r}: {why}" for scope, name, _, why in reached)
    return Verdict(False, day + DAY, reached=said, told=told)


def _reached(row: dict[str, Any] | None, tokens: int | None, money: int | None) -> str:
    if row is None:
        return ""
    used = row["input_tokens"] + row["output_tokens"]
    if tokens is not None and used >= tokens:
        return f"{used} tokens of {tokens} today"
    if money is not None and row["cost_nanos"] >= money:
        return f"{row['cost_nanos'] / NANOS:.4f} of {money / NANOS:.4f} (money) today"
    return ""


def _key(scope: str, name: str, shard: int, day: int) -> tuple[Any, ...]:
    return spend.c.scope == scope, spend.c.name == name, spend.c.shard == shard, spend.c.day == day


def _touch(conn: Connection, scope: str, name: str, shard: int, day: int, now: int) -> None:
    """The row exists (an agent's refusal may come before its inbox's first call)."""
    conn.execute(insert(conn, spend).values(scope=scope, name=name, shard=shard, day=day, updated=now)
                 .on_conflict_do_nothing(index_elements=KEY))


def _summed(rows: Iterable[Any]) -> list[dict[str, Any]]:
    """One figure per (scope, name, day), its shards added up (an inbox has one): calls,
    tokens, cost and refusals summed, the first refusal and telling the earliest, the
    ceilings those in force at the last call counted on any shard."""
    figures: dict[tuple[str, str, int], dict[str, Any]] = {}
    for r in rows:
        row = r._asdict()
        seen = figures.setdefault((r.scope, r.name, r.day), row)
        if seen is row:
            continue
        if _last_count(row) > _last_count(seen):  # a refusal's new row has no ceilings
            seen.update(updated=row["updated"], token_ceiling=row["token_ceiling"],
                        cost_ceiling_nanos=row["cost_ceiling_nanos"])
        for column in ADDED + ("refused",):
            seen[column] += row[column]
        for column in ("first_refused", "told"):
            seen[column] = min((t for t in (seen[column], row[column]) if t is not None), default=None)
    return list(figures.values())


def _last_count(row: dict[str, Any]) -> tuple[bool, int]:
    return row["calls"] > 0, row["updated"]


def _row(r: dict[str, Any]) -> SpendRow:
    money = r["cost_ceiling_nanos"]
    return SpendRow(r["scope"], r["name"], r["day"], r["calls"], r["input_tokens"], r["output_tokens"],
                    r["cost_nanos"] / NANOS, r["token_ceiling"], None if money is None else money / NANOS,
                    r["refused"], r["first_refused"], r["told"])


def today(conn: Connection, inbox: str | None, now: int | None) -> list[SpendRow]:
    """Today's figures: the inbox's (when given) and every agent's, the inbox first."""
    day = day_of(clock(conn, now))
    wanted = spend.c.scope == "agent"
    if inbox is not None:
        wanted = wanted | and_(spend.c.scope == "inbox", spend.c.name == inbox)
    rows = _summed(conn.execute(select(spend).where(spend.c.day == day, wanted)))
    return [_row(r) for r in sorted(rows, key=lambda r: (r["scope"] != "inbox", r["name"]))]


def incidents(conn: Connection, since: int) -> list[SpendRow]:
    """Budgets that refused a call, first since ``since``, oldest first."""
    refused = select(spend.c.scope, spend.c.name, spend.c.day).where(spend.c.first_refused >= since)
    rows = _summed(conn.execute(select(spend).where(
        tuple_(spend.c.scope, spend.c.name, spend.c.day).in_(refused))))
    first = [r for r in rows if r["first_refused"] >= since]  # not an earlier shard's refusal
    return [_row(r) for r in sorted(first, key=lambda r: (r["first_refused"], r["scope"], r["name"]))]


def metrics(conn: Connection, now: int) -> dict[str, Any]:
    """For /metrics: today's spend of each agent, how many inboxes and agents a ceiling
    stopped today, and the calls refused (within retention) by scope."""
    day = day_of(now)
    agents = {name: {"tokens": int(tokens), "cost": int(cost) / NANOS, "calls": int(calls)}
              for name, tokens, cost, calls in conn.execute(
                  select(spend.c.name, func.sum(spend.c.input_tokens + spend.c.output_tokens),
                         func.sum(spend.c.cost_nanos), func.sum(spend.c.calls))
                  .where(spend.c.day == day, spend.c.scope == "agent").group_by(spend.c.name))}
    reached = dict(conn.execute(select(spend.c.scope, func.count(distinct(spend.c.name))).where(
        spend.c.day == day, spend.c.refused > 0).group_by(spend.c.scope)).all())
    refused = dict(conn.execute(select(spend.c.scope, func.coalesce(func.sum(spend.c.refused), 0))
                                .group_by(spend.c.scope)).all())
    return {"agents_today": agents,
            "reached_today": {s: int(reached.get(s, 0)) for s in ("inbox", "agent")},
            "refused_calls": {s: int(refused.get(s, 0)) for s in ("inbox", "agent")}}


def purge(conn: Connection, cutoff: int) -> int:
    """Days that ended before ``cutoff`` (retention)."""
    return conn.execute(delete(spend).where(spend.c.day <= cutoff - DAY)).rowcount


class Spend:
    """What the model cost (``store.spend``), one short transaction each."""

    def __init__(self, transactions: Transactions) -> None:
        self.transactions = transactions

    def count(self, inbox: str, budget: Budget, usage: Usage, *, now: int | None = None) -> None:
        """One model call's usage, counted for the inbox and the agent. Not fenced: a call a
        run made before it lost its lease was paid for all the same."""
        validate.inbox(inbox)
        with self.transactions.statement() as conn:
            count(conn, inbox, budget, usage, now)

    def check(self, inbox: str, holder: str, gen: int, budget: Budget, *, now: int | None = None) -> Verdict:
        """May (holder, gen)'s run make a model call now? A refusal is recorded (the
        operator's incident) and tells the inbox's user once a day, fenced by the lease.
        A budget with no ceiling is answered without a transaction: the claude agent asks
        before every model call."""
        if not budget.limited():
            return Verdict(True, None)
        with self.transactions.transaction() as conn:
            return check(conn, inbox, holder, gen, budget, now)

    def today(self, inbox: str | None = None, *, now: int | None = None) -> list[SpendRow]:
        """Today's spend: the inbox's row (when given) and every agent's."""
        with self.transactions.transaction() as conn:
            return today(conn, inbox, now)

    def incidents(self, since: int) -> list[SpendRow]:
        """Budgets (an inbox's, an agent's) that refused a model call since ``since``."""
        with self.transactions.transaction() as conn:
            return incidents(conn, since)
