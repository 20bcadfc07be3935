"""A Pydantic AI agent whose tool calls wakeful decides (docs/pydantic_ai.md).

    WAKEFUL_AGENT=wakeful.examples.pydantic_ai_loop:agent
    WAKEFUL_AGENT_CONFIG=agent.toml        # its [tools.*] tables become Pydantic AI tools

Pydantic AI runs the loop (``agent.run``); :func:`wakeful.integrations.pydantic_ai.agent_for`
gives it the config's tools, decides each call through the tool kit (a write raises
``CallDeferred``: the run ends with ``DeferredToolRequests``), keeps the message history in
the inbox's memory (written by the fenced finish) and hands the write's result, or a human's
no, back as ``DeferredToolResults`` in a later run.

The model is Pydantic AI's ``FunctionModel`` around :func:`scripted_model`, so the example
runs offline: a line ``call NAME {json}`` in the user's text is a tool call
(``examples.custom_loop.plan``), tool returns are answered with their text (``NAME: content``
lines), anything else with "noted".

A real model, through ``wakeful proxy`` so the worker holds no key: add to the config ::

    [routes.anthropic]
    upstream = "https://api.anthropic.com"
    secret_env = "ANTHROPIC_API_KEY"   # in the proxy's environment only
    header = "x-api-key"
    allow = ["POST /v1/messages"]

and build the Agent with ``proxied_model(kit, "anthropic:claude-sonnet-4-5")``
(wakeful.integrations.pydantic_ai: an ``AnthropicModel`` whose client's base URL is the
proxy's ``anthropic`` route and whose key is this run's grant, dead once the lease is;
``"openai:gpt-4.1"`` through a ``[routes.openai]`` the same way)::

    def errands(kit: Toolkit) -> Agent:
        return Agent(proxied_model(kit, "anthropic:claude-sonnet-4-5"), instructions=kit.config.system)

Instructions, model settings, an output type: all as usual. Tools are not given to the
Agent: they are the config's, and only those.
"""

from __future__ import annotations

from typing import Any

from pydantic_ai import Agent
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel

from wakeful import Toolkit
from wakeful.examples.custom_loop import plan
from wakeful.integrations.pydantic_ai import agent_for


def scripted_model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    """The stand-in for a model: after tool results, it reports them; otherwise it calls the
    tools that ``call NAME {json}`` lines of the user's text ask for (examples.custom_loop.plan)."""
    last = messages[-1]
    returns = [p for p in last.parts if isinstance(p, ToolReturnPart)] if isinstance(last, ModelRequest) else []
    if returns:
        return ModelResponse(parts=[TextPart("\n".join(f"{p.tool_name}: {p.content}" for p in returns))])
    text = "\n".join(p.content for p in last.parts if isinstance(p, UserPromptPart) and isinstance(p.content, str))
    calls = [ToolCallPart(name, args) for name, args in plan(text)]
    return ModelResponse(parts=calls or [TextPart("noted")])


def errands(kit: Toolkit) -> Agent[Any, str]:
    """This run's Agent: the config's system prompt, the stand-in model (no tools here:
    agent_for adds the config's)."""
    return Agent(FunctionModel(scripted_model), instructions=kit.config.system or None)


agent = agent_for(errands)
