"""The runtime's parts that need no worker: settings, Celery config, channels, doorbell, CLI."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from databases import REDIS_HOST, REDIS_PORT
from runtime_support import base_env
from store import OutboxItem, OutgoingMessage, Store
from store.runs import Runs
from tasks.celeryconfig import celery_config
from tasks.channels import load_channel
from tasks.channels.log import JsonlChannel
from tasks.channels.webhook import WebhookChannel, WebhookError
from wakeful.settings import RuntimeSettings, SettingsError


def test_nothing_set_means_everything_embedded_under_var() -> None:
    s = RuntimeSettings.from_env({})
    assert s.store_url == f"sqlite:///{Path('var/wakeful.sqlite3').resolve()}"
    assert s.broker.startswith("sqla+sqlite:///") and s.embedded_broker
    assert s.results.startswith("db+sqlite:///")
    assert s.agent == "wakeful.agent.demo:agent" and s.outbox_channel == "log"


def test_settings_come_from_the_environment_and_bad_values_name_the_variable() -> None:
    s = RuntimeSettings.from_env({"WAKEFUL_LEASE_TTL": "7", "WAKEFUL_SCAN_INTERVAL": "0.25",
                           "WAKEFUL_BROKER_URL": "redis://:hunter22@redis:6379/0",
                           "WAKEFUL_TASK_EVENTS": "off"})
    assert (s.lease_ttl, s.scan_interval, s.task_events) == (7, 0.25, False)
    assert s.store_options()["lease_ttl"] == 7
    assert s.results == "redis://:hunter22@redis:6379/0"
    assert "hunter22" not in repr(s)
    with pytest.raises(SettingsError, match="WAKEFUL_MAX_ATTEMPTS"):
        RuntimeSettings.from_env({"WAKEFUL_MAX_ATTEMPTS": "three"})
    with pytest.raises(SettingsError, match="WAKEFUL_LEASE_TTL"):
        RuntimeSettings.from_env({"WAKEFUL_LEASE_TTL": "0"})
    assert RuntimeSettings.from_env({"WAKEFUL_OUTBOX_GAP": "0"}).store_options()["outbox_gap"] == 0  # no pacing
    with pytest.raises(SettingsError, match="WAKEFUL_OUTBOX_GAP must be a whole number >= 0"):
        RuntimeSettings.from_env({"WAKEFUL_OUTBOX_GAP": "-5"})


def test_celery_config_is_a_doorbell_broker_config() -> None:
    s = RuntimeSettings.from_env({"WAKEFUL_BROKER_URL": "redis://127.0.0.1:6379/0",
                           "WAKEFUL_RUN_TIME_LIMIT": "900"})
    c = celery_config(s)
    assert c["accept_content"] == ["json"] and c["task_serializer"] == "json"
    assert c["task_acks_late"] and c["task_reject_on_worker_lost"]
    assert c["worker_prefetch_multiplier"] == 1 and c["task_ignore_result"]
    transport = c["broker_transport_options"]
    assert transport["visibility_timeout"] > s.hard_time_limit > s.run_time_limit
    assert transport["health_check_interval"] > 0 and transport["socket_keepalive"]
    # External callers send with no routing options: the entry points are on "celery".
    assert c["task_default_queue"] == "celery"
    assert c["task_routes"]["wakeful.ingest"]["queue"] == "celery"
    assert c["task_routes"]["wakeful.run_inbox"]["queue"] != "celery"
    assert {t["task"] for t in c["beat_schedule"].values()} == {
        "wakeful.scan_timers", "wakeful.sweep", "wakeful.dispatch_outbox", "wakeful.purge",
        "wakeful.daily_summary", "wakeful.execute_effects"}


def test_embedded_config_has_no_fanout_features() -> None:
    c = celery_config(RuntimeSettings.from_env({}))
    assert c["worker_enable_remote_control"] is False
    assert c["worker_send_task_events"] is False
    assert "polling_interval" not in c["broker_transport_options"]  # it crashes create_engine


class _Hook(BaseHTTPRequestHandler):
    script: list[int] = []
    seen: list[dict] = []

    def do_POST(self) -> None:  # noqa: N802
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        type(self).seen.append({"key": self.headers.get("Idempotency-Key"), "body": body})
        status = type(self).script.pop(0) if type(self).script else 200
        self.send_response(status)
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def hook():
    handler = type("Hook", (_Hook,), {"script": [], "seen": []})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}/hook", handler
    server.shutdown()
    server.server_close()


MESSAGE = OutgoingMessage(inbox="alice", key="outbox-7", body="update 1\n\nupdate 2",
                          urgent=False, message_ids=(7, 8),
                          items=(OutboxItem(7, "notice", "update 1", False), OutboxItem(8, "notice", "update 2", False)))


def test_webhook_channel_posts_json_with_the_dispatch_key_and_retries(hook) -> None:
    url, handler = hook
    handler.script = [503, 429]
    channel = WebhookChannel(url, timeout=5, attempts=4, backoff=0.01)
    channel(MESSAGE)
    assert [s["key"] for s in handler.seen] == ["outbox-7"] * 3
    assert handler.seen[-1]["body"] == {"inbox": "alice", "key": "outbox-7", "kind": "notice",
                                        "body": "update 1\n\nupdate 2", "urgent": False,
                                        "message_ids": [7, 8], "messages": [
                                            {"id": 7, "kind": "notice", "body": "update 1", "urgent": False,
                                             "fields": None},
                                            {"id": 8, "kind": "notice", "body": "update 2", "urgent": False,
                                             "fields": None}]}


def test_webhook_channel_gives_up_on_a_refusal_and_after_its_attempts(hook) -> None:
    url, handler = hook
    handler.script = [400]
    with pytest.raises(WebhookError, match="HTTP 400"):
        WebhookChannel(url, attempts=4, backoff=0.01)(MESSAGE)
    assert len(handler.seen) == 1  # a 4xx is final: no retry
    handler.script = [500, 500]
    with pytest.raises(WebhookError, match="after 2 attempts"):
        WebhookChannel(url, attempts=2, backoff=0.01)(MESSAGE)
    with pytest.raises(WebhookError, match="ConnectError"):
        WebhookChannel("http://127.0.0.1:9/none", attempts=2, backoff=0.01)(MESSAGE)


def test_channels_are_chosen_by_configuration(tmp_path: Path) -> None:
    s = RuntimeSettings.from_env({})
    assert type(load_channel("log", s)).__name__ == "LogChannel"
    assert isinstance(load_channel("https://example.invalid/hook", s), WebhookChannel)
    jsonl = load_channel(f"jsonl:{tmp_path / 'out.jsonl'}", s)
    assert isinstance(jsonl, JsonlChannel)
    jsonl(MESSAGE)
    assert json.loads((tmp_path / "out.jsonl").read_text())["key"] == "outbox-7"
    assert load_channel("json:dumps", s) is json.dumps
    with pytest.raises(ValueError):
        load_channel("carrier-pigeon", s)


def test_agent_plugin_is_loaded_by_name() -> None:
    from wakeful.agent import load_agent
    from wakeful.agent.demo import agent

    assert load_agent("wakeful.agent.demo:agent") is agent
    with pytest.raises(ValueError):
        load_agent("wakeful.agent.demo")
    with pytest.raises(AttributeError):
        load_agent("wakeful.agent.demo:nobody")


def test_ring_never_raises_when_the_broker_is_down(tmp_path: Path) -> None:
    env = {**base_env(tmp_path), "WAKEFUL_BROKER_URL": "redis://127.0.0.1:1/0"}
    code = ("import time; from tasks.doorbell import ring; t = time.monotonic(); "
            "ring('alice'); print('returned')")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    assert "returned" in out.stdout
    assert "the sweep will ring it" in out.stderr


def test_importing_settings_and_doorbell_connects_to_nothing(tmp_path: Path) -> None:
    env = {**base_env(tmp_path), "WAKEFUL_DATABASE_URL": "postgresql+psycopg://nobody@127.0.0.1:1/x",
           "WAKEFUL_BROKER_URL": "redis://127.0.0.1:1/0"}
    code = "import wakeful.settings, tasks.doorbell, tasks; tasks.app; print('ok')"
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr
    assert not (tmp_path / "home").exists()  # and created nothing


def test_cli_ingest_answer_status_on_the_embedded_default(tmp_path: Path) -> None:
    env = base_env(tmp_path)

    def wakeful(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "wakeful.cli.main", *args], env=env, cwd=tmp_path,
                              capture_output=True, text=True, timeout=60)

    assert wakeful("init").returncode == 0
    first = wakeful("ingest", "alice", "chat", "m-1", '{"text": "hi"}')
    assert first.returncode == 0 and first.stdout.strip() == "stored", first.stderr
    assert wakeful("ingest", "alice", "chat", "m-1", '{"text": "hi"}').stdout.strip() == \
        "duplicate (already stored)"
    bad = wakeful("ingest", "alice", "chat", "m-2", '"not an object"')
    assert bad.returncode == 2 and "payload must be a JSON object" in bad.stderr
    unknown = wakeful("answer", "alice", "refund-1", "yes")
    assert unknown.returncode == 1 and unknown.stdout.strip() == "unknown"
    status = json.loads(wakeful("status", "alice", "--json").stdout)
    assert status["pending"] == 1 and status["inbox"] == "alice"
    overall = json.loads(wakeful("status", "--json").stdout)
    assert overall["metrics"]["events_pending"] == 1
    assert [s["inbox"] for s in overall["attention"]] == ["alice"]
    assert overall["rejected"] == []  # the CLI refuses bad input before the store sees it
    assert json.loads(wakeful("incidents", "--json").stdout) is not None
    assert (tmp_path / "home" / "wakeful.sqlite3").exists()


def test_the_redis_guard_refuses_a_kombu_it_was_not_verified_against() -> None:
    """Verified on kombu 5.7.0 / Celery 5.7.0 / redis-py 8.1.0 (the versions this suite ran on)."""
    import kombu

    from tasks import redis_guard

    redis_guard.check_version(kombu.__version__)  # the installed one was verified
    redis_guard.check_version("5.7.3")
    for unverified in ("5.8.0", "6.0.0", "5.6.9", "garbage"):
        with pytest.raises(redis_guard.UnverifiedKombu, match=f"kombu {unverified} is installed"):
            redis_guard.check_version(unverified)


def test_a_kombu_redis_channel_sends_every_command_through_one_client(redis_db: int) -> None:
    """tasks/redis_clients.py: kombu built a redis.Redis per publish and per ack; now the
    channel keeps one per connection pool, and makes a new one when its pool is new."""
    import kombu

    from tasks import redis_clients

    redis_clients.install()
    with kombu.Connection(f"redis://{REDIS_HOST}:{REDIS_PORT}/{redis_db}") as conn:
        channel = conn.default_channel
        with channel.conn_or_acquire() as first, channel.conn_or_acquire() as second:
            assert first is second and first.connection_pool is channel.pool
        given = object()
        with channel.conn_or_acquire(given) as passed:
            assert passed is given  # a caller's own client (a pipeline's) is used as it is
        queue = conn.SimpleQueue("wakeful-test-one-client")
        for n in range(3):
            queue.put({"n": n})
        got = [queue.get(timeout=5) for _ in range(3)]
        for message in got:
            message.ack()
        assert [m.payload["n"] for m in got] == [0, 1, 2]
        with channel.conn_or_acquire() as after:
            assert after is first  # publish, get and ack went through the same client
        channel._pool = None  # what a channel's close does; a reconnect makes a new pool
        with channel.conn_or_acquire() as renewed:
            assert renewed is not first and renewed.connection_pool is channel.pool
        queue.clear()
        queue.close()


def test_the_remote_control_subscriber_is_read_only_when_it_has_something_to_read(redis_db: int) -> None:
    """tasks/redis_guard.py: after a Redis restart the poller reported the subscriber's
    descriptor readable with nothing on its connection, and kombu's first blocking read hung
    the control worker's main thread. Read through the guard, an empty subscriber answers
    that nothing was read; unguarded, the same read blocks for good."""
    import kombu

    from tasks import redis_guard

    redis_guard.install()
    url = f"redis://{REDIS_HOST}:{REDIS_PORT}/{redis_db}"
    with kombu.Connection(url) as conn:
        channel = conn.default_channel
        subscriber = channel.subclient
        subscriber.subscribe("wakeful-test-guarded-subscriber")
        assert subscriber.parse_response()[0] in (b"subscribe", "subscribe")  # the confirmation
        assert not subscriber.connection.can_read(timeout=0)  # nothing more is there
        answers: list[bool] = []
        reader = threading.Thread(target=lambda: answers.append(channel._receive()), daemon=True)
        reader.start()
        reader.join(30)  # unguarded, this read never returns (redis-py 8 sets no timeout on it)
        assert answers == [False], "the subscriber was read with nothing to read: it blocks"
        subscriber.unsubscribe()


class _CountingRuns(Runs):
    """The real store's runs, counting the keeper's statements."""

    def renew_many(self, held, *, now=None):  # type: ignore[no-untyped-def]
        held = list(held)
        self.batches = getattr(self, "batches", []) + [len(held)]
        return super().renew_many(held, now=now)


def _leases(db_url: str, *names: str):  # type: ignore[no-untyped-def]
    from tasks.run_inbox import HeldLease

    store = Store.connect(db_url, lease_ttl=60)
    store.runs = _CountingRuns(store.transactions)
    far = time.monotonic() + 600
    return store, {n: HeldLease(store, n, "w", store.acquire(n, "w"), far) for n in names}


def test_the_lease_keeper_renews_every_held_run_in_one_statement_until_it_ends_is_lost_or_runs_out(
        db_url: str) -> None:
    import threading

    from wakeful.cli.processes import wait_for
    from tasks.lease_keeper import LeaseKeeper

    keeper = LeaseKeeper()
    store, leases = _leases(db_url, "a", "b", "c")
    assert store.release("b", "w", leases["b"].generation, force=True)  # b is lost: taken over
    assert store.acquire("b", "x") == leases["b"].generation + 1
    ended = threading.Event()
    far = time.monotonic() + 600
    with keeper.holding(leases["a"], 0.15, far, "a"), keeper.holding(leases["b"], 0.15, far, "b") as b, \
            keeper.holding(leases["c"], 0.15, time.monotonic() + 0.2, "c", on_deadline=ended.set) as c:
        wait_for(lambda: b.lost.is_set() and ended.is_set() and len(store.runs.batches) >= 4, 10,
                 "b lost, c past its deadline, a renewed on")
        assert not b.heartbeat() and c.lost.is_set()  # lost for good
        assert max(store.runs.batches) == 3  # every run due at a tick: one statement
        wait_for(lambda: [h.name for h in keeper._held.values()] == ["a"], 5, "only a held")
    wait_for(lambda: not keeper._held, 5, "nothing held once the runs ended")
    store.dispose()


def test_a_heartbeat_renews_only_when_the_renewal_is_near_and_reports_a_lost_lease() -> None:
    from dataclasses import dataclass

    from tasks.lease_keeper import LeaseKeeper

    @dataclass
    class Counted:
        store: object = None
        inbox: str = "a"
        holder: str = "w"
        generation: int = 1
        renewals: int = 0
        held: bool = True

        def renew(self) -> bool:
            self.renewals += 1
            return self.held

    lease = Counted()
    with LeaseKeeper().holding(lease, 30.0, time.monotonic() + 600, "a") as held:  # renewed every 10 s
        assert held.heartbeat() and held.heartbeat()
        assert lease.renewals == 0  # taken a moment ago: nothing new to confirm
        held.due = time.monotonic() + held.every / 2 - 0.01  # the renewal is near
        assert held.heartbeat() and lease.renewals == 1
        assert held.heartbeat() and lease.renewals == 1  # renewed just now
        lease.held, held.due = False, time.monotonic()  # taken over meanwhile, and due
        assert not held.heartbeat() and lease.renewals == 2
        assert not held.heartbeat() and lease.renewals == 2  # lost for good, not asked again


def test_the_lease_keeper_wakes_for_a_run_due_before_its_own_next_wake_up(db_url: str) -> None:
    """It sleeps a long lease's third with nothing held and is not woken by runs due after
    that; a run due sooner (a shorter lease) must wake it, or it would lapse unrenewed."""
    from wakeful.cli.processes import wait_for
    from tasks.lease_keeper import LeaseKeeper

    keeper = LeaseKeeper()
    store, leases = _leases(db_url, "long", "short")
    far = time.monotonic() + 600
    with keeper.holding(leases["long"], 30, far, "long"):
        wait_for(lambda: keeper._next_wake > time.monotonic() + 5, 5, "the keeper asleep for the long lease")
    with keeper.holding(leases["short"], 0.15, far, "short"):
        wait_for(lambda: len(getattr(store.runs, "batches", [])) >= 3, 5,  # every 0.05 s, not after 10 s
                 "the short lease renewed three times")
    store.dispose()


@pytest.mark.parametrize("recruit_after, rings", [(3600.0, 0), (0.0, 6)])
def test_a_drainer_rings_for_help_only_once_it_has_drained_for_a_while(
        store, monkeypatch: pytest.MonkeyPatch, recruit_after: float, rings: int) -> None:  # type: ignore[no-untyped-def]
    """A burst one task clears at once recruits no other run task (it would take a pool
    process from ingest); a drain that lasts past RECRUIT_AFTER rings for each inbox taken."""
    import time

    from tasks import doorbell, run_inbox

    for n in range(6):
        store.ingest(f"d{n}", "chat", f"m-{n}", {"text": "hi"})
    rung: list[str] = []
    monkeypatch.setattr(doorbell, "ring_backlog", rung.append)
    monkeypatch.setattr(run_inbox, "RECRUIT_AFTER", recruit_after)
    deadline = time.monotonic() + 600
    with store.transactions.pinned():
        summary = run_inbox._drain_backlog(store, lambda run: None, "W", deadline, run_inbox.Drain(deadline, skip=[]))
    assert summary["inboxes"] == 6 and all(store.status(f"d{n}").holder is None for n in range(6))
    assert len(rung) == rings


def test_an_answer_its_token_does_not_authorise_is_refused_as_not_authorized(monkeypatch) -> None:
    """A wrong, missing or expired token is a caller without the right to answer, not a
    malformed event: its own error (still recorded and answered with one line)."""
    from wakeful.approval_tokens import NotAuthorized
    from wakeful.errors import WakefulError
    from store import InvalidEvent
    from tasks import approvals

    monkeypatch.setattr(approvals, "approval_keys", lambda: ("k1",))
    for token in ("forged", ""):
        with pytest.raises(NotAuthorized) as refused:
            approvals._authorize("a", "r1", "yes", token, "self")
        assert isinstance(refused.value, WakefulError) and not isinstance(refused.value, InvalidEvent)
    with pytest.raises(InvalidEvent):
        approvals._authorize(1, "r1", "yes", "forged", "self")  # malformed: still an invalid event


@pytest.mark.redis
def test_a_batchs_results_are_stored_in_two_round_trips_and_a_stored_success_is_kept(
        redis_db: int, monkeypatch: pytest.MonkeyPatch) -> None:
    from celery import Celery
    from redis.connection import AbstractConnection

    from databases import REDIS_HOST, REDIS_PORT
    from tasks.batches import BatchItem, mark_done

    app = Celery("results", backend=f"redis://{REDIS_HOST}:{REDIS_PORT}/{redis_db}")
    app.conf.update(result_serializer="json", result_accept_content=["json"])
    backend = app.backend
    items = [BatchItem(f"task-{n}", (), {}, ignore_result=False) for n in range(20)]
    backend.mark_as_done("task-0", {"stored": "first"}, request=items[0])  # a success already there
    sends: list[int] = []
    real = AbstractConnection.send_packed_command
    monkeypatch.setattr(AbstractConnection, "send_packed_command",
                        lambda self, *a, **k: (sends.append(1), real(self, *a, **k))[1])
    mark_done(backend, [(item, {"stored": n}) for n, item in enumerate(items)])
    monkeypatch.undo()
    assert len(sends) == 2  # one MGET, one pipeline; one at a time it is two per message
    got = [app.AsyncResult(item.id).get(timeout=5) for item in items]
    assert got == [{"stored": "first"}] + [{"stored": n} for n in range(1, 20)]
