"""The agent's figures on ``/metrics`` (wakeful/web/ops.py): model calls, tokens, tool
decisions (running totals the agent keeps in each inbox's memory under
``store.effects.AGENT_TOTALS_KEY``, counted by committed runs) and effects by status (tool
executions: done, refused, expired, interrupted ...). Read from the store alone: the web edge
never loads an agent."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any


def figures(store: Any) -> dict[str, Any]:
    return store.effects.figures()


def families(f: dict[str, Any] | None) -> Iterator[Any]:
    from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

    f = f or {"effects": {}, "totals": {}}
    totals = f["totals"]
    yield CounterMetricFamily("wakeful_agent_model_calls", "Model calls by committed agent runs",
                              value=totals.get("model_calls", 0))
    tokens = CounterMetricFamily("wakeful_agent_tokens", "Tokens by committed agent runs (the API's usage)",
                                 labels=["kind"])
    for kind in ("input", "output"):
        tokens.add_metric([kind], totals.get(f"{kind}_tokens", 0))
    yield tokens
    decisions = CounterMetricFamily("wakeful_agent_tool_decisions",
                                    "Tool uses by decision: inline (read ran), effect (write committed), "
                                    "ask, refuse (denied, unknown or invalid), runtime, approved, "
                                    "refused, expired", labels=["decision"])
    for decision, count in sorted((totals.get("decisions") or {}).items()):
        decisions.add_metric([decision], count)
    yield decisions
    effects = GaugeMetricFamily("wakeful_agent_effects",
                                "Tool calls with effects by status (done: executed; refused, expired: "
                                "never ran; interrupted: at-most-once, not retried)", labels=["status"])
    for status in ("asked", "ready", "executing", "done", "refused", "expired", "interrupted"):
        effects.add_metric([status], f["effects"].get(status, 0))
    yield effects
