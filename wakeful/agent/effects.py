"""Executing committed effects: what the ``wakeful.execute_effects`` task (tasks/effects.py)
calls, after the finish that committed them.

Per effect, three steps, none of them holding a transaction across the tool call:

1. ``begin`` (one transaction): ready -> executing, attempts + 1; or a stale executing one
   taken again (at-least-once) or marked interrupted (at-most-once);
2. the tool call, with the effect's ``idempotency_key`` (the same on every try);
3. ``record`` (one transaction): done with the result, ingested as ``("tool", tool_use_id)``;
   or, when the tool said ``TryLater`` (its upstream is down), ``postpone``: ready again
   after the outage delay, the same idempotency key next time.

The policy is checked again at execution: a tool removed or denied since the call was
committed is refused (the model is told), so a stored approval never outlives the policy
that allowed it.
"""

from __future__ import annotations

import logging
import os
from contextlib import nullcontext
from dataclasses import dataclass
from typing import Any

from wakeful import telemetry
from store import EffectRow, InvalidOutcome, Store

from wakeful.agent import tools, wakes
from wakeful.agent.outage import TryLater
from wakeful.agent.config import AgentConfig
from wakeful.agent.tool import Tool, ToolCall

log = logging.getLogger("wakeful.agent.effects")


@dataclass(frozen=True)
class Executed:
    inbox: str
    tool_use_id: str
    tool: str
    outcome: str  # "done", "error" (the tool failed), "refused", "superseded", "skipped", "waiting" (an outage)


def execute_runnable(store: Store, cfg: AgentConfig, inbox: str | None = None, limit: int = 100) -> list[Executed]:
    """Every effect that may run now (of ``inbox``, or all), each once."""
    book = store.effects
    done = []
    for name, tool_use_id in book.runnable(stale_after=cfg.effect_timeout, inbox=inbox, limit=limit):
        done.append(execute(store, cfg, name, tool_use_id))
    return done


def execute(store: Store, cfg: AgentConfig, inbox: str, tool_use_id: str) -> Executed:
    book = store.effects
    effect = book.begin(inbox, tool_use_id, stale_after=cfg.effect_timeout)
    if effect is None:
        return Executed(inbox, tool_use_id, "", "skipped")  # another executor has it, or it is not ready
    tool = cfg.tools.get(effect.tool) or _listed_for(store, cfg, effect)
    if tool is None or tool.policy == "deny":
        book.refuse(inbox, tool_use_id, f"the tool {effect.tool!r} is no longer allowed; nothing ran")
        return Executed(inbox, tool_use_id, effect.tool, "refused")
    try:
        with _egress(store, cfg, effect, tool), wakes.executing(store), telemetry.execute_tool(
                effect.tool, tool_use_id, **{"wakeful.inbox": inbox, "wakeful.effect.attempt": effect.attempts}):
            result = tools.run(tool, dict(effect.input), _call(effect), cfg)
            telemetry.annotate(**{"error.type": "tool_error" if result["is_error"] else None})
    except TryLater as exc:  # the tool's upstream is down: not a failure of the call
        status = book.postpone(inbox, tool_use_id, effect.attempts, str(exc), retry_after=exc.seconds,
                               maybe_done=exc.maybe_done)
        log.warning("effect %s/%s: try later (%s): %s", inbox, tool_use_id, exc, status)
        return Executed(inbox, tool_use_id, effect.tool, "waiting" if status == "ready" else status or "superseded")
    if not book.record(inbox, tool_use_id, effect.attempts, result):
        log.warning("effect %s/%s: attempt %d finished after another took over; its result is dropped",
                    inbox, tool_use_id, effect.attempts)
        return Executed(inbox, tool_use_id, effect.tool, "superseded")
    return Executed(inbox, tool_use_id, effect.tool, "error" if result["is_error"] else "done")


def _egress(store: Store, cfg: AgentConfig, effect: EffectRow, tool: Tool) -> Any:
    """An HTTP tool reaches its route through the egress proxy under a grant bound to this
    attempt of this effect (wakeful/agent/egress.py): dead once the attempt is no longer executing."""
    if not tool.grant_routes:
        return nullcontext()
    from wakeful.agent import egress

    grant = egress.for_effect(store, effect.inbox, f"effects:{os.getpid()}", effect.generation,
                              effect.tool_use_id, effect.attempts, list(tool.grant_routes), cfg.effect_timeout)
    return egress.using(grant)


def _listed_for(store: Store, cfg: AgentConfig, effect: EffectRow) -> Tool | None:
    """A tool this process has not listed yet: a source that lists under a grant (an MCP
    server behind the proxy, wakeful/agent/mcp.py: ``run_routes``) lists under this attempt's."""
    routes = sorted({r for s in cfg.sources.values() for r in getattr(s, "run_routes", ())})
    if not routes:
        return None
    from wakeful.agent import egress

    grant = egress.for_effect(store, effect.inbox, f"effects:{os.getpid()}", effect.generation,
                              effect.tool_use_id, effect.attempts, routes, cfg.effect_timeout)
    with egress.using(grant):
        return cfg.tools.get(effect.tool)


def _call(effect: EffectRow) -> ToolCall:
    return ToolCall(id=effect.tool_use_id, name=effect.tool, inbox=effect.inbox,
                          idempotency_key=effect.idempotency_key, attempt=effect.attempts)


def refuse_unrunnable(effects: list[Any], cfg: AgentConfig | None) -> None:
    """Raise ``InvalidOutcome`` when an Outcome carries an effect no configured tool can run
    (no ``WAKEFUL_AGENT_CONFIG``, a tool it does not name, or one it denies): stored, it would
    wait ``ready`` for ever. The runtime calls this before the finish (tasks/run_inbox.py), so
    nothing of the Outcome is stored and the run fails with this message, like an agent's
    error; store/ stays free of the tool config."""
    names = {getattr(e, "tool", None) for e in effects}
    if not names:
        return
    tools = cfg.tools if cfg is not None else {}
    unrunnable = sorted(str(n) for n in names if n not in tools or tools[n].policy == "deny")
    if unrunnable:
        where = f"in {cfg.path}" if cfg is not None else "(WAKEFUL_AGENT_CONFIG is not set)"
        raise InvalidOutcome(f"no configured tool can run the effect(s) of {', '.join(map(repr, unrunnable))} "
                             f"{where}; nothing of this run was stored")
