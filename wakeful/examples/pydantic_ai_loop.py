"""An agent loop on Pydantic AI whose tool calls go through wakeful's tool kit (docs/agent.md).

    WAKEFUL_AGENT=wakeful.examples.pydantic_ai_loop:agent
    WAKEFUL_AGENT_CONFIG=agent.toml        # its [tools.*] tables become Pydantic AI tools

Pydantic AI runs the conversation; wakeful decides every tool call. Each configured tool is
a Pydantic AI tool whose function is ``kit.use``: a refused call or an allowed read answers
at once; a write is proposed as an effect and raises ``CallDeferred``, so the agent run ends
with ``DeferredToolRequests`` (Pydantic AI's "deferred tools"). The fenced finish commits the
effect; the executor runs it once (after a human's yes when it asks); its result wakes the
inbox, and the next run hands it back to Pydantic AI as ``DeferredToolResults`` with the
stored message history. Nothing of Pydantic AI's state lives in the process: the history is
in the inbox's memory, written by the finish.

The model is Pydantic AI's ``FunctionModel`` around :func:`scripted_model`, so the example
runs offline; give the Agent a real model (``"anthropic:claude-..."``, through
``wakeful proxy`` so the worker holds no key) and nothing else changes.
"""

from __future__ import annotations

from typing import Any

from pydantic_ai import Agent, RunContext, Tool
from pydantic_ai.exceptions import CallDeferred
from pydantic_ai.messages import (
    ModelMessage,
    ModelMessagesTypeAdapter,
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.tools import DeferredToolRequests, DeferredToolResults

from wakeful import Outcome, Run, Toolkit
from wakeful.examples.custom_loop import plan

HISTORY = "pydantic_ai"  # memory: the message history, as Pydantic AI serialises it
WAITING = "pydantic_ai_waiting"  # memory: results and new text kept until every deferred call is back


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


def kit_tools(kit: Toolkit) -> list[Tool[Any]]:
    """The config's tools as Pydantic AI tools, each call decided and run by the kit."""

    def tool(spec: dict[str, Any]) -> Tool[Any]:
        def call(ctx: RunContext[Any], **args: Any) -> str:
            use = kit.use(spec["name"], args, tool_use_id=ctx.tool_call_id)
            if use.waiting:  # a write: committed by the finish, run by the executor, result later
                raise CallDeferred(metadata={"status": use.status})
            return use.content  # a read's answer (wrapped as data unless trusted), or why it was refused

        # The kit checks the input against the schema (the policy does): Pydantic AI passes it on.
        return Tool.from_schema(call, name=spec["name"], description=spec["description"],
                                json_schema=spec["input_schema"], takes_ctx=True)

    return [tool(spec) for spec in kit.offered()]


def agent(run: Run) -> Outcome:
    kit = Toolkit(run)
    waiting = run.memory.get(WAITING) or {"results": {}, "prompt": []}
    results = {**waiting["results"], **{r.tool_use_id: r.content for r in kit.results if r.final}}
    prompt = waiting["prompt"] + [kit.text(event) for event in kit.events]
    if kit.waiting:  # Pydantic AI takes the deferred results all at once: keep these until then
        return kit.outcome(memory={WAITING: {"results": results, "prompt": prompt}})
    history: list[ModelMessage] = ModelMessagesTypeAdapter.validate_python(run.memory.get(HISTORY) or [])
    bot = Agent(FunctionModel(scripted_model), tools=kit_tools(kit), output_type=[str, DeferredToolRequests])
    said: list[str] = []
    if results:  # the writes of an earlier run are back: the model reads their results
        history = _turn(bot, history, said, deferred_tool_results=DeferredToolResults(calls=results))
    if prompt and not kit.waiting:
        history = _turn(bot, history, said, user_prompt="\n\n".join(prompt))
        prompt = []
    return kit.outcome(messages=["\n".join(said)] if said else [],
                       memory={HISTORY: ModelMessagesTypeAdapter.dump_python(history, mode="json"),
                               WAITING: {"results": {}, "prompt": prompt}})


def _turn(bot: Agent[Any, Any], history: list[ModelMessage], said: list[str], **request: Any) -> list[ModelMessage]:
    result = bot.run_sync(message_history=history, **request)
    if isinstance(result.output, str):
        said.append(result.output)
    return result.all_messages()
