"""The LangGraph integration (wakeful/integrations/langgraph.py) driving the example graph
(wakeful/examples/langgraph_loop.py, LangChain chat model stand-in, offline).

In-process, on both engines, each run by hand (acquire, claim, the agent, the fenced finish,
the executor): ask -> yes -> once, read inline, allowed write, no, deny, a reply with a read
and two writes resumed as the results come, text kept while the graph waits, taint, a
fenced run's state and write never stored, the checkpoint as JSON, the trimming.

In worker processes on PostgreSQL and Redis: ask -> yes -> the write exactly once and read
back; a refused tool and a read inline with the conversation kept across runs; the run
workers killed between the ask and the answer (the graph resumes from the inbox's memory);
a worker paused past its lease while another takes over (its proposed write never runs, its
graph state is never written)."""

from __future__ import annotations

import asyncio
import json
import signal
import time
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage

import wakeful.agent.config as config_module
from agent_support import agent_env, calls
from store import Outcome, Store
from wakeful.agent import Run
from wakeful.agent.config import AgentConfig
from wakeful.agent.effects import execute_runnable
from wakeful.examples import langgraph_loop
from wakeful.agent.outage import TryLater
from wakeful.examples.langgraph_loop import ScriptedChatModel
from store.spend import Usage
from wakeful.integrations.langgraph import (MEMORY_KEY, InboxCheckpointer, _past_budget, agent_for, chat_graph,
                                           outage, state_of, usage_of)

AGENT = "wakeful.examples.langgraph_loop:agent"


# -- in-process ---------------------------------------------------------------------------


class Loop:
    def __init__(self, store: Store, cfg: AgentConfig,
                 agent: Callable[[Run], Any] = langgraph_loop.agent) -> None:
        self.store, self.cfg, self.agent, self.n = store, cfg, agent, 0

    def say(self, text: str, inbox: str = "ada", source: str = "chat") -> None:
        self.n += 1
        self.store.ingest(inbox, source, f"m{self.n}", {"text": text})

    def run(self, inbox: str, batch: list[Any], gen: int) -> Outcome:
        outcome = asyncio.run(self.agent(Run(inbox, batch, gen, self.store.runs.memory(inbox), lambda: True)))
        json.dumps(outcome.memory)  # the store keeps memory as JSON
        return outcome

    def wake(self, inbox: str = "ada") -> None:
        """Runs until nothing is claimable, executing effects after each commit."""
        for _ in range(10):
            gen = self.store.acquire(inbox, "w")
            batch = self.store.claim(inbox, "w", gen)
            if not batch:
                self.store.release(inbox, "w", gen)
                return
            assert self.store.finish(inbox, "w", gen, [e.id for e in batch], outcome=self.run(inbox, batch, gen))
            self.store.release(inbox, "w", gen)
            execute_runnable(self.store, self.cfg, inbox)
        raise AssertionError("the inbox never settled")

    def said(self, inbox: str = "ada") -> list[str]:
        return [row.body for row in self.store.outbox(inbox) if not row.body.startswith("Approval needed")]

    def asked(self, inbox: str = "ada") -> list[Any]:
        return [e for e in self.store.effects.view(inbox) if e.status == "asked"]

    def answer(self, tool_use_id: str, answer: str, inbox: str = "ada") -> None:
        assert self.store.answer_approval(inbox, tool_use_id, answer) == answer

    def messages(self, inbox: str = "ada") -> list[Any]:
        return state_of(self.store.runs.memory(inbox)).get("messages", [])


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


def test_ask_yes_runs_once_after_the_finish_and_the_graph_reads_the_result(
        store: Store, configured: Any, tool_log: Path) -> None:
    lp = Loop(store, configured())
    lp.say('call refund_asked {"order": 7}')
    lp.wake()
    [asked] = lp.asked()
    assert calls(tool_log) == [] and lp.said() == []  # nothing ran in the run, nothing to say yet
    assert [type(m).__name__ for m in lp.messages()] == ["HumanMessage", "AIMessage"]  # interrupted there
    assert lp.store.runs.memory("ada")[MEMORY_KEY]["prompt"] == []
    lp.answer(asked.tool_use_id, "yes")
    lp.wake()
    [call] = calls(tool_log)
    assert (call["tool"], call["id"], call["input"]) == ("refund_asked", asked.tool_use_id, {"order": 7})
    assert lp.said() == ["refund_asked: refunded order 7"]
    [result] = [m for m in lp.messages() if isinstance(m, ToolMessage)]
    assert result.tool_call_id == asked.tool_use_id and "refunded order 7" in result.text
    lp.say("anything else?")
    lp.wake()
    assert len(calls(tool_log)) == 1 and lp.said()[-1] == "noted"  # never twice


def test_read_inline_allowed_write_no_and_deny(store: Store, configured: Any, tool_log: Path) -> None:
    """One inbox each: a read's answer is data, so after it every write would ask."""
    lp = Loop(store, configured())
    lp.say('call lookup {"order": 1}', inbox="read")
    lp.wake("read")
    assert [c["tool"] for c in calls(tool_log)] == ["lookup"]
    [said] = lp.said("read")
    assert said.startswith("lookup: ") and '"order": 1' in said
    lp.say('call refund {"order": 2}', inbox="write")
    lp.wake("write")
    assert [c["input"] for c in calls(tool_log) if c["tool"] == "refund"] == [{"order": 2}]
    assert lp.said("write") == ["refund: refunded order 2"]
    lp.say('call refund_asked {"order": 3}', inbox="no")
    lp.wake("no")
    lp.answer(lp.asked("no")[0].tool_use_id, "no", inbox="no")
    lp.wake("no")
    assert lp.said("no") == ["refund_asked: the tool call was refused by a human; nothing ran"]
    [refused] = [m for m in lp.messages("no") if isinstance(m, ToolMessage)]
    assert refused.status == "error"
    lp.say('call wipe {"order": 4}\ncall refund {"order": "four"}\ncall launch {"order": 5}', inbox="deny")
    lp.wake("deny")
    assert [c["tool"] for c in calls(tool_log)] == ["lookup", "refund"]
    [said] = lp.said("deny")
    assert "wipe: the tool 'wipe' is not available; nothing ran" in said  # decided by the kit, not the graph
    assert "refund: invalid input for 'refund'" in said and "launch: " in said
    assert store.effects.view("deny") == []


def test_a_reply_with_a_read_and_two_writes_resumes_as_each_result_comes(
        store: Store, configured: Any, tool_log: Path) -> None:
    """The read runs once, at once; both writes are asked in the same run (one interrupt
    each); the first yes runs its write and the graph keeps waiting for the other; text
    meanwhile is kept; the model reads every result in one turn, then the kept text."""
    lp = Loop(store, configured())
    lp.say('call lookup {"order": 1}\ncall refund_asked {"order": 7}\ncall refund_asked {"order": 8}')
    lp.wake()
    asked = {e.input["order"]: e for e in lp.asked()}
    assert sorted(asked) == [7, 8] and [c["tool"] for c in calls(tool_log)] == ["lookup"]
    assert asked[7].why == "the conversation holds the output of lookup, which is not trusted"
    lp.answer(asked[7].tool_use_id, "yes")
    lp.wake()
    assert [c["input"] for c in calls(tool_log)][1:] == [{"order": 7}] and lp.said() == []  # 8 still out
    lp.say("are you there?")
    lp.wake()
    assert lp.said() == [] and lp.store.runs.memory("ada")[MEMORY_KEY]["prompt"] == ["are you there?"]
    lp.answer(asked[8].tool_use_id, "no")
    lp.wake()
    [said] = lp.said()
    lines = said.splitlines()
    assert lines[0].startswith("lookup: ") and lines[-1] == "noted"
    assert "refund_asked: refunded order 7" in lines
    assert "refund_asked: the tool call was refused by a human; nothing ran" in lines
    assert [c["tool"] for c in calls(tool_log)] == ["lookup", "refund_asked"]  # the read ran once
    kinds = [type(m).__name__ for m in lp.messages()]
    assert kinds == ["HumanMessage", "AIMessage", "ToolMessage", "ToolMessage", "ToolMessage", "AIMessage",
                     "HumanMessage", "AIMessage"]
    assert lp.store.runs.memory("ada")[MEMORY_KEY]["prompt"] == []


def test_a_strangers_text_makes_an_allowed_write_ask_naming_why(store: Store, configured: Any,
                                                                 tool_log: Path) -> None:
    lp = Loop(store, configured())
    lp.say('call refund {"order": 9}', source="mail")
    lp.wake()
    [effect] = store.effects.view("ada")
    assert effect.status == "asked" and effect.why == "the conversation holds an event from mail, which is not trusted"
    assert calls(tool_log) == []
    [human] = [m for m in lp.messages() if isinstance(m, HumanMessage)]
    assert human.text.startswith("<untrusted")  # the model read it as data


def test_a_fenced_runs_write_never_runs_and_its_graph_state_is_never_written(
        store: Store, configured: Any, tool_log: Path) -> None:
    cfg = configured()
    lp = Loop(store, cfg)
    lp.say('call refund {"order": 5}')
    gen_a = store.acquire("ada", "A")
    batch_a = store.claim("ada", "A", gen_a)
    stalled = lp.run("ada", batch_a, gen_a)  # proposes the write, its graph state in the Outcome
    [proposed] = stalled.effects
    later = int(time.time()) + store.settings.lease_ttl + 5  # A stalled past its lease: B takes over
    gen_b = store.acquire("ada", "B", now=later)
    batch_b = store.claim("ada", "B", gen_b, now=later)
    taken = lp.run("ada", batch_b, gen_b)
    assert store.finish("ada", "A", gen_a, [e.id for e in batch_a], outcome=stalled, now=later + 1) is False
    assert store.finish("ada", "B", gen_b, [e.id for e in batch_b], outcome=taken, now=later + 1)
    execute_runnable(store, cfg, "ada")
    [effect] = store.effects.view("ada")
    assert effect.tool_use_id == taken.effects[0].tool_use_id != proposed.tool_use_id
    assert [c["id"] for c in calls(tool_log)] == [effect.tool_use_id]
    [ai] = [m for m in lp.messages() if isinstance(m, AIMessage)]
    assert [c["id"] for c in ai.tool_calls] == [effect.tool_use_id]  # B's graph, not A's


def test_an_interrupt_of_the_graphs_own_fails_the_run_naming_it(store: Store, configured: Any) -> None:
    from langgraph_agents import asks_on_its_own

    lp = Loop(store, configured(), asks_on_its_own)
    lp.say("hello")
    gen = store.acquire("ada", "w")
    batch = store.claim("ada", "w", gen)
    with pytest.raises(RuntimeError, match="interrupted by 'which order\\?', which agent_for does not answer"):
        lp.run("ada", batch, gen)


def test_the_checkpoint_is_json_and_loads_as_it_was(store: Store, configured: Any, tool_log: Path) -> None:
    lp = Loop(store, configured())
    lp.say('call lookup {"order": 1}\ncall refund_asked {"order": 7}')
    lp.wake()
    stored = store.runs.memory("ada")[MEMORY_KEY]["checkpoint"]
    assert json.loads(json.dumps(stored)) == stored
    again = InboxCheckpointer(stored)
    assert again.dump() == stored
    [latest] = list(again.list(None))
    assert [w[1] for w in latest.pending_writes] == ["__interrupt__"]  # the write's, kept for the resume
    messages = state_of(store.runs.memory("ada"))["messages"]
    assert [type(m).__name__ for m in messages] == ["HumanMessage", "AIMessage", "ToolMessage"]  # the read's answer


def test_the_conversation_is_trimmed_to_the_budget_by_whole_turns(store: Store, configured: Any,
                                                                   tool_log: Path) -> None:
    lp = Loop(store, configured(conversation_budget=120))
    for text in ("first " * 10, "second " * 10, 'call lookup {"order": 1}'):
        lp.say(text)
        lp.wake()
    messages = lp.messages()
    assert isinstance(messages[0], HumanMessage) and messages[0].text == 'call lookup {"order": 1}'
    assert [type(m).__name__ for m in messages] == ["HumanMessage", "AIMessage", "ToolMessage", "AIMessage"]


def test_past_budget_keeps_whole_turns_and_always_the_last() -> None:
    turn = [HumanMessage("h" * 10), AIMessage("", tool_calls=[{"name": "t", "args": {}, "id": "1"}]),
            ToolMessage("r" * 10, tool_call_id="1"), AIMessage("a" * 10)]
    assert _past_budget(turn, 5) == []  # the last turn, whatever its size
    two = turn + [HumanMessage("x"), AIMessage("y")]
    assert _past_budget(two, 5) == turn
    assert _past_budget(two, 10_000) == []


def test_a_model_made_for_each_run_is_given_the_runs_kit(store: Store, configured: Any) -> None:
    seen: list[str] = []

    def model(kit: Any) -> ScriptedChatModel:
        seen.append(kit.run.inbox)  # where a real model's client takes the run's grant
        return ScriptedChatModel()

    lp = Loop(store, configured(), agent_for(chat_graph(model)))
    lp.say("hello", inbox="bo")
    lp.wake("bo")
    assert seen == ["bo"] and lp.said("bo") == ["noted"]


def test_a_model_clients_outage_is_try_later_and_anything_else_is_not() -> None:
    class APIStatusError(Exception):
        def __init__(self, status_code: int, headers: dict[str, str]) -> None:
            super().__init__(f"HTTP {status_code}")
            self.status_code, self.response = status_code, SimpleNamespace(headers=headers)

    class APIConnectionError(Exception):
        pass

    busy = outage(APIStatusError(529, {"retry-after": "7"}))
    assert isinstance(busy, TryLater) and busy.after == 7
    assert isinstance(outage(APIConnectionError("refused")), TryLater)
    assert isinstance(outage(TimeoutError()), TryLater)
    assert outage(APIStatusError(400, {})) is None and outage(ValueError("bad")) is None


# -- worker processes ---------------------------------------------------------------------


def _start(make_cluster: Any, write_config: Any, tool_log: Path, agent: str = AGENT,
           **env: str) -> Any:
    full = agent_env(write_config(effect_timeout=3), "http://127.0.0.1:9", tool_log)
    full.update(env, WAKEFUL_AGENT=agent)
    return make_cluster(env=full)


def _executions(tool_log: Path, inbox: str) -> list[dict[str, Any]]:
    return [c for c in calls(tool_log) if c["inbox"] == inbox]


def _said(cluster: Any, inbox: str, text: str) -> list[str]:
    return cluster.wait(lambda: [r.body for r in cluster.store.outbox(inbox) if text in r.body],
                        f"{inbox}: a message with {text!r}")


def _messages(cluster: Any, inbox: str) -> list[Any]:
    return state_of(cluster.store.runs.memory(inbox)).get("messages", [])


def test_the_graph_asks_and_on_yes_the_write_runs_once(make_cluster: Any, write_config: Any,
                                                       tool_log: Path) -> None:
    cluster = _start(make_cluster, write_config, tool_log)
    cluster.ingest("ask", "chat", "1", {"text": 'call refund_asked {"order": 5}'})
    [asked] = cluster.wait(lambda: cluster.store.effects.view("ask"), "ask: the asked effect")
    assert asked.status == "asked" and asked.tool == "refund_asked"
    _said(cluster, "ask", "Approval needed")
    assert _executions(tool_log, "ask") == []
    assert cluster.store.answer_approval("ask", asked.tool_use_id, "yes") == "yes"
    _said(cluster, "ask", "refund_asked: refunded order 5")  # the graph resumed with the result
    assert [(c["id"], c["input"]) for c in _executions(tool_log, "ask")] == [(asked.tool_use_id, {"order": 5})]
    cluster.wait(lambda: cluster.store.effects.view("ask")[0].status == "done", "ask: the effect done")
    cluster.ingest("ask", "chat", "2", {"text": "anything else?"})  # another wake: never twice
    _said(cluster, "ask", "noted")
    cluster.wait(lambda: cluster.settled("ask", 4), "ask: every event settled")
    assert len(_executions(tool_log, "ask")) == 1


def test_a_refused_tool_a_read_inline_and_the_conversation_across_runs(make_cluster: Any, write_config: Any,
                                                                       tool_log: Path) -> None:
    cluster = _start(make_cluster, write_config, tool_log)
    cluster.ingest("ada", "chat", "1", {"text": 'call lookup {"order": 1}\ncall wipe {"order": 2}'})
    [said] = _said(cluster, "ada", "wipe: the tool 'wipe' is not available; nothing ran")
    assert said.startswith("lookup: ") and '"status": "shipped"' in said
    assert [c["tool"] for c in _executions(tool_log, "ada")] == ["lookup"]
    cluster.ingest("ada", "chat", "2", {"text": "thanks"})
    _said(cluster, "ada", "noted")
    humans = [m.text for m in _messages(cluster, "ada") if isinstance(m, HumanMessage)]
    assert humans == ['call lookup {"order": 1}\ncall wipe {"order": 2}', "thanks"]
    assert cluster.store.effects.view("ada") == [] and len(_executions(tool_log, "ada")) == 1


def test_the_graph_resumes_after_the_run_workers_restart_between_ask_and_answer(
        make_cluster: Any, write_config: Any, tool_log: Path) -> None:
    cluster = _start(make_cluster, write_config, tool_log)
    cluster.ingest("resume", "chat", "1", {"text": 'call refund_asked {"order": 8}'})
    [asked] = cluster.wait(lambda: cluster.store.effects.view("resume"), "resume: the asked effect")
    _said(cluster, "resume", "Approval needed")
    for proc in cluster.run_workers:
        cluster.procs.kill(proc, signal.SIGKILL)
    fresh = cluster.procs.worker("runs-new", ("wakeful.runs",))
    cluster.procs.wait_ready(fresh)
    assert cluster.store.answer_approval("resume", asked.tool_use_id, "yes") == "yes"
    _said(cluster, "resume", "refund_asked: refunded order 8")
    assert len(_executions(tool_log, "resume")) == 1
    kinds = [type(m).__name__ for m in _messages(cluster, "resume")]
    assert kinds == ["HumanMessage", "AIMessage", "ToolMessage", "AIMessage"]


def test_a_paused_workers_write_never_runs_and_its_graph_state_is_never_written(
        make_cluster: Any, write_config: Any, tool_log: Path, tmp_path: Path) -> None:
    gate = tmp_path / "gate"
    gate.mkdir()
    cluster = _start(make_cluster, write_config, tool_log, "langgraph_agents:held",
                     WAKEFUL_TEST_LANGGRAPH_GATE=str(gate))
    [first] = cluster.run_workers
    cluster.ingest("stall", "chat", "1", {"text": 'hold\ncall refund {"order": 7}'})
    cluster.wait(lambda: (gate / "held").exists(), "the first worker's model call")
    cluster.procs.kill(first, signal.SIGSTOP)  # paused inside the model call, past its lease
    second = cluster.procs.worker("runs-b", ("wakeful.runs",))
    cluster.procs.wait_ready(second)
    _said(cluster, "stall", "refund: refunded order 7")  # the second worker took over
    (gate / "release").touch()  # the first worker's model answers: a tool call of its own
    cluster.procs.kill(first, signal.SIGCONT)
    cluster.wait(lambda: "'end': 'fenced'" in first.text(), "the paused worker's run to end fenced")
    [effect] = cluster.store.effects.view("stall")  # only the second worker's was committed
    [call] = _executions(tool_log, "stall")
    assert call["id"] == effect.tool_use_id and effect.generation >= 2
    [ai, _] = [m for m in _messages(cluster, "stall") if isinstance(m, AIMessage)]
    assert [c["id"] for c in ai.tool_calls] == [effect.tool_use_id]  # the second's graph only


def test_a_chat_models_usage_counts_cached_input_apart_and_names_its_model() -> None:
    """LangGraph's model node counts each answer's spend (kit.spent): LangChain's
    ``input_tokens`` include the cache's reads and writes, which the day's spend prices apart."""
    answer = AIMessage("ok", response_metadata={"model_name": "claude-sonnet-4-5"},
                       usage_metadata={"input_tokens": 100, "output_tokens": 20, "total_tokens": 120,
                                       "input_token_details": {"cache_read": 30, "cache_creation": 10}})
    assert usage_of(answer, "fallback") == Usage("claude-sonnet-4-5", 60, 20, 10, 30)
    assert usage_of(AIMessage("no usage reported"), "fallback") == Usage("fallback", 0, 0, 0, 0)
