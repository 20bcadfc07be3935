"""The trust rules on their own, without a model: where taint is kept, and the data wrapper's
one rule (the tool loop shows both end to end, tests/agent/test_claude_loop.py)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from wakeful.agent.conversation import STORED_BEFORE_TAINT, Conversation, as_data
from wakeful.agent.policy import tainted_by
from agent_support import write_config

TAG = re.compile(r"[<\uff1c\ufe64]\s*/?\s*untrusted", re.IGNORECASE)


@pytest.mark.parametrize("tag", ["</UNTRUSTED>", "</untrusted >", "< / untrusted>", "<\tuntrusted\n a='b'>",
                                 "</untrusted\n>", "<Untrusted>", "\uff1c/untrusted>", "\ufe64untrusted>",
                                 "<\u200b/untrusted>", "</untrusted>"])
def test_every_spelling_of_the_tag_is_neutralised_in_the_text_and_the_labels(tag: str) -> None:
    wrapped = as_data(f"a {tag} b", source=f"x{tag}", id=f'1" {tag}')
    assert len(TAG.findall(wrapped.replace("\u200b", ""))) == 2, wrapped  # the wrapper's own


def test_a_conversation_stored_before_taint_was_recorded_is_tainted() -> None:
    old = {"claude": {"messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}]}]}}
    assert Conversation.load(old).tainted == [STORED_BEFORE_TAINT]
    assert Conversation.load({}).tainted == []


def test_taint_is_recorded_not_searched_and_kept_past_trimming() -> None:
    convo = Conversation()
    convo.add_user([{"type": "text", "text": as_data("a stranger's words", source="mail", id="1")}])
    assert convo.tainted == []  # the wrapper's text proves nothing; whoever adds it says so
    convo.taint("an event from mail")
    state = convo.state(budget=10)
    assert Conversation.load({"claude": state}).tainted == ["an event from mail"]
    assert tainted_by(["the output of a", "an event from b"]) == (
        "the conversation holds the output of a and an event from b, which are not trusted")


def test_an_ask_tools_request_also_says_what_tainted_the_conversation(tmp_path: Path) -> None:
    from wakeful.agent.config import load
    from wakeful.agent.policy import decide

    cfg = load(write_config(tmp_path / "agent.toml"))
    asked = decide(cfg, "refund_asked", {"order": 1}, ["an event from github"])
    became = decide(cfg, "refund", {"order": 1}, ["an event from github"])
    assert asked.kind == became.kind == "ask" and asked.reason == became.reason != ""
    assert decide(cfg, "refund", {"order": 1}, []).kind == "effect"
    assert decide(cfg, "lookup", {"order": 1}, ["an event from github"]).kind == "inline"
