"""wakeful's store: the correctness core. It never imports celery, redis or kombu.

Every wake-up of an always-on agent is an event in a durable inbox keyed
(inbox, source, source_id); a lease with a generation fences every write a worker makes;
timers, approvals and the outbox are bookkeeping around that table, decided inside the
database in short transactions. See docs/design.md section 4 for the contract.
"""

from .records import (
    AT_LEAST_ONCE,
    AT_MOST_ONCE,
    Approval,
    ApprovalAnswer,
    ApprovalRequest,
    Effect,
    EffectRow,
    EffectStatus,
    Event,
    EventStatus,
    Dispatched,
    Fired,
    InboxStatus,
    InvalidCall,
    InvalidEvent,
    InvalidOutcome,
    InvalidTimer,
    Message,
    MessageKind,
    Outage,
    Outcome,
    OutboxItem,
    OutboxRow,
    OutgoingMessage,
    Rejection,
    RunEnd,
    RunRecord,
    RunStart,
    RunStep,
    Timer,
    TimerRow,
)
from wakeful.settings import StoreSettings
from .store import Store

__all__ = [
    "AT_LEAST_ONCE",
    "AT_MOST_ONCE",
    "Approval",
    "ApprovalAnswer",
    "ApprovalRequest",
    "Dispatched",
    "Effect",
    "EffectRow",
    "EffectStatus",
    "Event",
    "EventStatus",
    "Fired",
    "InboxStatus",
    "InvalidCall",
    "InvalidEvent",
    "InvalidOutcome",
    "InvalidTimer",
    "Message",
    "MessageKind",
    "Outage",
    "Outcome",
    "OutboxItem",
    "OutboxRow",
    "OutgoingMessage",
    "Rejection",
    "RunEnd",
    "RunRecord",
    "RunStart",
    "RunStep",
    "Store",
    "StoreSettings",
    "Timer",
    "TimerRow",
]
