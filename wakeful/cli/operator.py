"""The operator's commands: what the store says about every inbox, and the two actions.

Every command reads the store (never Celery or Flower: the truth lives in the database),
prints a readable table by default and JSON with ``--json`` for scripts. An inbox, event or
approval that does not exist is a clear message on stderr and exit code 1 (with ``--json``,
also ``{"error": ...}`` on stdout); a bad option is exit code 2. The actions (``requeue``,
``answer``) ring the inbox's doorbell so a worker picks the work up at once.

The store is opened from the environment when a command runs (``WAKEFUL_DATABASE_URL`` and
the store settings), so each command sees the configuration it is started with.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any, NoReturn, Optional

import typer

from wakeful.cli.agent_views import approval_tools, describe_run, run_details
from store.display import safe

if TYPE_CHECKING:
    from store import InboxStatus, Store

STATUSES = ("pending", "running", "done", "dead")
CLI_ACTOR = "cli"  # who the command line's actions are by: an approval's answered_by, the audit's actor
JSON = typer.Option(False, "--json", help="JSON on stdout, for scripts.")
INBOX = typer.Option(None, "--inbox", "-i", help="Only this inbox.")
REQUIRED_INBOX = typer.Option(..., "--inbox", "-i", help="The inbox.")
WIDTH = 60  # longest free text (an error, a message body) shown in a table cell


# -- plumbing ---------------------------------------------------------------------------

@contextmanager
def opened_store() -> Iterator["Store"]:
    from wakeful.settings import RuntimeSettings, for_process
    from store import Store

    s = for_process(RuntimeSettings, "wakeful")
    store = Store.connect(s.store_url, **s.store_options())
    try:
        problem = usable(store, s.store_url)
        if problem:
            fail(problem, as_json=False)
        yield store
    finally:
        store.dispose()


def usable(store: "Store", url: str) -> str | None:
    """Why a command cannot use the store, in one line (its database unreachable, or without
    this wakeful's tables: run `wakeful init`); None when it can."""
    from sqlalchemy.exc import DBAPIError

    from wakeful.settings import without_password

    try:
        return store.behind()
    except DBAPIError as exc:
        reason = str(exc.orig).strip().splitlines()[0] if str(exc.orig).strip() else type(exc.orig).__name__
        return f"cannot reach the store's database ({without_password(url)}): {reason}"


def ring(inbox: str) -> None:
    from tasks import doorbell

    doorbell.ring(inbox)


def fail(message: str, as_json: bool, code: int = 1) -> NoReturn:
    """A clear message on stderr (and as JSON on stdout for scripts), then the exit code."""
    if as_json:
        typer.echo(json.dumps({"error": message}))
    echo(f"wakeful: {message}", err=True)
    raise typer.Exit(code)


def emit_json(data: Any) -> None:
    # exact, and terminal-safe as it is: json.dumps escapes control and non-ASCII characters
    typer.echo(json.dumps(data, indent=2, default=str))


def echo(text: str = "", err: bool = False) -> None:
    """Every human-readable line: values from outside may carry terminal escapes."""
    typer.echo(safe(text, keep_newlines=True), err=err)


def table(headers: Sequence[str], rows: Sequence[Sequence[Any]], empty: str) -> None:
    if not rows:
        echo(empty)
        return
    cells = [[_cell(v) for v in row] for row in rows]
    widths = [max(len(h), *(len(r[i]) for r in cells)) for i, h in enumerate(headers)]
    for line in [list(headers), ["-" * w for w in widths], *cells]:
        echo("  ".join(v.ljust(w) for v, w in zip(line, widths)).rstrip())


def _cell(value: Any) -> str:
    text = "-" if value is None else safe(value)
    return text if len(text) <= WIDTH else text[: WIDTH - 1] + "…"


def when(at: int | None) -> str:
    if at is None:
        return "-"
    return datetime.fromtimestamp(at, timezone.utc).strftime("%Y-%m-%d %H:%M:%S")


def span(seconds: int | None) -> str:
    """A duration, compact: 45s, 12m, 3h05m, 2d04h."""
    if seconds is None:
        return "-"
    sign, s = ("-" if seconds < 0 else ""), abs(int(seconds))
    if s < 60:
        return f"{sign}{s}s"
    if s < 3600:
        return f"{sign}{s // 60}m"
    if s < 86400:
        return f"{sign}{s // 3600}h{s % 3600 // 60:02d}m"
    return f"{sign}{s // 86400}d{s % 86400 // 3600:02d}h"


def relative(at: int | None, now: int) -> str:
    if at is None:
        return "-"
    return f"in {span(at - now)}" if at >= now else f"{span(now - at)} ago"


def known(status: "InboxStatus") -> bool:
    """Whether the store has ever heard of this inbox: a lease taken, an event, a timer, a
    message or an approval. (The store has no inbox listing to ask instead.)"""
    return bool(status.generation or status.pending or status.running or status.done
                or status.dead or status.next_timer_due is not None or status.held_messages
                or status.last_sent or status.pending_approvals)


def require_inbox(store: "Store", inbox: str, as_json: bool) -> "InboxStatus":
    status = store.status(inbox)
    if not known(status):
        fail(f"unknown inbox {inbox!r} (no events, timers, messages or lease)", as_json)
    return status


# -- status -----------------------------------------------------------------------------

def status(inbox: Optional[str] = typer.Argument(None, help="One inbox (default: all)."),
           as_json: bool = JSON) -> None:
    """One inbox's lease, events, timers and outbox; without one, totals and inboxes to watch.

    Without an inbox: events pending, running and dead, the oldest pending age, held
    messages, overdue timers, inboxes waiting out an outage; the inboxes with dead events first, then those with the oldest
    waiting work; the latest rejected input."""
    now = int(time.time())
    with opened_store() as store:
        if inbox is not None:
            st = require_inbox(store, inbox, as_json)
            upcoming = sorted((t for t in store.timers(inbox) if not t.done), key=lambda t: t.due)[:5]
            _show_inbox(st, upcoming, now, as_json, store.spend.today(inbox))
            return
        metrics = store.operator.metrics()
        attention = store.operator.attention(limit=20)
        rejected_rows = store.operator.rejections(limit=5)
    if as_json:
        emit_json({"metrics": metrics, "attention": [asdict(s) for s in attention],
                   "rejected": [asdict(r) for r in rejected_rows]})
        return
    echo(f"events: {metrics['events_pending']} pending, {metrics['events_running']} running, "
               f"{metrics['events_dead']} dead; oldest pending {span(metrics['oldest_pending_age'])}")
    echo(f"outbox: {metrics['outbox_held']} held; timers overdue: {metrics['timers_overdue']}; "
               f"rejected inputs: {sum(metrics['rejected'].values())}")
    if metrics["inboxes_waiting_on_outage"]:
        echo(f"outage: {metrics['inboxes_waiting_on_outage']} inbox(es) waiting for an upstream to come "
             f"back (a run said try later), the longest for {span(metrics['outage_age'])}")
    _show_budgets(metrics.get("budgets") or {})
    echo("")
    table(["inbox", "dead", "pending", "running", "oldest pending", "lease holder", "expires in",
           "held", "approvals"],
          [[s.inbox, s.dead, s.pending, s.running, span(s.oldest_pending_age), s.holder,
            span(s.lease_expires_in), s.held_messages, s.pending_approvals] for s in attention],
          "no inbox needs attention")
    if rejected_rows:
        echo("")
        echo(f"latest rejected input ({len(rejected_rows)} shown; `wakeful rejected` for more):")
        for r in rejected_rows:
            echo(f"  {when(r.received)}  {_cell(r.origin)}  {_cell(r.reason)}")


def _show_inbox(st: "InboxStatus", upcoming: list[Any], now: int, as_json: bool,
                spent: list[Any]) -> None:
    timers_out = [{"id": t.id, "due": t.due, "every": t.every, "cron": t.cron} for t in upcoming]
    if as_json:
        emit_json({**asdict(st), "next_timers": timers_out, "spend_today": [asdict(r) for r in spent]})
        return
    lease = (f"held by {safe(st.holder)}, generation {st.generation}, expires in {span(st.lease_expires_in)}"
             if st.holder else f"free (generation {st.generation})")
    echo(f"inbox {safe(st.inbox)}")
    echo(f"  lease      {lease}")
    echo(f"  events     {st.pending} pending, {st.running} running, {st.done} done, {st.dead} dead")
    echo(f"  oldest     {span(st.oldest_pending_age)} (pending)")
    echo(f"  outbox     {st.held_messages} held; last send "
               + (f"{when(st.last_sent)} ({relative(st.last_sent, now)})" if st.last_sent else "never"))
    echo(f"  approvals  {st.pending_approvals} pending")
    if st.waiting_on_outage:
        echo(f"  outage     {st.waiting_on_outage} event(s) wait for an upstream to come back, since "
             f"{when(st.outage_since)} ({relative(st.outage_since, now)})")
    _show_spend(spent)
    if not upcoming:
        echo("  timers     none")
    for n, t in enumerate(upcoming):
        repeat = f"every {span(t.every)}" if t.every else (f"cron {t.cron}" if t.cron else "once")
        echo(f"  {'timers' if n == 0 else '':<10} {safe(t.id)}: {when(t.due)} ({relative(t.due, now)}), {repeat}")


def _show_budgets(figures: dict[str, Any]) -> None:
    for name, spent in sorted(figures.get("agents_today", {}).items()):
        money = f"; {spent['cost']:.4f}" if spent["cost"] else ""
        echo(f"spend today (UTC): agent {safe(name)}: {spent['tokens']:,} tokens in {spent['calls']} call(s){money}")
    reached = figures.get("reached_today", {})
    if any(reached.values()):
        echo(f"budgets reached today: {reached.get('inbox', 0)} inbox(es), {reached.get('agent', 0)} agent(s) "
             "(`wakeful incidents`)")


def _show_spend(rows: list[Any]) -> None:
    """Today's spend (UTC day, store/spend.py) of the inbox and of each agent, against the
    ceilings in force at their last model call."""
    if not any(r.scope == "inbox" for r in rows):
        echo("  spend      nothing today (UTC)")
    for n, r in enumerate(rows):
        label = "spend" if n == 0 else ""
        who = "this inbox" if r.scope == "inbox" else f"agent {safe(r.name)}"
        tokens = f"{r.tokens:,} tokens" + (f" of {r.token_ceiling:,}" if r.token_ceiling is not None else "")
        money = (f"; {r.cost:.4f}" + (f" of {r.cost_ceiling:.4f}" if r.cost_ceiling is not None else "")
                 if r.cost or r.cost_ceiling is not None else "")
        echo(f"  {label:<10} {who}: {tokens} in {r.calls} call(s) today (UTC){money}")
        if r.refused:
            echo(f"  {'':<10}   budget reached: {r.refused} call(s) not made since {when(r.first_refused)}")
        if r.told:
            echo(f"  {'':<10}   the user was told at {when(r.told)} (once a day)")


# -- dead events and requeue ------------------------------------------------------------

def dead(inbox: Optional[str] = INBOX, as_json: bool = JSON) -> None:
    """Events parked dead (too many attempts), with each one's error and attempts."""
    with opened_store() as store:
        if inbox is not None:
            require_inbox(store, inbox, as_json)
        rows = store.dead(inbox)
    if as_json:
        emit_json([asdict(e) for e in rows])
        return
    table(["id", "inbox", "source", "source_id", "attempts", "created", "error"],
          [[e.id, e.inbox, e.source, e.source_id, e.attempts, when(e.created), e.error] for e in rows],
          "no dead events")


def requeue(event_id: Optional[int] = typer.Argument(None, help="A dead event's id."),
            inbox: Optional[str] = typer.Option(None, "--inbox", "-i",
                                                help="Every dead event of this inbox."),
            as_json: bool = JSON) -> None:
    """Dead events back to pending (attempts reset), and the inbox's doorbell rung.

    One event (EVENT_ID) or every dead event of an inbox (--inbox)."""
    if (event_id is None) == (inbox is None):
        fail("give either an EVENT_ID or --inbox INBOX", as_json, code=2)
    with opened_store() as store:  # through the console's action: audited as by "cli", in the same transaction
        if event_id is not None:
            found = store.operator.event(event_id)
            if found is None:
                fail(f"no event with id {event_id}", as_json)
            requeued = list(store.console.requeue(CLI_ACTOR, found.inbox, event_id).events)
            if not requeued:
                fail(f"event {event_id} is {found.status}, not dead: nothing requeued", as_json)
        else:
            require_inbox(store, inbox, as_json)
            requeued = list(store.console.requeue(CLI_ACTOR, inbox).events)
    for name in dict.fromkeys(e.inbox for e in requeued):
        ring(name)
    if as_json:
        emit_json({"requeued": [asdict(e) for e in requeued]})
        return
    if not requeued:
        echo(f"inbox {inbox!r} has no dead events: nothing requeued")
    for e in requeued:
        echo(f"requeued event {e.id} ({safe(e.source)}/{safe(e.source_id)}) in inbox {e.inbox!r}")


# -- approvals --------------------------------------------------------------------------

def approvals(inbox: Optional[str] = INBOX,
              all_: bool = typer.Option(False, "--all", help="Answered and expired ones too."),
              as_json: bool = JSON) -> None:
    """Approvals waiting for an answer, soonest deadline first: who was sent the link
    (approver) and, with --all, whose answer stands (by: an approver, or cli)."""
    now = int(time.time())
    with opened_store() as store:
        if inbox is not None:
            require_inbox(store, inbox, as_json)
        rows = store.approvals.view(inbox, pending_only=not all_)
        tools = approval_tools(store, inbox)  # the claude agent's tool calls: tool and input
    if as_json:
        emit_json([{**asdict(a), "tool": tools.get((a.inbox, a.request_id), (None,))[0],
                    "input": tools.get((a.inbox, a.request_id), (None, None))[1]} for a in rows])
        return
    table(["inbox", "request_id", "action", "tool", "input", "requested", "deadline", "left", "approver",
           "answer", "by"],
          [[a.inbox, a.request_id, a.action, *tools.get((a.inbox, a.request_id), ("-", "-")),
            when(a.created), when(a.deadline), relative(a.deadline, now), a.approver, a.answer or "pending",
            a.answered_by or "-"]
           for a in rows],
          "no pending approvals" if not all_ else "no approvals")


def answer(inbox: str, request_id: str,
           reply: str = typer.Argument(..., help="yes or no"), as_json: bool = JSON) -> None:
    """Answer an approval; prints the outcome that stands (yes, no, expired or unknown)."""
    try:
        with opened_store() as store:  # audited as the console's actions are, by "cli"
            outcome = store.console.answer(CLI_ACTOR, inbox, request_id, reply).action.outcome
    except ValueError as exc:
        fail(f"rejected: {exc}", as_json, code=2)
    if outcome != "unknown":
        ring(inbox)
    if as_json:
        emit_json({"inbox": inbox, "request_id": request_id, "outcome": outcome})
    else:
        echo(outcome)
    if outcome == "unknown":
        echo(f"wakeful: no approval {request_id!r} was requested in inbox {inbox!r}", err=True)
        raise typer.Exit(1)


# -- per-inbox views --------------------------------------------------------------------

def timers(inbox: str = REQUIRED_INBOX, as_json: bool = JSON) -> None:
    """An inbox's timers, next due first (done one-off timers last)."""
    now = int(time.time())
    with opened_store() as store:
        require_inbox(store, inbox, as_json)
        rows = sorted(store.timers(inbox), key=lambda t: (t.done, t.due))
    if as_json:
        emit_json([asdict(t) for t in rows])
        return
    table(["id", "due", "in", "repeats", "misfire", "state"],
          [[t.id, when(t.due), relative(t.due, now),
            f"every {span(t.every)}" if t.every else (f"cron {t.cron} {t.tz or ''}".strip() if t.cron else "once"),
            t.misfire, "done" if t.done else "live"] for t in rows],
          f"inbox {inbox!r} has no timers")


def outbox(inbox: str = REQUIRED_INBOX, as_json: bool = JSON) -> None:
    """An inbox's messages: held ones (waiting for the gap) and sent ones, each a reply,
    notice or approval (an approval for a named channel shows that channel)."""
    with opened_store() as store:
        require_inbox(store, inbox, as_json)
        rows = store.outbox(inbox)
    if as_json:
        emit_json([asdict(m) for m in rows])
        return
    table(["id", "created", "kind", "urgent", "sent", "body"],
          [[m.id, when(m.created), m.kind + (f" ({m.channel})" if m.channel else ""), "yes" if m.urgent else "",
            when(m.sent_at) if m.sent_at else "held", m.body] for m in rows],
          f"inbox {inbox!r} has no messages")


def events(inbox: str = REQUIRED_INBOX,
           status_: Optional[str] = typer.Option(None, "--status", "-s",
                                                 help="pending, running, done or dead."),
           as_json: bool = JSON) -> None:
    """An inbox's events, oldest first."""
    if status_ is not None and status_ not in STATUSES:
        fail(f"--status must be one of {', '.join(STATUSES)}, got {status_!r}", as_json, code=2)
    with opened_store() as store:
        require_inbox(store, inbox, as_json)
        rows = store.events(inbox, status=status_)
    if as_json:
        emit_json([asdict(e) for e in rows])
        return
    table(["id", "source", "source_id", "status", "attempts", "created", "error"],
          [[e.id, e.source, e.source_id, e.status, e.attempts, when(e.created), e.error] for e in rows],
          f"inbox {inbox!r} has no {status_ + ' ' if status_ else ''}events")


def runs(inbox: str = REQUIRED_INBOX,
         limit: int = typer.Option(50, help="The latest N runs."), as_json: bool = JSON) -> None:
    """An inbox's run history: who ran which events, and how it ended.

    Kept for the retention period (WAKEFUL_RETENTION), then purged."""
    with opened_store() as store:
        require_inbox(store, inbox, as_json)
        rows = store.operator.run_log(inbox, limit=limit)
        agent = run_details(store, inbox)  # the claude agent's model calls, tokens, tool decisions
    if as_json:
        emit_json([{**asdict(r), "agent": agent.get((r.generation, tuple(sorted(r.event_ids))))} for r in rows])
        return
    table(["id", "generation", "holder", "started", "took", "outcome", "events", "model calls",
           "tokens in/out", "tools", "error"],
          [[r.id, r.generation, r.holder, when(r.started), span(r.finished - r.started), r.outcome,
            ",".join(map(str, r.event_ids)) or "-",
            *describe_run(agent.get((r.generation, tuple(sorted(r.event_ids))))), r.error] for r in rows],
          f"inbox {inbox!r} has no runs on record")


# -- across inboxes ---------------------------------------------------------------------

def rejected(limit: int = typer.Option(50, help="The latest N."), as_json: bool = JSON) -> None:
    """Input that was refused (bad task arguments, unsigned webhooks ...), and why."""
    with opened_store() as store:
        rows = store.operator.rejections(limit=limit)
    if as_json:
        emit_json([asdict(r) for r in rows])
        return
    table(["id", "received", "origin", "inbox", "source", "source_id", "reason"],
          [[r.id, when(r.received), r.origin, r.inbox, r.source, r.source_id, r.reason] for r in rows],
          "no rejected input")


def incidents(since: int = typer.Option(86400, help="Seconds back."), as_json: bool = JSON) -> None:
    """Events parked dead and approvals expired in the last SINCE seconds (the daily summary)."""
    from tasks.summary import incidents as summary_incidents, render

    now = int(time.time())
    with opened_store() as store:
        found = summary_incidents(store, now - since)
    if as_json:
        emit_json({k: [asdict(x) for x in v] for k, v in found.items()})
        return
    echo(render(found, now - since, now) or f"nothing went wrong in the last {span(since)}")


COMMANDS: tuple[Callable[..., None], ...] = (
    status, dead, requeue, approvals, answer, timers, outbox, events, runs, rejected, incidents)


def register(cli: typer.Typer) -> None:
    """Add the operator commands to the ``wakeful`` command."""
    for command in COMMANDS:
        cli.command(command.__name__)(command)
