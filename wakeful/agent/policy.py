"""What happens to one tool use the model asks for: the policy, decided before anything runs.

- a runtime tool (stay silent, mark urgent): noted, answered at once;
- a tool not configured, or ``policy = "deny"``: an error tool_result (denied tools are
  never offered, so the model named it anyway);
- an input its ``input_schema`` refuses: an error tool_result, nothing runs;
- ``ask``: an effect that waits for a human's yes;
- ``allow`` + ``read``: runs inline, in the run;
- ``allow`` + ``write``: an effect, run after the finish commits it.

A conversation that holds untrusted text (wakeful/agent/conversation.py: an event of a source the
config does not trust, any tool's answer not declared ``trusted_output``) turns ``allow``
write tools into ``ask``: that text may have steered the model, so a human sees the write
first, told what tainted it. Where text enters, ``event_text`` and ``tool_output`` say how
the model reads it and what it taints with: the one rule for the claude loop and the tool kit
of any other loop (wakeful/agent/kit.py).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

import jsonschema

from store import Event

from wakeful.agent import wakes
from wakeful.agent.config import RUNTIME_TOOLS, AgentConfig
from wakeful.agent.conversation import as_data, cut
from wakeful.agent.tool import Tool

Kind = Literal["runtime", "refuse", "inline", "effect", "ask"]


@dataclass(frozen=True)
class Decision:
    kind: Kind
    tool: Tool | None = None
    reason: str = ""  # for "refuse": what the model is told; for "ask" after untrusted text: why


def decide(config: AgentConfig, name: str, tool_input: Any, tainted: Sequence[str]) -> Decision:
    """``tainted``: what untrusted text the model had in view when it asked for this tool."""
    if name in RUNTIME_TOOLS:
        return Decision("runtime")
    tool = config.tools.get(name)
    if tool is None or tool.policy == "deny":
        return Decision("refuse", tool, f"the tool {name!r} is not available; nothing ran")
    problem = invalid_input(tool, tool_input)
    if problem:
        return Decision("refuse", tool, f"invalid input for {name!r}: {problem}; nothing ran")
    if tool.effect == "read" and tool.policy == "allow":
        return Decision("inline", tool)
    if tool.policy == "ask" or tainted:  # the human who answers is told what the model had read
        return Decision("ask", tool, tainted_by(tainted))
    return Decision("effect", tool)


def tainted_by(tainted: Sequence[str]) -> str:
    """Why a write waits for a yes, for the human who answers; "" when nothing tainted it."""
    if not tainted:
        return ""
    listed = tainted[0] if len(tainted) == 1 else f"{', '.join(tainted[:-1])} and {tainted[-1]}"
    return f"the conversation holds {listed}, which {'is' if len(tainted) == 1 else 'are'} not trusted"


def invalid_input(tool: Tool, tool_input: Any) -> str | None:
    if not isinstance(tool_input, dict):
        return "the input must be a JSON object"
    error = jsonschema.exceptions.best_match(jsonschema.Draft202012Validator(tool.input_schema).iter_errors(tool_input))
    if error is None:
        return None
    where = "/".join(str(p) for p in error.absolute_path)
    return f"{where + ': ' if where else ''}{error.message}"


def offered(config: AgentConfig, runtime: bool = True) -> list[dict[str, Any]]:
    """The tools the model is told about: every configured tool but the denied ones, and
    (for the claude loop) the runtime's own."""
    tools = [{"name": t.name, "description": t.description or t.name, "input_schema": t.input_schema}
             for t in config.tools.values() if t.policy != "deny"]
    return tools + (RUNTIME_TOOL_SPECS if runtime else [])


def event_text(config: AgentConfig, event: Event, limit: int) -> tuple[str, str | None]:
    """An event as the model reads it (a payload's ``text``, else compact JSON naming the
    source; cut to ``limit``), and what it taints the conversation with: None for a source
    ``trusted_sources`` names, otherwise it is data, delimited and labelled."""
    woken = wakes.arrival(event)  # a wake the model set: its own note, not an outsider's
    if woken is not None:
        return cut(woken, limit), None
    payload = event.payload or {}
    text = payload.get("text")
    if not isinstance(text, str):
        text = json.dumps({"source": event.source, "payload": payload}, ensure_ascii=False,
                          separators=(",", ":"), sort_keys=True)
    text = cut(text, limit)
    if event.source in config.trusted_sources:  # trust is granted, never assumed
        return text, None
    return as_data(text, source=event.source, id=event.source_id), f"an event from {event.source}"


def tool_output(config: AgentConfig, name: str, tool_use_id: str, content: str) -> tuple[str, str | None]:
    """A tool's answer as the model reads it, and what it taints with: data (inline or an
    effect's), unless the config declares that tool ``trusted_output``."""
    tool = config.tools.get(name)
    if tool is not None and tool.trusted_output:
        return content, None
    return as_data(content, tool=name, id=tool_use_id), f"the output of {name}"


RUNTIME_TOOL_SPECS: list[dict[str, Any]] = [
    {"name": "stay_silent",
     "description": "Send nothing this time: nothing changed that the user needs to hear about. "
                    "Any text you write after this is not sent.",
     "input_schema": {"type": "object", "properties": {"reason": {"type": "string"}}}},
    {"name": "mark_urgent",
     "description": "Send your reply now instead of holding it for the next digest: use only "
                    "when the user must know at once.",
     "input_schema": {"type": "object", "properties": {"reason": {"type": "string"}}}},
]
