"""Wakes the model sets (wakeful/agent/wakes.py), in-process: the claude loop with the real SDK over
HTTP against the scripted Messages API, on a real store (both engines), runs driven by hand
(acquire, claim, agent, fenced finish) and the scheduler called with ``now``, as in
tests/agent/test_claude_loop.py. tests/agent/test_wakes_processes.py runs them with worker
and beat processes."""

from __future__ import annotations

import functools
import json
from datetime import datetime
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import anthropic
import pytest

from wakeful.agent import Run
from wakeful.agent.claude import ClaudeRun
from wakeful.agent.config import ConfigError, load
from wakeful.agent.effects import execute_runnable
from wakeful.agent.scripted import ScriptedModel
from wakeful.agent import policy
from store import Outcome, Store


def wakes_config(write_config: Any, **wakes: Any) -> Path:
    """The tests' config with a ``[wakes]`` table (``policy = "allow"`` unless given)."""
    path = write_config({})
    wakes.setdefault("policy", "allow")
    path.write_text(path.read_text() + "\n[wakes]\n" + "".join(f"{k} = {json.dumps(v)}\n" for k, v in wakes.items()))
    return path


class Agent:
    """test_claude_loop's driver, with the Run's read-only timers filled as the runtime fills them."""

    def __init__(self, store: Store, model: ScriptedModel, config: Path) -> None:
        self.store, self.model, self.cfg = store, model, load(config)
        self.client = anthropic.Anthropic(base_url=model.base_url, api_key="test", max_retries=0, timeout=10)
        self.n = 0

    def say(self, text: str, inbox: str = "ada") -> None:
        self.n += 1
        self.store.ingest(inbox, "chat", f"m{self.n}", {"text": text})

    def wake(self, inbox: str = "ada", now: int | None = None) -> list[Outcome]:
        outcomes = []
        for _ in range(10):
            gen = self.store.acquire(inbox, "w", now=now)
            batch = self.store.claim(inbox, "w", gen, now=now)
            if not batch:
                self.store.release(inbox, "w", gen, now=now)
                return outcomes
            run = Run(inbox, batch, gen, self.store.runs.memory(inbox), lambda: True,
                      _timers=functools.partial(self.store.timers, inbox))
            outcome = ClaudeRun(self.cfg, self.client, run).outcome()
            assert self.store.finish(inbox, "w", gen, [e.id for e in batch], outcome=outcome, now=now)
            self.store.release(inbox, "w", gen, now=now)
            outcomes.append(outcome)
            execute_runnable(self.store, self.cfg, inbox)
        raise AssertionError("the inbox never settled")

    def results(self, request: int = -1) -> list[dict[str, Any]]:
        """The tool_result blocks the model was sent in a request."""
        return [b for b in self.model.requests[request]["messages"][-1]["content"] if b.get("type") == "tool_result"]

    def wakes(self, inbox: str = "ada") -> list[Any]:
        return [t for t in self.store.timers(inbox) if t.id.startswith("wake:")]


@pytest.fixture
def agent(store: Store, model: ScriptedModel, write_config: Any) -> Agent:
    return Agent(store, model, wakes_config(write_config))


def call(tool: str, **input: Any) -> str:
    return f"call {tool} {json.dumps(input)}"


def test_schedule_list_and_cancel_are_outcome_changes(agent: Agent) -> None:
    agent.say(call("schedule_wake", after_seconds=600, note="check the build"))
    [outcome] = agent.wake()
    [timer] = outcome.timers  # the run wrote nothing itself: its finish did
    [stored] = agent.wakes()
    [result] = agent.results()
    assert not result.get("is_error") and f"scheduled {stored.id}" in result["content"]
    assert stored.id == timer.timer_id == f"wake:{result['tool_use_id']}"
    assert stored.payload["note"] == "check the build" and not stored.done

    agent.say(call("list_wakes"))
    agent.wake()
    [listed] = json.loads(agent.results()[0]["content"])
    assert (listed["id"], listed["note"]) == (stored.id, "check the build")

    agent.say(call("cancel_wake", id=stored.id) + "\n" + call("cancel_wake", id="wake:nosuch"))
    [outcome] = agent.wake()
    assert outcome.cancel_timers == [stored.id] and agent.wakes() == []
    cancelled, unknown = agent.results()
    assert not cancelled.get("is_error") and unknown["is_error"]
    assert "no pending wake 'wake:nosuch'" in unknown["content"]
    agent.say(call("list_wakes"))
    agent.wake()
    assert agent.results()[0]["content"] == "no pending wakes"


def test_a_wake_fires_once_with_its_note(agent: Agent, store: Store) -> None:
    agent.say(call("schedule_wake", after_seconds=60, note="call list_wakes {}"))
    agent.wake()
    [timer] = agent.wakes()
    assert store.run_scheduler(now=timer.due - 1) == []
    [fired] = store.run_scheduler(now=timer.due + 5)
    assert store.run_scheduler(now=timer.due + 6) == []  # a one-off: done
    agent.wake()
    woken = agent.model.requests[-2]["messages"][-1]["content"][-1]["text"]
    assert woken.startswith(f"[wake {timer.id}, which you set (once, 60 s after it was set)")
    assert woken.endswith("Your note:]\ncall list_wakes {}")  # the model's own words: not wrapped as data
    assert agent.results()[0]["content"] == "no pending wakes"  # it fired: no longer pending
    assert [e.source_id for e in store.events("ada") if e.source == "timer"] == [fired.source_id]


def test_the_limits_refuse_with_a_message_the_model_sees(store: Store, model: ScriptedModel,
                                                         write_config: Any) -> None:
    agent = Agent(store, model, wakes_config(write_config, max_pending=2))
    agent.say("\n".join([call("schedule_wake", after_seconds=5, note="spin"),
                         call("schedule_wake", cron="* * * * * */5", note="spin"),
                         call("schedule_wake", at="2020-01-01T00:00:00Z", note="past"),
                         call("schedule_wake", after_seconds=600, note="one"),
                         call("schedule_wake", after_seconds=700, note="two"),
                         call("schedule_wake", after_seconds=800, note="three")]))
    agent.wake()
    results = agent.results()
    assert [bool(r.get("is_error")) for r in results] == [True, True, True, False, False, True]
    for refused in results[:3]:
        assert "at least 60 s away (min_delay of [wakes])" in refused["content"] and "loop" in refused["content"]
    assert "fires 5 s apart" in results[1]["content"]
    assert "already has 2 pending wakes" in results[5]["content"] and "max_pending of [wakes]" in results[5]["content"]
    assert sorted(t.payload["note"] for t in agent.wakes()) == ["one", "two"]  # nothing of the refused
    agent.say(call("schedule_wake", after_seconds=900, note="four"))  # the stored ones count too
    agent.wake()
    assert "already has 2 pending wakes" in agent.results()[0]["content"] and len(agent.wakes()) == 2


def test_bad_input_is_refused_naming_what_is_wrong(agent: Agent) -> None:
    agent.say("\n".join([call("schedule_wake", note="when?"),
                         call("schedule_wake", after_seconds=600, cron="0 9 * * *", note="both"),
                         call("schedule_wake", cron="0 9 * * *", tz="Mars/Olympus", note="where?"),
                         call("schedule_wake", cron="not a cron", note="?"),
                         call("schedule_wake", at="tomorrow", note="?"),
                         call("schedule_wake", after_seconds=600),
                         call("schedule_wake", cron="0 0 30 2 *", note="never"),
                         call("schedule_wake", cron="0 9 * * * 0 2027", note="a year field"),
                         call("schedule_wake", at="2999-01-01T00:00:00Z", note="far")]))
    agent.wake()
    contents = [r["content"] for r in agent.results()]
    assert all(r.get("is_error") for r in agent.results()) and len(contents) == 9
    assert "never fires" in contents[6] and "five fields, or six with seconds last" in contents[7]
    assert "more than ten years away" in contents[8]
    assert "exactly one of after_seconds, at or cron" in contents[0] == contents[1]
    assert "'Mars/Olympus' is not a known IANA time zone" in contents[2]
    assert "not a valid cron expression" in contents[3] and "not an ISO 8601 time" in contents[4]
    assert "invalid input" in contents[5] and "'note' is a required property" in contents[5]
    assert agent.wakes() == []


def test_a_note_the_store_would_refuse_is_refused_at_once() -> None:
    """(A model's reply carrying a NUL fails the claude loop's finish on its own, by the
    conversation it stores; a loop of your own may pass any note to the kit.)"""
    from wakeful.agent.wakes import Limits, WakeRefused, plan

    with pytest.raises(WakeRefused, match=r"^note: .*\\u0000"):
        plan({"after_seconds": 60, "note": "a\x00b"}, Limits(), "toolu_1", now=1_000_000)


def test_a_cron_wake_in_a_time_zone_recurs_until_cancelled(agent: Agent, store: Store) -> None:
    berlin = ZoneInfo("Europe/Berlin")
    agent.say(call("schedule_wake", cron="0 9 * * *", tz="Europe/Berlin", note="morning digest"))
    agent.wake()
    [timer] = agent.wakes()
    assert (timer.cron, timer.tz) == ("0 9 * * *", "Europe/Berlin")
    first = datetime.fromtimestamp(timer.due, berlin)
    assert (first.hour, first.minute) == (9, 0)
    for day in range(3):
        [fired] = store.run_scheduler(now=timer.due + day * 86400 + 10)
        assert fired.source_id == f"{timer.id}@{timer.due + day * 86400}"
    assert len([e for e in store.events("ada") if e.source == "timer"]) == 3
    [still] = agent.wakes()
    assert not still.done and still.due == timer.due + 3 * 86400
    agent.say(call("cancel_wake", id=timer.id))
    agent.wake()
    assert agent.wakes() == [] and store.run_scheduler(now=timer.due + 5 * 86400) == []


def test_with_ask_the_executor_writes_the_wake_after_the_yes(store: Store, model: ScriptedModel,
                                                             write_config: Any) -> None:
    agent = Agent(store, model, wakes_config(write_config, policy="ask"))
    agent.say(call("schedule_wake", after_seconds=600, note="later") + "\n" +
              call("schedule_wake", after_seconds=1, note="too soon"))
    [outcome] = agent.wake()
    assert outcome.timers == [] and agent.wakes() == []
    [effect] = store.effects.view("ada")  # the refused one was never asked
    assert effect.status == "asked" and effect.tool == "schedule_wake"
    assert store.answer_approval("ada", effect.tool_use_id, "yes") == "yes"
    agent.wake()
    [timer] = agent.wakes()
    assert timer.id == f"wake:{effect.tool_use_id}" and timer.payload["note"] == "later"
    [result] = [r for r in agent.results() if r["tool_use_id"] == effect.tool_use_id]
    assert result["content"].startswith(f"scheduled {timer.id}") and "(approved)" in result["content"]


def test_the_executors_write_is_fenced_by_the_effects_attempt(store: Store, model: ScriptedModel,
                                                              write_config: Any) -> None:
    from store import Timer

    agent = Agent(store, model, wakes_config(write_config, policy="ask"))
    agent.say(call("schedule_wake", after_seconds=600, note="later"))
    agent.wake()
    [effect] = store.effects.view("ada")
    store.answer_approval("ada", effect.tool_use_id, "yes")
    book = store.effects
    gen = store.acquire("ada", "w")  # the run that reads the yes settles the effect: ready
    batch = store.claim("ada", "w", gen)
    assert store.finish("ada", "w", gen, [e.id for e in batch], outcome=Outcome(answered=[effect.tool_use_id]))
    taken = book.begin("ada", effect.tool_use_id, stale_after=300)
    timer = Timer(f"wake:{effect.tool_use_id}", {"wake": "x", "note": "n", "set": "s"}, after=600)
    assert store.wakes.write("ada", effect.tool_use_id, taken.attempts - 1, timer, 20) == "superseded"
    assert store.wakes.write("ada", effect.tool_use_id, taken.attempts, timer, 20) == "written"
    assert store.wakes.write("ada", effect.tool_use_id, taken.attempts, timer, 20) == "exists"  # a retry
    assert len(agent.wakes()) == 1


def test_a_wake_asked_for_with_untrusted_text_in_view_waits_for_a_yes(store: Store, model: ScriptedModel,
                                                                       write_config: Any) -> None:
    """A stranger's text steers the red-team model into scheduling a wake: with ``allow``,
    the tainted conversation turns it into ``ask``, like any write."""
    agent = Agent(store, model, wakes_config(write_config))
    store.ingest("ada", "mail", "x", {"text": call("schedule_wake", after_seconds=60, note="call refund {}")})
    agent.wake()
    [effect] = store.effects.view("ada")
    assert (effect.tool, effect.status) == ("schedule_wake", "asked") and "an event from mail" in effect.why
    assert agent.wakes() == []
    store.answer_approval("ada", effect.tool_use_id, "no")
    agent.wake()
    assert agent.wakes() == [] and "refused by a human" in agent.results()[0]["content"]


def test_the_wakes_table(write_config: Any, tmp_path: Path) -> None:
    path = write_config({})
    assert not [t for t in policy.offered(load(path)) if "wake" in t["name"]]  # absent: not offered
    for table, error in [('policy = "sometimes"', "[wakes]: policy must be one of allow, deny, ask"),
                         ('policy = "allow"\nmin_delay = 0', "[wakes]: min_delay must be a positive whole number"),
                         ('policy = "allow"\nmax_wakes = 3', "[wakes]: unknown key(s) max_wakes"),
                         ("min_delay = 5", "[wakes]: policy must be one of")]:
        broken = tmp_path / "broken.toml"
        broken.write_text(path.read_text() + f"\n[wakes]\n{table}\n")
        with pytest.raises(ConfigError) as exc:
            load(broken)
        assert str(exc.value).startswith(f"{broken}: ") and error in str(exc.value)
    denied = tmp_path / "denied.toml"
    denied.write_text(path.read_text() + '\n[wakes]\npolicy = "deny"\n')
    assert not [t for t in policy.offered(load(denied)) if "wake" in t["name"]]
    clash = tmp_path / "clash.toml"
    clash.write_text(path.read_text() + '\n[wakes]\npolicy = "allow"\n\n[tools.list_wakes]\n'
                     'call = "agent_tools:lookup"\npolicy = "allow"\n')
    with pytest.raises(ConfigError, match=r"both declare a tool named 'list_wakes'"):
        load(clash)


def test_a_custom_loop_on_the_tool_kit_gets_them_too(store: Store, write_config: Any,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """wakeful/examples/custom_loop.py, unchanged: its ``kit.use`` answers the wake tools and its
    ``kit.outcome`` carries the timers; the wake comes back through ``kit.text``."""
    import wakeful.agent.config as config_module
    from wakeful.examples import custom_loop

    monkeypatch.setenv(config_module.ENV, str(wakes_config(write_config)))
    monkeypatch.setattr(config_module, "_current", None)

    def wake() -> None:
        for _ in range(5):
            gen = store.acquire("kit", "w")
            batch = store.claim("kit", "w", gen)
            if not batch:
                store.release("kit", "w", gen)
                return
            run = Run("kit", batch, gen, store.runs.memory("kit"), _timers=functools.partial(store.timers, "kit"))
            assert store.finish("kit", "w", gen, [e.id for e in batch], outcome=custom_loop.agent(run))
        raise AssertionError("the inbox never settled")

    store.ingest("kit", "chat", "1", {"text": call("schedule_wake", after_seconds=60, note="call list_wakes {}")
                                      + "\n" + call("schedule_wake", after_seconds=6, note="spin")})
    wake()
    [timer] = store.timers("kit")
    [said] = [row.body for row in store.outbox("kit")]
    assert f"schedule_wake: scheduled {timer.id}" in said and "min_delay of [wakes]" in said
    store.run_scheduler(now=timer.due + 1)
    wake()
    assert "list_wakes: no pending wakes" in store.outbox("kit")[-1].body


def timers_probe(run: Run) -> Outcome:
    """For the run apart below: what ``run.timers()`` answers in the run's own process."""
    import os

    return Outcome(messages=[",".join(t.id for t in run.timers()), str(os.getpid())])


def test_run_timers_crosses_to_a_run_apart(store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    """A retried batch in a shared process runs in a process of its own (tasks/isolation.py):
    ``run.timers()`` there is a request to the waiting thread, which reads the store."""
    from store import Event
    from tasks import isolation, runtime

    store.add_timer("apart", "wake:toolu_1", 4_000_000_000, {"wake": "wake:toolu_1", "note": "n"})
    monkeypatch.setitem(runtime._worker, "pool", "threads")
    run = Run("apart", [Event(7, "apart", "chat", "m-1", {}, "running", 2)], 3, {},
              _timers=functools.partial(store.timers, "apart"))
    import os

    listed, pid = isolation.call_agent(timers_probe, run).messages
    assert listed == "wake:toolu_1" and pid != str(os.getpid())  # read in a process of its own
