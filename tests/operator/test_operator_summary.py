"""The daily summary: new dead events and expired approvals, once, to the operator channel."""

from __future__ import annotations

import logging
from collections.abc import Callable

import pytest

from store import Store

from operator_support import Content
from tasks.summary import HOLDER, WATERMARK, write_summary


def make_dead(store: Store, inbox: str, source_id: str, error: str, now: int) -> int:
    assert store.ingest(inbox, "chat", source_id, {}, now=now)
    gen = store.acquire(inbox, "worker-2", now=now)
    [event] = store.claim(inbox, "worker-2", gen, now=now)
    assert store.finish(inbox, "worker-2", gen, [event.id], error=error, now=now)
    store.release(inbox, "worker-2", gen, now=now)
    return event.id


def test_summary_goes_to_the_operator_inbox_once(make_store: Callable[..., Store],
                                                 content: Content) -> None:
    store = make_store(max_attempts=1)
    now = content.now
    result = write_summary(store, "ops", now=now)
    assert result == {"channel": "ops", "since": now - 86400, "until": now, "written": True}
    [message] = store.outbox("ops")
    assert message.sent_at is None and not message.urgent
    lines = message.body.splitlines()
    assert "1 event(s) parked dead" in lines[1]
    assert lines[2] == f"  #{content.poison_id} inbox alice: chat/p-1, 1 attempt(s): ValueError: poison"
    assert lines[3] == "1 approval(s) expired unanswered:"
    assert lines[4] == "  inbox bob: refund-2 (refund order 2)"
    assert "refund-1" not in message.body  # still pending, not expired
    # Written through the fenced path: an event-less run of the operator inbox, lease let go.
    [run] = store.operator.run_log("ops")
    assert (run.holder, run.outcome, run.event_ids) == (HOLDER, "done", ())
    assert store.status("ops").holder is None
    assert store.runs.memory("ops") == {WATERMARK: now}

    # The next summary tells only what is new.
    assert write_summary(store, "ops", now=now + 10)["written"] is False
    assert len(store.outbox("ops")) == 1
    later = make_dead(store, "carol", "c-9", "KeyError: 'x'", now + 20)
    assert write_summary(store, "ops", now=now + 30)["since"] == now + 10
    newest = store.outbox("ops")[-1].body
    assert f"#{later} inbox carol: chat/c-9" in newest and "KeyError" in newest
    assert "alice" not in newest and "refund-2" not in newest


def test_summary_waits_while_the_operator_inbox_is_busy(make_store: Callable[..., Store],
                                                        content: Content) -> None:
    store = make_store()
    store.acquire("ops", "agent-run", now=content.now)
    assert write_summary(store, "ops", now=content.now) == {
        "channel": "ops", "skipped": "the operator inbox's lease is held"}
    assert store.outbox("ops") == [] and store.runs.memory("ops") == {}
    assert store.status("ops").holder == "agent-run"


def test_summary_hands_back_an_operator_inbox_with_waiting_events(
        make_store: Callable[..., Store], content: Content) -> None:
    store = make_store()
    store.ingest("ops", "chat", "o-1", {}, now=content.now - 5)
    rung: list[str] = []
    assert write_summary(store, "ops", ring_inbox=rung.append, now=content.now)["written"]
    assert rung == ["ops"] and store.status("ops").holder is None
    assert [e.status for e in store.events("ops")] == ["pending"]


def test_summary_to_the_log_without_an_operator_inbox(make_store: Callable[..., Store],
                                                      content: Content,
                                                      caplog: pytest.LogCaptureFixture) -> None:
    store = make_store()
    with caplog.at_level(logging.INFO, logger="wakeful.summary"):
        result = write_summary(store, None, now=content.now)
    assert result["channel"] == "log" and result["written"] is True
    [record] = [r for r in caplog.records if r.name == "wakeful.summary"]
    assert record.levelno == logging.WARNING
    assert f"#{content.poison_id} inbox alice: chat/p-1" in record.getMessage()
    assert "inbox bob: refund-2" in record.getMessage()
    assert store.outbox("ops") == []


def test_summary_of_a_quiet_day_writes_nothing(make_store: Callable[..., Store],
                                               caplog: pytest.LogCaptureFixture) -> None:
    store = make_store()
    with caplog.at_level(logging.INFO, logger="wakeful.summary"):
        assert write_summary(store, None, now=2_000_000_000)["written"] is False
        assert write_summary(store, "ops", now=2_000_000_000)["written"] is False
    assert store.outbox("ops") == []
    assert all(r.levelno == logging.INFO for r in caplog.records if r.name == "wakeful.summary")


def test_summary_task_is_registered_and_scheduled_daily() -> None:
    from celery.schedules import crontab

    import tasks
    from tasks.celeryconfig import celery_config
    from wakeful.settings import RuntimeSettings, SettingsError

    assert "wakeful.daily_summary" in tasks.app.tasks
    config = celery_config(RuntimeSettings.from_env({"WAKEFUL_SUMMARY_HOUR": "6",
                                              "WAKEFUL_OPERATOR_INBOX": "ops"}))
    entry = config["beat_schedule"]["daily-summary"]
    assert entry["task"] == "wakeful.daily_summary"
    assert entry["schedule"] == crontab(minute=0, hour=6)
    assert entry["options"]["queue"] == "wakeful.control"
    with pytest.raises(SettingsError, match="WAKEFUL_SUMMARY_HOUR"):
        RuntimeSettings.from_env({"WAKEFUL_SUMMARY_HOUR": "24"})


def test_flower_shows_each_runs_inbox_and_summary() -> None:
    """Flower 2.2 hides args and results by default; `wakeful flower` shows them."""
    from wakeful.cli.flower import flower_command
    from wakeful.settings import RuntimeSettings

    s = RuntimeSettings.from_env({"WAKEFUL_FLOWER_BASIC_AUTH": "operator:long-enough",
                           "WAKEFUL_BROKER_URL": "redis://127.0.0.1:6379/0"})
    _, env = flower_command(s, {})
    columns = env["FLOWER_TASKS_COLUMNS"].split(",")
    assert columns[:3] == ["name", "args", "result"]
    _, chosen = flower_command(s, {"FLOWER_TASKS_COLUMNS": "name,state"})
    assert chosen["FLOWER_TASKS_COLUMNS"] == "name,state"  # the operator's choice stands


def test_summary_window_ends_on_the_database_clock_not_the_workers(
        make_store: Callable[..., Store], monkeypatch: pytest.MonkeyPatch) -> None:
    """A worker whose clock runs ten minutes ahead must not move the watermark past
    incidents that have not happened yet (they would fall between two summaries)."""
    import time

    store = make_store()
    database_now = store.transactions.clock()
    real_time = time.time
    monkeypatch.setattr(time, "time", lambda: real_time() + 600)
    result = write_summary(store, "ops")
    assert database_now <= result["until"] <= database_now + 60
    assert store.runs.memory("ops")[WATERMARK] == result["until"]
