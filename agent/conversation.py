"""The conversation, kept in the inbox's memory and written only by the fenced finish.

A worker that lost its lease loses its version with its refused finish; the next run starts
from the last committed one. Stored under the memory key ``"claude"``:

- ``messages``: the Messages API turns (user / assistant, content blocks as plain dicts);
- ``waiting``: tool use ids of the last assistant turn whose result has not come yet, each
  ``"ask"`` (waits for a human) or ``"effect"`` (committed, waits for the executor);
- ``results``: tool_result blocks already known for that turn;
- ``held``: user content that arrived while results were missing (the API takes no new
  user text before every tool_use of the last reply has its result).

The budget: the stored ``messages`` are kept under ``conversation_budget`` characters of
JSON by dropping the oldest exchanges whole (a user turn and everything up to the next user
turn that is not a tool result), and a note saying how many were dropped opens the first
turn. The latest exchange is never dropped, so one oversized turn can exceed the budget
for as long as it is the latest; one event's text is cut to a quarter of the budget, and the
held input keeps its newest half-budget (older held messages are dropped, with a note).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

MEMORY_KEY = "claude"
UNTRUSTED_OPEN = "<untrusted"
UNTRUSTED_CLOSE = "</untrusted>"
_NOTE_ROOM = 120  # characters kept free for the "earlier messages were dropped" note


@dataclass
class Conversation:
    messages: list[dict[str, Any]] = field(default_factory=list)
    waiting: dict[str, str] = field(default_factory=dict)
    results: list[dict[str, Any]] = field(default_factory=list)
    held: list[dict[str, Any]] = field(default_factory=list)
    dropped: int = 0

    @classmethod
    def load(cls, memory: dict[str, Any]) -> Conversation:
        state = memory.get(MEMORY_KEY) or {}
        return cls(messages=list(state.get("messages", [])), waiting=dict(state.get("waiting", {})),
                   results=list(state.get("results", [])), held=list(state.get("held", [])),
                   dropped=int(state.get("dropped", 0)))

    def state(self, budget: int) -> dict[str, Any]:
        self.trim(budget)
        self.trim_held(budget // 2)
        return {"messages": self.messages, "waiting": self.waiting, "results": self.results,
                "held": self.held, "dropped": self.dropped}

    # -- results of the last assistant turn ---------------------------------------------

    def result(self, tool_use_id: str, content: str, is_error: bool) -> bool:
        """A result for a tool use we wait for; False (ignored) for any other id."""
        if tool_use_id not in self.waiting:
            return False
        del self.waiting[tool_use_id]
        self.results.append(tool_result(tool_use_id, content, is_error))
        return True

    def take_pending_input(self) -> list[dict[str, Any]]:
        """Once nothing is waiting: the results (in the order of the tool uses) and the held
        input, to open the next user turn."""
        order = {b.get("id"): n for n, b in enumerate(self.last_tool_uses())}
        blocks = sorted(self.results, key=lambda b: order.get(b["tool_use_id"], len(order))) + self.held
        self.results, self.held = [], []
        return blocks

    def last_tool_uses(self) -> list[dict[str, Any]]:
        if not self.messages or self.messages[-1]["role"] != "assistant":
            return []
        return [b for b in self.messages[-1]["content"] if b.get("type") == "tool_use"]

    # -- turns -------------------------------------------------------------------------

    def add_user(self, blocks: list[dict[str, Any]]) -> None:
        if not blocks:
            return
        if self.messages and self.messages[-1]["role"] == "user":
            self.messages[-1]["content"].extend(blocks)  # the API wants turns to alternate
        else:
            self.messages.append({"role": "user", "content": list(blocks)})

    def add_assistant(self, blocks: list[dict[str, Any]]) -> None:
        if blocks:
            self.messages.append({"role": "assistant", "content": blocks})

    def untrusted(self) -> bool:
        """Does the model's context hold untrusted text (this run's or a kept earlier turn's)?"""
        return UNTRUSTED_OPEN in json.dumps(self.messages + self.held)

    def trim(self, budget: int) -> None:
        if _size(self.messages) <= budget:
            return
        while _size(self.messages) + _NOTE_ROOM > budget:  # room for the note below
            cut = _next_exchange(self.messages)
            if cut is None:
                return
            self.dropped += cut
            self.messages = self.messages[cut:]
        if self.dropped and self.messages:
            note = f"[{self.dropped} earlier messages of this conversation were dropped to fit its budget]"
            first = self.messages[0]["content"]
            if not (first and first[0].get("type") == "text" and first[0]["text"].startswith("[")
                    and "earlier messages" in first[0]["text"]):
                first.insert(0, {"type": "text", "text": note})
            else:
                first[0] = {"type": "text", "text": note}


    def trim_held(self, budget: int) -> None:
        """Input held while waiting (an approval may take hours) keeps its newest part."""
        dropped = 0
        while len(self.held) > 1 and _size(self.held) > budget:
            self.held.pop(0)
            dropped += 1
        if dropped:
            self.held.insert(0, {"type": "text", "text": f"[{dropped} earlier messages that arrived "
                                                         "while a tool result was pending were dropped]"})


def cut(text: str, limit: int) -> str:
    """One event's text within ``limit`` characters (the rest is dropped, and said so)."""
    return text if len(text) <= limit else text[:limit] + f"\n[cut: {len(text) - limit} more characters]"


def tool_result(tool_use_id: str, content: str, is_error: bool) -> dict[str, Any]:
    block: dict[str, Any] = {"type": "tool_result", "tool_use_id": tool_use_id, "content": content}
    if is_error:
        block["is_error"] = True
    return block


def _size(messages: list[dict[str, Any]]) -> int:
    return len(json.dumps(messages, ensure_ascii=False))


def _next_exchange(messages: list[dict[str, Any]]) -> int | None:
    """How many messages to drop so the first is a fresh user turn (not tool results); None
    when only the latest exchange is left."""
    for n in range(1, len(messages)):
        m = messages[n]
        if m["role"] == "user" and not any(b.get("type") == "tool_result" for b in m["content"]):
            return n
    return None
