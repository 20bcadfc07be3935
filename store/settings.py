"""Every store default in one place, each with the reason it has that value."""

from __future__ import annotations

from dataclasses import dataclass, fields


_MAY_BE_ZERO = {"outbox_gap"}  # 0: no pacing


@dataclass(frozen=True)
class StoreSettings:
    # Seconds a worker owns an inbox without renewing. Well above a normal run (renewed
    # between steps), or every long run turns into two.
    lease_ttl: int = 120
    # Claims before an event is parked dead: enough for a transient failure to pass, few
    # enough that a poison event stops hurting its inbox within minutes.
    max_attempts: int = 3
    # At most one outbox send per inbox per hour: start quiet (the article's number). A reply
    # owed to the person goes at once whatever the gap; 0 paces nothing.
    outbox_gap: int = 3600
    # Events per claim: one run should fit in one agent context.
    batch_limit: int = 100
    # Backoff after a failed run: base * 2**(attempts-1) seconds, capped. Long enough for a
    # rate limit or a flapping dependency to recover; short enough to finish within the hour.
    backoff_base: int = 10
    backoff_max: int = 600
    # A run that says "try later" (the model's or a tool's upstream is down: store/retries.py)
    # gives its attempt back and its events wait as long as the outage has lasted so far (at
    # least the base, at most the cap, jittered to between half and all of it): a blip is
    # answered within seconds, a long outage is tried about once per cap, and the cap bounds
    # how long an answer lags once the upstream is back.
    outage_backoff_base: int = 5
    outage_backoff_max: int = 300
    # Past this long of "try later" the events are parked dead with the reason "outage", so
    # nothing waits for ever (`wakeful requeue` brings them back). A day outlasts the model
    # API outages on record; a longer wait is an operator's call, not the runtime's.
    outage_horizon: int = 86400
    # Dedupe keys of finished events outlive their payloads by this much, so a sender's
    # late redelivery (Stripe retries for three days) is still refused.
    dedupe_window: int = 7 * 86400
    # Largest payload accepted, as UTF-8 JSON: webhooks recommend < 20 kB; 256 KiB leaves
    # room for a chat message with context, and keeps one event well inside a jsonb page chain.
    max_payload_bytes: int = 256 * 1024
    # misfire="each" emits at most this many missed occurrences per fire, so a 1-second
    # timer after a week's outage cannot flood its inbox; the rest are counted in `skipped`.
    misfire_each_cap: int = 100
    # A dispatcher that claimed outbox rows and vanished: after this long another may
    # resend them (with the same key). Longer than any channel's send with its retries.
    dispatch_timeout: int = 300
    # Seconds a PostgreSQL statement waits for a row lock. Store transactions last
    # milliseconds; a longer wait means a paused process holds the inbox, and a worker should
    # move on (acquire says "held"; the sweep rings again) instead of stalling behind it.
    lock_timeout: int = 5
    # Timers fired per scheduler transaction: short transactions, bounded lock sets.
    scheduler_batch: int = 500

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            least = 0 if f.name in _MAY_BE_ZERO else 1
            if not isinstance(value, int) or isinstance(value, bool) or value < least:
                raise ValueError(f"{f.name} must be a {'whole number >= 0' if least == 0 else 'positive integer'}, "
                                 f"got {value!r}")

    @classmethod
    def names(cls) -> set[str]:
        return {f.name for f in fields(cls)}
