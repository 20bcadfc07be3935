"""LangGraph agents for tests/agent/test_langgraph_loop.py.

``held``: the example's graph and stand-in model, except that the first model call whose
human text holds a line ``hold`` waits (a file ``held`` in ``WAKEFUL_TEST_LANGGRAPH_GATE``
says it does) until a file ``release`` appears there: a run kept inside the model call, so
the test can pause its worker past its lease and let another take the inbox over.

``asks_on_its_own``: a graph that calls ``interrupt()`` of its own, which agent_for refuses
to answer."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Any

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.types import interrupt

from wakeful import Toolkit
from wakeful.examples.langgraph_loop import ScriptedChatModel, reply
from wakeful.integrations.langgraph import agent_for, chat_graph


class HeldChatModel(ScriptedChatModel):
    async def _agenerate(self, messages: list[BaseMessage], stop: list[str] | None = None,
                         run_manager: Any = None, **kwargs: Any) -> ChatResult:
        gate = Path(os.environ["WAKEFUL_TEST_LANGGRAPH_GATE"])
        human = next((m for m in reversed(messages) if isinstance(m, HumanMessage)), None)
        if human is not None and "hold" in human.text.splitlines() and not (gate / "held").exists():
            (gate / "held").touch()
            while not (gate / "release").exists():
                await asyncio.sleep(0.05)
        return ChatResult(generations=[ChatGeneration(message=reply(messages))])


held = agent_for(chat_graph(HeldChatModel()))


def _asking(kit: Toolkit) -> StateGraph:
    def ask(state: MessagesState) -> dict[str, Any]:
        return {"messages": [AIMessage(str(interrupt("which order?")))]}

    graph = StateGraph(MessagesState)
    graph.add_node("ask", ask)
    graph.add_edge(START, "ask")
    graph.add_edge("ask", END)
    return graph


asks_on_its_own = agent_for(_asking)
