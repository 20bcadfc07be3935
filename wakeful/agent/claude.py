"""The built-in agent (``WAKEFUL_AGENT=claude``): Claude with tools, behind the fenced lease.

One wake (docs/design.md section 9), inside one run:

1. The batch becomes one user turn: a payload's ``text`` as text, anything else as compact
   JSON naming the source; events of a source the config does not trust are delimited and
   labelled as data, and taint the conversation. Tool results (source ``tool``, written by
   the runtime's executor) and approval answers (source ``approval``) become ``tool_result``
   blocks for their tool use; a tool's answer, inline or an effect's, is data and taints
   too, unless the tool is declared ``trusted_output``.
2. The model is called (``messages.create``, never the SDK's tool runner: its state would
   live in this process, not in the store) with the conversation and the offered tools, but
   only once every tool use of its last reply has a result.
3. Each tool use is decided by wakeful/agent/policy.py: refused, run inline (reads), or proposed as
   an effect (writes; with a human's approval first for ``ask``). Effects are only proposed
   here: the finish commits them, a Celery task runs them after the commit.
4. The reply's text is the run's message (unless the model chose ``stay_silent``; urgent with
   ``mark_urgent``; the policy refuses both when a stranger's text could be behind them, and
   the model, told, is called again). Everything goes into the Outcome, applied by the
   fenced finish.

Stop reasons: ``max_tokens`` keeps the text (marked as cut) and drops any tool use in that
reply, whose input may be cut too; ``refusal`` sends nothing and keeps no assistant turn
(the refused exchange stays out of the conversation), and both are logged in the run log.
An API error the SDK gave up on fails the run like any exception (backoff, dead at the cap),
unless it says the API is away (unreachable, 429, 5xx, 529): then the run says ``TryLater``
(wakeful/agent/outage.py) and its events wait the outage out without spending their attempts.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from wakeful import telemetry
from store import Effect, Event, Outcome, Timer
from store.effects import AGENT_TOTALS_KEY as TOTALS_KEY, idempotency_key
from store.spend import Usage

from wakeful.agent import config as config_module
from wakeful.agent import core, policy, tools, wakes
from wakeful.agent.config import RUN_GRANT_TTL, AgentConfig
from wakeful.agent.conversation import MEMORY_KEY, Conversation, storable, tool_result
from wakeful.agent.outage import TryLater, is_transient, retry_after
from wakeful.agent.run import BudgetReached, Run
from wakeful.agent.tool import ToolCall

log = logging.getLogger("wakeful.agent.claude")
LOG_KEY = "claude_runs"  # memory: the last runs' model calls, tokens and tool decisions
LOG_KEEP = 50

_lock = threading.Lock()
_loaded: tuple[AgentConfig, Any] | None = None


def configured() -> tuple[AgentConfig, Any]:
    """This process's config and SDK client, made once (``WAKEFUL_AGENT_CONFIG``,
    ``ANTHROPIC_API_KEY``, ``ANTHROPIC_BASE_URL``)."""
    global _loaded
    with _lock:
        if _loaded is None:
            import anthropic

            cfg = config_module.current()
            assert cfg is not None
            if not cfg.model:
                raise config_module.ConfigError(f"{cfg.path}: the claude agent needs an [agent] table with `model`")
            # With a [routes.anthropic] the model is reached through the egress proxy only,
            # with each run's grant: this process holds no key, and makes no keyed client.
            client = None if "anthropic" in cfg.routes else anthropic.Anthropic(
                timeout=cfg.timeout, max_retries=cfg.max_retries, http_client=_sdk_http_client())
            _loaded = (cfg, client)
        return _loaded


def agent(run: Run) -> Outcome:
    cfg, client = configured()
    routes = cfg.run_routes()
    if not routes:
        return ClaudeRun(cfg, client, run).outcome()
    from wakeful.agent import egress

    # The run's grant (bound to its lease: dead after a takeover) for the model's route and
    # the inline tools' routes; the run never sees a key.
    with egress.using(egress.Egress(egress.proxy_url(), run.grant(routes, RUN_GRANT_TTL))):
        return ClaudeRun(cfg, _through_proxy(cfg) or client, run).outcome()


def _sdk_http_client() -> Any:
    """The process's one connection pool for the model (wakeful/agent/egress.py, sized for a dense
    worker's runs in flight); the SDK's own where the egress kit is not installed."""
    try:
        from wakeful.agent import egress
    except ImportError:
        return None
    return egress.sdk_http_client()


def run_summary(outcome: Outcome) -> dict[str, Any]:
    """For the run task's summary (Flower): this run's model calls, tokens and tool
    decisions, when the claude agent produced the Outcome; {} otherwise."""
    entries = outcome.memory.get(LOG_KEY) if isinstance(outcome.memory, dict) else None
    if not isinstance(entries, list) or not entries or not isinstance(entries[-1], dict):
        return {}
    last = entries[-1]
    return {"model_calls": last.get("model_calls", 0),
            "tokens": f"{last.get('input_tokens', 0)}/{last.get('output_tokens', 0)}",
            "tools": sorted((last.get("decisions") or {}).values())}


agent.summary = run_summary  # type: ignore[attr-defined]  # the runtime's hook (agent.summary_of)


def _through_proxy(cfg: AgentConfig) -> Any:
    """With a ``[routes.anthropic]`` and the run's grant set by the runtime
    (``agent.egress.using``), the model is called through the egress proxy: the grant is the
    client's key, the proxy puts the real one on. None otherwise (the SDK's own
    ``ANTHROPIC_API_KEY`` / ``ANTHROPIC_BASE_URL``)."""
    if "anthropic" not in cfg.routes:
        return None
    try:
        from wakeful.agent import egress
    except ImportError:
        return None
    grant = egress.current()
    if grant is None:
        return None
    return grant.anthropic_client(timeout=cfg.timeout, max_retries=cfg.max_retries)


@dataclass
class ClaudeRun:
    cfg: AgentConfig
    client: Any
    run: Run
    convo: Conversation = field(init=False)
    effects: list[Effect] = field(default_factory=list)
    answered: list[str] = field(default_factory=list)
    decisions: dict[str, str] = field(default_factory=dict)
    usage: dict[str, int] = field(default_factory=lambda: {"input_tokens": 0, "output_tokens": 0})
    calls: int = 0
    silent: bool = False
    urgent: bool = False
    stop: str = ""
    resumes_at: int | None = None  # set when the daily budget stopped a model call
    wake_book: wakes.RunWakes = field(init=False)
    count: policy.RunCount = field(default_factory=policy.RunCount)  # this run's tool uses and approvals

    def __post_init__(self) -> None:
        self.convo = Conversation.load(self.run.memory)
        self.wake_book = wakes.RunWakes.of(self.cfg, self.run)  # its timers go into the Outcome

    def outcome(self) -> Outcome:
        fresh = self._read_batch()
        text = None
        if self.convo.waiting:
            self.convo.held.extend(fresh)  # the model hears it once the results are in
            self.stop = "waiting"
        else:
            self.convo.add_user(self.convo.take_pending_input() + fresh)
            if self.convo.messages and self.convo.messages[-1]["role"] == "user":
                text = self._talk()
        messages = core.said([text] if text else [], silent=self.silent, urgent=self.urgent)
        if messages:
            self.convo.owner_waiting = False  # answered
        # Budget reached: the input stays in the conversation, answered when the next day's
        # budget wakes the inbox (docs/agent.md, "Budgets").
        resume = core.resume_timer(self.resumes_at)
        return Outcome(messages=messages, effects=self.effects, answered=self.answered,
                       timers=self.wake_book.timers + resume, cancel_timers=self.wake_book.cancelled,
                       memory={MEMORY_KEY: self.convo.state(self.cfg.conversation_budget),
                               LOG_KEY: self._log(), TOTALS_KEY: self._totals()})

    # -- the batch -----------------------------------------------------------------------

    def _read_batch(self) -> list[dict[str, Any]]:
        fresh: list[dict[str, Any]] = []
        for event in self.run.events:
            payload = event.payload or {}
            if event.source == "tool" and event.source_id in self.convo.waiting:
                content = self._tool_output(event.source_id, str(payload.get("tool", "")),
                                            str(payload.get("content", "")))
                self.convo.result(event.source_id, content, bool(payload.get("is_error")))
            elif event.source == "approval" and self.convo.waiting.get(event.source_id) == "ask":
                self._answer(event.source_id, str(payload.get("answer")))
            elif core.budget_resumed(event):
                pass  # a wake only: the held input is answered now the budget resumed
            elif event.source in ("tool", "approval"):
                log.info("inbox %r: %s/%s is for no tool use this conversation waits for; ignored",
                         self.run.inbox, event.source, event.source_id)
            else:
                fresh.append(self._block(event))
        return fresh

    def _answer(self, tool_use_id: str, answer: str) -> None:
        self.answered.append(tool_use_id)  # the finish settles the effect by the stored answer
        settled = core.answered(answer)
        if settled is None:
            self.convo.waiting[tool_use_id] = "effect"  # runs after this finish; result comes back
            self.decisions[tool_use_id] = "approved"
        else:
            self.convo.result(tool_use_id, settled[1], True)
            self.decisions[tool_use_id] = settled[0]

    def _block(self, event: Event) -> dict[str, Any]:
        text, taint = policy.event_text(self.cfg, event, max(1000, self.cfg.conversation_budget // 4))
        if taint:
            self.convo.taint(taint)
        if policy.from_owner(self.cfg, event):
            self.convo.owner_waiting = True  # until a reply is sent, held or not
        return {"type": "text", "text": text}

    def _tool_output(self, use_id: str, name: str, content: str) -> str:
        """A tool's answer as the model reads it (wakeful/agent/policy.py): data, which taints the
        conversation, unless the config declares that tool's output trusted."""
        text, taint = policy.tool_output(self.cfg, name, use_id, content)
        if taint:
            self.convo.taint(taint)
        return text

    # -- the model -----------------------------------------------------------------------

    def _talk(self) -> str | None:
        """Call the model until it answers without tools, waits for results, or hits the cap."""
        while self.calls < self.cfg.max_model_calls:
            self.run.heartbeat()  # raises LeaseLost once fenced: no point asking the model
            try:
                reply = self._create()
            except BudgetReached as exc:  # the call is not made; the run ends without it
                self.stop, self.resumes_at = "budget", exc.verdict.resumes_at
                log.warning("inbox %r: daily budget reached (%s); no model call until it resumes",
                            self.run.inbox, exc)
                return None
            blocks = [b.model_dump(mode="json", exclude_none=True) for b in reply.content]
            self.stop = str(reply.stop_reason)
            if reply.stop_reason == "refusal":
                log.warning("inbox %r: the model refused; nothing is sent", self.run.inbox)
                return None
            if reply.stop_reason == "max_tokens":
                blocks = [b for b in blocks if b.get("type") != "tool_use"]
            self.convo.add_assistant(blocks)
            # Its text as the store can hold it; its tool uses as the model gave them, so the
            # policy refuses an input the store cannot hold instead of running a changed one.
            text = "\n".join(storable(b["text"]) for b in blocks if b.get("type") == "text").strip()
            uses = [b for b in blocks if b.get("type") == "tool_use"]
            if not uses:
                return f"{text}\n[cut: the reply reached max_tokens]" if reply.stop_reason == "max_tokens" else text
            tainted = tuple(self.convo.tainted)  # what the model had in view when it asked
            results = [self._decide(use, text, tainted) for use in uses]
            known = [r for r in results if r is not None]
            # Runtime tools the policy let stand need no answer before the reply goes; one it
            # refused is told at once, like any tool's error, and the model writes its reply.
            honoured = all(self.decisions[u["id"]] == f"{u['name']}:runtime" for u in uses)
            if self.convo.waiting or honoured:
                self.convo.results.extend(known)  # sent with the next user turn
                return text if not self.convo.waiting else None
            self.convo.add_user(known)
        self.stop = "max_model_calls"
        log.warning("inbox %r: %d model calls in one run (the cap); the rest waits for the next wake",
                    self.run.inbox, self.calls)
        return None

    def _create(self) -> Any:
        system = f"{self.cfg.system}\n\n{core.UNTRUSTED_NOTE}".strip()
        self.run.check_budget(self.cfg.budget)  # raises BudgetReached: this call is not made
        self.calls += 1
        offered = policy.offered(self.cfg)
        for taint in self.cfg.offered_taint(offered):  # a server's tool text in view (docs/mcp.md)
            self.convo.taint(taint)
        # A span after the GenAI semantic conventions; never the prompt or the reply's text.
        with telemetry.span(f"chat {self.cfg.model}", kind=telemetry.CLIENT, attributes={
                "gen_ai.operation.name": "chat", "gen_ai.provider.name": "anthropic",
                "gen_ai.system": "anthropic", "gen_ai.request.model": self.cfg.model,
                "gen_ai.request.max_tokens": self.cfg.max_tokens}):
            traced = {"extra_headers": telemetry.headers()} if telemetry.on() else {}
            reply = model_reply(self.client, model=self.cfg.model, max_tokens=self.cfg.max_tokens,
                                system=system, tools=offered, messages=self.convo.messages,
                                **traced)
            telemetry.annotate(**{
                "gen_ai.response.model": str(getattr(reply, "model", "") or "") or None,
                "gen_ai.response.id": str(getattr(reply, "id", "") or "") or None,
                "gen_ai.response.finish_reasons": [str(reply.stop_reason)],
                "gen_ai.usage.input_tokens": int(getattr(reply.usage, "input_tokens", 0) or 0),
                "gen_ai.usage.output_tokens": int(getattr(reply.usage, "output_tokens", 0) or 0)})
        self.run.count_spend(self.cfg.budget, Usage.of(self.cfg.model, reply.usage))  # even if fenced later
        for key in self.usage:
            self.usage[key] += int(getattr(reply.usage, key, 0) or 0)
        return reply

    def _decide(self, use: dict[str, Any], words: str, tainted: tuple[str, ...]) -> dict[str, Any] | None:
        """A tool use's result now, or None when it waits (an effect or an approval)."""
        use_id, name, tool_input = use["id"], use["name"], use.get("input")
        d = policy.decide(self.cfg, name, tool_input, tainted, self.convo.owner_waiting, self.count)
        self.decisions[use_id] = f"{name}:{d.kind}"
        if d.kind == "runtime":
            self.silent = self.silent or name == "stay_silent"
            self.urgent = self.urgent or name == "mark_urgent"
            return tool_result(use_id, "ok", False)
        if d.kind == "refuse":
            return tool_result(use_id, d.reason, True)
        assert d.tool is not None
        if d.tool.source == wakes.SOURCE:  # an Outcome change, or checked now and asked
            answer = self.wake_book.answer(d.kind, d.tool, tool_input, use_id)
            if answer is not None:
                return tool_result(use_id, *answer)
        if d.kind == "inline":
            call = ToolCall(use_id, name, self.run.inbox, idempotency_key(self.run.inbox, use_id))
            with telemetry.execute_tool(name, use_id):
                result = tools.run(d.tool, tool_input, call, self.cfg)
                telemetry.annotate(**{"error.type": "tool_error" if result["is_error"] else None})
            return tool_result(use_id, self._tool_output(use_id, name, result["content"]), result["is_error"])
        ask = d.kind == "ask"
        self.effects.append(core.proposed(self.cfg, d, use_id, name, tool_input, words))
        self.convo.waiting[use_id] = "ask" if ask else "effect"
        return None

    def _totals(self) -> dict[str, Any]:
        """Counted by committed runs only: a fenced run's calls are not in them."""
        totals = dict(self.run.memory.get(TOTALS_KEY) or {})
        totals["model_calls"] = int(totals.get("model_calls", 0)) + self.calls
        for key, value in self.usage.items():
            totals[key] = int(totals.get(key, 0)) + value
        decisions = dict(totals.get("decisions") or {})
        for decided in self.decisions.values():
            kind = decided.rpartition(":")[2]
            decisions[kind] = int(decisions.get(kind, 0)) + 1
        totals["decisions"] = decisions
        return totals

    def _log(self) -> list[dict[str, Any]]:
        entry = {"generation": self.run.generation, "events": [e.id for e in self.run.events],
                 "at": int(time.time()), "model_calls": self.calls, **self.usage,
                 "decisions": self.decisions, "stop": self.stop}
        kept = list(self.run.memory.get(LOG_KEY) or [])[-(LOG_KEEP - 1):]
        return kept + [entry]


def model_reply(client: Any, **request: Any) -> Any:
    """``messages.create``; what the SDK reports as the API being away (a connection
    refused or reset, a timeout, 429, 500-class answers and 529 overloaded, the proxy's
    502/503/504) once its own retries are spent is an outage: ``TryLater``, with the
    answer's Retry-After. Any other error (a bad request, a refused key) fails the run."""
    import anthropic

    try:
        return client.messages.create(**request)
    except anthropic.APIConnectionError as exc:  # APITimeoutError too
        raise TryLater(f"the model API is unreachable ({type(exc).__name__}: {exc})") from exc
    except anthropic.APIStatusError as exc:
        if not is_transient(exc.status_code):
            raise
        raise TryLater(f"the model API answered {exc.status_code} ({type(exc).__name__})",
                       after=retry_after(exc.response.headers)) from exc
