"""The fleet page (what needs attention first, the last day's charts) and the search page."""

from __future__ import annotations

from typing import Any

from store.console import NEAR, Attention, Fleet, Found

from . import charts
from .render import Html, html, inbox_url, join, moment, name, table

# kind -> (title, what it means, the columns after the inbox's)
SECTIONS: dict[str, tuple[str, str, tuple[str, str, str]]] = {
    "dead": ("Dead events", "parked after their last attempt: the agent will not see them until they are requeued",
             ("dead", "last parked", "")),
    "approvals": ("Approvals waiting", "nobody has answered; soonest deadline first (past it, the run resumes "
                  "with expired)", ("", "deadline", "request")),
    "lapsed": ("Leases past their TTL", "events left running by a worker that stopped renewing (killed, "
               "paused); the sweep hands them to another", ("", "lapsed", "holder")),
    "outage": ("Waiting out an outage", "a run said try later: an upstream the agent needs is down",
               ("events", "since", "")),
    "held": ("Held messages", "written, not sent yet: the outbox gap, or a channel that fails", ("messages", "oldest", "")),
    "budget": ("Budgets near their ceiling", "today's spend at 80 % of a ceiling or past it (UTC day)",
               ("calls refused", "first refused", "spent")),
    "waiting": ("Oldest waiting work", "pending events, the inbox with the oldest first", ("pending", "oldest", "")),
}


def fleet_page(fleet: Fleet) -> Html:
    t, now = fleet.totals, fleet.now
    totals = html('<p class="totals"><b>{pending}</b> pending · <b>{running}</b> running · <b>{dead}</b> dead · '
                  "oldest pending {oldest} · timers overdue <b>{overdue}</b> · as of {at}</p>",
                  pending=f"{t['pending']:,}", running=f"{t['running']:,}", dead=f"{t['dead']:,}",
                  oldest=f"{t['oldest_pending_age']:,} s" if t["pending"] else "-",
                  overdue=f"{t['timers_overdue']:,}", at=moment(now, now))
    attention = join(_section(a, now) for a in sorted(fleet.attention, key=lambda a: a.items == 0))
    figures = join([
        charts.runs_per_minute(fleet.runs_per_minute), charts.latency(fleet.latency),
        charts.per_day("Dead per day", [(d, n) for d, n in fleet.dead_per_day], "events", "dead"),
        charts.per_day("Spend per day", [(d, tokens) for d, tokens, _, _ in fleet.spend_per_day], "tokens",
                       "spend"),
    ])
    actions = table(("when", "who", "inbox", "what", "target", "outcome"),
                    [(moment(a.at, now), name(a.actor), _inbox(a.inbox), a.action, name(a.target or "-"),
                      name(a.outcome)) for a in fleet.actions], empty="no console actions yet")
    return html('<h1>Fleet</h1>{totals}<section class="attention"><h2 class="sr">Needs attention</h2>{attention}'
                '</section><section class="charts"><h2>The last day</h2><div class="figures">{figures}</div>'
                '</section><section><h2>Latest console actions</h2>{actions}</section>',
                totals=totals, attention=attention, figures=figures, actions=actions)


def _section(a: Attention, now: int) -> Html:
    title, meaning, (count_label, at_label, detail_label) = SECTIONS[a.kind]
    headers = ["inbox", *(h for h in (count_label, at_label, detail_label) if h)]
    rows = [[_inbox(r.inbox) if not r.inbox.startswith("agent ") else name(r.inbox),
             *([f"{r.count:,}"] if count_label else []), moment(r.at, now),
             *([name(r.detail)] if detail_label else [])] for r in a.rows]
    near = html(' · <b class="warn">{n} due within {h} h</b>', n=a.near, h=NEAR // 3600) if a.near else Html()
    return html('<div class="trouble {kind} {state}" id="attention-{kind}"><h3>{title} <span class="count">{items} '
                "in {inboxes} inbox(es)</span>{near}</h3><p class=\"why\">{meaning}</p>{rows}</div>",
                kind=a.kind, state="quiet" if not a.items else "loud", title=title, items=f"{a.items:,}",
                inboxes=f"{a.inboxes:,}", near=near, meaning=meaning,
                rows=table(headers, rows, empty="none") if a.items else Html())


def _inbox(inbox: str) -> Html:
    return html('<a href="{href}">{shown}</a>', href=inbox_url(inbox), shown=name(inbox))


def search_page(found: Found, now: int) -> Html:
    inbox = (html('<p>Inbox {link}.</p>', link=_inbox(found.inbox)) if found.inbox is not None
             else html("<p>No inbox is named {q}.</p>", q=name(found.query)))
    rows: list[list[Any]] = [[_inbox(e.inbox), html('<a href="{h}">#{id}</a>', h=inbox_url(e.inbox) + f"#event-{e.id}",
                                                    id=e.id),
                              name(e.source), name(e.source_id), e.status, moment(e.created, now)] for e in found.events]
    events = table(("inbox", "event", "source", "source key", "status", "arrived"), rows,
                   empty="No event has this source key (its source id, or source/source id).")
    return html("<h1>Search: <code>{q}</code></h1>{inbox}<h2>Events with this source key</h2>{events}",
                q=name(found.query), inbox=inbox, events=events)
