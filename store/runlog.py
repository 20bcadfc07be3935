"""The run log: one row per committed finish, so a checker can prove runs never overlapped."""

from __future__ import annotations

from typing import Any

from sqlalchemy import bindparam

from . import leases, plans
from .records import RunEnd
from .tables import runs

LOG_RUN = runs.insert().values(
    inbox=bindparam("p_inbox"), generation=bindparam("p_gen"), holder=bindparam("p_holder"),
    started=bindparam("p_started"), finished=bindparam("p_now"), outcome=bindparam("p_outcome"),
    event_ids=bindparam("p_event_ids"), error=bindparam("p_error"))

# On PostgreSQL the run's log row rides in the statement that resigns or extends the lease.
LOG_AND_RESIGN_OR_EXTEND = plans.cached(
    "log_and_resign_or_extend", leases.RESIGN_OR_EXTEND.statement.add_cte(LOG_RUN.returning(runs.c.id).cte("run_log")))


def entry(inbox: str, generation: int, holder: str, started: int, now: int, event_ids: list[int],
          error: str | None, waiting: bool = False) -> dict[str, Any]:
    """The parameters of ``LOG_RUN`` for one finish (outcome ``done``, ``error``, or
    ``waiting``: the agent said "try later")."""
    outcome = RunEnd.DONE if error is None else RunEnd.WAITING if waiting else RunEnd.ERROR
    return {"p_inbox": inbox, "p_gen": generation, "p_holder": holder, "p_started": started,
            "p_now": now, "p_outcome": str(outcome),
            "p_event_ids": event_ids, "p_error": error}
