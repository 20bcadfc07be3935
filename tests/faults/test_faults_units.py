"""tasks/faults.py without processes: the spec, the log line, inertness, the checker's rules."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from tasks import faults

from checker import Inputs, _events, _gap_broken, _outbox, _runs, _timers, claimed_alone


def test_spec_parses_points_actions_and_the_nth_reach(tmp_path) -> None:
    assert faults.parse("after_claim:block:2, during_scan,after_send_before_mark:sleep=1.5") == {
        "after_claim": ("block", 0.0, 2), "during_scan": ("log", 0.0, 0),
        "after_send_before_mark": ("sleep", 1.5, 0)}
    spec = tmp_path / "faults"
    spec.write_text("# a comment\nbefore_finish_commit:exit\n")
    assert faults.parse(f"@{spec}") == {"before_finish_commit": ("exit", 0.0, 0)}
    assert faults.parse("") == {}
    for bad in ("nowhere:block", "after_claim:explode"):
        with pytest.raises(faults.FaultSpecError):
            faults.parse(bad)


def test_unset_points_do_nothing(monkeypatch, tmp_path) -> None:
    monkeypatch.setattr(faults, "_points", {})
    monkeypatch.setenv(faults.LOG_ENV, str(tmp_path / "log"))
    faults.point("after_claim", inbox="a")
    send = lambda message: None  # noqa: E731
    assert faults.wrap_send(send) is send
    with faults.before_commit(SimpleNamespace(engine=None), "before_finish_commit"):
        pass
    assert not (tmp_path / "log").exists()


def test_install_wraps_nothing_when_no_point_is_named(monkeypatch) -> None:
    from tasks import isolation, runtime

    monkeypatch.setattr(faults, "_points", {})
    monkeypatch.setattr(faults, "_installed", False)
    call_agent, hooks = isolation.call_agent, list(runtime.STORE_HOOKS)
    faults.install(SimpleNamespace(tasks={}))  # a named point would look up the ingest task here
    assert isolation.call_agent is call_agent and runtime.STORE_HOOKS == hooks


def test_the_run_path_holds_no_fault_point() -> None:
    """The points are hooks around the run (tasks/faults.py ``install``): no task module
    but the package's entry, which installs them, names the fault module."""
    import ast
    from pathlib import Path

    tasks_dir = Path(faults.__file__).parent
    naming = []
    for path in sorted(tasks_dir.rglob("*.py")):
        if path.name == "faults.py" or path == tasks_dir / "__init__.py":
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and (node.module == "tasks.faults" or (
                    node.module == "tasks" and any(a.name == "faults" for a in node.names))):
                naming.append(str(path.relative_to(tasks_dir)))
            if isinstance(node, ast.Import) and any(a.name == "tasks.faults" for a in node.names):
                naming.append(str(path.relative_to(tasks_dir)))
    assert naming == []


def test_a_reached_point_is_logged_before_it_acts(monkeypatch, tmp_path) -> None:
    log = tmp_path / "log"
    monkeypatch.setattr(faults, "_points", {"after_claim": ("log", 0.0, 0),
                                            "after_finish_commit": ("exit", 0.0, 2)})
    monkeypatch.setattr(faults, "_reached", {})
    monkeypatch.setenv(faults.LOG_ENV, str(log))
    faults.point("after_claim", inbox="a", generation=3, events=[1, 2])
    faults.point("after_finish_commit", inbox="a")  # the 1st reach of an ":2" point: only logged
    lines = [json.loads(line) for line in log.read_text().splitlines()]
    assert [(x["point"], x["action"], x["n"]) for x in lines] == [
        ("after_claim", "log", 1), ("after_finish_commit", "log", 1)]
    assert lines[0]["events"] == [1, 2] and lines[0]["generation"] == 3


def _run(id, gen, started, finished, events, outcome="done"):  # noqa: A002
    return SimpleNamespace(id=id, inbox="a", generation=gen, started=started, finished=finished,
                           outcome=outcome, event_ids=events)


def test_checker_counts_overlaps_and_double_completions() -> None:
    clean = [_run(1, 1, 10, 12, [1]), _run(2, 1, 12, 13, [2]), _run(3, 2, 20, 21, [3])]
    assert _runs(clean) == {"events_done_twice": 0, "runs_overlapping": 0}
    bad = clean + [_run(4, 3, 20, 22, [3]), _run(5, 2, 30, 31, [4])]
    assert _runs(bad) == {"events_done_twice": 1, "runs_overlapping": 2}


def test_checker_counts_timer_and_outbox_violations() -> None:
    ev = [SimpleNamespace(source="timer", source_id="t@10", inbox="a", payload={"scheduled_for": 10}),
          SimpleNamespace(source="timer", source_id="t@20", inbox="a", payload={"scheduled_for": 10})]
    assert _timers(ev) == 1
    sent = [{"key": "k1", "body": "x", "message_ids": [1]}, {"key": "k1", "body": "y", "message_ids": [1]},
            {"key": "k2", "body": "z", "message_ids": [1]}]
    counts = _outbox(sent, [], "at-most-once", None)
    assert counts["outbox_key_changed"] == 1 and counts["outbox_resent_at_most_once"] == 1
    assert counts["outbox_message_twice"] == 1
    row = lambda i, key, claimed, sent_at, urgent=False: SimpleNamespace(  # noqa: E731
        id=i, inbox="a", urgent=urgent, dispatch_key=key, claimed_at=claimed, sent_at=sent_at)
    assert _gap_broken([row(1, "k1", 0, 1), row(2, "k2", 5, 5), row(3, "k3", 6, 6, urgent=True)], 4) == 0
    assert _gap_broken([row(1, "k1", 0, 1), row(2, "k2", 3, 3)], 4) == 1


def test_checker_tells_an_outage_from_a_poison_event() -> None:
    def event(i: int, status: str, attempts: int, error: str | None = None, since: int | None = None,
              finished: int | None = None) -> SimpleNamespace:
        return SimpleNamespace(id=i, inbox="a", source="chat", source_id=str(i), status=status, attempts=attempts,
                               error=error, outage_since=since, finished=finished, payload={})
    inputs = Inputs({("a", "chat", str(i)) for i in range(1, 5)})
    ev = [event(1, "dead", 3, "too many attempts (3); last error: boom"),
          event(2, "dead", 0, "outage: still failing after the outage horizon (100 s); last: x", 1000, 1100),
          event(3, "dead", 0, "outage: still failing after the outage horizon (100 s); last: x", 1000, 1050),
          event(4, "dead", 1, "boom")]
    counts = _events(ev, inputs, max_attempts=3, outage_horizon=100)
    assert (counts["dead_below_cap"], counts["dead_outage_below_horizon"]) == (1, 1)


def test_checker_knows_which_events_ran_alone() -> None:
    log = [{"point": "after_claim", "events": [1, 2, 3]}, {"point": "after_claim", "events": [2]},
           {"point": "after_claim", "events": [4]}, {"point": "agent_call", "events": [4], "apart": False},
           {"point": "after_claim", "events": [5]}, {"point": "agent_call", "events": [5], "apart": False},
           {"point": "after_claim", "events": [5]}, {"point": "agent_call", "events": [5], "apart": True}]
    assert claimed_alone(log) == {2, 5}  # 4 was claimed alone, but ran beside others
