"""Grants and the audit trail of the egress proxy (wakeful/proxy/, docs/design.md section 9).

A grant is a random token the runtime mints for a worker and sends with every request
through the proxy; the proxy puts the route's secret on the request instead. The store keeps
only the token's sha256, bound to an inbox, a lease generation, the routes it covers and an
expiry (the database's clock). The rules:

- A **run's grant** (``tool_use_id`` NULL) is minted only by the live lease's holder, under
  the inbox lock (``leases.holds``): a worker that was fenced off cannot mint one. It is
  good while the inbox's lease row still carries its generation, a holder and an unexpired
  ``lease_until``: once another worker takes the inbox over (generation + 1), or the lease
  lapses or is released, every call the old worker makes through the proxy is refused.
- An **effect's grant** (``tool_use_id`` set) is minted by the effect executor after the
  run's commit, when the lease may long be released, so it is bound to the effect instead:
  good while its generation is not above the inbox's (a grant from a generation that never
  held the lease is forged) and ``effect_is_live``: the effect row committed by that
  generation is ``executing`` at the attempt the grant was minted for. An executor whose
  attempt was taken over (at-least-once retake) or finished can no longer call.
- Every grant expires (``ttl``): the lease and the effect are the fence, the expiry bounds a
  token that leaked anyway. Minting deletes the inbox's expired grants, so the table stays
  the size of the live work.

Each check is one statement (the grant joined with its inbox's lease row and its effect);
each proxied request, allowed or not, leaves one audit row: who, where, what came of it,
never a header or a body.
"""

from __future__ import annotations

import hashlib
import secrets
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Connection, and_, delete, func, insert, literal_column, select

from . import leases, rules, validate
from .db import clock, clock_expr
from .records import InvalidCall
from .transactions import Transactions
from .tables import INBOX_MAX, SOURCE_ID_MAX, audit, effects, grants, inboxes

TOKEN_PREFIX = "wkg_"  # recognisable in a leak report; the rest is 256 random bits
TOKEN_MAX = 128  # longer than any token minted here: anything longer is forged, unhashed
ROUTE_MAX = 64
PATH_MAX = 1024

# What came of a request (the audit's ``outcome``; "ok" = the upstream answered in full).
OUTCOMES = {
    "ok": "the upstream answered",
    "no_grant": "no grant: send X-Wakeful-Grant (or the SDK's api key) with the grant the runtime minted",
    "forged": "the grant is not one the runtime minted",
    "expired": "the grant has expired",
    "fenced": "the grant's lease generation no longer holds the inbox (another worker took it over, "
              "or the run ended)",
    "effect_done": "the grant's effect is no longer executing at that attempt",
    "route_not_granted": "the grant does not cover this route",
    "unknown_route": "no such route",
    "path_not_allowed": "the route's allowlist does not allow this method and path",
    "bad_path": "the path has dot, empty or encoded-slash segments",
    "request_too_large": "the request body is over the proxy's limit",
    "upstream_down": "the upstream could not be reached",
    "upstream_timeout": "the upstream did not answer in time",
    "upstream_cut": "the upstream failed mid-response",
    "upstream_encoding": "the upstream answered in a content encoding the proxy cannot decode (so could not "
                         "scrub)",
    "response_cut": "the response was cut at the proxy's size limit",
    "client_gone": "the caller went away before the response ended",
}

# Refusals of a caller without a live grant for the route: anyone who can reach the proxy can
# cause them at will, so the proxy writes them within a budget (wakeful/proxy/settings.py) and the
# audit keeps the newest UNGRANTED_KEPT of each route and outcome. A caller with a live grant
# (a path the allowlist refuses, an upstream failing) is always recorded and never capped:
# that is the evidence of a hijacked run, and the grant's run bounds it.
UNGRANTED = frozenset({"no_grant", "forged", "expired", "fenced", "effect_done", "route_not_granted",
                       "unknown_route"})
UNGRANTED_KEPT = 1000
# The route recorded for a request to a route that does not exist: a caller's made-up name
# never becomes an audit key or a /metrics label (it is outside the route name grammar).
UNKNOWN_ROUTE = "(unknown)"


def token_hash(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8", "surrogatepass")).hexdigest()


@dataclass(frozen=True)
class GrantCheck:
    """The proxy's answer for one request's grant: ``status`` 200 lets it through; 401/403
    refuse it with ``outcome`` (a key of ``OUTCOMES``) and ``reason`` (words for the tool)."""

    status: int
    outcome: str
    inbox: str | None = None
    generation: int | None = None
    tool_use_id: str | None = None

    @property
    def allowed(self) -> bool:
        return self.status == 200

    @property
    def reason(self) -> str:
        return OUTCOMES[self.outcome]


@dataclass(frozen=True)
class AuditEntry:
    id: int
    at: int
    inbox: str | None
    generation: int | None
    tool_use_id: str | None
    route: str
    method: str
    path: str
    status: int
    bytes: int
    duration_ms: int
    outcome: str


# -- minting -------------------------------------------------------------------------------

def check_mint_input(inbox: str, holder: str, generation: Any, routes: Any, ttl: Any,
                     tool_use_id: Any, attempt: Any) -> list[str]:
    """Validate a mint before any transaction opens; the routes as a sorted, unique list."""
    validate.name("inbox", inbox, INBOX_MAX)
    validate.name("holder", holder, 255)
    for field, value in (("generation", generation), ("ttl", ttl)):
        if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
            raise InvalidCall(f"{field} must be a positive whole number, got {value!r}")
    if isinstance(routes, str | bytes) or not isinstance(routes, list | tuple | set | frozenset) or not routes:
        raise InvalidCall("routes must be a non-empty list of route names")
    names = sorted({validate.name("route", r, ROUTE_MAX) for r in routes})
    if tool_use_id is not None:
        validate.name("tool_use_id", tool_use_id, SOURCE_ID_MAX)
    if attempt is not None and (not isinstance(attempt, int) or isinstance(attempt, bool) or attempt <= 0):
        raise InvalidCall(f"attempt must be a positive whole number, got {attempt!r}")
    return names


def mint(conn: Connection, inbox: str, holder: str, generation: int, routes: list[str], ttl: int,
         tool_use_id: str | None, attempt: int | None, now: int | None) -> str | None:
    """A new grant's token, or None: a run's grant needs the live lease (holder, generation),
    an effect's grant needs its effect executing (at ``attempt``, when given)."""
    if tool_use_id is None:
        at = leases.holds(conn, inbox, holder, generation, now)
        if at is None:
            return None
    else:
        at = clock(conn, now)
        effect = conn.execute(select(effects.c.status, effects.c.generation, effects.c.attempts).where(
            effects.c.inbox == inbox, effects.c.tool_use_id == tool_use_id)).one_or_none()
        if effect is None or not effect_is_live(effect.status, effect.generation, effect.attempts,
                                                generation, attempt):
            return None
    conn.execute(delete(grants).where(grants.c.inbox == inbox, grants.c.expires < at))
    token = TOKEN_PREFIX + secrets.token_urlsafe(32)
    conn.execute(insert(grants).values(
        token_hash=token_hash(token), inbox=inbox, generation=generation, holder=holder,
        routes=routes, tool_use_id=tool_use_id, attempt=attempt, created=at, expires=at + ttl))
    return token


def effect_is_live(status: str | None, effect_generation: int | None, attempts: int | None,
                   generation: int, attempt: int | None) -> bool:
    """INTEGRATION HOOK (effects, store/effects.py): an effect's grant works while the effect
    that generation committed is being executed, at the attempt the grant was minted for.
    Wired to the effects table as it stands (status ``executing``, ``generation``,
    ``attempts``); change it here if the executor's rules change."""
    return (status == "executing" and effect_generation == generation
            and (attempt is None or attempts == attempt))


# -- checking ------------------------------------------------------------------------------

def _check_statement(now: int | None):  # type: ignore[no-untyped-def]
    joined = grants.outerjoin(inboxes, inboxes.c.inbox == grants.c.inbox).outerjoin(
        effects, and_(effects.c.inbox == grants.c.inbox, effects.c.tool_use_id == grants.c.tool_use_id))
    return select(
        grants.c.inbox, grants.c.generation, grants.c.routes, grants.c.tool_use_id, grants.c.attempt,
        grants.c.expires, inboxes.c.holder, inboxes.c.generation.label("lease_generation"),
        inboxes.c.lease_until, effects.c.status.label("effect_status"),
        effects.c.generation.label("effect_generation"), effects.c.attempts.label("effect_attempts"),
        clock_expr(now).label("now"),
    ).select_from(joined)


def check(conn: Connection, token: str | None, route: str, now: int | None) -> GrantCheck:
    """May a request on ``route`` carrying ``token`` go upstream? One statement."""
    if not token:
        return GrantCheck(401, "no_grant")
    if len(token) > TOKEN_MAX or not token.startswith(TOKEN_PREFIX):
        return GrantCheck(403, "forged")
    row = conn.execute(_check_statement(now).where(grants.c.token_hash == token_hash(token))).one_or_none()
    if row is None:
        return GrantCheck(403, "forged")
    who = {"inbox": row.inbox, "generation": row.generation, "tool_use_id": row.tool_use_id}
    if row.expires < row.now:
        return GrantCheck(403, "expired", **who)
    if route not in (row.routes or []):
        return GrantCheck(403, "route_not_granted", **who)
    if row.tool_use_id is None:
        held = (row.lease_generation == row.generation and row.holder is not None
                and row.lease_until is not None and rules.lease_live(row.lease_until, row.now))
        return GrantCheck(200, "ok", **who) if held else GrantCheck(403, "fenced", **who)
    if row.lease_generation is None or row.generation > row.lease_generation:
        return GrantCheck(403, "forged", **who)
    if not effect_is_live(row.effect_status, row.effect_generation, row.effect_attempts,
                          row.generation, row.attempt):
        return GrantCheck(403, "effect_done", **who)
    return GrantCheck(200, "ok", **who)


# -- the audit trail -----------------------------------------------------------------------

def record(conn: Connection, check_: GrantCheck, route: str, method: str, path: str, status: int,
           size: int, duration_ms: int, outcome: str | None, now: int | None) -> None:
    """One proxied (or refused) request. ``path`` without its query; never headers or bodies.
    ``outcome`` None: the grant check's own (a refusal's reason, or "ok")."""
    outcome = outcome or check_.outcome
    if outcome not in OUTCOMES:
        raise InvalidCall(f"unknown audit outcome {outcome!r}")
    route = _storable(route, ROUTE_MAX)
    conn.execute(insert(audit).values(
        at=clock_expr(now), inbox=check_.inbox, generation=check_.generation,
        tool_use_id=check_.tool_use_id, route=route, method=_storable(method, 16),
        path=_storable(path, PATH_MAX), status=status, bytes=size, duration_ms=duration_ms,
        outcome=outcome))
    if outcome in UNGRANTED:
        # The cap: rows of this route and outcome beyond the newest UNGRANTED_KEPT go (read
        # through the not-ok index; usually nothing to delete). Retention still purges by age.
        same = and_(audit.c.route == route, audit.c.outcome == outcome,
                    audit.c.outcome != literal_column("'ok'"))
        oldest_kept = (select(audit.c.id).where(same).order_by(audit.c.id.desc())
                       .offset(UNGRANTED_KEPT - 1).limit(1).scalar_subquery())
        conn.execute(delete(audit).where(same, audit.c.id < oldest_kept))


def _storable(text: str, limit: int) -> str:
    # A caller chooses the route and path it asks for: NUL and lone surrogates (which
    # PostgreSQL refuses) are escaped, so a hostile path is recorded, not lost.
    return text.encode("utf-8", "backslashreplace").decode("utf-8").replace("\x00", "\\x00")[:limit]


def view(conn: Connection, inbox: str | None, limit: int) -> list[AuditEntry]:
    """The newest ``limit`` rows (of ``inbox``, or all), oldest first."""
    query = select(audit)
    if inbox is not None:
        query = query.where(audit.c.inbox == inbox)
    rows = conn.execute(query.order_by(audit.c.id.desc()).limit(limit)).all()
    return [AuditEntry(**{c: getattr(r, c) for c in AuditEntry.__dataclass_fields__}) for r in reversed(rows)]


def not_ok_counts(conn: Connection) -> dict[str, dict[str, int]]:
    """Requests that were refused or failed, ``{route: {outcome: count}}`` (for /metrics)."""
    not_ok = audit.c.outcome != literal_column("'ok'")  # a literal, so the partial index applies
    rows = conn.execute(select(audit.c.route, audit.c.outcome, func.count())
                        .where(not_ok).group_by(audit.c.route, audit.c.outcome)).all()
    counts: dict[str, dict[str, int]] = {}
    for route, outcome, n in rows:
        counts.setdefault(route, {})[outcome] = int(n)
    return counts


class Grants:
    """The egress proxy's grants and audit trail (``store.grants``), one short transaction
    each."""

    def __init__(self, transactions: Transactions) -> None:
        self.transactions = transactions

    def mint(self, inbox: str, holder: str, gen: int, routes: Iterable[str], ttl: int, *,
             tool_use_id: str | None = None, attempt: int | None = None, now: int | None = None) -> str | None:
        """A grant token for ``routes`` (None when refused): a run's grant needs the live lease
        (holder, gen); an effect's (``tool_use_id``) needs that effect executing."""
        names = check_mint_input(inbox, holder, gen, routes, ttl, tool_use_id, attempt)
        with self.transactions.transaction() as conn:
            return mint(conn, inbox, holder, gen, names, ttl, tool_use_id, attempt, now)

    def check(self, token: str | None, route: str, *, now: int | None = None) -> GrantCheck:
        """May a request on ``route`` carrying ``token`` go upstream (one statement)."""
        with self.transactions.transaction() as conn:
            return check(conn, token, route, now)

    def record_egress(self, check_: GrantCheck, route: str, method: str, path: str, status: int,
                      size: int = 0, duration_ms: int = 0, outcome: str | None = None, *,
                      now: int | None = None) -> None:
        """One audit row for a proxied or refused request (never headers or bodies)."""
        with self.transactions.transaction() as conn:
            record(conn, check_, route, method, path, status, size, duration_ms, outcome, now)

    def audit(self, inbox: str | None = None, *, limit: int = 100) -> list[AuditEntry]:
        with self.transactions.transaction() as conn:
            return view(conn, inbox, limit)
