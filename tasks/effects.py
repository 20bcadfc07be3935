"""``wakeful.execute_effects``: run the tool calls with effects that a finish committed.

Rung right after a run whose finish committed or released an effect (tasks/run_inbox.py), and
ticked by beat so an effect whose ring was lost, or whose executor died, is still taken
(wakeful/agent/effects.py: at-least-once retakes a stale one, at-most-once reports it interrupted).
Each result is ingested as an event, and the inbox is rung so the agent hears it now.

Runs on the run workers' queue, one task per effect: a dense worker (threads) carries many
tool calls at once, so a slow tool holds one thread, not the others, nor the control
worker's processes that ingest and dispatch. The task for an inbox (a ring) or for all (the
beat tick) only finds the runnable effects and sends one task for each.
"""

from __future__ import annotations

import logging
from typing import Any

from celery.signals import celeryd_init

from wakeful import telemetry

from tasks.application import app
from tasks.celeryconfig import RUNS_QUEUE
from tasks.doorbell import _RETRY, ring, ring_dispatch
from tasks.runtime import get_store
from tasks.application import runtime_settings

log = logging.getLogger("wakeful.effects")


@celeryd_init.connect
def check_agent_config(**_kwargs: Any) -> None:
    """A worker whose agent config is wrong (the claude agent's, or the tools of any agent,
    read whenever ``WAKEFUL_AGENT_CONFIG`` is set) stops at its start, saying why (the file
    and the table), instead of failing every run or every effect."""
    from wakeful.agent.config import ConfigError, for_worker

    try:
        settings = runtime_settings()
        cfg = for_worker(settings.agent)
        # One model call, retries included, must end well inside the run's time limit (the
        # lease keeper renews the lease until then, not after).
        if cfg is not None and cfg.model and cfg.timeout * (cfg.max_retries + 1) >= settings.run_time_limit:
            raise ConfigError(f"{cfg.path}: [agent] timeout {cfg.timeout:g}s x {cfg.max_retries + 1} tries "
                              f"does not fit in WAKEFUL_RUN_TIME_LIMIT ({settings.run_time_limit}s)")
    except ConfigError as exc:
        log.critical("%s", exc)
        raise SystemExit(f"wakeful: the agent's config is wrong: {exc}") from None


@app.task(name="wakeful.execute_effects")
def execute_effects(inbox: Any = None, tool_use_id: Any = None) -> dict[str, Any]:
    """With ``inbox`` and ``tool_use_id``: execute that effect (wakeful/agent/effects.py). Otherwise:
    send one such task for each effect that may run now (of ``inbox``, or all). Whatever the
    agent: an effect runs by the tools of ``WAKEFUL_AGENT_CONFIG``."""
    from wakeful.agent.config import current
    from wakeful.agent.effects import execute

    cfg = current(required=False)
    if cfg is None:  # no tool is configured, so the runtime's finish stored no effect
        return {"executed": 0, "skipped": "WAKEFUL_AGENT_CONFIG is not set: no tool is configured"}
    book = get_store().effects
    if isinstance(inbox, str) and isinstance(tool_use_id, str):
        done = execute(get_store(), cfg, inbox, tool_use_id)
        telemetry.annotate(**{"wakeful.inbox": inbox, "gen_ai.tool.call.id": tool_use_id,
                              "gen_ai.tool.name": done.tool or None, "wakeful.effect.outcome": done.outcome})
        if done.outcome not in ("skipped", "waiting"):
            ring(inbox)  # the result is an event: wake the agent
        return {"executed": [done.inbox, done.tool_use_id, done.tool, done.outcome]}
    runnable = book.runnable(stale_after=cfg.effect_timeout, inbox=inbox if isinstance(inbox, str) else None)
    for name, use_id in runnable:
        _send(name, use_id)
    return {"sent": len(runnable)}


def _send(inbox: str, tool_use_id: str | None = None) -> None:
    try:
        app.send_task("wakeful.execute_effects", kwargs={"inbox": inbox, "tool_use_id": tool_use_id},
                      queue=RUNS_QUEUE, ignore_result=True, retry=True, retry_policy=_RETRY)
    except Exception as exc:  # a lost ring costs one beat interval, nothing more
        log.warning("ringing the effect executor for %r failed: %s", inbox, exc)


def ring_effects(inbox: str) -> None:
    """After a finish that committed or settled an effect: run the ready ones now, and send
    an approval request now (the finish wrote it to the outbox itself)."""
    ring_dispatch(inbox)
    _send(inbox)
