"""The conversation, kept in the inbox's memory and written only by the fenced finish.

A worker that lost its lease loses its version with its refused finish; the next run starts
from the last committed one. Stored under the memory key ``"claude"``:

- ``messages``: the Messages API turns (user / assistant, content blocks as plain dicts);
- ``waiting``: tool use ids of the last assistant turn whose result has not come yet, each
  ``"ask"`` (waits for a human) or ``"effect"`` (committed, waits for the executor);
- ``results``: tool_result blocks already known for that turn;
- ``held``: user content that arrived while results were missing (the API takes no new
  user text before every tool_use of the last reply has its result);
- ``tainted``: what untrusted text has entered the model's context (an event of a source
  the config does not trust, a tool's answer): while it is not empty, writes need a yes;
- ``owner_waiting``: the owner's words (a trusted source's event) entered since the last
  reply was sent, so an answer is owed: with the conversation tainted, ``stay_silent`` is
  refused while it is set (wakeful/agent/policy.py), also when the words were held.

Taint is recorded where the text enters, never read back from the text (a stranger can
write the wrapper's words too), and it stays for the conversation's life: trimming drops
the turn that brought the text, but keeps the model's later turns, written with it in view,
which may carry its instructions on. A conversation stored before taint was recorded is
taken as tainted.

The budget: the stored ``messages`` are kept under ``conversation_budget`` characters of
JSON by dropping the oldest exchanges whole (a user turn and everything up to the next user
turn that is not a tool result), and a note saying how many were dropped opens the first
turn. The latest exchange is never dropped, so one oversized turn can exceed the budget
for as long as it is the latest; one event's text is cut to a quarter of the budget, and the
held input keeps its newest half-budget (older held messages are dropped, with a note).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

MEMORY_KEY = "claude"
TAINT_KEEP = 4  # what tainted a conversation, named up to this many (source names are the caller's)
STORED_BEFORE_TAINT = "text stored before wakeful recorded where text came from"
# Any spelling of the data wrapper's tag a model may read as one: any case, a slash, spaces,
# tabs, newlines or invisible characters inside, a fullwidth or small bracket; attributes or
# anything else may follow.
_GAP = r"[\s\u200b-\u200f\u2060\ufeff]*"
_TAG = re.compile(rf"[<\uff1c\ufe64]{_GAP}/?{_GAP}untrusted", re.IGNORECASE)
# A NUL, and a surrogate (a code point of a Python string in that range stands alone).
_UNSTORABLE = re.compile("[\x00\ud800-\udfff]")
_NOTE_ROOM = 120  # characters kept free for the "earlier messages were dropped" note


@dataclass
class Conversation:
    messages: list[dict[str, Any]] = field(default_factory=list)
    waiting: dict[str, str] = field(default_factory=dict)
    results: list[dict[str, Any]] = field(default_factory=list)
    held: list[dict[str, Any]] = field(default_factory=list)
    dropped: int = 0
    tainted: list[str] = field(default_factory=list)
    owner_waiting: bool = False

    @classmethod
    def load(cls, memory: dict[str, Any]) -> Conversation:
        state = memory.get(MEMORY_KEY) or {}
        tainted = state.get("tainted", [STORED_BEFORE_TAINT] if state.get("messages") else [])
        return cls(messages=list(state.get("messages", [])), waiting=dict(state.get("waiting", {})),
                   results=list(state.get("results", [])), held=list(state.get("held", [])),
                   dropped=int(state.get("dropped", 0)), tainted=list(tainted),
                   owner_waiting=bool(state.get("owner_waiting", False)))

    def state(self, budget: int) -> dict[str, Any]:
        self.trim(budget)
        self.trim_held(budget // 2)
        return {"messages": self.messages, "waiting": self.waiting, "results": self.results,
                "held": self.held, "dropped": self.dropped, "tainted": self.tainted,
                "owner_waiting": self.owner_waiting}

    def taint(self, what: str) -> None:
        """Untrusted text (``what`` says whose) enters the model's context."""
        if what not in self.tainted and len(self.tainted) < TAINT_KEEP:
            self.tainted.append(what)

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
        """The model's reply, as the store can hold it (``storable``)."""
        if blocks:
            self.messages.append({"role": "assistant", "content": storable(blocks)})

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


def storable(value: Any) -> Any:
    """``value`` (JSON: a model's reply, a tool's answer) with what the store cannot hold
    replaced by U+FFFD in every string and key: a NUL and a lone surrogate, which PostgreSQL's
    text and jsonb refuse (store/validate.py). Kept raw, one of them in the stored
    conversation would fail every finish of the run, until its events are dead; a tool input
    holding one is refused before it runs (wakeful/agent/policy.py), so this copy only
    keeps the record."""
    if isinstance(value, str):
        return _UNSTORABLE.sub("\ufffd", value)
    if isinstance(value, dict):
        return {storable(k): storable(v) for k, v in value.items()}
    if isinstance(value, list):
        return [storable(v) for v in value]
    return value


def cut(text: str, limit: int) -> str:
    """One event's text within ``limit`` characters (the rest is dropped, and said so)."""
    return text if len(text) <= limit else text[:limit] + f"\n[cut: {len(text) - limit} more characters]"


def as_data(text: str, **labels: str) -> str:
    """Untrusted text as the model reads it: ``<untrusted source="…" id="…">…</untrusted>``,
    each spelling of the tag inside neutralised (its bracket becomes a parenthesis), so the
    text cannot close its wrapper or open another."""
    attributes = " ".join(f'{name}="{_attribute(value)}"' for name, value in labels.items())
    return f"<untrusted {attributes}>\n{_neutral(text)}\n</untrusted>"


def unwrapped(text: str) -> str:
    """A model's text as a person reads it: the ``<untrusted …>`` wrapper a model may echo
    from its input taken away (what it wrapped stays, as the text it is)."""
    return _WRAPPER.sub("", text)


# The wrapper as_data writes, opening and closing: a tag inside the text was neutralised there.
_WRAPPER = re.compile(r'<untrusted(?: [^<>\n]*)?>\n?|\n?</untrusted>')


def _neutral(text: str) -> str:
    return _TAG.sub(lambda tag: "(" + tag.group(0)[1:], text)


def _attribute(value: str) -> str:
    return _neutral(value.replace('"', "'").replace("<", "(").replace(">", ")"))[:200]


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
