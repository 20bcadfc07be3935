"""The record types the store hands out and takes in.

Plain frozen dataclasses: they carry no connection and no behaviour, so callers can keep them,
compare them and serialise them (``dataclasses.asdict``) without touching the database.
All times are integer seconds since the epoch.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Literal

from wakeful.errors import WakefulError


class EventStatus(StrEnum):
    """An event's life: pending -> running (claimed) -> done, or dead at the attempt cap.
    Members equal the strings stored, so rows read back compare with them as they are."""

    PENDING = "pending"
    RUNNING = "running"
    DONE = "done"
    DEAD = "dead"


class EffectStatus(StrEnum):
    """A tool call with an effect: asked (waits for a human's yes) -> ready -> executing ->
    done; or refused / expired (never runs); or interrupted (an at-most-once call whose
    result was lost: never retried)."""

    ASKED = "asked"
    READY = "ready"
    EXECUTING = "executing"
    DONE = "done"
    REFUSED = "refused"
    EXPIRED = "expired"
    INTERRUPTED = "interrupted"


class RunEnd(StrEnum):
    """How a run's finish ended, as the run log records it."""

    DONE = "done"
    ERROR = "error"
    WAITING = "waiting"  # the agent said "try later": an outage, not a failure


class ApprovalAnswer(StrEnum):
    """The outcome of an approval that stands (``answer_approval``'s answer)."""

    YES = "yes"
    NO = "no"
    EXPIRED = "expired"
    UNKNOWN = "unknown"  # never requested


class MessageKind(StrEnum):
    """An outbox message's kind: a reply to the person the inbox talks to, a notice, or an
    approval request."""

    REPLY = "reply"
    NOTICE = "notice"
    APPROVAL = "approval"


Misfire = Literal["coalesce", "each"]
Delivery = Literal["at-least-once", "at-most-once"]

AT_LEAST_ONCE: Delivery = "at-least-once"
AT_MOST_ONCE: Delivery = "at-most-once"


class InvalidEvent(WakefulError, ValueError):
    """An event (or a call naming an inbox, holder or approval) the store refuses; the message
    says what is wrong. Nothing was stored."""


class InvalidTimer(WakefulError, ValueError):
    """A timer the store refuses (bad schedule, time zone, key or payload). Nothing was stored."""


class InvalidOutcome(WakefulError, ValueError):
    """A run's Outcome the store refuses (not an Outcome, a bad message, timer, approval or
    memory write). The finish wrote nothing; the runtime fails the run with this reason."""


class InvalidCall(WakefulError, ValueError):
    """A store call's argument the store refuses (an approver address, a grant's routes, a
    purge's age, a channel's delivery, a database URL ...). Nothing was written."""


@dataclass(frozen=True)
class Event:
    id: int
    inbox: str
    source: str
    source_id: str
    payload: dict[str, Any] | None
    status: EventStatus
    attempts: int  # includes the current claim: 1 on a first run
    error: str | None = None
    created: int | None = None
    claim_gen: int | None = None
    finished: int | None = None  # when it went done or dead


@dataclass(frozen=True)
class Message:
    """Something the agent wants to say. Urgent messages bypass the outbox gap.

    ``kind="reply"`` asks to be sent at once, inside the gap: the store grants it while a
    reply is owed to the person the inbox talks to (store/outbox.py) and keeps it as a paced
    ``notice`` otherwise."""

    body: str
    urgent: bool = False
    kind: Literal["reply", "notice"] = "notice"


@dataclass(frozen=True)
class ApprovalRequest:
    """A deferred action: the run ends; the answer (or its expiry) comes back as an event."""

    request_id: str
    action: str
    expires_in: int


@dataclass(frozen=True)
class Effect:
    """A tool call with an effect (store/effects.py), committed by the finish, run after it.

    Keyed ``(inbox, tool_use_id)``: a tool use that was never committed never runs. With
    ``approval_ttl`` the finish also requests an approval under the tool use id (and the
    outbox gets the request for a human); the effect then waits for a yes. ``words`` is what
    the model said before the call, shown with the approval as the model's; ``why`` is the
    runtime's reason for asking when the tool's policy alone would not (say, the conversation
    holds text from outside), shown apart from the model's words.
    """

    tool_use_id: str
    tool: str
    input: dict[str, Any]
    delivery: Delivery = "at-least-once"
    approval_ttl: int | None = None
    words: str = ""
    why: str = ""
    # Who gets the approval's link (store/approvals.py ``approver``): None or "self" for the
    # inbox's own user, "inbox:NAME" or "channel:NAME" for someone else.
    approver: str | None = None


@dataclass(frozen=True)
class EffectRow:
    """A stored effect, as the executor and the operator views see it."""

    inbox: str
    tool_use_id: str
    tool: str
    input: dict[str, Any]
    words: str
    why: str
    idempotency_key: str
    delivery: Delivery
    status: str  # asked, ready, executing, done, refused, expired, interrupted
    attempts: int
    generation: int
    result: dict[str, Any] | None
    created: int
    updated: int


@dataclass(frozen=True)
class Timer:
    """A timer a run asks for. ``due`` is absolute; ``after`` is seconds from the finish.

    With neither, a recurring timer's first occurrence is the next one after the finish.
    """

    timer_id: str
    payload: dict[str, Any] = field(default_factory=dict)
    due: int | None = None
    after: int | None = None
    every: int | None = None
    cron: str | None = None
    tz: str = "UTC"
    key: tuple[str, str] | None = None
    misfire: Misfire = "coalesce"


@dataclass(frozen=True)
class Outcome:
    """What a run produces. Applied inside the fenced ``finish``: all of it or none of it.

    ``memory`` writes are upserts; a value of ``None`` deletes the key.
    """

    messages: list[str | Message] = field(default_factory=list)
    approvals: list[ApprovalRequest] = field(default_factory=list)
    timers: list[Timer] = field(default_factory=list)
    memory: dict[str, Any] = field(default_factory=dict)
    # Tool calls with effects (store/effects.py), and the tool use ids whose approval answer
    # this run read: the finish settles each of those by the answer that stands.
    effects: list[Effect] = field(default_factory=list)
    answered: list[str] = field(default_factory=list)
    # Timer ids of this inbox to delete (after ``timers`` are written): a wake the model
    # cancelled (wakeful/agent/wakes.py) is gone only if this run commits.
    cancel_timers: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class RunStart:
    """What ``runs.start`` did: the lease, the first batch, and the inbox's memory."""

    generation: int | None  # None: nothing claimed, no lease held (another holds it, or no work)
    events: list[Event]  # the first batch, claimed under ``generation``
    memory: dict[str, Any] = field(default_factory=dict)  # read with the batch, {} without one


@dataclass(frozen=True)
class RunStep:
    """What ``runs.finish_and_claim`` did: the finish, then the next batch or the release."""

    finished: bool  # False: fenced (nothing written) or nothing of ours left to finish
    events: list[Event]  # the next batch, claimed under the same generation
    released: bool  # True when nothing was left and the lease was given up
    memory: dict[str, Any] = field(default_factory=dict)  # as the finish left it, with a next batch
    # With ``take_next``: after a release, the next inbox taken from the backlog in the same
    # transaction, as ``runs.start_next`` returns it (None: none was ready).
    next: "tuple[str, RunStart] | None" = None


@dataclass(frozen=True)
class OutboxRow:
    id: int
    inbox: str
    body: str
    urgent: bool
    created: int
    sent_at: int | None
    dispatch_key: str | None = None
    kind: str = "notice"  # reply, notice or approval
    fields: dict[str, Any] | None = None  # an approval's: tool, input, words, deadline ...
    channel: str | None = None  # a named channel (an approver "channel:NAME")


@dataclass(frozen=True)
class OutboxItem:
    """One stored message inside a merged ``OutgoingMessage``: its kind and, for an
    approval, its fields (``inbox``, ``request_id``, ``tool``, ``input``, ``words``, ``why``,
    ``deadline``, ``approver``; ``link`` once the dispatcher minted it)."""

    id: int
    kind: str
    body: str
    urgent: bool
    fields: dict[str, Any] | None = None


@dataclass(frozen=True)
class OutgoingMessage:
    """One merged message handed to a channel's ``send``.

    ``key`` is stable across resends of the same rows, so a channel can pass it on as an
    idempotency key and the receiver can drop the duplicate of an at-least-once resend.
    """

    inbox: str
    key: str
    body: str
    urgent: bool
    message_ids: tuple[int, ...]
    # The merged rows one by one, for a channel that renders kinds and fields (buttons for
    # an approval); ``body`` stays for a channel that wants only text.
    items: tuple[OutboxItem, ...] = ()
    channel: str | None = None  # None: the deployment's channel; else the named one

    @property
    def kind(self) -> str:
        """The items' kind when they share one, else ``mixed``."""
        kinds = {i.kind for i in self.items}
        return kinds.pop() if len(kinds) == 1 else ("mixed" if kinds else "notice")


@dataclass
class Dispatched:
    """What a dispatch of several inboxes did: messages sent, and each inbox whose send
    raised (its unsent messages are held again for the next dispatch; the others went on)."""

    sent: int = 0
    failed: dict[str, Exception] = field(default_factory=dict)


@dataclass(frozen=True)
class TimerRow:
    id: str
    inbox: str
    due: int
    every: int | None
    cron: str | None
    tz: str | None
    misfire: Misfire
    payload: dict[str, Any]
    key: tuple[str, str] | None
    done: bool


@dataclass(frozen=True)
class Fired:
    """One timer occurrence turned into an inbox event by ``run_scheduler``."""

    inbox: str
    timer_id: str
    source: str
    source_id: str
    stored: bool  # False when the key was already there (a replay)


@dataclass(frozen=True)
class Approval:
    inbox: str
    request_id: str
    action: str
    deadline: int
    created: int
    answer: str | None  # yes / no / expired once an event stands, else None (pending)
    approver: str = "self"  # who was sent the link
    answered_by: str | None = None  # whose answer stands: an approver address, or "cli"


@dataclass(frozen=True)
class InboxStatus:
    inbox: str
    holder: str | None
    generation: int
    lease_expires_in: int | None  # None when nobody holds a live lease
    pending: int
    running: int
    done: int
    dead: int
    oldest_pending_age: int | None
    next_timer_due: int | None
    held_messages: int
    last_sent: int | None
    pending_approvals: int
    # Pending events waiting out an outage (their run said "try later"), and since when.
    waiting_on_outage: int = 0
    outage_since: int | None = None


@dataclass(frozen=True)
class Outage:
    """An inbox whose events wait for an upstream to come back (their run said "try later")."""

    inbox: str
    events: int
    since: int  # when the oldest of those outages began


@dataclass(frozen=True)
class RunRecord:
    """One committed finish: the run log that lets a checker prove runs never overlapped."""

    id: int
    inbox: str
    generation: int
    holder: str
    started: int
    finished: int
    outcome: str  # "done" or "error"
    event_ids: tuple[int, ...]
    error: str | None


@dataclass(frozen=True)
class Rejection:
    id: int
    received: int
    origin: str  # "task", "http:/hooks/github", ...
    reason: str
    inbox: str | None
    source: str | None
    source_id: str | None
    excerpt: str | None
