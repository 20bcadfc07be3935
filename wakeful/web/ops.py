"""Operations: ``GET /healthz`` and ``GET /metrics`` (Prometheus text format).

Metrics are read from the store at scrape time, so every web process reports the same
numbers (nothing is split across uvicorn workers), plus this process's own refusal counts.
The store queries are read-only and use its partial indexes (live events, held outbox, live
timers); rejected input is counted from the store's rejection table, which the runtime's
retention purges, so that count is "within the retention window".
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

import anyio
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.exposition import CONTENT_TYPE_LATEST
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from .edge import Edge

log = logging.getLogger("wakeful.web")


def _default_broker_check() -> None:
    """One real round trip to the runtime's broker; raises when it is unreachable.

    Connecting alone proves nothing on kombu's SQLAlchemy transport (it connects lazily), so
    this declares the runs queue (already declared by the runtime: a no-op) and reads its
    length: LLEN on Redis, a COUNT on the embedded broker.
    """
    import tasks
    from tasks.celeryconfig import RUNS_QUEUE

    with tasks.app.connection_for_read() as conn:
        conn.ensure_connection(max_retries=1, timeout=2)
        conn.default_channel.queue_declare(queue=RUNS_QUEUE)


async def _probe(check: Any, timeout: int) -> str:
    try:
        with anyio.fail_after(timeout):
            await anyio.to_thread.run_sync(check, abandon_on_cancel=True)
        return "ok"
    except TimeoutError:
        return "timeout"
    except Exception as exc:  # noqa: BLE001 - any failure means down; say which kind, no detail
        return f"down ({type(exc).__name__})"


async def healthz(request: Request) -> Response:
    edge: Edge = request.app.state.edge
    timeout = edge.settings.health_timeout
    store_state = await _probe(lambda: edge.store.transactions.ping(), timeout)
    broker_state = await _probe(edge.broker_check or _default_broker_check, timeout)
    healthy = store_state == "ok" and broker_state == "ok"
    return JSONResponse({"store": store_state, "broker": broker_state},
                        status_code=200 if healthy else 503, headers={"Cache-Control": "no-store"})


def store_figures(store: Any, now: int) -> dict[str, Any]:
    """Queue figures read from the store (one short read transaction)."""
    from wakeful.web.agent_metrics import figures as agent_figures

    return {**store.operator.metrics(now=now), "agent": agent_figures(store)}


class _Collector:
    """Turns one snapshot into metric families (prometheus_client does the escaping)."""

    def __init__(self, figures: dict[str, Any], refusals: dict[tuple[str, str], int],
                 doorbells: dict[str, int], unrecorded: dict[str, int]) -> None:
        self.figures = figures
        self.refusals = refusals
        self.doorbells = doorbells
        self.unrecorded = unrecorded

    def collect(self) -> Iterator[Metric]:
        f = self.figures
        events = GaugeMetricFamily("wakeful_events", "Events by status (live rows only)", labels=["status"])
        for status in ("pending", "running", "dead"):
            events.add_metric([status], f.get(f"events_{status}", 0))
        yield events
        yield GaugeMetricFamily("wakeful_oldest_pending_age_seconds",
                                "Age of the oldest pending event (0 when none)",
                                value=f.get("oldest_pending_age", 0))
        yield GaugeMetricFamily("wakeful_outbox_held", "Outbox messages not sent yet",
                                value=f.get("outbox_held", 0))
        yield GaugeMetricFamily("wakeful_timers_overdue", "Live timers whose due time has passed",
                                value=f.get("timers_overdue", 0))
        yield GaugeMetricFamily("wakeful_inboxes_waiting_on_outage",
                                "Inboxes whose events wait out an outage (a run said try later)",
                                value=f.get("inboxes_waiting_on_outage", 0))
        yield GaugeMetricFamily("wakeful_outage_age_seconds",
                                "How long the oldest waiting outage has lasted (0 when none)",
                                value=f.get("outage_age", 0))
        counters = f.get("counters", {})
        for name in sorted(counters):
            yield CounterMetricFamily(f"wakeful_{_metric_name(name)}",
                                      f"Store counter {name}", value=counters[name])
        rejected = CounterMetricFamily("wakeful_rejected_input",
                                       "Refused input recorded in the store (within retention)",
                                       labels=["origin"])
        for origin, count in sorted(f.get("rejected", {}).items()):
            rejected.add_metric([origin], count)
        yield rejected
        proxy = CounterMetricFamily("wakeful_proxy_not_ok",
                                    "Requests the egress proxy refused or that failed upstream, by route "
                                    "and outcome (the audit trail, within retention)", labels=["route", "outcome"])
        for route, outcomes in sorted(f.get("proxy_not_ok", {}).items()):
            for outcome, count in sorted(outcomes.items()):
                proxy.add_metric([route, outcome], count)
        yield proxy
        yield from _budget_families(f.get("budgets") or {})
        web = CounterMetricFamily("wakeful_web_refusals",
                                  "Requests this web process refused, by route and reason",
                                  labels=["route", "reason"])
        for (route, reason), count in sorted(self.refusals.items()):
            web.add_metric([route, reason], count)
        yield web
        lost = CounterMetricFamily("wakeful_web_refusals_unrecorded",
                                   "Refusals answered but not written to the store (rate limit or "
                                   "store down), by route", labels=["route"])
        for route, count in sorted(self.unrecorded.items()):
            lost.add_metric([route], count)
        yield lost
        rings = CounterMetricFamily("wakeful_web_doorbells",
                                    "Doorbells this web process rang, by outcome: returned (ring() came "
                                    "back; it logs its own broker errors), late, failed, skipped; the "
                                    "runtime's sweep covers every one that did not reach a worker", labels=["outcome"])
        for outcome in ("returned", "late", "failed", "skipped"):
            rings.add_metric([outcome], self.doorbells.get(outcome, 0))
        yield rings
        from wakeful.web.agent_metrics import families as agent_families

        yield from agent_families(f.get("agent"))  # model calls, tokens, tool decisions, effects


def _budget_families(budgets: dict[str, Any]) -> Iterator[Metric]:
    """Daily budgets (store/spend.py): today's spend per agent, the budgets that stopped a
    model call today (the operator's incident), the calls not made."""
    agents = budgets.get("agents_today", {})
    for key, unit in (("tokens", "tokens"), ("cost", "money, in the price table's currency")):
        family = GaugeMetricFamily(f"wakeful_agent_spend_today_{key}",
                                   f"The agent's model spend today (UTC day), {unit}", labels=["agent"])
        for name, spent in sorted(agents.items()):
            family.add_metric([name], spent[key])
        yield family
    reached = GaugeMetricFamily("wakeful_budget_reached_today",
                                "Inboxes or agents whose daily budget refused a model call today",
                                labels=["scope"])
    refused = CounterMetricFamily("wakeful_budget_refused_calls",
                                  "Model calls not made because a daily budget was reached (within "
                                  "retention)", labels=["scope"])
    for scope in ("inbox", "agent"):
        reached.add_metric([scope], budgets.get("reached_today", {}).get(scope, 0))
        refused.add_metric([scope], budgets.get("refused_calls", {}).get(scope, 0))
    yield reached
    yield refused


def _metric_name(name: str) -> str:
    cleaned = "".join(c if c.isalnum() or c == "_" else "_" for c in name)
    return cleaned[:-6] if cleaned.endswith("_total") else cleaned  # the family adds _total


async def metrics(request: Request) -> Response:
    edge: Edge = request.app.state.edge
    try:
        figures = await run_in_threadpool(store_figures, edge.store, edge.now())
    except Exception as exc:  # noqa: BLE001 - a scrape must say the store is down, not crash
        log.error("metrics: store unavailable: %s", type(exc).__name__)
        return Response("# store unavailable\n", status_code=503, media_type="text/plain")
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Collector(figures, dict(edge.refusals), dict(edge.doorbells),
                                  dict(edge.unrecorded)))  # type: ignore[arg-type]
    return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)


routes = [
    Route("/healthz", healthz, methods=["GET"]),
    Route("/metrics", metrics, methods=["GET"]),
]
