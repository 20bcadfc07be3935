"""An agent on LangGraph whose tool calls wakeful decides (docs/langgraph.md).

    WAKEFUL_AGENT=wakeful.examples.langgraph_loop:agent
    WAKEFUL_AGENT_CONFIG=agent.toml        # its [tools.*] tables: bound to the model, decided by the kit

LangGraph runs the loop (model -> tools -> model ...); wakeful decides each tool call
(wakeful/integrations/langgraph.py): a refused call or an allowed read answers at once, a
write interrupts the graph (LangGraph's ``interrupt()``), the run ends, the finish commits the
effect with the graph's checkpoint in the inbox's memory, the executor runs the write once
(after a human's yes when asked) and a later run resumes the graph with its result
(``Command(resume=...)``).

The model is :class:`ScriptedChatModel`, a LangChain chat model that needs no network, so the
example runs anywhere. For a real one, give ``chat_graph`` any LangChain chat model; reach its
API through ``wakeful proxy`` (a ``[routes.anthropic]`` table, the key in the proxy's
environment only) so the worker holds no key: the client's key is the run's grant, bound to
its lease (dead after a takeover), so make the model for each run (``chat_graph`` takes
``model(kit)`` too; it is called off the event loop)::

    from langchain_anthropic import ChatAnthropic
    from wakeful.agent import egress
    from wakeful.agent.config import RUN_GRANT_TTL

    def claude(kit):
        return ChatAnthropic(model="claude-sonnet-4-5", base_url=f"{egress.proxy_url()}/anthropic",
                             api_key=kit.run.grant(["anthropic"], RUN_GRANT_TTL))

    agent = agent_for(chat_graph(claude))

Nothing else changes: the proxy takes the grant from ``x-api-key`` and puts the key on the
way out (docs/proxy.md).
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import Any

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.runnables import Runnable
from langchain_core.utils.function_calling import convert_to_openai_tool

from wakeful.examples.custom_loop import plan
from wakeful.integrations.langgraph import agent_for, chat_graph


class ScriptedChatModel(BaseChatModel):
    """The stand-in for a model (as wakeful/examples/custom_loop.py's): after tool results it
    reports them, one ``NAME: content`` line each; otherwise each ``call NAME {json}`` line of
    the latest human text is a tool call; with none, it answers "noted"."""

    @property
    def _llm_type(self) -> str:
        return "wakeful-scripted"

    def bind_tools(self, tools: Sequence[Any], **kwargs: Any) -> Runnable[Any, AIMessage]:
        return self.bind(tools=[convert_to_openai_tool(t) for t in tools], **kwargs)

    def _generate(self, messages: list[BaseMessage], stop: list[str] | None = None,
                  run_manager: Any = None, **kwargs: Any) -> ChatResult:
        return ChatResult(generations=[ChatGeneration(message=reply(messages))])


def reply(messages: list[BaseMessage]) -> AIMessage:
    returns: list[ToolMessage] = []
    for message in reversed(messages):  # the results after the model's last reply
        if not isinstance(message, ToolMessage):
            break
        returns.insert(0, message)
    if returns:
        return AIMessage("\n".join(f"{m.name}: {m.text}" for m in returns))
    human = next((m for m in reversed(messages) if isinstance(m, HumanMessage)), None)
    calls = [{"name": name, "args": args if isinstance(args, dict) else {"input": args},
              "id": f"call_{uuid.uuid4().hex[:24]}", "type": "tool_call"}
             for name, args in plan(human.text if human else "")]
    return AIMessage("", tool_calls=calls) if calls else AIMessage("noted")


agent = agent_for(chat_graph(ScriptedChatModel()))
