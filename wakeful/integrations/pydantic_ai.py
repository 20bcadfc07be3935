"""A Pydantic AI ``Agent`` as a wakeful agent: Pydantic AI runs its own loop, wakeful decides
every tool call (docs/pydantic_ai.md).

    from pydantic_ai import Agent
    from wakeful.integrations.pydantic_ai import agent_for, proxied_model
    agent = agent_for(lambda kit: Agent(proxied_model(kit, "anthropic:claude-sonnet-4-5"),
                                        instructions=kit.config.system))
    # WAKEFUL_AGENT=yourmodule:agent

- :func:`agent_for` makes ``agent(run)``, a coroutine of the run's Outcome (a
  :class:`PydanticAIAgent`, which pickles for a run apart when ``build`` does), from ``build(kit)``, called
  once per run that calls the model (in a worker thread: it may mint the run's grant,
  :func:`proxied_model`), which returns the ``Agent`` without tools. The config's tools
  (``kit.offered()``) are given to each ``agent.run`` as one toolset; an Agent with tools,
  toolsets (MCP servers included) or native tools of its own is refused (a tool the kit does
  not decide would run unchecked). The batch's text (``kit.text``: a stranger's wrapped as
  data) is one user prompt; the run's output is what it says (``kit.outcome(messages=...)``).
- Each tool call is decided by ``await kit.ause(name, args, tool_use_id=ctx.tool_call_id,
  words=<the model's text with it>)``, the calls of one reply one after another, in order. A
  refused call and an allowed read answer at once (the kit's ``content``; an error as
  ``ToolFailed``, so the model reads it as one). A write (``use.waiting``: proposed or
  asked) never runs inside Pydantic AI: the tool raises ``CallDeferred`` and the run ends
  with ``DeferredToolRequests`` (Pydantic AI's deferred tools). The finish commits the
  effect; the executor runs it once (after a human's yes when asked); its result (or the
  human's no, or the expiry) wakes the inbox.
- A later run hands what came back (``kit.results``) to Pydantic AI as
  ``DeferredToolResults`` with the stored history (``agent.run(message_history=...,
  deferred_tool_results=...)``): a result as the call's return, a no or an expiry as a
  ``ToolFailed`` with the kit's words. Pydantic AI takes the results of one reply all at
  once, so a result that comes back while another write of that reply is still out is kept
  until the last one is back.

State, only in the inbox's memory, written by the fenced finish (a fenced run's is never
written); nothing of Pydantic AI stays in the process between runs. The keys and format are
those wakeful/examples/pydantic_ai_loop.py stored before this module, read as they are::

    memory["pydantic_ai"]          the message history (ModelMessagesTypeAdapter, JSON mode)
    memory["pydantic_ai_waiting"]  {"results": {tool call id: content | {"content", "is_error"}},
                                    "prompt": [texts that came while a write was out]}

(a result stored as a bare string, as the example stored them, is read as a success).
The history keeps the newest exchanges within ``[agent] conversation_budget`` characters of
JSON: the oldest go whole (a user prompt and everything up to the next, so a tool call never
loses its return), the latest is always kept, system prompt parts of the first request
move to the new first one, and each request's ``instructions`` but the latest's are left out
(Pydantic AI sends the run's own). Text that arrives while a write is out is kept (its newest
half-budget) and becomes the next user prompt once nothing is pending: a model API takes no
user turn between a reply's tool calls and their returns.

Around each model call (a Pydantic AI ``Hooks`` capability given to the run): before it
``kit.model_call()`` checks the lease (a run taken over stops before it pays for a call whose
finish would be refused) and the day's ``[budget]`` (once it is spent, no call: the run ends
with ``kit.stopped``, its input kept for the next day's run), and ``max_model_calls`` per run
is applied (past it, the call is skipped with a short note, said, instead of failing the
run); after it the response's usage is counted for the inbox's and the agent's day
(``kit.spent``). A model API that is away (unreachable, 408, 429, 5xx) is
raised as ``TryLater``: the run's events wait the outage out. A call to a tool that is not
offered (denied, unknown) is answered by Pydantic AI itself ("Unknown tool name"), a retry
counted against the Agent's ``retries``. Imports the agent kit and Pydantic AI, never Celery
or tasks/.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import threading
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from pydantic_ai import Agent, RunContext
from pydantic_ai.capabilities import Hooks
from pydantic_ai.exceptions import CallDeferred, ModelAPIError, ModelConnectionError, SkipModelRequest, ToolFailed
from pydantic_ai.messages import (
    ModelMessage,
    ModelMessagesTypeAdapter,
    ModelRequest,
    ModelResponse,
    RetryPromptPart,
    SystemPromptPart,
    TextPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.models import Model
from pydantic_ai.tools import DeferredToolRequests, DeferredToolResults, ToolDefinition
from pydantic_ai.toolsets import AbstractToolset, FunctionToolset
from pydantic_ai.toolsets.abstract import ToolsetTool
from pydantic_core import to_json

from store.records import Outcome
from store.spend import Usage
from wakeful.agent import core
from wakeful.agent.config import RUN_GRANT_TTL
from wakeful.agent.conversation import storable
from wakeful.agent.kit import Toolkit, ToolUse
from wakeful.agent.outage import TryLater, is_transient, retry_after
from wakeful.agent.run import BudgetReached, Run

__all__ = ["MEMORY_KEY", "PydanticAIAgent", "agent_for", "outage", "proxied_model"]

log = logging.getLogger("wakeful.integrations.pydantic_ai")

MEMORY_KEY = "pydantic_ai"  # the history; f"{MEMORY_KEY}_waiting": results and text held while a write is out
NO_RESULT = "no result came back for this tool call; whether it ran is not known"

Build = Callable[[Toolkit], Agent[Any, Any]]


def agent_for(build: Build, *, runtime_tools: bool = False, max_model_calls: int | None = None,
              instructions: str | None = core.UNTRUSTED_NOTE, memory_key: str = MEMORY_KEY) -> PydanticAIAgent:
    """``async def agent(run) -> Outcome`` running the Agent ``build(kit)`` returns.

    ``runtime_tools``: offer the claude loop's ``stay_silent`` and ``mark_urgent`` too;
    ``max_model_calls``: model calls per run (the config's ``[agent] max_model_calls`` when
    None); ``instructions``: added to the Agent's own for each run (the note on wrapped
    text; None for none); ``memory_key``: where the history lives (the held results and text
    under ``memory_key + "_waiting"``)."""
    return PydanticAIAgent(build, runtime_tools, max_model_calls, instructions, memory_key)


@dataclass(frozen=True)
class PydanticAIAgent:
    """What :func:`agent_for` returns: called with a run, a coroutine of its Outcome. A plain
    object, so it pickles (for a run apart, tasks/isolation.py) when ``build`` does: a
    module-level function, not a lambda."""

    build: Build
    runtime_tools: bool = False
    max_model_calls: int | None = None
    instructions: str | None = core.UNTRUSTED_NOTE
    memory_key: str = MEMORY_KEY

    async def __call__(self, run: Run) -> Outcome:
        kit = await asyncio.to_thread(Toolkit, run)  # may read the inbox's timers: not on the loop
        try:
            return await _Wake(kit, self.build, self.runtime_tools, self.max_model_calls, self.instructions,
                               self.memory_key).outcome()
        except BudgetReached as reached:  # no model call: the run's input waits for the next day
            return kit.stopped(reached)


@dataclass(frozen=True)
class _Back:
    """What came back for a deferred call, as kept until the last of its reply is back."""

    content: str
    is_error: bool

    def for_pydantic_ai(self) -> Any:
        return ToolFailed(self.content) if self.is_error else self.content

    def stored(self) -> Any:
        return {"content": self.content, "is_error": True} if self.is_error else self.content

    @classmethod
    def read(cls, value: Any) -> _Back:
        if isinstance(value, dict):
            return cls(str(value.get("content", "")), bool(value.get("is_error")))
        return cls(str(value), False)  # the example's format: the content of a result


class _Wake:
    """One run: the kit's decisions for Pydantic AI's calls, the stored state, what is said."""

    def __init__(self, kit: Toolkit, build: Build, runtime_tools: bool, max_model_calls: int | None,
                 instructions: str | None, memory_key: str) -> None:
        self.kit, self.build, self.runtime_tools, self.instructions = kit, build, runtime_tools, instructions
        self.max_model_calls = max_model_calls if max_model_calls is not None else kit.config.max_model_calls
        self.key, self.waiting_key = memory_key, f"{memory_key}_waiting"
        self.budget = kit.config.conversation_budget
        self.calls = 0  # model calls of this run
        self.seen: set[str] = set()  # tool call ids the kit decided in this run
        self.lock = asyncio.Lock()  # the kit is one run's, used one call at a time
        self.bot: Agent[Any, Any] | None = None
        self.tools: _KitTools | None = None

    # -- the run --------------------------------------------------------------------------

    async def outcome(self) -> Outcome:
        kit, memory = self.kit, self.kit.run.memory
        history: list[ModelMessage] = ModelMessagesTypeAdapter.validate_python(memory.get(self.key) or [])
        held = memory.get(self.waiting_key) or {}
        back = {call_id: _Back.read(v) for call_id, v in (held.get("results") or {}).items()}
        back.update({r.tool_use_id: _Back(r.content, r.is_error) for r in kit.results if r.final})
        prompt = core.held_while_waiting(list(held.get("prompt") or []) + [kit.text(e) for e in kit.events], self.budget // 2)
        said: list[str] = []
        if not kit.waiting:  # every write of the last reply is back (or none was out)
            open_calls = _open_calls(history)
            for call_id in sorted(set(back) - set(open_calls)):
                log.warning("inbox %r: the result of %s is for no tool call the history waits for; dropped",
                            kit.run.inbox, call_id)
            if open_calls:
                results = DeferredToolResults(calls={
                    call_id: back.get(call_id, _Back(NO_RESULT, True)).for_pydantic_ai() for call_id in open_calls})
                history = await self._turn(history, said, deferred_tool_results=results)
            back = {}
            if prompt and not kit.waiting:
                history = await self._turn(_trimmed(history, self.budget), said, user_prompt="\n\n".join(prompt))
                prompt = []
        state = {self.key: _stored(history, self.budget),
                 self.waiting_key: {"results": {k: v.stored() for k, v in back.items()}, "prompt": prompt}}
        return await asyncio.to_thread(kit.outcome, messages=["\n".join(said)] if said else [], memory=state)

    async def _turn(self, history: list[ModelMessage], said: list[str], **request: Any) -> list[ModelMessage]:
        """One ``agent.run``: its text output appended to ``said``; the history after it."""
        bot = await self._agent()
        assert self.tools is not None
        try:
            with bot.parallel_tool_call_execution_mode("sequential"):  # the kit decides in the reply's order
                result = await bot.run(message_history=history, toolsets=[self.tools], capabilities=[self._hooks()],
                                       instructions=self.instructions, output_type=_output_type(bot),
                                       infer_name=False, **request)
        except Exception as exc:
            later = outage(exc)
            if later is None:
                raise
            raise later from exc
        output = result.output
        if isinstance(output, DeferredToolRequests):
            pending = set(self.kit.state()["pending"])
            strays = [c.tool_name for c in output.approvals] + [c.tool_name for c in output.calls
                                                                if c.tool_call_id not in pending]
            if strays:  # only the kit's writes may wait: anything else would never be answered
                raise RuntimeError(f"the Pydantic AI run deferred tool calls the kit did not: {strays}")
        elif output is not None:
            text = storable((output if isinstance(output, str) else to_json(output).decode()).strip())
            if text:
                said.append(text)
        return list(result.all_messages())

    async def _agent(self) -> Agent[Any, Any]:
        if self.bot is not None:
            return self.bot
        bot = await asyncio.to_thread(self.build, self.kit)  # may mint the run's grant: not on the loop
        if not isinstance(bot, Agent):
            raise TypeError(f"agent_for: build(kit) returned {type(bot).__name__}, not a pydantic_ai.Agent")
        own = _own_tools(bot)
        if own:
            name = f" {bot.name!r}" if bot.name else ""
            raise ValueError(f"agent_for: the Agent{name} has {' and '.join(own)} of its own: wakeful "
                             "decides every tool call, so the tools come from WAKEFUL_AGENT_CONFIG "
                             "([tools.*], [mcp.*]; a Python function is [tools.NAME] call = \"module:function\")")
        specs = await asyncio.to_thread(self.kit.offered, self.runtime_tools)  # may list an MCP server
        self.bot, self.tools = bot, _KitTools(specs, self._use)
        return bot

    # -- around each model call -----------------------------------------------------------

    def _hooks(self) -> Hooks[Any]:
        hooks: Hooks[Any] = Hooks()
        kit = self.kit

        @hooks.on.before_model_request
        async def before(ctx: RunContext[Any], request_context: Any) -> Any:
            await kit.amodel_call()  # raises LeaseLost, BudgetReached
            if self.calls >= self.max_model_calls:
                note = f"(stopped after {self.max_model_calls} model calls in one run)"
                raise SkipModelRequest(ModelResponse(parts=[TextPart(note)]))
            self.calls += 1
            return request_context

        @hooks.on.after_model_request
        async def after(ctx: RunContext[Any], *, request_context: Any, response: ModelResponse) -> ModelResponse:
            await kit.aspent(_usage(response, kit.config.model))
            return response

        return hooks

    # -- the tool calls -------------------------------------------------------------------

    async def _use(self, name: str, args: Any, call_id: str, words: str) -> ToolUse:
        async with self.lock:
            if call_id in self.seen or call_id in self.kit.state()["pending"]:
                why = f"the tool call id {call_id!r} is used already; nothing ran"
                return ToolUse(call_id, name, "refused", why, True)
            self.seen.add(call_id)
            return await self.kit.ause(name, args, tool_use_id=call_id, words=words)


class _AsGiven:
    """The arguments as the model gave them, for the kit to judge (its policy checks the
    schema): a JSON object as a dict, anything else as it came (which the kit refuses)."""

    def validate_json(self, input: str | bytes | bytearray, **kwargs: Any) -> Any:
        try:
            return json.loads(input)
        except ValueError:
            return input if isinstance(input, str) else bytes(input).decode("utf-8", "replace")

    def validate_python(self, input: Any, **kwargs: Any) -> Any:
        return input


_AS_GIVEN = _AsGiven()


class _KitTools(AbstractToolset[Any]):
    """The config's tools (``kit.offered()``'s specs) as one Pydantic AI toolset, each call
    decided by the kit: an answer now, ``ToolFailed`` with the kit's reason, or ``CallDeferred``
    for a write (its result comes in a later run)."""

    def __init__(self, specs: Sequence[dict[str, Any]],
                 use: Callable[[str, Any, str, str], Awaitable[ToolUse]]) -> None:
        self.specs, self.use = list(specs), use

    @property
    def id(self) -> str | None:
        return "wakeful"

    async def get_tools(self, ctx: RunContext[Any]) -> dict[str, ToolsetTool[Any]]:
        return {spec["name"]: ToolsetTool(
            toolset=self, max_retries=ctx.max_retries, args_validator=_AS_GIVEN,
            tool_def=ToolDefinition(name=spec["name"], description=spec.get("description") or spec["name"],
                                    parameters_json_schema=spec["input_schema"]))
            for spec in self.specs}

    async def call_tool(self, name: str, tool_args: Any, ctx: RunContext[Any], tool: ToolsetTool[Any]) -> Any:
        assert ctx.tool_call_id is not None
        use = await self.use(name, tool_args, ctx.tool_call_id, _words(ctx.messages))
        if use.waiting:  # a write: committed by the finish, run by the executor, its result later
            raise CallDeferred(metadata={"status": use.status})
        if use.is_error:
            raise ToolFailed(use.content)
        return use.content


# -- helpers ----------------------------------------------------------------------------------


def _own_tools(bot: Agent[Any, Any]) -> list[str]:
    """What of its own the Agent would run without the kit: tools, toolsets, native tools."""
    own: list[str] = []
    toolsets = list(bot.toolsets)  # the Agent's own function toolset first, then every other
    if toolsets and isinstance(toolsets[0], FunctionToolset) and toolsets[0].tools:
        own.append("tools")
    if len(toolsets) > 1 or (toolsets and not isinstance(toolsets[0], FunctionToolset)):
        own.append("toolsets")
    native = [t for t in bot.root_capability.get_native_tools() if getattr(t, "kind", None) != "tool_search"]
    if native:  # run at the model's provider (web search, code execution): not the kit's to decide
        own.append("native tools")
    return own


def _output_type(bot: Agent[Any, Any]) -> Any:
    """The Agent's output type with ``DeferredToolRequests`` (a run may end waiting for writes)."""
    given = bot.output_type
    kinds = list(given) if isinstance(given, list | tuple) else [given]
    return given if DeferredToolRequests in kinds else [*kinds, DeferredToolRequests]


def _words(messages: Sequence[ModelMessage]) -> str:
    """What the model said with its tool calls (shown to the human asked to approve one)."""
    last = messages[-1] if messages else None
    if not isinstance(last, ModelResponse):
        return ""
    return storable("\n".join(p.content for p in last.parts if isinstance(p, TextPart)).strip())


def _usage(response: ModelResponse, configured: str) -> Usage:
    """A response's usage as wakeful counts it: input without the cached part (Pydantic AI's
    ``input_tokens`` includes cache reads and writes)."""
    u = response.usage
    return Usage.cache_in_input(response.model_name or configured, u.input_tokens, u.output_tokens,
                                u.cache_write_tokens, u.cache_read_tokens)


def outage(exc: BaseException) -> TryLater | None:
    """A model call's error as an outage (the run waits and tries again, its events not
    counted as failing), as the claude agent's: unreachable or timed out, or a status the API
    is away with (408, 429, 5xx, 529) once the client's own retries are spent; None for any
    other error (a bad request, a refused key), which fails the run."""
    if isinstance(exc, ModelConnectionError):
        return TryLater(f"the model API is unreachable ({type(exc).__name__}: {exc})")
    status = getattr(exc, "status_code", None)
    if isinstance(exc, ModelAPIError) and isinstance(status, int) and is_transient(status):
        after = getattr(exc, "retry_after", None)
        return TryLater(f"the model API answered {status} ({type(exc).__name__})",
                        after=after if isinstance(after, int | float) else retry_after(getattr(exc, "headers", None)))
    return None


def _open_calls(history: Sequence[ModelMessage]) -> list[str]:
    """The ids of the last reply's tool calls that have no return yet: the deferred ones a
    run ended waiting for (the other calls' returns are in the requests after it)."""
    for index in range(len(history) - 1, -1, -1):
        message = history[index]
        if isinstance(message, ModelResponse):
            answered = {p.tool_call_id for m in history[index + 1:] for p in m.parts
                        if isinstance(p, ToolReturnPart | RetryPromptPart)}
            return [c.tool_call_id for c in message.tool_calls if c.tool_call_id not in answered]
    return []


def _starts_exchange(message: ModelMessage) -> bool:
    """A request of a user prompt, not of tool returns: where an exchange begins."""
    return (isinstance(message, ModelRequest) and any(isinstance(p, UserPromptPart) for p in message.parts)
            and not any(isinstance(p, ToolReturnPart | RetryPromptPart) for p in message.parts))


def _trimmed(history: list[ModelMessage], budget: int) -> list[ModelMessage]:
    """The history under ``budget`` characters of JSON, the oldest exchanges (a user prompt
    and everything up to the next) dropped whole; the latest is always kept. The first
    request's system prompt parts open what is kept (Pydantic AI sends them only with an
    empty history)."""
    sizes = [len(json.dumps(m)) for m in ModelMessagesTypeAdapter.dump_python(history, mode="json")]
    if sum(sizes) <= budget:
        return history
    starts = [i for i, m in enumerate(history) if _starts_exchange(m)]
    if not starts or starts[0] != 0:
        starts = [0] + starts
    system = [p for p in history[0].parts if isinstance(p, SystemPromptPart)] if history else []
    total, first = sum(sizes), 0
    while total > budget and first < len(starts) - 1:
        total -= sum(sizes[starts[first]:starts[first + 1]])
        first += 1
    kept = history[starts[first]:]
    head = kept[0]
    if system and isinstance(head, ModelRequest) and not any(isinstance(p, SystemPromptPart) for p in head.parts):
        kept = [replace(head, parts=[*system, *head.parts]), *kept[1:]]
    return kept


def _stored(history: list[ModelMessage], budget: int) -> list[Any]:
    """The history as memory holds it: trimmed to ``budget``, as JSON the store takes, each
    request's ``instructions`` but the latest left out (Pydantic AI records them on every
    request and sends the run's own; a long system prompt would fill the budget otherwise)."""
    last = max((i for i, m in enumerate(history) if isinstance(m, ModelRequest)), default=-1)
    lean = [replace(m, instructions=None) if isinstance(m, ModelRequest) and i != last and m.instructions else m
            for i, m in enumerate(history)]
    return storable(ModelMessagesTypeAdapter.dump_python(_trimmed(lean, budget), mode="json"))


# -- a real model through the egress proxy --------------------------------------------------

_clients: dict[tuple[Any, ...], Any] = {}
_clients_lock = threading.Lock()
_PROVIDERS = {"anthropic": "anthropic", "openai": "openai", "openai-chat": "openai", "openai-responses": "openai"}


def proxied_model(kit: Toolkit, model: str, route: str | None = None) -> Model:
    """A Pydantic AI model reached through ``wakeful proxy``'s ``route`` with this run's grant
    (bound to its lease) as its key: the worker holds no key. ``model`` is
    ``"anthropic:NAME"`` (the route ``anthropic``, as the claude agent's), ``"openai:NAME"``
    (chat completions) or ``"openai-responses:NAME"`` (the route ``openai`` for both). Call
    it from ``build(kit)`` (a worker thread: minting the grant is a store call). One client per
    process and route (its connection pool shared by every run on the process's event loop),
    copied per run with the grant (``with_options``).

    [routes.anthropic]: ``upstream = "https://api.anthropic.com"``, ``secret_env =
    "ANTHROPIC_API_KEY"``, ``header = "x-api-key"``, ``allow = ["POST /v1/messages"]``.
    [routes.openai]: ``upstream = "https://api.openai.com/v1"``, ``secret_env =
    "OPENAI_API_KEY"``, ``allow = ["POST /chat/completions"]`` (``["POST /responses"]``)."""
    from wakeful.agent.egress import proxy_url

    kind, colon, name = model.partition(":")
    if not colon or kind not in _PROVIDERS or not name:
        raise ValueError(f"proxied_model: {model!r} must be anthropic:NAME, openai:NAME or openai-responses:NAME")
    provider = _PROVIDERS[kind]
    route = route or provider
    url = f"{proxy_url()}/{route}"
    key = (os.getpid(), provider, url, kit.config.timeout, kit.config.max_retries)
    with _clients_lock:
        base = _clients.get(key)
        if base is None:
            base = _clients[key] = _client(provider, url, kit.config.timeout, kit.config.max_retries)
    client = base.with_options(api_key=kit.run.grant([route], RUN_GRANT_TTL))
    if provider == "anthropic":
        from pydantic_ai.models.anthropic import AnthropicModel
        from pydantic_ai.providers.anthropic import AnthropicProvider

        return AnthropicModel(name, provider=AnthropicProvider(anthropic_client=client))
    from pydantic_ai.models.openai import OpenAIChatModel, OpenAIResponsesModel
    from pydantic_ai.providers.openai import OpenAIProvider

    made = OpenAIResponsesModel if kind == "openai-responses" else OpenAIChatModel
    return made(name, provider=OpenAIProvider(openai_client=client))


def _client(provider: str, url: str, timeout: float, max_retries: int) -> Any:
    if provider == "anthropic":
        from anthropic import AsyncAnthropic

        return AsyncAnthropic(api_key="each run's grant", base_url=url, timeout=timeout, max_retries=max_retries)
    from openai import AsyncOpenAI

    return AsyncOpenAI(api_key="each run's grant", base_url=url, timeout=timeout, max_retries=max_retries)
