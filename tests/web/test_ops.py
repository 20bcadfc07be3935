"""/healthz and /metrics against a real store."""

from __future__ import annotations

import time

import anyio.from_thread
from prometheus_client.parser import text_string_to_metric_families

from web_support import GITHUB_SECRET, Client
from store import Store
from wakeful.web.app import create_app
from web_signing import body_of, github_headers


def scrape(client: Client) -> dict[tuple[str, tuple], float]:
    r = client.get("/metrics")
    assert r.status_code == 200
    assert r.headers["content-type"].startswith("text/plain")
    samples = {}
    for family in text_string_to_metric_families(r.text):
        for s in family.samples:
            samples[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return samples


def run(app, fn):  # type: ignore[no-untyped-def]
    with anyio.from_thread.start_blocking_portal() as portal:
        c = Client(app, portal)
        try:
            return fn(c)
        finally:
            portal.call(c.http.aclose)


def test_healthz_ok(client: Client) -> None:
    r = client.get("/healthz")
    assert r.status_code == 200 and r.json() == {"store": "ok", "broker": "ok"}


def test_healthz_broker_down(web_store: Store, settings) -> None:  # type: ignore[no-untyped-def]
    def down() -> None:
        raise ConnectionRefusedError("no broker")

    r = run(create_app(store=web_store, ring=lambda i: None, settings=settings, broker_check=down),
            lambda c: c.get("/healthz"))
    assert r.status_code == 503
    assert r.json() == {"store": "ok", "broker": "down (ConnectionRefusedError)"}


def test_healthz_broker_hangs(web_store: Store) -> None:
    from web_support import web_settings

    settings = web_settings(health_timeout=1)
    r = run(create_app(store=web_store, ring=lambda i: None, settings=settings,
                       broker_check=lambda: time.sleep(5)),
            lambda c: c.get("/healthz"))
    assert r.status_code == 503 and r.json()["broker"] == "timeout"


def test_healthz_and_metrics_store_down(settings) -> None:  # type: ignore[no-untyped-def]
    down = Store.connect("postgresql+psycopg://postgres@127.0.0.1:1/nowhere")
    app = create_app(store=down, ring=lambda i: None, settings=settings, broker_check=lambda: None)
    health, metrics = run(app, lambda c: (c.get("/healthz"), c.get("/metrics")))
    assert health.status_code == 503 and health.json()["store"].startswith("down")
    assert metrics.status_code == 503
    down.dispose()


def test_metrics_follow_the_store(client: Client, web_store: Store, inbox: str) -> None:
    before = scrape(client)
    pending = before[("wakeful_events", (("status", "pending"),))]
    for n in range(3):
        body = body_of({"n": n})
        assert client.post(f"/hooks/github/{inbox}", content=body,
                           headers=github_headers(GITHUB_SECRET, body)).status_code == 202
    # two refusals of different kinds
    assert client.post(f"/hooks/github/{inbox}", content=b"{}",
                       headers={"content-type": "application/json"}).status_code == 401
    assert client.post(f"/hooks/github/{inbox}", content=b"{}", headers={"content-type": "text/plain"}).status_code == 415
    after = scrape(client)
    assert after[("wakeful_events", (("status", "pending"),))] == pending + 3
    assert ("wakeful_events", (("status", "dead"),)) in after
    assert ("wakeful_events", (("status", "running"),)) in after
    assert after[("wakeful_oldest_pending_age_seconds", ())] >= 0
    for name in ("wakeful_outbox_held", "wakeful_timers_overdue",
                 "wakeful_lease_takeovers_total", "wakeful_stale_finishes_refused_total"):
        assert (name, ()) in after, name
    origin = (("origin", "web:hooks/github"),)
    assert after[("wakeful_rejected_input_total", origin)] == before.get(("wakeful_rejected_input_total", origin), 0) + 2
    assert after[("wakeful_web_refusals_total", (("reason", "no_signature"), ("route", "web:hooks/github")))] >= 1
    assert after[("wakeful_web_refusals_total", (("reason", "content_type"), ("route", "web:hooks/github")))] >= 1


def test_metrics_see_overdue_timers_and_the_oldest_pending(client: Client, web_store: Store, inbox: str) -> None:
    now = int(time.time())
    web_store.add_timer(inbox, "overdue", now - 50, {"x": 1})
    web_store.ingest(inbox, "test", "old-one", {"x": 1}, now=now - 1000)
    after = scrape(client)
    assert after[("wakeful_timers_overdue", ())] >= 1
    assert after[("wakeful_oldest_pending_age_seconds", ())] >= 999


def test_a_flood_of_refusals_is_answered_but_only_sampled_into_the_store(web_store: Store, clock) -> None:  # type: ignore[no-untyped-def]
    from web_support import web_settings

    app = create_app(store=web_store, ring=lambda i: None, settings=web_settings(rejections_per_second=2),
                     broker_check=lambda: None, clock=clock)
    origin = "web:hooks/stripe"

    def recorded() -> int:
        return sum(1 for r in web_store.operator.rejections(limit=10_000) if r.origin == origin)

    def flood(c: Client, n: int) -> list[int]:
        return [c.post("/hooks/stripe/flooded", content=b"{}",
                       headers={"content-type": "application/json"}).status_code for _ in range(n)]

    def scenario(c: Client):  # type: ignore[no-untyped-def]
        before = recorded()
        assert flood(c, 10) == [401] * 10
        assert recorded() - before == 4  # the burst: twice the rate
        clock.now += 1.0  # one second later, two more may be written
        assert flood(c, 5) == [401] * 5
        assert recorded() - before == 6
        return scrape(c)

    samples = run(app, scenario)
    assert samples[("wakeful_web_refusals_unrecorded_total", (("route", origin),))] == 9
    assert samples[("wakeful_web_refusals_total", (("reason", "no_signature"), ("route", origin)))] == 15
