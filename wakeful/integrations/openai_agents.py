"""An OpenAI Agents SDK ``Agent`` as a wakeful agent: the SDK runs its own loop, wakeful
decides every tool call (docs/openai_agents.md).

    from agents import Agent
    from wakeful.integrations.openai_agents import agent_for
    agent = agent_for(lambda kit: Agent(name="errands", instructions=..., model=...))
    # WAKEFUL_AGENT=yourmodule:agent

- :func:`agent_for` makes ``async def agent(run) -> Outcome`` from ``build(kit)``, called
  once per run (in a worker thread: it may mint the run's grant, :func:`proxied_model`),
  which returns the SDK ``Agent`` without tools. The config's tools (``kit.offered()``) are
  added as SDK ``FunctionTool``s; an Agent with tools, MCP servers or handoffs of its own is
  refused (a tool the kit does not decide would run unchecked). The batch's text
  (``kit.text``: a stranger's wrapped as data) is one user message; the run's final output
  is what it says (``kit.outcome(messages=[text])``).
- Each tool call is decided by ``await kit.ause(name, args, tool_use_id=<the SDK's call
  id>)`` from the tool's ``needs_approval`` callable, which the SDK asks before it invokes
  anything. A refused call or an allowed read answers at once: ``needs_approval`` says no,
  and the tool's invocation returns the kit's ``content`` (nothing else runs in the SDK).
  A write (``use.waiting``: proposed or asked) says yes: the SDK does not invoke it, and
  the run ends with ``result.interruptions`` (the SDK's human-in-the-loop). The SDK's own
  approval is never given by a person: wakeful's effects and approvals decide, and their
  outcome is applied to the interruption mechanically.
- The ``RunState`` (``result.to_state().to_json()``) goes into the inbox's memory with the
  kit's state, through ``kit.outcome(memory=...)``: written only by the fenced finish. The
  finish commits the effect; the executor runs it once, after the finish (and a human's yes
  when asked); its result (or the human's no, or the expiry) wakes the inbox. A later run
  loads the ``RunState`` and applies what came back (``kit.results``): a result approves
  the interruption, and the SDK's invocation of the approved tool returns that result
  (nothing runs again); a no or an expiry rejects it with the kit's words as the
  ``rejection_message``. The SDK goes on from there (to the model once every call of the
  reply has its output; an interruption still waiting stays one).
- A call the SDK interrupts on its own (arguments that are not a JSON object: the SDK asks
  for approval without asking ``needs_approval``) is decided by the kit at once (refused,
  as a rule) and the run goes on. A call to a tool that is not offered (denied, unknown) is
  answered with the kit's refusal (``tool_not_found_behavior="return_error_to_model"``).

The conversation (``result.to_input_list()``) is kept in the inbox's memory too, the oldest
exchanges dropped past ``conversation_budget`` characters of JSON; text that arrives while
the SDK's run waits for a write is kept (``prompt``) and becomes the next user message once
the run is no longer interrupted (a model API refuses a user turn between tool calls and
their outputs). Nothing of the SDK stays in the process between runs: no ``Session``, no
``previous_response_id`` or ``conversation_id`` (state kept at a provider would be written
by a fenced run too). Memory, under ``memory_key``::

    {"history": [input items], "state": RunState JSON or null, "prompt": [texts]}

Before each model call ``kit.model_call()`` checks the run's lease (a run taken over stops
early) and the day's ``[budget]`` (once it is spent, no call: the run ends with
``kit.stopped``, its input kept for the next day's run, docs/agent.md "Budgets"); after it
the usage is counted for the inbox's and the agent's day (``kit.spent``). A run
that reaches ``max_turns`` model calls ends with a short note instead of failing.
Tracing is off unless your ``run_config`` says otherwise (the SDK's exporter would call
OpenAI with a key the worker must not hold). Imports the agent kit and the SDK, never Celery
or tasks/.
"""

from __future__ import annotations

import asyncio
import dataclasses
import inspect
import json
import os
import threading
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from agents import Agent, FunctionTool, RunConfig, RunHooks, Runner, RunResult, RunState
from agents.models.interface import Model
from agents.run_config import ToolErrorFormatterArgs
from agents.run_error_handlers import RunErrorHandlerInput, RunErrorHandlerResult

from store.records import Outcome
from store.spend import Usage
from wakeful.agent.config import RUN_GRANT_TTL
from wakeful.agent import core
from wakeful.agent.kit import Toolkit, ToolUse
from wakeful.agent.policy import RUNTIME_TOOLS
from wakeful.agent.run import BudgetReached, Run

__all__ = ["MEMORY_KEY", "agent_for", "proxied_model"]

MEMORY_KEY = "openai_agents"
DEFAULT_MAX_TURNS = 10
NO_DECISION = "no decision was made for this tool call; nothing ran"


def agent_for(build: Callable[[Toolkit], Agent[Any]], *, runtime_tools: bool = False,
              max_turns: int = DEFAULT_MAX_TURNS, run_config: RunConfig | None = None,
              memory_key: str = MEMORY_KEY) -> Callable[[Run], Awaitable[Outcome]]:
    """``async def agent(run) -> Outcome`` running the Agent ``build(kit)`` returns.

    ``runtime_tools``: offer the claude loop's ``stay_silent`` and ``mark_urgent`` too;
    ``max_turns``: model calls per run (the SDK's ``max_turns``); ``run_config``: the SDK's,
    for the model provider or settings (its ``tool_not_found_behavior`` and
    ``tool_error_formatter`` are wakeful's; tracing is off when none is given); the Agent's
    ``name`` must stay the same from run to run (the stored ``RunState`` names it)."""

    async def agent(run: Run) -> Outcome:
        kit = await asyncio.to_thread(Toolkit, run)  # may read the inbox's timers: not on the loop
        try:
            return await _Wake(kit, runtime_tools, max_turns, run_config, memory_key).outcome(build)
        except BudgetReached as reached:  # no model call: the run's input waits for the next day
            return kit.stopped(reached)

    agent.__doc__ = f"The OpenAI Agents SDK agent of {getattr(build, '__qualname__', build)!r} on wakeful's kit."
    return agent


def _function_tools(specs: Sequence[dict[str, Any]], decide: Callable[[str, Any, str], Awaitable[bool]],
                    answer: Callable[[str], str]) -> list[FunctionTool]:
    """The config's tools (``kit.offered()``'s ``specs``) as SDK ``FunctionTool``s:
    ``needs_approval`` is ``decide(name, args, call_id)`` (True: the call waits, the SDK
    interrupts), the invocation returns ``answer(call_id)`` (the kit's content, decided
    before). The kit checks the input against the schema: the SDK passes it on as it came."""

    def tool(spec: dict[str, Any]) -> FunctionTool:
        name = spec["name"]

        async def needs_approval(ctx: Any, args: dict[str, Any], call_id: str) -> bool:
            return await decide(name, args, call_id)

        async def invoke(ctx: Any, arguments: str) -> str:
            return answer(ctx.tool_call_id)

        return FunctionTool(name=name, description=spec.get("description") or name,
                            params_json_schema=spec["input_schema"], on_invoke_tool=invoke,
                            strict_json_schema=False, needs_approval=needs_approval)

    return [tool(spec) for spec in specs]


class _Wake:
    """One run: the kit's decisions for the SDK's calls, the stored state, what is said."""

    def __init__(self, kit: Toolkit, runtime_tools: bool, max_turns: int, run_config: RunConfig | None,
                 memory_key: str) -> None:
        self.kit, self.runtime_tools, self.max_turns, self.memory_key = kit, runtime_tools, max_turns, memory_key
        self.run_config = _run_config(run_config, self._not_found)
        self.answers: dict[str, str] = {}  # call id -> what the invocation returns (decided before it)
        self.waiting: set[str] = set()  # call ids of this run's writes: the SDK interrupts on them
        self.seen: set[str] = set()  # call ids the kit decided in this run
        self.lock = asyncio.Lock()  # the kit is one run's, used one call at a time
        self.bot: Agent[Any] | None = None

    # -- the run --------------------------------------------------------------------------

    async def outcome(self, build: Callable[[Toolkit], Agent[Any]]) -> Outcome:
        kit = self.kit
        kept = kit.run.memory.get(self.memory_key) or {}
        history: list[Any] = list(kept.get("history") or [])
        state: dict[str, Any] | None = kept.get("state")
        prompt = core.held_while_waiting(list(kept.get("prompt") or []) + [kit.text(e) for e in kit.events],
                                         kit.config.conversation_budget // 2)
        back = {r.tool_use_id: r for r in kit.results if r.final}  # "approved": its result comes later
        said: list[str] = []
        if (state is not None and back) or (state is None and prompt):
            self.bot = await self._agent(build)
        if state is not None and back:  # a write of an earlier run is back: the SDK goes on
            resumed = await RunState.from_json(self.bot, state)
            for item in resumed.get_interruptions():
                result = back.get(item.call_id)
                if result is None:
                    continue  # still waiting (or decided by _drive below)
                if result.status in ("done", "error"):  # ran: the SDK's invocation returns its result
                    self.answers[item.call_id] = result.content
                    resumed.approve(item)
                else:  # a human's no, or no answer in time: it never ran
                    resumed.reject(item, rejection_message=result.content)
            state, history = self._after(await self._drive(resumed), history, said)
        if state is None and prompt:
            turn = _trimmed(history, kit.config.conversation_budget) + [
                {"role": "user", "content": "\n\n".join(prompt)}]
            state, history = self._after(await self._drive(turn), history, said)
            prompt = []
        memory = {"history": history, "state": state, "prompt": prompt}
        return kit.outcome(messages=["\n".join(said)] if said else [], memory={self.memory_key: memory})

    async def _agent(self, build: Callable[[Toolkit], Agent[Any]]) -> Agent[Any]:
        bot = await asyncio.to_thread(build, self.kit)  # may mint the run's grant: not on the loop
        if not isinstance(bot, Agent):
            raise TypeError(f"agent_for: build(kit) returned {type(bot).__name__}, not an agents.Agent")
        own = [what for what in ("tools", "mcp_servers", "handoffs") if getattr(bot, what, None)]
        if own:
            raise ValueError(f"agent_for: the Agent {bot.name!r} has {' and '.join(own)} of its own: wakeful "
                             "decides every tool call, so the tools come from WAKEFUL_AGENT_CONFIG "
                             "([tools.*], [mcp.*]; a Python function is [tools.NAME] call = \"module:function\")")
        specs = await asyncio.to_thread(self.kit.offered, self.runtime_tools)  # may list an MCP server
        return bot.clone(tools=_function_tools(specs, self._needs_approval, self._answer))

    async def _drive(self, start: list[Any] | RunState[Any, Any]) -> RunResult:
        """Run the SDK from ``start`` until it ends or waits only for the kit's writes: an
        interruption the kit did not ask for is decided now, and the SDK goes on."""
        assert self.bot is not None
        result = await self._run(start)
        for _ in range(self.max_turns + 2):
            pending = set(self.kit.state()["pending"])
            undecided = [i for i in result.interruptions if i.call_id not in pending]
            if not undecided:
                return result
            state, applied = result.to_state(), False
            for item in undecided:
                if item.call_id not in self.answers:
                    use = await self._use(item.tool_name, _arguments(item.raw_item), item.call_id)
                    if use.waiting:
                        continue  # a write after all: it waits like the others
                    if use.status == "refused":
                        state.reject(item, rejection_message=use.content)
                        applied = True
                        continue
                    self.answers[item.call_id] = use.content
                state.approve(item)  # its invocation returns the kit's answer
                applied = True
            if not applied:
                return result
            result = await self._run(state)
        raise RuntimeError("the SDK's run kept interrupting on tool calls the kit had decided")

    async def _run(self, start: list[Any] | RunState[Any, Any]) -> RunResult:
        assert self.bot is not None
        return await Runner.run(self.bot, start, max_turns=self.max_turns, run_config=self.run_config,
                                hooks=_Hooks(self.kit), error_handlers={"max_turns": self._stopped})

    def _after(self, result: RunResult, history: list[Any], said: list[str]) -> tuple[dict[str, Any] | None, list[Any]]:
        """The state to keep (None once the SDK's run ended) and the conversation."""
        if result.interruptions:  # a write waits: the RunState holds the conversation until it is back
            return _plain(result.to_state().to_json()), history
        if result.final_output not in (None, ""):
            said.append(str(result.final_output))
        return None, _trimmed(_plain(result.to_input_list()), self.kit.config.conversation_budget)

    def _stopped(self, data: RunErrorHandlerInput[Any]) -> RunErrorHandlerResult:
        return RunErrorHandlerResult(final_output=f"(stopped after {self.max_turns} model turns in one run)")

    # -- the SDK's tool calls -------------------------------------------------------------

    async def _needs_approval(self, name: str, args: Any, call_id: str) -> bool:
        if call_id in self.answers:
            return False
        if call_id in self.waiting:
            return True
        use = await self._use(name, args, call_id)
        if use.waiting:
            return True
        self.answers[call_id] = use.content
        return False

    def _answer(self, call_id: str) -> str:
        return self.answers.get(call_id, NO_DECISION)

    async def _use(self, name: str, args: Any, call_id: str) -> ToolUse:
        async with self.lock:
            if call_id in self.seen or call_id in self.kit.state()["pending"]:
                why = f"the tool call id {call_id!r} is used already; nothing ran"
                return ToolUse(call_id, name, "refused", why, True)
            self.seen.add(call_id)
            use = await self.kit.ause(name, args, tool_use_id=call_id)
            if use.waiting:
                self.waiting.add(call_id)
            return use

    async def _not_found(self, args: ToolErrorFormatterArgs[Any]) -> str | None:
        """A call to a tool that is not offered: the kit's refusal (a runtime tool not offered
        is not the kit's to apply)."""
        if args.kind != "tool_not_found":
            return None
        if args.tool_name in RUNTIME_TOOLS:
            return f"the tool {args.tool_name!r} is not available; nothing ran"
        use = await self._use(args.tool_name, {}, args.call_id)
        return use.content if use.status == "refused" else NO_DECISION


class _Hooks(RunHooks[Any]):
    """Around each model call: the lease (a run taken over stops before it pays for a call
    whose finish would be refused) and the day's spend."""

    def __init__(self, kit: Toolkit) -> None:
        self.kit = kit

    async def on_llm_start(self, context: Any, agent: Agent[Any], system_prompt: Any, input_items: Any) -> None:
        await self.kit.amodel_call()  # raises LeaseLost, BudgetReached

    async def on_llm_end(self, context: Any, agent: Agent[Any], response: Any) -> None:
        usage = response.usage
        cached = getattr(getattr(usage, "input_tokens_details", None), "cached_tokens", 0)
        spent = Usage.cache_in_input(_model_name(agent.model, self.kit.config.model), usage.input_tokens,
                                     usage.output_tokens, 0, cached)
        await self.kit.aspent(spent)


def _run_config(given: RunConfig | None, not_found: Callable[[ToolErrorFormatterArgs[Any]], Awaitable[str | None]]
                ) -> RunConfig:
    """The SDK's run config: the caller's (tracing off without one), with wakeful's answer
    to a call of a tool that is not offered."""
    base = given if given is not None else RunConfig(tracing_disabled=True)
    theirs = base.tool_error_formatter

    async def formatter(args: ToolErrorFormatterArgs[Any]) -> str | None:
        mine = await not_found(args)
        if mine is not None or theirs is None:
            return mine
        answer = theirs(args)
        return await answer if inspect.isawaitable(answer) else answer

    return dataclasses.replace(base, tool_not_found_behavior="return_error_to_model", tool_error_formatter=formatter)


def _arguments(raw_item: Any) -> Any:
    """A call's arguments as the kit reads them: the JSON object, or the text as it came
    (which the policy refuses)."""
    text = raw_item.get("arguments") if isinstance(raw_item, dict) else getattr(raw_item, "arguments", None)
    try:
        return json.loads(text) if isinstance(text, str) else text
    except ValueError:
        return text


def _model_name(model: Any, configured: str) -> str:
    if isinstance(model, str) and model:
        return model
    return str(getattr(model, "model", "") or configured or type(model).__name__)


def _plain(value: Any) -> Any:
    """JSON the store holds: the SDK's items may be pydantic models."""

    def default(o: Any) -> Any:
        if hasattr(o, "model_dump"):
            return o.model_dump(mode="json", exclude_unset=True)
        raise TypeError(f"{type(o).__name__} is not JSON")

    return json.loads(json.dumps(value, default=default, allow_nan=False))


def _is_user_turn(item: Any) -> bool:
    return isinstance(item, dict) and item.get("role") == "user" and item.get("type", "message") == "message"


def _trimmed(history: list[Any], budget: int) -> list[Any]:
    """The conversation under ``budget`` characters of JSON, the oldest exchanges (a user
    message and everything up to the next) dropped whole; the latest is always kept."""
    starts = [i for i, item in enumerate(history) if _is_user_turn(item)]
    if not starts or starts[0] != 0:
        starts = [0] + starts
    sizes = [len(json.dumps(history[a:b])) for a, b in zip(starts, starts[1:] + [len(history)])]
    total, first = sum(sizes), 0
    while total > budget and first < len(starts) - 1:
        total -= sizes[first]
        first += 1
    return history[starts[first]:] if first else history


# -- a real model through the egress proxy --------------------------------------------------

_clients: dict[tuple[Any, ...], Any] = {}
_clients_lock = threading.Lock()


def proxied_model(kit: Toolkit, model: str, route: str = "openai", chat_completions: bool = False) -> Model:
    """An OpenAI model reached through ``wakeful proxy``'s ``route`` with this run's grant
    (bound to its lease) as its key: the worker holds no key. Call it from ``build(kit)``
    (a worker thread: minting the grant is a store call). One client per process and proxy
    route (its connection pool shared by every run on the process's event loop), copied
    per run with the grant (``with_options``).

    [routes.openai] in the config: ``upstream = "https://api.openai.com/v1"``,
    ``secret_env = "OPENAI_API_KEY"`` (set in the proxy's environment only), ``allow =
    ["POST /responses"]`` (``["POST /chat/completions"]`` with ``chat_completions``)."""
    from agents import OpenAIChatCompletionsModel, OpenAIResponsesModel
    from openai import AsyncOpenAI

    from wakeful.agent.egress import proxy_url

    url = f"{proxy_url()}/{route}"
    key = (os.getpid(), url, kit.config.timeout, kit.config.max_retries)
    with _clients_lock:
        base = _clients.get(key)
        if base is None:
            base = _clients[key] = AsyncOpenAI(api_key="each run's grant", base_url=url,
                                               timeout=kit.config.timeout, max_retries=kit.config.max_retries)
    client = base.with_options(api_key=kit.run.grant([route], RUN_GRANT_TTL))
    if chat_completions:
        return OpenAIChatCompletionsModel(model=model, openai_client=client)
    return OpenAIResponsesModel(model=model, openai_client=client)
