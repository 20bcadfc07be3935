"""Pydantic AI on wakeful's tool kit (wakeful/integrations/pydantic_ai.py, the example
wakeful/examples/pydantic_ai_loop.py), driven offline by Pydantic AI's own test model
(``FunctionModel`` around the example's ``scripted_model``).

On a real store (both engines), each run by hand (acquire, claim, the async agent, the
fenced finish, the executor): ask -> yes -> the write runs once and Pydantic AI reads its
result back from ``DeferredToolResults``; read inline; an allowed write after the commit; a
human's no; deny, schema and non-object arguments refused; text held while a write is out;
two writes of one reply coming back apart (the first result kept, in the example's format);
taint; the history across runs and its trim under the budget (whole exchanges, the system
prompt kept); a fenced finish writes no state; an Agent with tools of its own refused;
max_model_calls; runtime tools; the model's words with the call; spend counted per model
call; a lost lease stops the run before the model is called; an outage is TryLater. In
worker processes on PostgreSQL and Redis: the run workers restarted between ask and answer;
a worker stopped inside the model call past its lease, its run fenced and its history never
written.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from pydantic_ai import Agent
from pydantic_ai.messages import (
    ModelMessage,
    ModelMessagesTypeAdapter,
    ModelRequest,
    ModelResponse,
    SystemPromptPart,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.usage import RequestUsage

import wakeful.agent.config as config_module
from agent_support import agent_env, calls
from store import Outcome, Store
from wakeful.agent import LeaseLost, Run, TryLater, core
from wakeful.agent.config import AgentConfig
from wakeful.agent.effects import execute_runnable
from wakeful.examples import pydantic_ai_loop
from wakeful.examples.pydantic_ai_loop import scripted_model
from wakeful.integrations import pydantic_ai as integration
from wakeful.integrations.pydantic_ai import MEMORY_KEY, agent_for

AgentFn = Callable[[Run], Any]
WAITING = f"{MEMORY_KEY}_waiting"
EXAMPLE = "wakeful.examples.pydantic_ai_loop:agent"


# -- by hand, on a real store ---------------------------------------------------------------

class Loop:
    """The runtime's steps around one async agent, in this process."""

    def __init__(self, store: Store, cfg: AgentConfig, agent: AgentFn = pydantic_ai_loop.agent) -> None:
        self.store, self.cfg, self.agent, self.n = store, cfg, agent, 0

    def say(self, text: str, inbox: str = "ada", source: str = "chat") -> None:
        self.n += 1
        self.store.ingest(inbox, source, f"m{self.n}", {"text": text})

    def once(self, inbox: str = "ada", **run: Any) -> Outcome | None:
        """One run: what the agent returned (its finish committed), None when nothing was claimable."""
        gen = self.store.acquire(inbox, "w")
        batch = self.store.claim(inbox, "w", gen)
        if not batch:
            self.store.release(inbox, "w", gen)
            return None
        outcome = asyncio.run(self.agent(Run(inbox, batch, gen, self.store.runs.memory(inbox), lambda: True, **run)))
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
        return self.store.runs.memory(inbox)

    def history(self, inbox: str = "ada") -> list[ModelMessage]:
        return ModelMessagesTypeAdapter.validate_python(self.memory(inbox).get(MEMORY_KEY) or [])

    def waiting(self, inbox: str = "ada") -> dict[str, Any]:
        return self.memory(inbox).get(WAITING) or {}

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


def _parts(history: list[ModelMessage], kind: type) -> list[Any]:
    return [p for m in history for p in m.parts if isinstance(p, kind)]


def _prompts(history: list[ModelMessage]) -> list[str]:
    return [str(p.content) for p in _parts(history, UserPromptPart)]


def test_ask_yes_runs_once_and_pydantic_ai_reads_the_result(store: Store, configured: Any, tool_log: Path) -> None:
    lp = Loop(store, configured())
    lp.say('call refund_asked {"order": 7}')
    lp.wake()
    [asked] = store.effects.view("ada")
    assert calls(tool_log) == [] and asked.status == "asked"
    assert any("Approval needed" in b for b in lp.said())
    [call] = _parts(lp.history(), ToolCallPart)  # the run ended waiting: the call has no return yet
    assert call.tool_call_id == asked.tool_use_id and _parts(lp.history(), ToolReturnPart) == []
    lp.answer("yes")
    lp.wake()
    assert [c["input"] for c in calls(tool_log)] == [{"order": 7}]
    assert any("refund_asked: " in b and "refunded order 7" in b for b in lp.said()), lp.said()
    [returned] = _parts(lp.history(), ToolReturnPart)
    assert returned.tool_call_id == asked.tool_use_id and "refunded order 7" in str(returned.content)
    assert lp.waiting() == {"results": {}, "prompt": []}
    lp.say("anything else?")
    lp.wake()  # another wake: never twice
    assert len(calls(tool_log)) == 1 and lp.said()[-1] == "noted"


def test_read_inline_allowed_write_after_commit_and_no(store: Store, configured: Any, tool_log: Path) -> None:
    """One inbox each: a read's answer is data, so after it every write would ask."""
    lp = Loop(store, configured())
    lp.say('call lookup {"order": 1}', inbox="read")
    lp.wake("read")
    assert [c["tool"] for c in calls(tool_log)] == ["lookup"]
    assert any(b.startswith("lookup: ") and '"order": 1' in b for b in lp.said("read")), lp.said("read")
    assert store.effects.view("read") == []  # a read never waits
    lp.say('call refund {"order": 2}', inbox="write")
    lp.wake("write")
    assert [c["input"] for c in calls(tool_log) if c["tool"] == "refund"] == [{"order": 2}]
    assert any("refund: " in b and "refunded order 2" in b for b in lp.said("write"))
    lp.say('call refund_asked {"order": 3}', inbox="no")
    lp.wake("no")
    lp.answer("no", inbox="no")
    lp.wake("no")
    assert any("refund_asked: the tool call was refused by a human; nothing ran" in b for b in lp.said("no"))
    [refused] = _parts(lp.history("no"), ToolReturnPart)
    assert refused.outcome == "failed"  # the model reads the no as a failed call
    assert [c["tool"] for c in calls(tool_log)] == ["lookup", "refund"]


def test_deny_schema_and_non_object_arguments_are_refused(store: Store, configured: Any, tool_log: Path) -> None:
    lp = Loop(store, configured())
    lp.say('call wipe {"order": 4}\ncall refund {"order": "four"}\ncall refund {four}')
    lp.wake()
    assert calls(tool_log) == [] and store.effects.view("ada") == []
    [said] = lp.said()
    # A denied tool is never offered: Pydantic AI itself refuses a call to a tool it was not given.
    assert "wipe: Unknown tool name: 'wipe'" in said
    assert said.count("refund: invalid input for 'refund'") == 2, said  # also the arguments that are no JSON object


def test_text_while_a_write_is_out_is_held_then_answered(store: Store, configured: Any, tool_log: Path) -> None:
    lp = Loop(store, configured())
    lp.say('call refund_asked {"order": 5}')
    lp.wake()
    lp.say('call lookup {"order": 6}')
    lp.wake()
    assert lp.waiting()["prompt"] == ['call lookup {"order": 6}'] and calls(tool_log) == []
    assert _prompts(lp.history()) == ['call refund_asked {"order": 5}']  # not sent while the call waits
    lp.answer("yes")
    lp.wake()
    assert [c["tool"] for c in calls(tool_log)] == ["refund_asked", "lookup"]
    [reply] = [b for b in lp.said() if "refunded order 5" in b]
    assert reply.index("refund_asked: ") < reply.index("lookup: ")  # the result first, then the held text's turn
    assert lp.waiting() == {"results": {}, "prompt": []}
    assert _prompts(lp.history()) == ['call refund_asked {"order": 5}', 'call lookup {"order": 6}']


def test_two_writes_of_one_reply_come_back_apart(store: Store, configured: Any, tool_log: Path) -> None:
    """The allowed write runs after the first finish; its result is kept (in the format the
    example stored: the content of a success) until the asked one is back too, then both go
    to Pydantic AI at once and the model answers."""
    lp = Loop(store, configured())
    lp.say('call refund {"order": 1}\ncall refund_asked {"order": 2}')
    lp.wake()
    assert [c["input"] for c in calls(tool_log)] == [{"order": 1}]
    [first] = [e for e in store.effects.view("ada") if e.tool == "refund"]
    kept = lp.waiting()["results"]
    assert list(kept) == [first.tool_use_id] and isinstance(kept[first.tool_use_id], str)
    assert "refunded order 1" in kept[first.tool_use_id] and not [b for b in lp.said() if "refund:" in b]
    lp.answer("no")
    lp.wake()
    [reply] = [b for b in lp.said() if "refund:" in b]
    assert "refunded order 1" in reply and "refund_asked: the tool call was refused by a human" in reply, reply
    assert len(_parts(lp.history(), ToolReturnPart)) == 2 and lp.waiting()["results"] == {}


def test_results_kept_by_the_earlier_example_are_read(store: Store, configured: Any, tool_log: Path) -> None:
    """Memory as wakeful/examples/pydantic_ai_loop.py stored it before the integration (the
    same keys; a kept result a bare string) and as it stores it now (an error a dict)."""
    assert integration._Back.read("refunded") == integration._Back("refunded", False)
    assert integration._Back.read({"content": "no", "is_error": True}) == integration._Back("no", True)
    assert integration._Back("no", True).stored() == {"content": "no", "is_error": True}
    assert integration._Back("yes", False).stored() == "yes"


def test_a_strangers_text_makes_an_allowed_write_ask(store: Store, configured: Any, tool_log: Path) -> None:
    lp = Loop(store, configured())
    lp.say('call refund {"order": 9}', source="mail")
    lp.wake()
    [effect] = store.effects.view("ada")
    assert effect.status == "asked" and effect.why == "the conversation holds an event from mail, which is not trusted"
    assert calls(tool_log) == []


def test_the_history_carries_across_runs_and_is_trimmed_under_the_budget(store: Store, configured: Any,
                                                                         tool_log: Path) -> None:
    budget = 6000
    cfg = configured(conversation_budget=budget)
    lp = Loop(store, cfg, agent_for(lambda kit: Agent(FunctionModel(scripted_model), system_prompt="You run errands.")))
    lp.say("hello")
    lp.wake()
    assert lp.said() == ["noted"] and _prompts(lp.history()) == ["hello"]
    lp.say('call lookup {"order": 3}')
    lp.wake()
    assert _prompts(lp.history()) == ["hello", 'call lookup {"order": 3}']
    for n in range(12):  # past the budget: the oldest exchanges go, whole
        lp.say(f"note {n} " + "x" * 100 if n % 3 != 2 else f'call lookup {{"order": {n}}}')
        lp.wake()
        stored = lp.memory()[MEMORY_KEY]
        assert len(json.dumps(stored)) <= budget
    history = lp.history()
    prompts = _prompts(history)
    assert "hello" not in prompts and prompts[-1] == 'call lookup {"order": 11}'
    first = history[0]
    assert isinstance(first, ModelRequest) and [type(p) for p in first.parts][:2] == [SystemPromptPart, UserPromptPart]
    assert [p.content for p in _parts(history, SystemPromptPart)] == ["You run errands."]  # moved, not lost
    calls_kept = {p.tool_call_id for p in _parts(history, ToolCallPart)}
    returns_kept = {p.tool_call_id for p in _parts(history, ToolReturnPart)}
    assert calls_kept and calls_kept == returns_kept  # no call without its return, none the other way


def test_the_instructions_are_stored_once_not_with_every_request(store: Store, configured: Any,
                                                                 tool_log: Path) -> None:
    long = ("Be brief. " * 60).strip()
    seen: list[str | None] = []

    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        seen.append(info.instructions)
        return scripted_model(messages, info)

    lp = Loop(store, configured(), agent_for(lambda kit: Agent(FunctionModel(model), instructions=long)))
    for text in ("hello", 'call lookup {"order": 1}', "thanks"):
        lp.say(text)
        lp.wake()
    assert len(seen) == 4 and all(i is not None and i.startswith(long) and "<untrusted" in i for i in seen)
    assert json.dumps(lp.memory()[MEMORY_KEY]).count(long) == 1  # on the latest request only


def test_a_long_wait_keeps_the_newest_text_within_half_the_budget(store: Store, configured: Any,
                                                                  tool_log: Path) -> None:
    lp = Loop(store, configured(conversation_budget=2000))
    lp.say('call refund_asked {"order": 5}')
    lp.wake()
    for n in range(6):
        lp.say(f"later {n} " + "y" * 300)
        lp.wake()
    prompt = lp.waiting()["prompt"]
    assert prompt[0].startswith("(3 earlier messages were dropped") and prompt[-1].startswith("later 5 ")
    assert sum(len(t) for t in prompt[1:]) <= 1000


def test_a_fenced_finish_writes_no_state(store: Store, configured: Any, tool_log: Path) -> None:
    """A run whose lease was taken over meanwhile: its finish is refused, so neither its
    effect nor its history is stored; the next run starts from the last committed state."""
    lp = Loop(store, configured())
    lp.say('call refund_asked {"order": 4}')
    gen = store.acquire("ada", "w")
    batch = store.claim("ada", "w", gen)
    stale = asyncio.run(lp.agent(Run("ada", batch, gen, store.runs.memory("ada"), lambda: True)))
    assert stale.memory[MEMORY_KEY] and stale.effects
    store.release("ada", "w", gen)  # another worker takes the inbox over
    assert store.acquire("ada", "v") is not None
    assert not store.finish("ada", "w", gen, [e.id for e in batch], outcome=stale)
    memory = store.runs.memory("ada")
    assert MEMORY_KEY not in memory and WAITING not in memory and store.effects.view("ada") == []


@pytest.mark.parametrize("own", ["tools", "toolsets", "native tools"])
def test_an_agent_with_tools_of_its_own_is_refused(own: str, store: Store, configured: Any, tool_log: Path) -> None:
    from pydantic_ai.capabilities import WebSearch
    from pydantic_ai.toolsets import FunctionToolset

    def sneak(order: int) -> str:
        """Runs without the kit."""
        return "ran"

    extra: dict[str, Any] = {"tools": {"tools": [sneak]}, "toolsets": {"toolsets": [FunctionToolset([sneak])]},
                             "native tools": {"capabilities": [WebSearch()]}}[own]
    lp = Loop(store, configured(), agent_for(lambda kit: Agent(FunctionModel(scripted_model), **extra)))
    lp.say('call sneak {"order": 1}')
    with pytest.raises(ValueError, match=f"has {own} of its own"):
        lp.once()
    assert store.runs.memory("ada") == {} and store.effects.view("ada") == []


def test_a_run_past_max_model_calls_ends_with_a_note(store: Store, configured: Any, tool_log: Path) -> None:
    def looping(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        return ModelResponse(parts=[ToolCallPart("lookup", {"order": 1})])

    lp = Loop(store, configured(), agent_for(lambda kit: Agent(FunctionModel(looping)), max_model_calls=3))
    lp.say("go")
    lp.wake()
    assert lp.said() == ["(stopped after 3 model calls in one run)"]
    assert len(calls(tool_log)) == 3 and lp.waiting() == {"results": {}, "prompt": []}
    lp.say("again")  # the history goes on from the note
    lp.wake()
    assert lp.said()[-1] == "(stopped after 3 model calls in one run)" and len(calls(tool_log)) == 6


def test_runtime_tools_when_offered_and_never_when_not(store: Store, configured: Any, tool_log: Path) -> None:
    lp = Loop(store, configured(), agent_for(pydantic_ai_loop.errands, runtime_tools=True))
    lp.say("call stay_silent {}", inbox="quiet")
    lp.wake("quiet")
    assert lp.said("quiet") == [] and _prompts(lp.history("quiet")) == ["call stay_silent {}"]
    lp = Loop(store, lp.cfg)
    lp.say("call stay_silent {}", inbox="loud")
    lp.wake("loud")
    [said] = lp.said("loud")
    assert said.startswith("stay_silent: Unknown tool name: 'stay_silent'")


def test_the_models_words_go_with_the_approval_request(store: Store, configured: Any, tool_log: Path) -> None:
    def wordy(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        if isinstance(messages[-1], ModelRequest) and _parts([messages[-1]], ToolReturnPart):
            return scripted_model(messages, info)
        return ModelResponse(parts=[TextPart("I will refund order 3."), ToolCallPart("refund_asked", {"order": 3})])

    lp = Loop(store, configured(), agent_for(lambda kit: Agent(FunctionModel(wordy))))
    lp.say("please refund 3")
    lp.wake()
    [asked] = store.effects.view("ada")
    assert asked.words == "I will refund order 3."


def test_spend_is_counted_after_each_model_call(store: Store, configured: Any, tool_log: Path) -> None:
    def cached(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        usage = RequestUsage(input_tokens=100, cache_read_tokens=30, cache_write_tokens=20, output_tokens=5)
        if isinstance(messages[-1], ModelRequest) and _parts([messages[-1]], ToolReturnPart):
            return ModelResponse(parts=[TextPart("done")], usage=usage)
        return ModelResponse(parts=[ToolCallPart("lookup", {"order": 1})], usage=usage)

    cfg = configured()
    lp = Loop(store, cfg, agent_for(lambda kit: Agent(FunctionModel(cached))))
    spent: list[Any] = []
    lp.say("go")
    lp.once(_count_spend=lambda budget, usage: spent.append((budget, usage)))
    assert lp.said() == ["done"]
    assert [(u.model, u.input_tokens, u.output_tokens, u.cache_write_tokens, u.cache_read_tokens)
            for _, u in spent] == [("function:cached:", 50, 5, 20, 30)] * 2  # one per model call
    assert all(budget is cfg.budget for budget, _ in spent)


def test_a_lost_lease_stops_the_run_before_the_model_is_called(store: Store, configured: Any,
                                                               tool_log: Path) -> None:
    asked: list[int] = []

    def counted(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        asked.append(1)
        return ModelResponse(parts=[TextPart("paid for")])

    configured()
    bot = agent_for(lambda kit: Agent(FunctionModel(counted)))
    store.ingest("ada", "chat", "1", {"text": "hello"})
    gen = store.acquire("ada", "w")
    batch = store.claim("ada", "w", gen)
    with pytest.raises(LeaseLost):
        asyncio.run(bot(Run("ada", batch, gen, {}, lambda: False)))
    assert asked == []


@pytest.mark.parametrize(("status", "later"), [(429, True), (503, True), (400, False)])
def test_a_model_api_that_is_away_is_an_outage(status: int, later: bool, store: Store, configured: Any,
                                                tool_log: Path) -> None:
    from pydantic_ai.exceptions import ModelHTTPError

    def away(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        raise ModelHTTPError(status, "m1", headers={"retry-after": "7"})

    configured()
    bot = agent_for(lambda kit: Agent(FunctionModel(away)))
    store.ingest("ada", "chat", "1", {"text": "hello"})
    gen = store.acquire("ada", "w")
    batch = store.claim("ada", "w", gen)
    with pytest.raises(TryLater if later else ModelHTTPError) as raised:
        asyncio.run(bot(Run("ada", batch, gen, {}, lambda: True)))
    if later:
        assert raised.value.seconds == 7


def test_the_example_agent_pickles_for_a_run_apart(store: Store, configured: Any, tool_log: Path) -> None:
    """A retried batch may run in a process of its own (tasks/isolation.py): the agent is sent
    pickled, which a module-level ``build`` allows."""
    import pickle

    copy = pickle.loads(pickle.dumps(pydantic_ai_loop.agent))
    assert copy == pydantic_ai_loop.agent
    lp = Loop(store, configured(), copy)
    lp.say('call lookup {"order": 2}')
    lp.wake()
    assert [c["input"] for c in calls(tool_log)] == [{"order": 2}] and lp.said()[0].startswith("lookup: ")


def test_held_and_trimmed_helpers() -> None:
    assert core.held_while_waiting(["a" * 10, "b" * 10, "c" * 10], 25) == [
        "(1 earlier messages were dropped while a tool call was out)", "b" * 10, "c" * 10]
    assert core.held_while_waiting(["x" * 100], 10) == ["x" * 100]  # the newest is kept whole
    big = [ModelRequest(parts=[UserPromptPart("q" * 500)]), ModelResponse(parts=[TextPart("a" * 500)])]
    assert integration._trimmed(big, 10) == big  # the latest exchange, whatever its size


def test_the_proxied_models_carry_the_runs_grant_never_a_key(configured: Any,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    from pydantic_ai.models.anthropic import AnthropicModel
    from pydantic_ai.models.openai import OpenAIChatModel, OpenAIResponsesModel

    from wakeful.agent import egress
    from wakeful.agent.kit import Toolkit

    configured()
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    granted: list[list[str]] = []
    run = Run("ada", [], 1, {}, lambda: True, lambda routes, ttl: granted.append(routes) or "grant-for-this-run")
    kit = Toolkit(run)
    model = integration.proxied_model(kit, "anthropic:claude-sonnet-4-5")
    assert isinstance(model, AnthropicModel) and model.model_name == "claude-sonnet-4-5"
    client = model.client
    assert client.api_key == "grant-for-this-run"
    assert str(client.base_url).rstrip("/") == f"{egress.proxy_url()}/anthropic"
    chat = integration.proxied_model(kit, "openai:gpt-4.1")
    responses = integration.proxied_model(kit, "openai-responses:gpt-4.1", route="oai")
    assert isinstance(chat, OpenAIChatModel) and isinstance(responses, OpenAIResponsesModel)
    assert chat.client.api_key == "grant-for-this-run"
    assert str(responses.client.base_url).rstrip("/") == f"{egress.proxy_url()}/oai"
    assert granted == [["anthropic"], ["openai"], ["oai"]]
    with pytest.raises(ValueError, match="must be anthropic:NAME"):
        integration.proxied_model(kit, "claude-sonnet-4-5")


# -- worker processes -------------------------------------------------------------------------

async def _held_model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    """The example's model, but its first tool-calling reply of the whole cluster waits for
    the test (``PYDANTIC_AI_TEST_HOLD`` names a directory: ``held`` is written there with the
    call's id, then ``release`` is waited for); every later reply, in any process, goes at once."""
    response = scripted_model(messages, info)
    hold = Path(os.environ["PYDANTIC_AI_TEST_HOLD"])
    if response.tool_calls and _first(hold / "held", json.dumps({"call_id": response.tool_calls[0].tool_call_id})):
        while not (hold / "release").exists():
            await asyncio.sleep(0.05)
    return response


def _first(path: Path, text: str) -> bool:
    """Write ``path`` unless it exists (atomically, across processes): True for the writer."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL)
    except FileExistsError:
        return False
    with os.fdopen(fd, "w") as f:
        f.write(text)
    return True


# WAKEFUL_AGENT=test_pydantic_ai_loop:held_agent (tests/agent is on the workers' PYTHONPATH).
held_agent = agent_for(lambda kit: Agent(FunctionModel(_held_model)))


def _start(make_cluster: Any, write_config: Any, tool_log: Path, agent: str = EXAMPLE, **env: str) -> Any:
    cfg = agent_env(write_config(effect_timeout=3), "http://127.0.0.1:9", tool_log)
    return make_cluster(env={**cfg, "WAKEFUL_AGENT": agent, **env})


def _executions(tool_log: Path, inbox: str) -> list[dict[str, Any]]:
    return [c for c in calls(tool_log) if c["inbox"] == inbox]


def _said(cluster: Any, inbox: str, text: str) -> list[str]:
    return cluster.wait(lambda: [r.body for r in cluster.store.outbox(inbox) if text in r.body],
                        f"{inbox}: a message with {text!r}")


def _history(cluster: Any, inbox: str) -> list[ModelMessage]:
    return ModelMessagesTypeAdapter.validate_python(cluster.store.runs.memory(inbox).get(MEMORY_KEY) or [])


def test_in_workers_the_history_resumes_after_a_restart_between_ask_and_answer(
        make_cluster: Any, write_config: Any, tool_log: Path) -> None:
    cluster = _start(make_cluster, write_config, tool_log)
    cluster.ingest("resume", "chat", "1", {"text": 'call refund_asked {"order": 8}'})
    [asked] = cluster.wait(lambda: cluster.store.effects.view("resume"), "resume: the asked effect")
    cluster.wait(lambda: _parts(_history(cluster, "resume"), ToolCallPart), "resume: the history stored")
    for proc in cluster.run_workers:
        cluster.procs.kill(proc, signal.SIGKILL)
    fresh = cluster.procs.worker("runs-new", ("wakeful.runs",))
    cluster.procs.wait_ready(fresh)
    assert cluster.store.answer_approval("resume", asked.tool_use_id, "yes") == "yes"
    _said(cluster, "resume", "refund_asked: ")
    assert len(_executions(tool_log, "resume")) == 1
    history = _history(cluster, "resume")
    assert _prompts(history) == ['call refund_asked {"order": 8}']
    assert [p.tool_call_id for p in _parts(history, ToolReturnPart)] == [asked.tool_use_id]


def test_in_workers_a_stalled_runs_history_is_never_written(make_cluster: Any, write_config: Any,
                                                            tool_log: Path, tmp_path: Path) -> None:
    """The first worker is stopped inside the model call past its lease; a second takes the
    inbox over and answers. The first, let go, proposes a write of its own and stores its
    history: its finish is fenced, so neither is ever written."""
    hold = tmp_path / "hold"
    hold.mkdir()
    cluster = _start(make_cluster, write_config, tool_log, "test_pydantic_ai_loop:held_agent",
                     PYDANTIC_AI_TEST_HOLD=str(hold))
    [first] = cluster.run_workers
    cluster.ingest("stall", "chat", "1", {"text": 'call refund {"order": 7}'})
    cluster.wait(lambda: (hold / "held").exists(), "the first worker inside its model call")
    cluster.procs.kill(first, signal.SIGSTOP)  # paused inside the model call, past its lease
    second = cluster.procs.worker("runs-b", ("wakeful.runs",))
    cluster.procs.wait_ready(second)
    _said(cluster, "stall", "refund: ")  # the second worker took over: proposed, run, read back
    (hold / "release").touch()
    cluster.procs.kill(first, signal.SIGCONT)
    cluster.wait(lambda: "'end': 'fenced'" in first.text(), "the stalled worker's run to end fenced")
    stalled = json.loads((hold / "held").read_text())["call_id"]
    [effect] = cluster.store.effects.view("stall")  # only the second worker's was committed
    [call] = _executions(tool_log, "stall")
    assert call["id"] == effect.tool_use_id != stalled and effect.generation >= 2
    memory = cluster.store.runs.memory("stall")
    assert stalled not in json.dumps(memory)
    assert [p.tool_call_id for p in _parts(_history(cluster, "stall"), ToolCallPart)] == [effect.tool_use_id]
