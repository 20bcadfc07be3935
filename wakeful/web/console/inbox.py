"""One inbox's page: where it stands (lease, counts, dead events, waiting approvals, timers,
spend) with the actions an operator takes, then its timeline, newest first, a page at a time.

Every value that came from a sender, a tool or the model goes through ``render.untrusted``
(or ``render.name`` for a short key); the runtime's own words (statuses, the reason it asked)
are shown as its own.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from store import display
from store.console import Action, Item, Page

from . import charts
from .render import Html, form, html, inbox_url, join, moment, name, table, untrusted

Csrf = str


def inbox_page(page: Page, csrf: Csrf, trace: Callable[[str, int], str | None]) -> Html:
    inbox, now = page.inbox, page.now
    items = join(_item(i, page, csrf, trace) for i in page.items) or html('<li class="empty">nothing recorded</li>')
    older = (html('<a rel="next" href="{h}">Older →</a>', h=inbox_url(inbox, before=page.older)) if page.older
             else html('<span class="end">the beginning</span>'))
    return html('<h1>Inbox <code>{inbox}</code></h1><div class="panels">{summary}{dead}{approvals}{timers}{spend}'
                '</div><section class="timeline"><h2>Timeline <span class="count">newest first</span></h2>'
                '<ol class="steps">{items}</ol><nav class="pager"><a href="{newest}">Newest</a> {older}</nav>'
                "</section>", inbox=name(inbox), summary=_summary(page), dead=_dead(page, csrf),
                approvals=_approvals(page, csrf), timers=_timers(page, csrf), spend=_spend(page),
                items=items, newest=inbox_url(inbox), older=older)


def _summary(page: Page) -> Html:
    s, now = page.summary, page.now
    if s.holder is None:
        lease = html("free (generation {g})", g=s.generation)
    elif s.lease_until is not None and s.lease_until < now:
        lease = html('<b class="warn">past its TTL</b> since {at}, held by <code>{h}</code> (generation {g})',
                     at=moment(s.lease_until, now), h=name(s.holder), g=s.generation)
    else:
        lease = html("held by <code>{h}</code>, generation {g}, until {at}", h=name(s.holder), g=s.generation,
                     at=moment(s.lease_until, now))
    outage = (html('<li class="warn">{n} event(s) waiting out an outage since {at}</li>', n=s.outage,
                   at=moment(s.outage_since, now)) if s.outage else Html())
    return html('<section class="panel summary"><h2>Where it stands</h2><ul><li>lease: {lease}</li>'
                "<li>events: <b>{p}</b> pending (oldest {oldest}), <b>{r}</b> running, <b>{d}</b> dead</li>{outage}"
                "<li>outbox: <b>{held}</b> held; last send {sent}</li></ul></section>", lease=lease, p=s.pending,
                oldest=moment(s.oldest_pending, now), r=s.running, d=s.dead, outage=outage, held=s.held,
                sent=moment(s.last_sent, now))


def _dead(page: Page, csrf: Csrf) -> Html:
    if not page.dead:
        return Html()
    every = form("/console/requeue", csrf, {"inbox": page.inbox}, f"Requeue all {len(page.dead)}", css="all")
    rows = [(html('<a href="#event-{id}">#{id}</a>', id=e.id), name(f"{e.source}/{e.source_id}"), e.attempts,
             name(e.error or "-"), form("/console/requeue", csrf, {"inbox": page.inbox, "event": e.id}, "Requeue"))
            for e in page.dead]
    return html('<section class="panel dead"><h2>Dead events</h2>{every}{rows}</section>', every=every,
                rows=table(("event", "key", "attempts", "error", ""), rows, empty=""))


def _approvals(page: Page, csrf: Csrf) -> Html:
    if not page.pending_approvals:
        return Html()
    rows = [(name(a.request_id), moment(a.deadline, page.now), name(a.approver), _answer_forms(page, csrf, a.request_id))
            for a in page.pending_approvals]
    return html('<section class="panel approvals"><h2>Waiting approvals</h2><p class="why">Your answer is recorded '
                "as yours and wakes the agent.</p>{rows}</section>",
                rows=table(("request", "deadline", "approver", "answer"), rows, empty=""))


def _answer_forms(page: Page, csrf: Csrf, request_id: str) -> Html:
    fields = {"inbox": page.inbox, "request": request_id}
    return join([form("/console/answer", csrf, fields, "Yes", value="yes", css="yes"),
                 form("/console/answer", csrf, fields, "No", value="no", css="no")])


def _timers(page: Page, csrf: Csrf) -> Html:
    rows = [(name(t.id), moment(t.due, page.now),
             f"every {t.every} s" if t.every else (name(f"cron {t.cron} {t.tz or ''}") if t.cron else "once"),
             form("/console/cancel-timer", csrf, {"inbox": page.inbox, "timer": t.id}, "Cancel")
             if not t.id.startswith("approval:") else html('<span class="why">its approval\'s expiry</span>'))
            for t in page.timers]
    return html('<section class="panel timers"><h2>Timers</h2>{rows}</section>',
                rows=table(("timer", "due", "repeats", ""), rows, empty="no live timers"))


def _spend(page: Page) -> Html:
    rows = [("this inbox" if r.scope == "inbox" else name(f"agent {r.name}"),
             f"{r.tokens:,}" + (f" of {r.token_ceiling:,}" if r.token_ceiling else ""), r.calls,
             f"{r.cost:.4f}" + (f" of {r.cost_ceiling:.4f}" if r.cost_ceiling is not None else ""), r.refused)
            for r in page.spend_today]
    days = [(d, t) for d, t, _, _ in page.spend_per_day]
    chart = charts.per_day("This inbox's tokens per day", days, "tokens", "spend") if any(t for _, t in days) else Html()
    return html('<section class="panel spend"><h2>Spend today (UTC)</h2>{rows}{chart}</section>',
                rows=table(("whose", "tokens", "calls", "money", "refused"), rows, empty="no model calls today"),
                chart=chart)


# -- the timeline's steps -----------------------------------------------------------------------

def _item(item: Item, page: Page, csrf: Csrf, trace: Callable[[str, int], str | None]) -> Html:
    r, now = item.record, page.now
    head, body = _RENDER[item.kind](r, page, csrf, trace)
    anchor = f"{item.kind}-{r.id}" if item.kind in ("event", "run", "message", "action") else ""
    return html('<li class="step {kind}" data-kind="{kind}"{anchor}><div class="head"><span class="kind">{label}</span>'
                " {head} <span class=\"at\">{at}</span></div>{body}</li>", kind=item.kind,
                anchor=html(' id="{a}"', a=anchor) if anchor else Html(), label=_LABELS[item.kind], head=head,
                at=moment(item.at, now), body=body)


_LABELS = {"event": "event", "run": "run", "effect": "tool call", "approval": "approval", "message": "message",
           "action": "console"}


def _payload_label(source: str) -> str:
    return {"tool": "The tool's answer (data from outside, not checked):",
            "approval": "The answer, and the action it was for as the model wrote it (not checked):",
            "timer": "The timer's payload (as it was set, not checked):"}.get(
        source, f"What {display.escaped(source)} sent (data from outside, not checked):")


def _event(e: Any, page: Page, csrf: Csrf, trace: Any) -> tuple[Html, Html]:
    requeue = (form("/console/requeue", csrf, {"inbox": page.inbox, "event": e.id}, "Requeue")
               if e.status == "dead" else Html())
    head = html('<b>#{id}</b> <code>{key}</code> <span class="status {status}">{status}</span> attempts {attempts}',
                id=e.id, key=name(f"{e.source}/{e.source_id}"), status=e.status, attempts=e.attempts)
    error = untrusted("Its error (may quote outside text, not checked):", e.error, css="error") if e.error else Html()
    payload = (untrusted(_payload_label(e.source), e.payload) if e.payload is not None
               else html('<p class="why">payload purged (retention)</p>'))
    return head, join([requeue, error, payload])


def _run(r: Any, page: Page, csrf: Csrf, trace: Callable[[str, int], str | None]) -> tuple[Html, Html]:
    events = join((html('<a href="#event-{i}">#{i}</a>', i=i) for i in r.event_ids), " ") or Html("none")
    link = trace(page.inbox, r.generation)
    traced = html(' · <a class="trace" href="{h}" rel="noreferrer" target="_blank">trace</a>', h=link) if link else Html()
    head = html('generation <b>{g}</b> <span class="status {o}">{o}</span> took {took} s · events {events}{traced}',
                g=r.generation, o=r.outcome, took=r.finished - r.started, events=events, traced=traced)
    log = page.decisions.get((r.generation, tuple(sorted(r.event_ids))))
    agent = (html('<p class="agent">model calls {calls} · tokens {tin}/{tout} · tool decisions: {d}</p>',
                  calls=log.get("model_calls", 0), tin=log.get("input_tokens", 0), tout=log.get("output_tokens", 0),
                  d=name(", ".join(f"{k}: {v}" for k, v in sorted((log.get("decisions") or {}).items())) or "none"))
             if log else Html())
    holder = html('<p class="holder">by <code>{h}</code></p>', h=name(r.holder))
    error = untrusted("Its error (may quote outside text, not checked):", r.error, css="error") if r.error else Html()
    return head, join([holder, agent, error])


def _effect(e: Any, page: Page, csrf: Csrf, trace: Any) -> tuple[Html, Html]:
    asked = e.tool_use_id in page.asked
    head = html('<b>{tool}</b> <code>{id}</code> policy: <b>{decision}</b> · <span class="status {s}">{s}</span>'
                " · attempts {a} · {delivery}", tool=name(e.tool), id=name(e.tool_use_id),
                decision="ask a human first" if asked else "allowed", s=e.status, a=e.attempts, delivery=e.delivery)
    why = html('<p class="runtime">{label} {why}</p>', label=display.WHY_LABEL, why=name(e.why)) if e.why else Html()
    words = untrusted(display.WORDS_LABEL, e.words, css="words") if e.words else Html()
    result = (untrusted("The tool's answer (data from outside, not checked):", e.result, css="result")
              if e.result is not None else Html())
    return head, join([why, untrusted("The input, as the model wrote it (not checked):", e.input), words, result])


def _approval(a: Any, page: Page, csrf: Csrf, trace: Any) -> tuple[Html, Html]:
    answer = (html('answer <b class="status {a}">{a}</b> by <code>{by}</code>', a=a.answer, by=name(a.answered_by or "self"))
              if a.answer else html('<b class="warn">waiting</b> until {d}', d=moment(a.deadline, page.now)))
    head = html("<code>{id}</code> for <code>{approver}</code> · {answer}", id=name(a.request_id),
                approver=name(a.approver), answer=answer)
    buttons = _answer_forms(page, csrf, a.request_id) if a.answer is None else Html()
    return head, join([buttons, untrusted("The action asked (as the model wrote it, not checked):", a.action)])


def _message(m: Any, page: Page, csrf: Csrf, trace: Any) -> tuple[Html, Html]:
    sent = html("sent {at}", at=moment(m.sent_at, page.now)) if m.sent_at else html('<b class="warn">held</b>')
    head = html('<b>{kind}</b>{urgent} via {channel} · {sent}', kind=m.kind, urgent=" (urgent)" if m.urgent else "",
                channel=name(m.channel or "the outbox channel"), sent=sent)
    return head, untrusted("The agent's message (its own words and what it quoted, not checked):", m.body)


def _action(a: Action, page: Page, csrf: Csrf, trace: Any) -> tuple[Html, Html]:
    what = {"requeue": "requeued event", "requeue_all": "requeued every dead event", "answer": "answered",
            "cancel_timer": "cancelled timer"}.get(a.action, a.action)
    head = html("<b>{who}</b> {what} <code>{target}</code>{detail} → {outcome}", who=name(a.actor), what=what,
                target=name(a.target or ""), detail=html(" <b>{d}</b>", d=name(a.detail)) if a.detail else Html(),
                outcome=name(a.outcome))
    return head, Html()


_RENDER = {"event": _event, "run": _run, "effect": _effect, "approval": _approval, "message": _message,
           "action": _action}
