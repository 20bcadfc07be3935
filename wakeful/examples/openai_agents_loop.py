"""An OpenAI Agents SDK agent whose tool calls wakeful decides (docs/openai_agents.md).

    WAKEFUL_AGENT=wakeful.examples.openai_agents_loop:agent
    WAKEFUL_AGENT_CONFIG=agent.toml        # its [tools.*] tables become the SDK's function tools

The SDK runs the loop (``Runner.run``); :func:`wakeful.integrations.openai_agents.agent_for`
gives it the config's tools, decides each call through the tool kit (a write becomes an
interruption of the SDK's run: ``needs_approval``), keeps the SDK's ``RunState`` and the
conversation in the inbox's memory (written by the fenced finish) and resumes the run when
the write's result, or a human's no, comes back.

The model is :class:`StandInModel`, a ``Model`` of the SDK's interface that needs no
network, so the example runs anywhere: a line ``call NAME {json}`` in the user's latest text
is a tool call (``examples.custom_loop.plan``), tool results are answered with their text
(``NAME: content`` lines), anything else with "noted".

A real model, through ``wakeful proxy`` so the worker holds no key: add to the config ::

    [routes.openai]
    upstream = "https://api.openai.com/v1"
    secret_env = "OPENAI_API_KEY"      # in the proxy's environment only
    allow = ["POST /responses"]

and build the Agent with ``model=proxied_model(kit, "gpt-4.1")``
(wakeful.integrations.openai_agents: an ``OpenAIResponsesModel`` whose client's base URL is
the proxy's ``openai`` route and whose key is this run's grant, dead once the lease is). An
``instructions`` of your own, ``model_settings``, an ``output_type``: all as usual. Tools are
not given to the Agent: they are the config's, and only those.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from typing import Any

from agents import Agent
from agents.items import ModelResponse, TResponseInputItem, TResponseOutputItem, TResponseStreamEvent
from agents.models.interface import Model
from agents.testing import ScriptedModel, assistant_message, function_call
from agents.usage import Usage

from wakeful import Toolkit
from wakeful.examples.custom_loop import plan
from wakeful.integrations.openai_agents import agent_for


class StandInModel(Model):
    """The stand-in for a model: after tool results, it reports them; otherwise it calls the
    tools that ``call NAME {json}`` lines of the user's latest text ask for; else "noted".
    Each call gets a fresh id (``call_<hex>``), unique as a real model's are."""

    def reply(self, input: str | list[TResponseInputItem]) -> list[TResponseOutputItem]:
        items = [_plain(i) for i in ([{"role": "user", "content": input}] if isinstance(input, str) else input)]
        names = {i.get("call_id"): i.get("name") for i in items if i.get("type") == "function_call"}
        outputs: list[dict[str, Any]] = []
        for item in reversed(items):  # the tool results since the model's last reply
            if item.get("type") != "function_call_output":
                break
            outputs.insert(0, item)
        if outputs:
            text = "\n".join(f"{names.get(o.get('call_id'), 'tool')}: {_text(o.get('output'))}" for o in outputs)
            return [_said(text)]
        users = [i for i in items if i.get("role") == "user"]
        calls = plan(_text(users[-1].get("content")) if users else "")
        return [function_call(name, args, call_id=f"call_{uuid.uuid4().hex[:24]}") for name, args in calls] \
            or [_said("noted")]

    async def get_response(self, system_instructions: str | None, input: str | list[TResponseInputItem],
                           *args: Any, **kwargs: Any) -> ModelResponse:
        return ModelResponse(output=self.reply(input), usage=Usage(requests=1), response_id=None)

    async def stream_response(self, system_instructions: str | None, input: str | list[TResponseInputItem],
                              *args: Any, **kwargs: Any) -> AsyncIterator[TResponseStreamEvent]:
        # The SDK's own test double turns one reply into the stream of events a provider sends.
        once = ScriptedModel([self.reply(input)])
        async for event in once.stream_response(system_instructions, input, *args, **kwargs):
            yield event


def _plain(item: Any) -> dict[str, Any]:
    if isinstance(item, dict):
        return item
    dumped = item.model_dump(exclude_unset=True) if hasattr(item, "model_dump") else {}
    return dumped if isinstance(dumped, dict) else {}


def _text(content: Any) -> str:
    """A message's or an output's text: a string, or the text of its parts."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(_text(part.get("text") if isinstance(part, dict) else getattr(part, "text", ""))
                         for part in content)
    return "" if content is None else str(content)


def _said(text: str) -> TResponseOutputItem:
    return assistant_message(text, item_id=f"msg_{uuid.uuid4().hex[:24]}")


def errands(kit: Toolkit) -> Agent[Any]:
    """This run's Agent: the config's system prompt, the stand-in model (no tools here:
    agent_for adds the config's)."""
    return Agent(name="errands", instructions=kit.config.system or None, model=StandInModel())


agent = agent_for(errands)
