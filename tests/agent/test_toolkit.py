"""The tool kit (wakeful/agent/kit.py) driving the two example loops (wakeful/examples/) on a real store
(both engines): each run by hand (acquire, claim, agent, fenced finish, the executor), so
each rule is visible; tests/agent/test_toolkit_processes.py runs them in worker processes."""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import wakeful.agent.config as config_module
from wakeful.agent import Run
from wakeful.agent.config import AgentConfig
from wakeful.agent.effects import execute_runnable
from wakeful.agent.kit import Toolkit
from agent_support import calls
from wakeful.examples import custom_loop, pydantic_ai_loop
from store import Effect, InvalidOutcome, Outcome, Store

LOOPS = {"custom": custom_loop.agent, "pydantic_ai": pydantic_ai_loop.agent}


class Loop:
    def __init__(self, store: Store, cfg: AgentConfig, agent: Callable[[Run], Outcome]) -> None:
        self.store, self.cfg, self.agent, self.n = store, cfg, agent, 0

    def say(self, text: str, inbox: str = "ada", source: str = "chat") -> None:
        self.n += 1
        self.store.ingest(inbox, source, f"m{self.n}", {"text": text})

    def wake(self, inbox: str = "ada") -> None:
        """Runs until nothing is claimable, executing effects after each commit."""
        for _ in range(10):
            gen = self.store.acquire(inbox, "w")
            batch = self.store.claim(inbox, "w", gen)
            if not batch:
                self.store.release(inbox, "w", gen)
                return
            outcome = self.agent(Run(inbox, batch, gen, self.store.runs.memory(inbox), lambda: True))
            if inspect.isawaitable(outcome):  # an async loop (Pydantic AI's), awaited as the runtime does
                outcome = asyncio.run(outcome)
            assert self.store.finish(inbox, "w", gen, [e.id for e in batch], outcome=outcome)
            self.store.release(inbox, "w", gen)
            execute_runnable(self.store, self.cfg, inbox)
        raise AssertionError("the inbox never settled")

    def said(self, inbox: str = "ada") -> list[str]:
        return [row.body for row in self.store.outbox(inbox)]

    def answer(self, answer: str, inbox: str = "ada") -> None:
        [asked] = [e for e in self.store.effects.view(inbox) if e.status == "asked"]
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


@pytest.mark.parametrize("loop", sorted(LOOPS))
def test_ask_yes_runs_once_and_the_loop_reads_the_result(loop: str, store: Store, configured: Any,
                                                         tool_log: Path) -> None:
    lp = Loop(store, configured(), LOOPS[loop])
    lp.say('call refund_asked {"order": 7}')
    lp.wake()
    assert calls(tool_log) == [] and store.effects.view("ada")[0].status == "asked"
    assert any("Approval needed" in b for b in lp.said())
    lp.answer("yes")
    lp.wake()
    assert [c["input"] for c in calls(tool_log)] == [{"order": 7}]
    assert any("refund_asked: " in b and "refunded order 7" in b for b in lp.said()), lp.said()
    lp.wake()  # nothing left: never twice
    assert len(calls(tool_log)) == 1


@pytest.mark.parametrize("loop", sorted(LOOPS))
def test_read_inline_allowed_write_after_commit_no_and_deny(loop: str, store: Store, configured: Any,
                                                            tool_log: Path) -> None:
    """One inbox each: a read's answer is data, so after it every write would ask."""
    lp = Loop(store, configured(), LOOPS[loop])
    lp.say('call lookup {"order": 1}', inbox="read")
    lp.wake("read")
    assert [c["tool"] for c in calls(tool_log)] == ["lookup"]
    assert any("lookup: " in b and '"order": 1' in b for b in lp.said("read")), lp.said("read")
    lp.say('call refund {"order": 2}', inbox="write")
    lp.wake("write")
    assert [c["input"] for c in calls(tool_log) if c["tool"] == "refund"] == [{"order": 2}]
    assert any("refunded order 2" in b for b in lp.said("write"))
    lp.say('call refund_asked {"order": 3}', inbox="no")
    lp.wake("no")
    lp.answer("no", inbox="no")
    lp.wake("no")
    assert any("refused by a human; nothing ran" in b for b in lp.said("no"))
    lp.say('call wipe {"order": 4}\ncall refund {"order": "four"}', inbox="deny")
    lp.wake("deny")
    assert [c["tool"] for c in calls(tool_log)] == ["lookup", "refund"]
    said = "\n".join(lp.said("deny"))
    # A denied tool is never offered: Pydantic AI itself refuses a call to a tool it was not given.
    refused = "Unknown tool name: 'wipe'" if loop == "pydantic_ai" else "the tool 'wipe' is not available"
    assert refused in said and "invalid input for 'refund'" in said


def test_untrusted_text_makes_an_allowed_write_ask_naming_why(store: Store, configured: Any, tool_log: Path) -> None:
    """The same taint rule as the claude loop: a stranger's mail asks for a refund, the
    stand-in model obeys, the kit asks a human first."""
    lp = Loop(store, configured(), custom_loop.agent)
    lp.say('call refund {"order": 9}', source="mail")
    lp.wake()
    [effect] = store.effects.view("ada")
    assert effect.status == "asked" and effect.why == "the conversation holds an event from mail, which is not trusted"
    assert calls(tool_log) == []
    kit = Toolkit(Run("ada", [], 9, store.runs.memory("ada")))
    assert kit.tainted == ("an event from mail",)  # kept in the inbox's memory for later runs


def test_a_read_answer_taints_unless_trusted_output(store: Store, configured: Any, tool_log: Path) -> None:
    cfg = configured()
    kit = Toolkit(Run("bo", [], 1, {}), cfg)
    read = kit.use("lookup", {"order": 1})
    assert read.status == "done" and read.content.startswith("<untrusted tool=\"lookup\"")
    assert kit.use("refund", {"order": 1}).status == "asked"  # the read's answer is in view


def test_an_effect_no_configured_tool_runs_is_refused_by_the_kit(configured: Any) -> None:
    kit = Toolkit(Run("bo", [], 1, {}), configured())
    with pytest.raises(InvalidOutcome, match=r"no configured tool can run the effect\(s\) of 'launch'"):
        kit.outcome(effects=[Effect("toolu_x", "launch", {})])
    with pytest.raises(InvalidOutcome, match="'wipe'"):  # denied: the executor would refuse it
        kit.outcome(effects=[Effect("toolu_y", "wipe", {"order": 1})])


def test_the_docs_show_the_example_loop_as_it_is() -> None:
    """docs/agent.md's complete loop is wakeful/examples/custom_loop.py's code, line for line."""
    root = Path(__file__).resolve().parents[2]
    docs = (root / "docs" / "agent.md").read_text()
    block = docs.split("A complete loop (wakeful/examples/custom_loop.py", 1)[1].split("```python", 1)[1].split("```", 1)[0]
    source = (root / "wakeful" / "examples" / "custom_loop.py").read_text().splitlines()
    missing = [line for line in block.splitlines() if line.strip() and line not in source]
    assert not missing, missing


@pytest.mark.parametrize("loop", sorted(LOOPS))
def test_an_asked_write_goes_to_the_named_approver_and_the_answer_is_an_unwrapped_reply(
        loop: str, store: Store, configured: Any, tool_log: Path) -> None:
    """Issue 55: the kit loops sent the link to the customer. ``[agent] approver`` (and a
    tool's own) routes the request, as for the claude loop (wakeful/agent/core.py); the loop's
    answer to the person is a reply, with no <untrusted> wrapper of the model's echoing."""
    tools = {"refund_asked": {"call": "agent_tools:refund", "policy": "ask", "effect": "write"},
             "refund_billing": {"call": "agent_tools:refund", "policy": "ask", "effect": "write",
                                "approver": "inbox:billing"},
             "lookup": {"call": "agent_tools:lookup", "policy": "allow", "effect": "read"}}
    lp = Loop(store, configured(tools, approver="inbox:ops"), LOOPS[loop])
    lp.say('call refund_asked {"order": 1}\ncall refund_billing {"order": 2}', inbox="cust")
    lp.wake("cust")
    assert sorted(a.approver for a in store.approvals.view("cust")) == ["inbox:billing", "inbox:ops"]
    assert not any("[[wakeful-approval-link" in b for b in lp.said("cust"))  # no link to the customer
    lp.say('call lookup {"order": 3}', inbox="reader")
    lp.wake("reader")
    [row] = store.outbox("reader")
    assert row.kind == "reply" and "lookup: " in row.body and "<untrusted" not in row.body, row.body
