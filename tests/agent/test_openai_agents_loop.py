"""The OpenAI Agents SDK on wakeful's tool kit (wakeful/integrations/openai_agents.py, the
example wakeful/examples/openai_agents_loop.py), the SDK driven offline by the example's
StandInModel (a ``Model`` of the SDK's interface).

On a real store (both engines), each run by hand (acquire, claim, the async agent, the
fenced finish, the executor): ask -> yes -> the write runs once and the SDK resumes from the
stored RunState with its result; read inline; an allowed write after the commit; a human's
no; deny, schema and non-object arguments refused; text held while a write is out; two
writes of one reply coming back apart; taint; the conversation across runs; a fenced finish
writes no state. In worker processes on PostgreSQL and Redis: ask -> yes -> exactly once;
refused, read inline and the conversation across runs; the run workers restarted between
ask and answer; a worker stopped inside the model call past its lease, its run fenced and
its RunState never written.
"""

from __future__ import annotations

import asyncio
import json
import signal
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import wakeful.agent.config as config_module
from agent_support import agent_env, calls
from store import Outcome, Store
from wakeful.agent import Run, core
from wakeful.agent.config import AgentConfig
from wakeful.agent.effects import execute_runnable
from wakeful.examples import openai_agents_loop
from wakeful.integrations import openai_agents
from wakeful.integrations.openai_agents import MEMORY_KEY, agent_for

Agent = Callable[[Run], Any]
EXAMPLE = "wakeful.examples.openai_agents_loop:agent"


# -- by hand, on a real store ---------------------------------------------------------------

class Loop:
    """The runtime's steps around one async agent, in this process."""

    def __init__(self, store: Store, cfg: AgentConfig, agent: Agent = openai_agents_loop.agent) -> None:
        self.store, self.cfg, self.agent, self.n = store, cfg, agent, 0

    def say(self, text: str, inbox: str = "ada", source: str = "chat") -> None:
        self.n += 1
        self.store.ingest(inbox, source, f"m{self.n}", {"text": text})

    def once(self, inbox: str = "ada") -> Outcome | None:
        """One run: what the agent returned (its finish committed), None when nothing was claimable."""
        gen = self.store.acquire(inbox, "w")
        batch = self.store.claim(inbox, "w", gen)
        if not batch:
            self.store.release(inbox, "w", gen)
            return None
        outcome = asyncio.run(self.agent(Run(inbox, batch, gen, self.store.runs.memory(inbox), lambda: True)))
        assert self.store.finish(inbox, "w", gen, [e.id for e in batch], outcome=outcome)
        self.store.release(inbox, "w", gen)
        return outcome

    def wake(self, inbox: str = "ada") -> None:
        """Runs until nothing is claimable, executing effects after each commit."""
        for _ in range(10):
            if self.once(inbox) is None:
                return
            execute_runnable(self.store, self.cfg, inbox)
        raise AssertionError("the inbox never settled")

    def said(self, inbox: str = "ada") -> list[str]:
        return [row.body for row in self.store.outbox(inbox)]

    def memory(self, inbox: str = "ada") -> dict[str, Any]:
        return self.store.runs.memory(inbox).get(MEMORY_KEY) or {}

    def answer(self, answer: str, inbox: str = "ada", tool: str | None = None) -> None:
        [asked] = [e for e in self.store.effects.view(inbox) if e.status == "asked" and tool in (None, e.tool)]
        assert self.store.answer_approval(inbox, asked.tool_use_id, answer) == answer


@pytest.fixture
def configured(write_config: Any, monkeypatch: pytest.MonkeyPatch) -> Callable[..., AgentConfig]:
    """The process's config (what Toolkit(run) reads) for this test."""

    def use(*args: Any, **kwargs: Any) -> AgentConfig:
        path = write_config(*args, **kwargs)
        monkeypatch.setenv(config_module.ENV, str(path))
        monkeypatch.setattr(config_module, "_current", None)
        cfg = config_module.current()
        assert cfg is not None
        return cfg

    return use


def _items(history: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [i for i in history if i.get("type") == kind]


def test_ask_yes_runs_once_and_the_sdk_resumes_with_the_result(store: Store, configured: Any,
                                                                tool_log: Path) -> None:
    lp = Loop(store, configured())
    lp.say('call refund_asked {"order": 7}')
    lp.wake()
    [asked] = store.effects.view("ada")
    assert calls(tool_log) == [] and asked.status == "asked" and asked.tool_use_id.startswith("call_")
    assert any("Approval needed" in b for b in lp.said())
    kept = lp.memory()
    assert kept["state"] is not None and kept["history"] == []  # the SDK's run waits, in memory only
    lp.answer("yes")
    lp.wake()
    assert [c["input"] for c in calls(tool_log)] == [{"order": 7}]
    assert any("refund_asked: " in b and "refunded order 7" in b for b in lp.said()), lp.said()
    kept = lp.memory()
    assert kept["state"] is None and kept["prompt"] == []
    [call] = _items(kept["history"], "function_call")
    [output] = _items(kept["history"], "function_call_output")
    assert call["call_id"] == output["call_id"] == asked.tool_use_id and "refunded order 7" in output["output"]
    lp.say("anything else?")
    lp.wake()  # another wake: never twice
    assert len(calls(tool_log)) == 1 and lp.said()[-1] == "noted"


def test_read_inline_allowed_write_after_commit_no_deny_and_bad_input(store: Store, configured: Any,
                                                                      tool_log: Path) -> None:
    """One inbox each: a read's answer is data, so after it every write would ask."""
    lp = Loop(store, configured())
    lp.say('call lookup {"order": 1}', inbox="read")
    lp.wake("read")
    assert [c["tool"] for c in calls(tool_log)] == ["lookup"]
    assert any(b.startswith("lookup: ") and '"order": 1' in b for b in lp.said("read")), lp.said("read")
    assert lp.memory("read")["state"] is None  # a read never interrupts the SDK's run
    lp.say('call refund {"order": 2}', inbox="write")
    lp.wake("write")
    assert [c["input"] for c in calls(tool_log) if c["tool"] == "refund"] == [{"order": 2}]
    assert any("refund: " in b and "refunded order 2" in b for b in lp.said("write"))
    lp.say('call refund_asked {"order": 3}', inbox="no")
    lp.wake("no")
    lp.answer("no", inbox="no")
    lp.wake("no")
    assert any("refund_asked: the tool call was refused by a human; nothing ran" in b for b in lp.said("no"))
    lp.say('call wipe {"order": 4}\ncall refund {"order": "four"}\ncall refund {four}', inbox="deny")
    lp.wake("deny")
    assert [c["tool"] for c in calls(tool_log)] == ["lookup", "refund"]
    [said] = lp.said("deny")
    assert "wipe: the tool 'wipe' is not available; nothing ran" in said  # never offered: the kit's refusal
    assert "refund: invalid input for 'refund'" in said
    assert said.count("invalid input for 'refund'") == 2, said  # also the arguments that are no JSON object
    assert store.effects.view("deny") == [] and lp.memory("deny")["state"] is None


def test_text_while_a_write_is_out_is_held_then_answered(store: Store, configured: Any, tool_log: Path) -> None:
    lp = Loop(store, configured())
    lp.say('call refund_asked {"order": 5}')
    lp.wake()
    lp.say('call lookup {"order": 6}')
    lp.wake()
    assert lp.memory()["prompt"] == ['call lookup {"order": 6}'] and calls(tool_log) == []
    lp.answer("yes")
    lp.wake()
    assert [c["tool"] for c in calls(tool_log)] == ["refund_asked", "lookup"]
    [reply] = [b for b in lp.said() if "refunded order 5" in b]
    assert reply.index("refund_asked: ") < reply.index("lookup: ")  # the result first, then the held text's turn
    assert lp.memory()["prompt"] == [] and lp.memory()["state"] is None


def test_two_writes_of_one_reply_come_back_apart(store: Store, configured: Any, tool_log: Path) -> None:
    """The allowed write runs after the first finish; its result resumes the SDK's run, which
    still waits for the asked one; the model answers once both outputs are in."""
    lp = Loop(store, configured())
    lp.say('call refund {"order": 1}\ncall refund_asked {"order": 2}')
    lp.wake()
    assert [c["input"] for c in calls(tool_log)] == [{"order": 1}]
    assert lp.memory()["state"] is not None and not [b for b in lp.said() if "refund:" in b]
    lp.answer("yes")
    lp.wake()
    assert [c["input"] for c in calls(tool_log)] == [{"order": 1}, {"order": 2}]
    [reply] = [b for b in lp.said() if "refund:" in b]
    assert "refund: " in reply and "refunded order 1" in reply and "refund_asked: " in reply, reply
    assert len(_items(lp.memory()["history"], "function_call_output")) == 2


def test_a_strangers_text_makes_an_allowed_write_ask(store: Store, configured: Any, tool_log: Path) -> None:
    lp = Loop(store, configured())
    lp.say('call refund {"order": 9}', source="mail")
    lp.wake()
    [effect] = store.effects.view("ada")
    assert effect.status == "asked" and effect.why == "the conversation holds an event from mail, which is not trusted"
    assert calls(tool_log) == []


def test_the_conversation_carries_across_runs_and_is_trimmed(store: Store, configured: Any,
                                                            tool_log: Path) -> None:
    lp = Loop(store, configured(conversation_budget=1000))
    lp.say("hello")
    lp.wake()
    assert lp.said() == ["noted"]
    first = lp.memory()["history"]
    assert [i.get("role") for i in first] == ["user", "assistant"] and first[0]["content"] == "hello"
    lp.say('call lookup {"order": 3}')
    lp.wake()
    history = lp.memory()["history"]
    assert history[:2] == first and history[2]["content"] == 'call lookup {"order": 3}'
    for n in range(12):  # past the budget: the oldest exchanges go, whole
        lp.say(f"note {n} " + "x" * 100)
        lp.wake()
    history = lp.memory()["history"]
    assert len(json.dumps(history)) <= 1000 and history[0]["role"] == "user"
    assert history[-2]["content"].startswith("note 11 ") and history[0]["content"] != "hello"


def test_a_fenced_finish_writes_no_state(store: Store, configured: Any, tool_log: Path) -> None:
    """A run whose lease was taken over meanwhile: its finish is refused, so neither its
    effect nor its RunState is stored; the next run starts from the last committed state."""
    lp = Loop(store, configured())
    lp.say('call refund_asked {"order": 4}')
    gen = store.acquire("ada", "w")
    batch = store.claim("ada", "w", gen)
    stale = asyncio.run(lp.agent(Run("ada", batch, gen, store.runs.memory("ada"), lambda: True)))
    assert stale.memory[MEMORY_KEY]["state"] is not None and stale.effects
    store.release("ada", "w", gen)  # another worker takes the inbox over
    assert store.acquire("ada", "v") is not None
    assert not store.finish("ada", "w", gen, [e.id for e in batch], outcome=stale)
    assert MEMORY_KEY not in store.runs.memory("ada") and store.effects.view("ada") == []


def test_an_agent_with_tools_of_its_own_is_refused(store: Store, configured: Any, tool_log: Path) -> None:
    from agents import Agent, function_tool

    @function_tool
    def sneak(order: int) -> str:
        """Runs without the kit."""
        return "ran"

    lp = Loop(store, configured(), agent_for(lambda kit: Agent(name="x", model=openai_agents_loop.StandInModel(),
                                                               tools=[sneak])))
    lp.say('call sneak {"order": 1}')
    with pytest.raises(ValueError, match="has tools of its own"):
        lp.once()


def test_a_run_past_max_turns_ends_with_a_note(store: Store, configured: Any, tool_log: Path) -> None:
    from agents import Agent
    from agents.testing import function_call

    class Looping(openai_agents_loop.StandInModel):
        def reply(self, input: Any) -> Any:
            import uuid
            return [function_call("lookup", {"order": 1}, call_id=f"call_{uuid.uuid4().hex}")]

    lp = Loop(store, configured(), agent_for(lambda kit: Agent(name="loop", model=Looping()), max_turns=3))
    lp.say("go")
    lp.wake()
    assert lp.said() == ["(stopped after 3 model turns in one run)"]
    assert len(calls(tool_log)) == 3 and lp.memory()["state"] is None


def test_runtime_tools_when_offered_and_never_when_not(store: Store, configured: Any, tool_log: Path) -> None:
    """``stay_silent`` offered (``runtime_tools=True``): the kit applies it, the run says
    nothing. Not offered: a call to it is refused, never applied."""
    lp = Loop(store, configured(), agent_for(openai_agents_loop.errands, runtime_tools=True))
    lp.say("call stay_silent {}", inbox="quiet")
    lp.wake("quiet")
    assert lp.said("quiet") == [] and lp.memory("quiet")["history"]
    lp = Loop(store, lp.cfg)
    lp.say("call stay_silent {}", inbox="loud")
    lp.wake("loud")
    assert lp.said("loud") == ["stay_silent: the tool 'stay_silent' is not available; nothing ran"]


def test_the_stand_in_model_answers_streamed_runs_too() -> None:
    from agents import Agent, RunConfig, Runner

    async def streamed() -> Any:
        result = Runner.run_streamed(Agent(name="s", model=openai_agents_loop.StandInModel()), "hello",
                                     run_config=RunConfig(tracing_disabled=True))
        async for _ in result.stream_events():
            pass
        return result.final_output

    assert asyncio.run(streamed()) == "noted"


def test_held_text_keeps_the_newest_within_its_budget() -> None:
    assert core.held_while_waiting(["a" * 10, "b" * 10, "c" * 10], 25) == [
        "(1 earlier messages were dropped while a tool call was out)", "b" * 10, "c" * 10]
    assert core.held_while_waiting(["x" * 100], 10) == ["x" * 100]  # the newest is kept whole


def test_the_proxied_model_carries_the_runs_grant_never_a_key(configured: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    from agents import OpenAIResponsesModel

    from wakeful.agent import egress
    from wakeful.agent.kit import Toolkit

    configured()
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    granted: list[list[str]] = []
    run = Run("ada", [], 1, {}, lambda: True, lambda routes, ttl: granted.append(routes) or "grant-for-this-run")
    model = openai_agents.proxied_model(Toolkit(run), "gpt-4.1")
    assert isinstance(model, OpenAIResponsesModel) and granted == [["openai"]]
    client = model._client
    assert client.api_key == "grant-for-this-run"
    assert str(client.base_url).rstrip("/") == f"{egress.proxy_url()}/openai"


# -- worker processes -------------------------------------------------------------------------

def _start(make_cluster: Any, write_config: Any, tool_log: Path, agent: str = EXAMPLE,
           **env: str) -> Any:
    cfg = agent_env(write_config(effect_timeout=3), "http://127.0.0.1:9", tool_log)
    return make_cluster(env={**cfg, "WAKEFUL_AGENT": agent, **env})


def _executions(tool_log: Path, inbox: str) -> list[dict[str, Any]]:
    return [c for c in calls(tool_log) if c["inbox"] == inbox]


def _said(cluster: Any, inbox: str, text: str) -> list[str]:
    return cluster.wait(lambda: [r.body for r in cluster.store.outbox(inbox) if text in r.body],
                        f"{inbox}: a message with {text!r}")


def _kept(cluster: Any, inbox: str) -> dict[str, Any]:
    return cluster.store.runs.memory(inbox).get(MEMORY_KEY) or {}


def test_in_workers_ask_and_on_yes_the_write_runs_once(make_cluster: Any, write_config: Any,
                                                       tool_log: Path) -> None:
    cluster = _start(make_cluster, write_config, tool_log)
    cluster.ingest("ask", "chat", "1", {"text": 'call refund_asked {"order": 5}'})
    [asked] = cluster.wait(lambda: cluster.store.effects.view("ask"), "ask: the asked effect")
    assert asked.status == "asked" and asked.tool == "refund_asked"
    _said(cluster, "ask", "Approval needed")
    assert _executions(tool_log, "ask") == [] and _kept(cluster, "ask")["state"] is not None
    assert cluster.store.answer_approval("ask", asked.tool_use_id, "yes") == "yes"
    _said(cluster, "ask", "refunded order 5")  # the SDK's run resumed with the result, in a later run
    assert [c["input"] for c in _executions(tool_log, "ask")] == [{"order": 5}]
    cluster.wait(lambda: cluster.store.effects.view("ask")[0].status == "done", "ask: the effect done")
    cluster.ingest("ask", "chat", "2", {"text": "anything else?"})  # another wake: never twice
    cluster.wait(lambda: cluster.settled("ask", 4), "ask: every event settled")
    _said(cluster, "ask", "noted")
    assert len(_executions(tool_log, "ask")) == 1 and _kept(cluster, "ask")["state"] is None


def test_in_workers_refused_read_inline_and_the_conversation_across_runs(
        make_cluster: Any, write_config: Any, tool_log: Path) -> None:
    cluster = _start(make_cluster, write_config, tool_log)
    cluster.ingest("deny", "chat", "1", {"text": 'call wipe {"order": 1}'})
    cluster.ingest("read", "chat", "1", {"text": 'call lookup {"order": 2}'})
    _said(cluster, "deny", "wipe: the tool 'wipe' is not available; nothing ran")
    _said(cluster, "read", "lookup: ")
    assert [c["tool"] for c in calls(tool_log)] == ["lookup"] and cluster.store.effects.view("deny") == []
    cluster.ingest("read", "chat", "2", {"text": "thanks"})
    _said(cluster, "read", "noted")
    history = _kept(cluster, "read")["history"]
    assert [i.get("content") for i in history if i.get("role") == "user"] == ['call lookup {"order": 2}', "thanks"]
    assert len(_items(history, "function_call_output")) == 1


def test_in_workers_the_run_resumes_after_a_restart_between_ask_and_answer(
        make_cluster: Any, write_config: Any, tool_log: Path) -> None:
    cluster = _start(make_cluster, write_config, tool_log)
    cluster.ingest("resume", "chat", "1", {"text": 'call refund_asked {"order": 8}'})
    [asked] = cluster.wait(lambda: cluster.store.effects.view("resume"), "resume: the asked effect")
    cluster.wait(lambda: _kept(cluster, "resume").get("state"), "resume: the RunState stored")
    for proc in cluster.run_workers:
        cluster.procs.kill(proc, signal.SIGKILL)
    fresh = cluster.procs.worker("runs-new", ("wakeful.runs",))
    cluster.procs.wait_ready(fresh)
    assert cluster.store.answer_approval("resume", asked.tool_use_id, "yes") == "yes"
    _said(cluster, "resume", "refund_asked: ")
    assert len(_executions(tool_log, "resume")) == 1
    history = _kept(cluster, "resume")["history"]
    assert history[0]["content"] == 'call refund_asked {"order": 8}'
    assert [i["call_id"] for i in _items(history, "function_call")] == [asked.tool_use_id]


def test_in_workers_a_stalled_runs_state_is_never_written(make_cluster: Any, write_config: Any,
                                                          tool_log: Path, tmp_path: Path) -> None:
    """The first worker is stopped inside the model call past its lease; a second takes the
    inbox over and answers. The first, let go, proposes a write of its own and stores its
    RunState: its finish is fenced, so neither is ever written."""
    hold = tmp_path / "hold"
    hold.mkdir()
    cluster = _start(make_cluster, write_config, tool_log, "openai_agents_held:agent",
                     OPENAI_AGENTS_TEST_HOLD=str(hold))
    [first] = cluster.run_workers
    cluster.ingest("stall", "chat", "1", {"text": 'call refund {"order": 7}'})
    cluster.wait(lambda: (hold / "held").exists(), "the first worker inside its model call")
    cluster.procs.kill(first, signal.SIGSTOP)  # paused inside the model call, past its lease
    second = cluster.procs.worker("runs-b", ("wakeful.runs",))
    cluster.procs.wait_ready(second)
    _said(cluster, "stall", "refund: ")  # the second worker took over: proposed, run, resumed
    (hold / "release").touch()
    cluster.procs.kill(first, signal.SIGCONT)
    cluster.wait(lambda: "'end': 'fenced'" in first.text(), "the stalled worker's run to end fenced")
    stalled = json.loads((hold / "held").read_text())["call_id"]
    [effect] = cluster.store.effects.view("stall")  # only the second worker's was committed
    [call] = _executions(tool_log, "stall")
    assert call["id"] == effect.tool_use_id != stalled and effect.generation >= 2
    kept = _kept(cluster, "stall")
    assert kept["state"] is None and stalled not in json.dumps(kept)
    assert [i["call_id"] for i in _items(kept["history"], "function_call")] == [effect.tool_use_id]
