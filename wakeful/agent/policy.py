"""What happens to one tool use the model asks for: the policy, decided before anything runs.

- a runtime tool (stay silent, mark urgent): noted, answered at once, unless a stranger's
  text could be behind it (below);
- a tool not configured, or ``policy = "deny"``: an error tool_result (denied tools are
  never offered, so the model named it anyway);
- an input the store cannot hold (a NUL, a lone surrogate, too deep or too big) or its
  ``input_schema`` refuses: an error tool_result, nothing runs;
- ``ask``: an effect that waits for a human's yes;
- ``allow`` + ``read``: runs inline, in the run;
- ``allow`` + ``write``: an effect, run after the finish commits it;
- past ``[limits]`` (``tool_uses_per_run``, ``approvals_per_run``, counted by the loop's
  :class:`RunCount`): an error tool_result, nothing runs and nothing is asked.

A conversation that holds untrusted text (wakeful/agent/conversation.py: an event of a source the
config does not trust, any tool's answer not declared ``trusted_output``) turns ``allow``
write tools into ``ask``: that text may have steered the model, so a human sees the write
first, told what tainted it. Nor may that text change how or whether the owner is spoken
to: ``mark_urgent`` is refused (the reply goes at the outbox's pace), and so is
``stay_silent`` while the owner's words wait for an answer (silence over a stranger's event
alone stays the model's choice). Where text enters, ``event_text`` and ``tool_output`` say
how the model reads it and what it taints with, and ``from_owner`` whether an answer is owed
to it: the one rule for the claude loop and the tool kit of any other loop
(wakeful/agent/kit.py).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

import jsonschema

from store import Event, InvalidEvent, validate
from wakeful.settings import StoreSettings

from wakeful.agent import wakes
from wakeful.agent.config import RUNTIME_TOOLS, AgentConfig, RunLimits
from wakeful.agent.conversation import as_data, cut
from wakeful.agent.tool import Tool

Kind = Literal["runtime", "refuse", "inline", "effect", "ask"]
# The most of a tool's input the store keeps with its effect (store/effects.py): bigger, and
# the finish that commits the effect would fail.
MAX_INPUT_BYTES = StoreSettings().max_payload_bytes


@dataclass(frozen=True)
class Decision:
    kind: Kind
    tool: Tool | None = None
    reason: str = ""  # for "refuse": what the model is told; for "ask" after untrusted text: why


@dataclass
class RunCount:
    """What one run has used of ``[limits]``: each loop keeps one per run and passes it to
    every :func:`decide`."""

    tool_uses: int = 0
    approvals: int = 0

    def bound(self, limits: RunLimits, name: str, decision: Decision) -> Decision:
        """``decision``, counted; past a bound, a refusal naming it instead."""
        if self.tool_uses >= limits.tool_uses_per_run:
            return Decision("refuse", decision.tool, (
                f"{name!r} refused: this run has made {limits.tool_uses_per_run} tool uses, the most allowed "
                "(tool_uses_per_run of [limits]), so that one input cannot set off a flood of calls; "
                "nothing ran"))
        self.tool_uses += 1
        if decision.kind != "ask":
            return decision
        if self.approvals >= limits.approvals_per_run:
            return Decision("refuse", decision.tool, (
                f"{name!r} refused: this run has asked for {limits.approvals_per_run} approvals, the most "
                "allowed (approvals_per_run of [limits]), so that one input cannot flood a human with "
                "requests; nothing ran and nothing was asked"))
        self.approvals += 1
        return decision


def decide(config: AgentConfig, name: str, tool_input: Any, tainted: Sequence[str],
           owner_waiting: bool = False, count: RunCount | None = None) -> Decision:
    """``tainted``: what untrusted text the model had in view when it asked for this tool;
    ``owner_waiting``: the owner's words (``from_owner``) wait for this run's answer;
    ``count``: the run's :class:`RunCount`, bounding it by ``[limits]``."""
    decision = _decided(config, name, tool_input, tainted, owner_waiting)
    return decision if count is None else count.bound(config.limits, name, decision)


def _decided(config: AgentConfig, name: str, tool_input: Any, tainted: Sequence[str],
             owner_waiting: bool) -> Decision:
    if name in RUNTIME_TOOLS:
        problem = invalid_input(RUNTIME_SCHEMAS[name], tool_input)
        if problem:
            return Decision("refuse", None, f"invalid input for {name!r}: {problem}; nothing ran")
        refused = runtime_refusal(name, tainted, owner_waiting)
        return Decision("refuse", None, refused) if refused else Decision("runtime")
    tool = config.tools.get(name)
    if tool is None or tool.policy == "deny":
        return Decision("refuse", tool, f"the tool {name!r} is not available; nothing ran")
    problem = invalid_input(tool.input_schema, tool_input)
    if problem:
        return Decision("refuse", tool, f"invalid input for {name!r}: {problem}; nothing ran")
    if tool.effect == "read" and tool.policy == "allow":
        return Decision("inline", tool)
    if tool.policy == "ask" or tainted:  # the human who answers is told what the model had read
        return Decision("ask", tool, tainted_by(tainted))
    return Decision("effect", tool)


def runtime_refusal(name: str, tainted: Sequence[str], owner_waiting: bool) -> str | None:
    """Why a runtime tool is refused, or None. Text from outside the owner must not change
    how or whether the owner is spoken to: with it in view the model may be its voice, so it
    cannot make a message urgent (four strangers' comments would be four sends past the
    outbox's pace), nor silence the answer the owner's words wait for. Over a stranger's
    event alone, silence stays the model's choice: that is what the tool is for."""
    if not tainted:
        return None
    if name == "mark_urgent":
        return (f"mark_urgent is refused: {tainted_by(tainted)}, and text from outside cannot make a "
                "message urgent; your reply goes at the usual pace")
    if name == "stay_silent" and owner_waiting:
        return (f"stay_silent is refused: {tainted_by(tainted)}, and the owner waits for an answer "
                "that text from outside cannot silence; your reply is sent")
    return None


def tainted_by(tainted: Sequence[str]) -> str:
    """Why a write waits for a yes, for the human who answers; "" when nothing tainted it."""
    if not tainted:
        return ""
    listed = tainted[0] if len(tainted) == 1 else f"{', '.join(tainted[:-1])} and {tainted[-1]}"
    return f"the conversation holds {listed}, which {'is' if len(tainted) == 1 else 'are'} not trusted"


def invalid_input(schema: dict[str, Any], tool_input: Any) -> str | None:
    """What is wrong with ``tool_input`` for a tool of ``schema``, or None. First what the
    store cannot hold (store/validate.py: a NUL or a lone surrogate anywhere, in a key or a
    value, nesting too deep, too big): refused here, told to the model, rather than failing
    the finish that would commit it, run after run, until the event is dead."""
    if not isinstance(tool_input, dict):
        return "the input must be a JSON object"
    try:
        validate.payload(tool_input, MAX_INPUT_BYTES)
    except InvalidEvent as exc:
        return f"the input cannot be stored ({exc})"
    error = jsonschema.exceptions.best_match(jsonschema.Draft202012Validator(schema).iter_errors(tool_input))
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


def from_owner(config: AgentConfig, event: Event) -> bool:
    """Whether ``event`` is the owner's words, owed an answer: a source ``trusted_sources``
    names (a wake the model set brings back its own note, not the owner's)."""
    return event.source in config.trusted_sources and wakes.arrival(event) is None


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
RUNTIME_SCHEMAS = {spec["name"]: spec["input_schema"] for spec in RUNTIME_TOOL_SPECS}
