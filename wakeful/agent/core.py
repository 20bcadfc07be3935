"""The rules of a run that every agent loop goes through, written once: the built-in claude
loop (wakeful/agent/claude.py) and the tool kit (wakeful/agent/kit.py), on which your own loop
and the framework integrations (wakeful/integrations/) are built. A guarantee that holds for
one loop and not another is a defect; tests/agent/test_conformance.py runs every loop through
the same checks.

- what a tool use becomes is ``policy.decide`` (allow/deny/ask, schemas, taint, ``[limits]``,
  the runtime tools);
- a write the policy lets through becomes ``proposed``: an Effect committed by the run's
  fenced finish and run once after it by the executor, routed to its approver (the tool's
  own, else ``[agent] approver``) when it asks;
- a human's answer to an asked write comes back as ``answered``: yes, it runs after this
  run's finish; no or expired, it never runs and the model is told so;
- what a loop says reaches a person through ``said``: the loop's text is a ``reply`` (the
  store sends it at once while the person's message waits for one, and paces it as a notice
  otherwise: store/outbox.py), nothing after a ``stay_silent`` that stood, urgent after a
  ``mark_urgent`` that stood, and never an approval link marker or the ``<untrusted>`` wrapper
  of its own.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from store import Effect, Message
from store.effects import defang

from wakeful.agent.config import AgentConfig
from wakeful.agent.conversation import storable, unwrapped
from wakeful.agent.policy import Decision


def proposed(config: AgentConfig, d: Decision, tool_use_id: str, name: str, tool_input: Any,
             words: str = "") -> Effect:
    """The Effect of a write ``d`` let through ("effect" or "ask"). ``words``: what the model
    said with the call, shown to the human who approves."""
    assert d.tool is not None and d.kind in ("effect", "ask")
    ask = d.kind == "ask"
    return Effect(tool_use_id, name, tool_input, delivery=d.tool.delivery,  # type: ignore[arg-type]
                  approval_ttl=d.tool.approval_ttl if ask else None, words=storable(words.strip()),
                  why=d.reason, approver=d.tool.approver or config.approver)


def answered(answer: str) -> tuple[str, str] | None:
    """A human's answer to an asked write: None for yes (it runs after this run's finish, its
    result comes in a later run); else its status and what the model is told."""
    if answer == "yes":
        return None
    if answer == "no":
        return "refused", "the tool call was refused by a human; nothing ran"
    return "expired", "the tool call was not approved in time (expired); nothing ran"


def said(messages: Sequence[str | Message], *, silent: bool = False, urgent: bool = False) -> list[Message]:
    """What a loop says, as it goes to a person (the module docstring): a text is a reply."""
    if silent:
        return []
    out = []
    for m in messages:
        message = m if isinstance(m, Message) else Message(m, kind="reply")
        body = defang(unwrapped(message.body))
        if not body.strip():
            continue
        out.append(replace(message, body=body, urgent=message.urgent or urgent))
    return out

