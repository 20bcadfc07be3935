"""The tool kit: the built-in claude loop's guarantees for an agent loop of your own.

An agent is any callable ``agent(run: Run) -> Outcome`` (``WAKEFUL_AGENT=module:callable``).
Built on a :class:`Toolkit`, its tool calls get what the claude agent's get, by the same
code (wakeful/agent/policy.py, wakeful/agent/tools.py, wakeful/agent/effects.py):

- the tools are the ``[tools.*]`` (and every other source's) tables of the same
  ``WAKEFUL_AGENT_CONFIG`` TOML; ``offered()`` lists them for your model;
- ``use(name, input)`` decides the call against the policy before anything runs: refused
  (unknown, denied, an input the store cannot hold or its schema refuses, past ``[limits]``),
  run inline (an allowed read: the answer now), or proposed as an effect (a write: committed
  by this run's fenced finish and run once after it by the executor; ``ask``, or any write
  while untrusted text is in view, waits for a human's yes first); the claude loop's
  ``stay_silent`` and ``mark_urgent`` by the same rule (refused when a stranger's text could
  be behind them), applied to the messages by ``outcome``;
- taint: an event of a source ``trusted_sources`` does not name, and a tool's answer not
  declared ``trusted_output``, are data (``text(event)`` and the answers come wrapped as
  such) and make every later write wait for a yes. The kit records it where the text enters
  (an untrusted event taints as soon as the kit reads the batch, whether or not your loop
  shows it to a model) and keeps it in the inbox's memory for as long as the kit's state;
- in a later run, ``results`` holds what came back for earlier uses: an effect's result
  (source ``tool``) or the human's answer (source ``approval``: yes, the effect runs after
  this run's finish; no or expired, it never runs);
- budgets: call ``model_call()`` (``amodel_call()`` in an async loop) before each model
  call and ``spent(usage)`` after it. Once the day's ``[budget]`` is spent it raises
  ``BudgetReached`` (the store tells the inbox's user, once a day): make no call, and end
  the run with ``kit.stopped(reached)``. Nothing that run proposed, said or stored stands
  (your state stays as the run found it); the events and results it read come again, in
  ``events`` and ``results``, in the run a timer starts when the next day's budget does;
- ``outcome(...)`` returns your Outcome with the proposed effects, the answers read (which
  the finish settles) and the kit's state in memory. A fenced run's Outcome is refused by
  the store, so nothing it proposed ever runs.

An effect whose tool no configured tool can run is refused as ``InvalidOutcome``: here, by
``outcome()``, and by the runtime before the finish for any agent (tasks/run_inbox.py calls
:func:`agent.effects.refuse_unrunnable`), so nothing of that run is stored and the run
fails with the reason in its run log. See docs/agent.md for a complete loop and one on
Pydantic AI (wakeful/examples/).
"""

from __future__ import annotations

import asyncio
import json
import logging
import uuid
from collections.abc import Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import asdict, dataclass
from typing import Any

from store import Effect, Event, Message, Outcome
from store.effects import idempotency_key
from store.spend import Usage

from wakeful.agent import core, policy, tools, wakes
from wakeful.agent.config import RUN_GRANT_TTL, AgentConfig, current
from wakeful.agent.conversation import Conversation
from wakeful.agent.effects import refuse_unrunnable
from wakeful.agent.run import BudgetReached, Run
from wakeful.agent.tool import Tool, ToolCall

__all__ = ["ToolResult", "ToolUse", "Toolkit"]

log = logging.getLogger("wakeful.agent.kit")
MEMORY_KEY = "toolkit"


@dataclass(frozen=True)
class ToolUse:
    """What became of one tool call, at once."""

    tool_use_id: str
    tool: str
    # "refused" (nothing ran; ``content`` says why), "done" / "error" (an allowed read ran
    # inline; ``content`` is its answer as the model should read it; "done" for a runtime
    # tool the policy let stand), "proposed" (a write, run after this run's finish), "asked"
    # (a write waiting for a human's yes)
    status: str
    content: str = ""
    is_error: bool = False
    why: str = ""  # for "asked" when the policy alone would not ask: what untrusted text was in view

    @property
    def waiting(self) -> bool:
        """Its result comes in a later run (``Toolkit.results``)."""
        return self.status in ("proposed", "asked")


@dataclass(frozen=True)
class ToolResult:
    """What came back in this run for a tool use of an earlier run."""

    tool_use_id: str
    tool: str
    # "done" / "error" (the executor ran it), "approved" (a human said yes: it runs after
    # this run's finish, its result comes later), "refused" / "expired" (it never runs)
    status: str
    content: str
    is_error: bool

    @property
    def final(self) -> bool:
        return self.status != "approved"


class Toolkit:
    """One run's tool calls under the config's policy. Make one per run, first thing."""

    def __init__(self, run: Run, config: AgentConfig | None = None, memory_key: str = MEMORY_KEY) -> None:
        cfg = config if config is not None else current()
        assert cfg is not None
        self.run, self.config, self.memory_key = run, cfg, memory_key
        state = run.memory.get(memory_key) or {}
        # tool use id -> {"tool": name, "status": "asked" | "proposed"}: what earlier runs wait for
        self._pending: dict[str, dict[str, str]] = {k: dict(v) for k, v in (state.get("pending") or {}).items()}
        self._taint = Conversation(tainted=list(state.get("tainted") or []))  # its taint rule, reused
        self._effects: list[Effect] = []
        self._answered: list[str] = []
        self._used: set[str] = set()
        self._count = policy.RunCount()  # this run's tool uses and approvals, against [limits]
        self._silent = self._urgent = False  # stay_silent / mark_urgent, as the policy let them stand
        self._owner_waiting = False  # the owner's words are in this run's batch: an answer is owed
        # What a run the budget stopped had read, given again to this one (model_call).
        carried = state.get("carried") or {}
        self.results: list[ToolResult] = [ToolResult(**r) for r in carried.get("results") or []]
        # the batch but for results and answers, oldest first
        self.events: list[Event] = [Event(**e) for e in carried.get("events") or []]
        self._wakes = wakes.RunWakes.of(cfg, run)  # schedule_wake / cancel_wake: Outcome timers
        for event in self.events:
            self._read_event(event)
        self._read_batch()

    # -- what came in ---------------------------------------------------------------------

    def _read_batch(self) -> None:
        for event in self.run.events:
            payload = event.payload or {}
            waited = self._pending.get(event.source_id)
            if event.source == "tool" and waited is not None:
                self._result(event.source_id, str(payload.get("tool") or waited["tool"]),
                             str(payload.get("content", "")), bool(payload.get("is_error")))
            elif event.source == "approval" and waited is not None and waited["status"] == "asked":
                self._answer(event.source_id, waited["tool"], str(payload.get("answer")))
            elif event.source in ("tool", "approval"):
                log.info("inbox %r: %s/%s is for no tool use the kit waits for; ignored",
                         self.run.inbox, event.source, event.source_id)
            elif not core.budget_resumed(event):  # that timer is a wake only
                self.events.append(event)
                self._read_event(event)

    def _read_event(self, event: Event) -> None:
        self.text(event)  # taints now: the loop may show it to a model any way it likes
        self._owner_waiting = self._owner_waiting or policy.from_owner(self.config, event)

    def _result(self, tool_use_id: str, name: str, content: str, is_error: bool) -> None:
        del self._pending[tool_use_id]
        text = self._output(tool_use_id, name, content)
        self.results.append(ToolResult(tool_use_id, name, "error" if is_error else "done", text, is_error))

    def _answer(self, tool_use_id: str, name: str, answer: str) -> None:
        self._answered.append(tool_use_id)  # the finish settles the effect by the stored answer
        settled = core.answered(answer)
        if settled is None:
            self._pending[tool_use_id]["status"] = "proposed"
            self.results.append(ToolResult(tool_use_id, name, "approved", "approved: it runs now", False))
            return
        del self._pending[tool_use_id]
        self.results.append(ToolResult(tool_use_id, name, *settled, True))

    def text(self, event: Event) -> str:
        """An event as a model should read it: an untrusted source's text delimited and
        labelled as data (wakeful/agent/policy.py)."""
        text, taint = policy.event_text(self.config, event, max(1000, self.config.conversation_budget // 4))
        if taint:
            self._taint.taint(taint)
        return text

    def taint(self, what: str) -> None:
        """Untrusted text entered the model's view some other way (a web page your loop
        fetched): every later write waits for a yes, the human told ``what``."""
        self._taint.taint(what)

    @property
    def tainted(self) -> tuple[str, ...]:
        return tuple(self._taint.tainted)

    @property
    def waiting(self) -> bool:
        """Earlier tool uses whose result has not come yet."""
        return bool(self._pending)

    # -- model calls ----------------------------------------------------------------------

    def model_call(self) -> None:
        """Call before each model call. Raises LeaseLost once this run is fenced (no point
        paying for a call whose finish would be refused), BudgetReached once the day's
        ``[budget]`` is spent: the call must not be made, and the run ends with
        ``stopped(reached)`` (the module docstring, "budgets")."""
        self.run.heartbeat()
        self.run.check_budget(self.config.budget)

    async def amodel_call(self) -> None:
        """``model_call`` for an async loop (the store is asked in a worker thread)."""
        await asyncio.to_thread(self.model_call)

    def spent(self, usage: Usage) -> None:
        """Call right after each model call with what it used: counted for the inbox's and the
        agent's day at once, even if this run is fenced later."""
        if usage.tokens:  # a model that reports nothing costs no transaction
            self.run.count_spend(self.config.budget, usage)

    async def aspent(self, usage: Usage) -> None:
        await asyncio.to_thread(self.spent, usage)

    def stopped(self, reached: BudgetReached) -> Outcome:
        """The Outcome of a run the day's budget stopped (``model_call`` raised ``reached``,
        perhaps through a framework's loop): nothing it proposed, scheduled, said or stored;
        the answers it read settled (a yes runs after this finish, a no never); what it read
        given again to the run the resume timer starts (the newest events within the
        conversation budget: an inbox that keeps receiving all day keeps its latest)."""
        for effect in self._effects:
            del self._pending[effect.tool_use_id]
        self._effects = []
        events, size = [], 0
        for event in reversed(self.events):
            stored = asdict(event)
            size += len(json.dumps(stored))
            if events and size > self.config.conversation_budget:
                log.warning("inbox %r: %d older event(s) dropped while the daily budget is reached",
                            self.run.inbox, len(self.events) - len(events))
                break
            events.insert(0, stored)
        state = self.state()
        state["carried"] = {"events": events, "results": [asdict(r) for r in self.results if r.final]}
        return Outcome(answered=self._answered, timers=core.resume_timer(reached.verdict.resumes_at),
                       memory={self.memory_key: state})

    # -- tool calls -----------------------------------------------------------------------

    def offered(self, runtime: bool = False) -> list[dict[str, Any]]:
        """The tools to tell the model about (``name``, ``description``, ``input_schema``):
        every configured one but the denied, and with ``runtime`` the claude loop's
        ``stay_silent`` and ``mark_urgent`` (``outcome`` applies them). A source that lists
        through the egress proxy (an MCP server over HTTP) lists under a grant bound to this
        run's lease."""
        with self._egress(self.config.listing_routes()):
            offered = policy.offered(self.config, runtime=runtime)
        for taint in self.config.offered_taint(offered):  # a server's tool text in view (docs/mcp.md)
            self._taint.taint(taint)
        return offered

    def use(self, name: str, input: Any, tool_use_id: str | None = None, words: str = "") -> ToolUse:
        """Decide one tool call and do what the decision says. ``tool_use_id`` is the model's
        id for the call (one is made when left out; unique per inbox); ``words`` is what the
        model said with it, shown to the human who approves."""
        use_id = tool_use_id or f"toolu_kit_{uuid.uuid4().hex[:24]}"
        if use_id in self._used or use_id in self._pending:
            raise ValueError(f"tool use id {use_id!r} is used already")
        self._used.add(use_id)
        d = policy.decide(self.config, name, input, self.tainted, self._owner_waiting, self._count)
        if d.kind == "runtime":  # stay_silent, mark_urgent: outcome() applies them to the messages
            self._silent = self._silent or name == "stay_silent"
            self._urgent = self._urgent or name == "mark_urgent"
            return ToolUse(use_id, name, "done", "ok")
        if d.kind == "refuse":
            return ToolUse(use_id, name, "refused", d.reason, True)
        assert d.tool is not None
        if d.tool.source == wakes.SOURCE:  # an Outcome change, or checked now and asked
            answer = self._wakes.answer(d.kind, d.tool, input, use_id)
            if answer is not None:
                return ToolUse(use_id, name, "error" if answer[1] else "done", *answer)
        if d.kind == "inline":
            return self._inline(d.tool, input, use_id)
        ask = d.kind == "ask"
        self._effects.append(core.proposed(self.config, d, use_id, name, input, words))
        self._pending[use_id] = {"tool": name, "status": "asked" if ask else "proposed"}
        return ToolUse(use_id, name, "asked" if ask else "proposed", why=d.reason)

    async def ause(self, name: str, input: Any, tool_use_id: str | None = None, words: str = "") -> ToolUse:
        """``use`` for an async loop: an allowed read runs (it may wait on an upstream) in a
        worker thread, so the event loop that carries other runs is not held meanwhile."""
        return await asyncio.to_thread(self.use, name, input, tool_use_id, words)

    def _inline(self, tool: Tool, input: dict[str, Any], use_id: str) -> ToolUse:
        call = ToolCall(use_id, tool.name, self.run.inbox, idempotency_key(self.run.inbox, use_id))
        with self._egress(tool.grant_routes):
            result = tools.run(tool, input, call, self.config)
        text = self._output(use_id, tool.name, result["content"])
        return ToolUse(use_id, tool.name, "error" if result["is_error"] else "done", text, result["is_error"])

    def _output(self, use_id: str, name: str, content: str) -> str:
        text, taint = policy.tool_output(self.config, name, use_id, content)
        if taint:
            self._taint.taint(taint)
        return text

    def _egress(self, routes: Sequence[str]) -> AbstractContextManager[Any]:
        """``routes`` under a grant bound to this run's lease (wakeful/agent/egress.py)."""
        if not routes:
            return nullcontext()
        from wakeful.agent import egress

        token = self.run.grant(list(routes), RUN_GRANT_TTL)
        return egress.using(egress.Egress(egress.proxy_url(), token))

    # -- the finish -----------------------------------------------------------------------

    def outcome(self, messages: list[str | Message] | None = None, **fields: Any) -> Outcome:
        """The run's Outcome: ``messages`` as they go to a person (``core.said``: a text is a
        reply, sent at once while the person's message waits for one; none after a
        ``stay_silent`` that stood, each urgent after such a ``mark_urgent``; no approval link
        marker or ``<untrusted>`` wrapper of the model's own) and any other Outcome field, with
        the kit's effects, answers and state added. Raises ``InvalidOutcome`` for an effect no
        configured tool can run."""
        effects = list(fields.pop("effects", [])) + self._effects
        answered = list(fields.pop("answered", [])) + self._answered
        memory = {**fields.pop("memory", {}), self.memory_key: self.state()}
        fields["timers"] = list(fields.get("timers", [])) + self._wakes.timers
        fields["cancel_timers"] = list(fields.get("cancel_timers", [])) + self._wakes.cancelled
        refuse_unrunnable(effects, self.config)
        said = core.said(messages or [], silent=self._silent, urgent=self._urgent)
        return Outcome(messages=list(said), effects=effects, answered=answered, memory=memory, **fields)

    def state(self) -> dict[str, Any]:
        """What the kit keeps in the inbox's memory (under ``memory_key``), written only by
        the fenced finish."""
        return {"pending": self._pending, "tainted": list(self._taint.tainted)}
