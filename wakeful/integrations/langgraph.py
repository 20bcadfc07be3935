"""A LangGraph graph as a wakeful agent: the graph runs its own loop, wakeful decides every
tool call (docs/langgraph.md).

    from wakeful.integrations.langgraph import agent_for, chat_graph
    agent = agent_for(chat_graph(model))          # WAKEFUL_AGENT=yourmodule:agent

- :func:`agent_for` makes ``async def agent(run) -> Outcome`` from ``build(kit)``, which
  returns the run's graph as a ``StateGraph`` (not compiled: it is compiled with the inbox's
  checkpointer). The batch's text (``kit.text``: a stranger's wrapped as data) is one human
  message; the new AI messages' text is what the run says (``kit.outcome(messages=...)``).
- :func:`add_tools` adds the tool nodes to a graph of your own: ``tools`` decides each tool
  call of the last AI message, in order, through ``await kit.ause(name, args,
  tool_use_id=<the call's id>)``. A refused call and an allowed read answer at once (a
  ``ToolMessage``); a write (``use.waiting``: proposed or asked) does not run in the graph:
  ``tools`` sends it to ``tools_wait``, which calls LangGraph's ``interrupt()``, one task per
  write, and the run ends with the graph interrupted. The fenced finish commits the effect;
  the executor runs it once (after a human's yes when asked); its result (or the human's no)
  wakes the inbox, and a later run resumes the graph with ``Command(resume={interrupt id:
  {"content", "is_error", "status"}})``: the waiting task returns it as the call's
  ``ToolMessage`` and the graph goes on (to the model once every write of the reply is back).
- :func:`chat_graph` is the common case: a chat model bound to the config's tools
  (``kit.offered()``), its tool calls to the tool nodes, back to the model; the stored
  conversation trimmed to the config's ``conversation_budget`` after each answer. Its model
  node calls ``kit.model_call()`` before each call (the lease; the day's ``[budget]``: once
  spent, no call, the run ends with ``kit.stopped`` and its input waits for the next day's
  run) and counts the answer's usage (``kit.spent(usage_of(answer, model))``): a model node
  of your own graph does the same.
- The checkpoint lives in the inbox's memory (``memory[memory_key]["checkpoint"]``) through
  :class:`InboxCheckpointer`, a ``BaseCheckpointSaver`` over a JSON-able dict, loaded at
  the run's start and dumped into its Outcome: written only by the fenced finish, so a run
  fenced off mid-way leaves the last committed state, and a takeover or a restart resumes
  from it. Nothing of the graph stays in the process between runs.

Text that arrives while the graph waits for a write is kept (``memory[memory_key]["prompt"]``)
and becomes the human message once the graph is no longer interrupted (a chat API refuses a
human turn between a model's tool calls and their results). An ``interrupt()`` of your own
graph's is not answered here: the run fails naming it (ask a human through a tool with
``policy = "ask"`` instead).
"""

from __future__ import annotations

import asyncio
import base64
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Sequence
from typing import Any

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, AnyMessage, BaseMessage, HumanMessage, RemoveMessage, SystemMessage, ToolMessage
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    WRITES_IDX_MAP,
    BaseCheckpointSaver,
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
    get_checkpoint_id,
    get_checkpoint_metadata,
    writes_sort_key,
)
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.types import Command, Interrupt, Send, interrupt

from store.records import Outcome
from store.spend import Usage
from wakeful.agent import core
from wakeful.agent.conversation import storable
from wakeful.agent.kit import Toolkit
from wakeful.agent.outage import TryLater, is_transient, retry_after
from wakeful.agent.run import BudgetReached, Run

__all__ = ["InboxCheckpointer", "add_tools", "agent_for", "chat_graph", "outage", "state_of", "usage_of"]

log = logging.getLogger("wakeful.integrations.langgraph")

MEMORY_KEY = "langgraph"  # memory: {"checkpoint": the graph's, "prompt": text kept while it waits}
MARK = "wakeful_tool"  # in an interrupt's value: the interrupts this module answers

Build = Callable[[Toolkit], StateGraph]


# -- the agent ------------------------------------------------------------------------------


def agent_for(build: Build, *, memory_key: str = MEMORY_KEY) -> Callable[[Run], Awaitable[Outcome]]:
    """``async def agent(run) -> Outcome`` running the graph ``build(kit)`` returns, its
    checkpoint in the inbox's memory under ``memory_key``."""

    async def agent(run: Run) -> Outcome:
        kit = await asyncio.to_thread(Toolkit, run)  # may read the inbox's timers: not on the loop
        try:
            return await _wake(kit, build, memory_key)
        except BudgetReached as reached:  # no model call: the run's input waits for the next day
            return kit.stopped(reached)

    return agent


async def _wake(kit: Toolkit, build: Build, memory_key: str) -> Outcome:
    run = kit.run
    stored = run.memory.get(memory_key) or {}
    saver = InboxCheckpointer(stored.get("checkpoint"))
    # build may list tools over the network (kit.offered(): an MCP server): not on the loop
    graph = (await asyncio.to_thread(build, kit)).compile(checkpointer=saver)
    config: RunnableConfig = {"configurable": {"thread_id": run.inbox}}
    prompt = list(stored.get("prompt") or []) + [kit.text(event) for event in kit.events]
    said: list[str] = []
    waits = _waits(await graph.aget_state(config))
    resume = {waits[r.tool_use_id].id: {"content": r.content, "is_error": r.is_error, "status": r.status}
              for r in kit.results if r.final and r.tool_use_id in waits}
    for r in kit.results:
        if r.final and r.tool_use_id not in waits:
            log.warning("inbox %r: the result of %s (%s) is for no tool call the graph waits for; "
                        "dropped", run.inbox, r.tool_use_id, r.tool)
    if resume:  # earlier writes are back (or refused): the waiting tasks return them
        waits = await _turn(graph, Command(resume=resume), config, said)
    if prompt and not waits:
        waits = await _turn(graph, {"messages": [HumanMessage("\n\n".join(prompt))]}, config, said)
        prompt = []
    memory = {memory_key: {"checkpoint": saver.dump(prune=not waits), "prompt": prompt}}
    return await asyncio.to_thread(kit.outcome, messages=["\n".join(said)] if said else [], memory=memory)


async def _turn(graph: Any, input: Any, config: RunnableConfig, said: list[str]) -> dict[str, Interrupt]:
    """One invocation: what the new AI messages say appended to ``said``; the writes the graph
    now waits for returned."""
    before = {m.id for m in _messages(await graph.aget_state(config))}
    await graph.ainvoke(input, config)
    after = await graph.aget_state(config)
    for message in _messages(after):
        if isinstance(message, AIMessage) and message.id not in before and not message.tool_calls:
            text = storable(message.text.strip())  # no NUL: the store would refuse the finish
            if text:  # its answer; text said with tool calls is in the approval request (words)
                said.append(text)
    return _waits(after)


def _messages(snapshot: Any) -> list[AnyMessage]:
    values = snapshot.values if isinstance(snapshot.values, dict) else {}
    return list(values.get("messages") or [])


def _waits(snapshot: Any) -> dict[str, Interrupt]:
    """The interrupts the graph waits on, by tool use id; one not this module's fails the run."""
    waits: dict[str, Interrupt] = {}
    for pending in snapshot.interrupts:
        value = pending.value
        if not (isinstance(value, dict) and value.get(MARK)):
            raise RuntimeError(f"the graph is interrupted by {value!r}, which agent_for does not answer: "
                               "ask a human through a tool whose policy asks (docs/langgraph.md)")
        waits[value["tool_use_id"]] = pending
    return waits


def state_of(memory: dict[str, Any], memory_key: str = MEMORY_KEY) -> dict[str, Any]:
    """The graph's values as the inbox's memory holds them (its root checkpoint's channels):
    what an operator or a test reads, e.g. ``state_of(memory)["messages"]``."""
    saver = InboxCheckpointer((memory.get(memory_key) or {}).get("checkpoint"))
    found = saver.get_tuple({"configurable": {"thread_id": "", "checkpoint_ns": ""}})
    return dict(found.checkpoint["channel_values"]) if found else {}


# -- the tool nodes -------------------------------------------------------------------------


def add_tools(graph: StateGraph, kit: Toolkit, *, name: str = "tools", then: str = "model") -> None:
    """Adds ``name`` (decides each tool call of the last AI message through the kit) and
    ``name + "_wait"`` (one task per write, interrupted until its result comes back) to
    ``graph``, whose state keeps its messages under ``messages`` (``MessagesState``); both go
    on to ``then``. Route to ``name`` after the model when its last message has tool calls
    (langgraph.prebuilt's ``tools_condition``)."""
    wait = f"{name}_wait"

    async def decide(state: dict[str, Any]) -> Command:
        ai = next(m for m in reversed(state["messages"]) if isinstance(m, AIMessage))
        words = ai.text.strip()  # what the model said with its calls: shown to the human who approves
        answered: list[ToolMessage] = []
        waiting: list[Send] = []
        for call in ai.tool_calls:  # in order, one at a time: a read's answer taints the next write
            await asyncio.to_thread(kit.run.heartbeat)  # a run that lost its lease stops here
            use = await kit.ause(call["name"], call["args"], tool_use_id=call["id"], words=words)
            if use.waiting:  # a write: committed by the finish, run by the executor, its result later
                waiting.append(Send(wait, {MARK: True, "tool_use_id": use.tool_use_id,
                                           "tool": use.tool, "status": use.status}))
            else:  # refused (why), or an allowed read's answer (wrapped as data unless trusted)
                answered.append(_tool_message(use.tool_use_id, use.tool, use.content, use.is_error))
        return Command(update={"messages": answered}, goto=waiting or then)

    def wait_for(request: dict[str, Any]) -> dict[str, Any]:
        # Ends the run here; a later run resumes with what came back (agent_for).
        result = interrupt(request)
        return {"messages": [_tool_message(request["tool_use_id"], request["tool"],
                                           str(result.get("content", "")), bool(result.get("is_error")))]}

    graph.add_node(name, decide, destinations=(then, wait))
    graph.add_node(wait, wait_for)
    graph.add_edge(wait, then)


def _tool_message(tool_use_id: str, tool: str, content: str, is_error: bool) -> ToolMessage:
    return ToolMessage(content, tool_call_id=tool_use_id, name=tool, status="error" if is_error else "success")


def chat_graph(model: BaseChatModel | Callable[[Toolkit], BaseChatModel], *, system: str | None = None) -> Build:
    """``build(kit)`` for the common case: ``model`` (or ``model(kit)``, made for each run: a
    client holding the run's grant) bound to the config's tools, the kit's tool nodes, back to
    the model until it answers without a tool call; then the stored conversation is trimmed
    to the config's ``conversation_budget`` (oldest turns first), as the claude agent's is.
    The system prompt is ``system`` or the config's ``[agent] system``, with the note on
    wrapped text."""

    def build(kit: Toolkit) -> StateGraph:
        chat = model if isinstance(model, BaseChatModel) else model(kit)
        bound = chat.bind_tools(kit.offered())
        prompt = f"{kit.config.system if system is None else system}\n\n{core.UNTRUSTED_NOTE}".strip()

        async def call_model(state: MessagesState) -> dict[str, Any]:
            await kit.amodel_call()  # a run that lost its lease, or the day's budget, stops here
            try:
                answer = await bound.ainvoke([SystemMessage(prompt), *state["messages"]])
            except Exception as exc:
                later = outage(exc)
                if later is None:
                    raise
                raise later from exc
            await kit.aspent(usage_of(answer, kit.config.model))
            return {"messages": [answer]}

        def route(state: MessagesState) -> str:
            last = state["messages"][-1]
            return "tools" if isinstance(last, AIMessage) and last.tool_calls else "trim"

        def trim(state: MessagesState) -> dict[str, Any]:
            return {"messages": [RemoveMessage(id=m.id) for m in _past_budget(state["messages"],
                                                                               kit.config.conversation_budget)]}

        graph = StateGraph(MessagesState)
        graph.add_node("model", call_model)
        graph.add_node("trim", trim)
        add_tools(graph, kit, then="model")
        graph.add_edge(START, "model")
        graph.add_conditional_edges("model", route, ["tools", "trim"])
        graph.add_edge("trim", END)
        return graph

    return build


def usage_of(message: BaseMessage, model: str) -> Usage:
    """A chat model's answer's usage (LangChain's ``usage_metadata``, whose ``input_tokens``
    include the cached ones) as the day's spend counts it; nothing when the model reports none."""
    meta: dict[str, Any] = dict(getattr(message, "usage_metadata", None) or {})
    details = dict(meta.get("input_token_details") or {})
    named = (getattr(message, "response_metadata", None) or {}).get("model_name")
    return Usage.cache_in_input(str(named or model), meta.get("input_tokens"), meta.get("output_tokens"),
                                details.get("cache_creation"), details.get("cache_read"))


def outage(exc: BaseException) -> TryLater | None:
    """A model client's error as an outage (the run waits and tries again, its events not
    counted as failing), as the claude agent's: unreachable, timed out, or a status the API
    is away with (429, 5xx, 529) once the client's own retries are spent; None for any other
    error (a bad request, a refused key), which fails the run. Read from the error's shape
    (``status_code``, ``response.headers``; the Anthropic and OpenAI SDKs' ``APIConnectionError``
    and ``APITimeoutError``), so any LangChain chat model's client is covered."""
    name = type(exc).__name__
    if name in ("APIConnectionError", "APITimeoutError") or isinstance(exc, ConnectionError | TimeoutError):
        return TryLater(f"the model API is unreachable ({name}: {exc})")
    status = getattr(exc, "status_code", None)
    if isinstance(status, int) and is_transient(status):
        headers = getattr(getattr(exc, "response", None), "headers", None)
        return TryLater(f"the model API answered {status} ({name})", after=retry_after(headers))
    return None


def _past_budget(messages: Sequence[AnyMessage], budget: int) -> list[AnyMessage]:
    """The oldest messages to drop so the rest fits ``budget`` characters, whole turns only
    (what is kept starts with a human message: no tool result without its call); the last
    turn is kept whatever its size."""
    size, cut = 0, None
    for i in range(len(messages) - 1, -1, -1):
        m = messages[i]
        size += len(str(m.content)) + (len(str(m.tool_calls)) if isinstance(m, AIMessage) else 0)
        if isinstance(m, HumanMessage):
            if cut is not None and size > budget:
                break
            cut = i
    return list(messages[:cut]) if cut else []


# -- the checkpointer -----------------------------------------------------------------------


def _typed(value: tuple[str, bytes]) -> list[str]:
    return [value[0], base64.b64encode(value[1]).decode("ascii")]


def _untyped(value: Sequence[str]) -> tuple[str, bytes]:
    return (value[0], base64.b64decode(value[1]))


class InboxCheckpointer(BaseCheckpointSaver[int]):
    """A LangGraph checkpointer over one inbox's memory: ``InboxCheckpointer(data)`` loads what
    ``dump()`` returned (plain JSON: the store keeps memory as JSON), one thread (the inbox).

    It keeps the latest checkpoint of each namespace and that checkpoint's pending writes
    (what a resume needs), not the history: ``get_state_history`` and time travel see one
    checkpoint, and LangGraph's beta ``DeltaChannel`` (which replays ancestors) is not
    supported. Values are serialised by LangGraph's own serde (msgpack), base64 in the JSON."""

    def __init__(self, data: dict[str, Any] | None = None) -> None:
        super().__init__()
        # namespace -> {"id", "parent", "checkpoint": (type, bytes), "metadata": (type, bytes)}
        self._latest: dict[str, dict[str, Any]] = {}
        # (namespace, checkpoint id) -> {(task id, idx): (task id, channel, (type, bytes), task path)}
        self._writes: dict[tuple[str, str], dict[tuple[str, int], tuple[str, str, tuple[str, bytes], str]]] = {}
        for ns, saved in ((data or {}).get("namespaces") or {}).items():
            self._latest[ns] = {"id": saved["id"], "parent": saved.get("parent"),
                                "checkpoint": _untyped(saved["checkpoint"]),
                                "metadata": _untyped(saved["metadata"])}
            self._writes[(ns, saved["id"])] = {
                (task_id, idx): (task_id, channel, _untyped(value), path)
                for task_id, idx, channel, value, path in saved.get("writes") or []}

    def dump(self, prune: bool = False) -> dict[str, Any]:
        """What the inbox's memory keeps. ``prune``: the graph is not interrupted, so the
        checkpoints of finished subgraphs (namespaces but the root) are left out."""
        namespaces = {}
        for ns, saved in self._latest.items():
            if prune and ns:
                continue
            writes = self._writes.get((ns, saved["id"])) or {}
            namespaces[ns] = {"id": saved["id"], "parent": saved["parent"],
                              "checkpoint": _typed(saved["checkpoint"]), "metadata": _typed(saved["metadata"]),
                              "writes": [[t, idx, channel, _typed(value), path]
                                         for (t, idx), (_, channel, value, path) in writes.items()]}
        return {"v": 1, "namespaces": namespaces}

    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        ns = config["configurable"].get("checkpoint_ns", "")
        saved = self._latest.get(ns)
        wanted = get_checkpoint_id(config)
        if saved is None or (wanted and wanted != saved["id"]):
            return None
        return self._tuple(config["configurable"].get("thread_id", ""), ns, saved)

    def _tuple(self, thread_id: str, ns: str, saved: dict[str, Any]) -> CheckpointTuple:
        stored = self._writes.get((ns, saved["id"])) or {}
        ordered = sorted(stored.items(), key=lambda item: writes_sort_key(item[1][3], *item[0]))
        parent = saved["parent"]
        return CheckpointTuple(
            config={"configurable": {"thread_id": thread_id, "checkpoint_ns": ns, "checkpoint_id": saved["id"]}},
            checkpoint=self.serde.loads_typed(saved["checkpoint"]),
            metadata=self.serde.loads_typed(saved["metadata"]),
            parent_config=({"configurable": {"thread_id": thread_id, "checkpoint_ns": ns, "checkpoint_id": parent}}
                           if parent else None),
            pending_writes=[(t, channel, self.serde.loads_typed(value)) for t, channel, value, _ in
                            (w for _, w in ordered)])

    def list(self, config: RunnableConfig | None, *, filter: dict[str, Any] | None = None,
             before: RunnableConfig | None = None, limit: int | None = None) -> Iterator[CheckpointTuple]:
        thread_id = (config or {}).get("configurable", {}).get("thread_id", "")
        wanted_ns = (config or {}).get("configurable", {}).get("checkpoint_ns")
        wanted_id = get_checkpoint_id(config) if config else None
        below = get_checkpoint_id(before) if before else None
        found = 0
        for ns, saved in self._latest.items():
            if (wanted_ns is not None and ns != wanted_ns) or (wanted_id and saved["id"] != wanted_id):
                continue
            if below and saved["id"] >= below:
                continue
            tup = self._tuple(thread_id, ns, saved)
            if filter and any(tup.metadata.get(k) != v for k, v in filter.items()):
                continue
            if limit is not None and found >= limit:
                return
            found += 1
            yield tup

    def put(self, config: RunnableConfig, checkpoint: Checkpoint, metadata: CheckpointMetadata,
            new_versions: ChannelVersions) -> RunnableConfig:
        thread_id = config["configurable"]["thread_id"]
        ns = config["configurable"].get("checkpoint_ns", "")
        self._latest[ns] = {"id": checkpoint["id"], "parent": config["configurable"].get("checkpoint_id"),
                            "checkpoint": self.serde.dumps_typed(checkpoint),
                            "metadata": self.serde.dumps_typed(get_checkpoint_metadata(config, metadata))}
        for key in [k for k in self._writes if k[0] == ns and k[1] != checkpoint["id"]]:
            del self._writes[key]  # an older checkpoint's writes: it is gone
        return {"configurable": {"thread_id": thread_id, "checkpoint_ns": ns, "checkpoint_id": checkpoint["id"]}}

    def put_writes(self, config: RunnableConfig, writes: Sequence[tuple[str, Any]], task_id: str,
                   task_path: str = "") -> None:
        ns = config["configurable"].get("checkpoint_ns", "")
        stored = self._writes.setdefault((ns, config["configurable"]["checkpoint_id"]), {})
        for idx, (channel, value) in enumerate(writes):
            key = (task_id, WRITES_IDX_MAP.get(channel, idx))
            if key[1] >= 0 and key in stored:
                continue  # a task's writes are saved once; the special channels' are replaced
            stored[key] = (task_id, channel, self.serde.dumps_typed(value), task_path)

    def delete_thread(self, thread_id: str) -> None:
        self._latest.clear()
        self._writes.clear()

    # Nothing here waits on I/O: the async API is the sync one.

    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        return self.get_tuple(config)

    async def alist(self, config: RunnableConfig | None, *, filter: dict[str, Any] | None = None,
                    before: RunnableConfig | None = None, limit: int | None = None) -> AsyncIterator[CheckpointTuple]:
        for tup in self.list(config, filter=filter, before=before, limit=limit):
            yield tup

    async def aput(self, config: RunnableConfig, checkpoint: Checkpoint, metadata: CheckpointMetadata,
                   new_versions: ChannelVersions) -> RunnableConfig:
        return self.put(config, checkpoint, metadata, new_versions)

    async def aput_writes(self, config: RunnableConfig, writes: Sequence[tuple[str, Any]], task_id: str,
                          task_path: str = "") -> None:
        self.put_writes(config, writes, task_id, task_path)

    async def adelete_thread(self, thread_id: str) -> None:
        self.delete_thread(thread_id)
