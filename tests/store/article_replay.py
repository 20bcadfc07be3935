"""The article's scenario driver, replayed against ``store`` (one inbox, simulated clock).

The driver is the article's ``demo.py`` rewritten for the store's contract: the same calls in
the same order at the same times, printing the same lines. ``EXPECTED`` is the article's raw
output as published (the page's text lost runs of spaces, so lines compare with whitespace
runs collapsed: see ``normalized``).
"""

from __future__ import annotations

from store import Outcome, Store

EXPECTED = """\
1. webhook delivered twice
first: True retry: False rows: 1
2. two workers ask for the lease at the same time
A: 1 B: None
3. three quick chat messages
events in one run: 3
4. A stalls mid-run; B takes over; A wakes up
B before A's lease expires: None
B after expiry: gen 2 re-claims ['msg-3']
A renews after both leases lapsed: gen 3
A finishes its old claim (gen 1 ): False
msg-3: ('done', 2) outbox rows: 1
5. a poison event arrives together with a healthy one
W0 claimed ['poison', 'healthy'] and crashed
W1 claimed ['poison'] and crashed
W2 claimed ['poison'] and crashed
W3 claimed ['healthy'] and finished
W4 claimed [] and finished
poison: ('dead', 3) healthy: ('done', 2)
6. timers: a second scheduler pass, a replay, a three-day outage
pass 1: 1 pass 2: 0
replay of the same occurrence: 1 due, 1 event total
after the outage: events total 2 skipped 3 late by 10 min next due in 23.8 h
7. approvals with a four-hour window
881: expiry ran at 5h, yes at 6h -> expired
882: yes at 5h, scheduler not run yet -> expired
883: yes at 1h -> yes second tap no at 2h -> yes
883 after its expiry timer fired: yes
never requested -> unknown
8. outbox: three updates inside an hour
sends: ['update 0', 'update 1 | update 2']
"""

INBOX = "article"


def normalized(text: str) -> list[str]:
    return [" ".join(line.split()) for line in text.strip().splitlines()]


def replay(store: Store, inbox: str = INBOX) -> str:
    out: list[str] = []

    def say(*parts: object) -> None:
        out.append(" ".join(str(p) for p in parts))

    t = 1_000_000
    day = 86400
    ttl = store.settings.lease_ttl

    def run(holder: str, now: int, messages: tuple[str, ...] = ()) -> list:
        gen = store.acquire(inbox, holder, now=now)
        batch = store.claim(inbox, holder, gen, now=now)
        store.finish(inbox, holder, gen, [e.id for e in batch], Outcome(messages=list(messages)), now=now)
        return batch

    def event(source_id: str):
        return next(e for e in store.events(inbox) if e.source_id == source_id)

    def status(source_id: str) -> tuple[str, int]:
        e = event(source_id)
        return (e.status, e.attempts)

    say("1. webhook delivered twice")
    first = store.ingest(inbox, "github", "delivery-7f3a", {"pr": 12}, now=t)
    retry = store.ingest(inbox, "github", "delivery-7f3a", {"pr": 12}, now=t)
    say("", "first:", first, " retry:", retry, " rows:", len(store.events(inbox)))

    say("2. two workers ask for the lease at the same time")
    say("", "A:", store.acquire(inbox, "A", now=t), " B:", store.acquire(inbox, "B", now=t))
    run("A", t)

    say("3. three quick chat messages")
    for n in range(3):
        store.ingest(inbox, "chat", f"msg-{n}", {"text": f"message {n}"}, now=t + 5)
    say("", "events in one run:", len(run("A", t + 5)))

    say("4. A stalls mid-run; B takes over; A wakes up")
    store.ingest(inbox, "chat", "msg-3", {"text": "send the report"}, now=t + 10)
    gen_a = store.acquire(inbox, "A", now=t + 10)
    batch_a = store.claim(inbox, "A", gen_a, now=t + 10)  # A stalls here
    say("", "B before A's lease expires:", store.acquire(inbox, "B", now=t + 60))
    t2 = t + 10 + ttl + 1
    gen_b = store.acquire(inbox, "B", now=t2)
    batch_b = store.claim(inbox, "B", gen_b, now=t2)
    say("", "B after expiry: gen", gen_b, " re-claims", [e.source_id for e in batch_b])
    store.finish(inbox, "B", gen_b, [e.id for e in batch_b], Outcome(messages=["report sent"]), now=t2)
    t3 = t2 + ttl + 1  # B's lease lapses too
    say("", "A renews after both leases lapsed: gen", store.acquire(inbox, "A", now=t3))
    say("", "A finishes its old claim (gen", gen_a, "):",
        store.finish(inbox, "A", gen_a, [e.id for e in batch_a], Outcome(messages=["report sent"]), now=t3))
    say("", "msg-3:", status("msg-3"), " outbox rows:", len(store.outbox(inbox)))

    say("5. a poison event arrives together with a healthy one")
    store.ingest(inbox, "chat", "poison", {"text": "x"}, now=t3)
    store.ingest(inbox, "chat", "healthy", {"text": "ok"}, now=t3)
    now = t3 + ttl + 1
    for n in range(5):
        gen = store.acquire(inbox, f"W{n}", now=now)
        got = store.claim(inbox, f"W{n}", gen, now=now)
        ids = [e.source_id for e in got]
        if "poison" in ids:
            say("", f"W{n} claimed {ids} and crashed")  # no finish()
        else:
            store.finish(inbox, f"W{n}", gen, [e.id for e in got], now=now)
            say("", f"W{n} claimed {ids} and finished")
        now += ttl + 1
    say("", "poison:", status("poison"), " healthy:", status("healthy"))

    say("6. timers: a second scheduler pass, a replay, a three-day outage")

    def digests() -> list:
        return [e for e in store.events(inbox) if e.source_id.startswith("digest@")]

    store.add_timer(inbox, "digest", now, {"task": "daily digest"}, every=day)
    say("", "pass 1:", len(store.run_scheduler(now=now)), " pass 2:", len(store.run_scheduler(now=now)))
    store.add_timer(inbox, "digest", now, {"task": "daily digest"}, every=day)  # replay
    say("", "replay of the same occurrence:", len(store.run_scheduler(now=now)), "due,",
        len(digests()), "event total")
    later = now + day + 3 * day + 600  # next due + 3 days
    store.run_scheduler(now=later)
    ev = digests()[-1].payload
    digest = next(tm for tm in store.timers(inbox) if tm.id == "digest")
    say("", "after the outage: events total", len(digests()), " skipped", ev["skipped"],
        " late by", ev["late_by"] // 60, "min", " next due in", round((digest.due - later) / 3600, 1), "h")

    say("7. approvals with a four-hour window")
    h = 3600
    store.request_approval(inbox, "refund-881", "refund order 881", 4 * h, now=later)
    store.run_scheduler(now=later + 5 * h)
    say("", "881: expiry ran at 5h, yes at 6h ->",
        store.answer_approval(inbox, "refund-881", "yes", now=later + 6 * h))
    store.request_approval(inbox, "refund-882", "refund order 882", 4 * h, now=later)
    say("", "882: yes at 5h, scheduler not run yet ->",
        store.answer_approval(inbox, "refund-882", "yes", now=later + 5 * h))
    store.request_approval(inbox, "refund-883", "refund order 883", 4 * h, now=later)
    say("", "883: yes at 1h ->", store.answer_approval(inbox, "refund-883", "yes", now=later + h),
        " second tap no at 2h ->", store.answer_approval(inbox, "refund-883", "no", now=later + 2 * h))
    store.run_scheduler(now=later + 5 * h)
    stored = next(e for e in store.events(inbox) if (e.source, e.source_id) == ("approval", "refund-883"))
    say("", "883 after its expiry timer fired:", stored.payload["answer"])
    say("", "never requested ->", store.answer_approval(inbox, "refund-999", "yes", now=later))

    say("8. outbox: three updates inside an hour")
    sent: list[str] = []
    m = later + 6 * h
    store.dispatch(inbox, lambda message: None, now=m - 2 * h)  # what was held went out 2h ago
    for n, minute in enumerate((0, 10, 20)):
        at = m + minute * 60
        store.ingest(inbox, "chat", f"update-{n}", {"text": f"update {n}"}, now=at)
        run("U", at, (f"update {n}",))
        store.dispatch(inbox, lambda message: sent.append(message.body), now=at)
    store.dispatch(inbox, lambda message: sent.append(message.body), now=m + 61 * 60)
    say("", "sends:", [s.replace("\n\n", " | ") for s in sent])
    return "\n".join(out) + "\n"
