"""What a human approves is what runs: the approval page of a tool call, served by
``python -m wakeful.web`` and looked at in headless Chromium at a phone's and a desktop's width, shows
every input value whole and wrapped, makes look-alike, invisible and bidi characters visible
and names them, and sets the model's own words apart. The approval message in the outbox
follows the same rule. Screenshots are kept under the test's tmp_path."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from test_uvicorn import Server, start, stop

from store import Effect, Outcome, Store
from wakeful.approval_tokens import approval_link
from web_support import APPROVAL_SECRET

CHROMIUM = "/usr/bin/chromium"
WIDTHS = (390, 1280)  # a phone, a desktop
ATTACKER = "attacker@evil.com"
# What a steered model proposes: the address pushed off the screen by 160 spaces, a Cyrillic
# "а" (U+0430) in a familiar address, a right-to-left override that shows "ada@evil.com", and
# words that say one amount while the input says another.
INPUT = {"amount": 5000, "email": "ada@ex\u0430mple.com", "to": " " * 160 + ATTACKER,
         "note": "\u202emoc.live@ada"}
WORDS = "I will send Ada 5 EUR."


@pytest.fixture(scope="module")
def server(web_db_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    server = start(web_db_url, tmp_path_factory.mktemp("page"))
    yield server
    stop(server)


@pytest.fixture
def store(web_db_url: str) -> Iterator[Store]:
    s = Store.connect(web_db_url)
    yield s
    s.dispose()


def _ask(store: Store, inbox: str) -> str:
    """Commit the tool call as the agent's finish does: an asked effect, its approval, its
    request in the outbox."""
    tool_use_id = f"toolu_{uuid.uuid4().hex[:12]}"
    store.ingest(inbox, "chat", "m1", {"text": "pay Ada"})
    generation = store.acquire(inbox, "w1")
    assert generation is not None
    batch = store.claim(inbox, "w1", generation)
    effect = Effect(tool_use_id, "send_money", INPUT, approval_ttl=600, words=WORDS)
    assert store.finish(inbox, "w1", generation, [e.id for e in batch], outcome=Outcome(effects=[effect]))
    return tool_use_id


def test_the_page_shows_the_input_whole_and_visible(server: Server, store: Store, inbox: str,
                                                    tmp_path: Path) -> None:
    from databases import service_missing

    if not os.access(CHROMIUM, os.X_OK):  # a laptop without it skips; CI (which installs it) fails
        service_missing("Chromium", f"no {CHROMIUM} (apt-get install chromium)")
    from playwright.sync_api import sync_playwright

    link = approval_link(inbox, _ask(store, inbox), base_url=server.url, secret=APPROVAL_SECRET,
                         expires_in=3600)
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, headless=True, args=["--no-sandbox"])
        try:
            for width in WIDTHS:
                page = browser.new_page(viewport={"width": width, "height": 900})
                page.goto(link)
                page.screenshot(path=str(tmp_path / f"approval-{width}px.png"), full_page=True)
                _assert_shown(page, width)
                page.close()
        finally:
            browser.close()


def _assert_shown(page, width: int) -> None:  # type: ignore[no-untyped-def]
    box = page.evaluate(_BOX_OF, ATTACKER)
    assert box is not None, f"{ATTACKER} is not on the page"
    assert 0 <= box["left"] and box["right"] <= width, (width, box)  # on screen, no scrolling
    assert page.evaluate("document.documentElement.scrollWidth") <= width
    text = page.inner_text("body")
    assert "ada@ex\\u0430mple.com" in text and "\\u202emoc.live@ada" in text
    assert "\u0430" not in text and "\u202e" not in text
    assert page.is_visible("#flags")
    flags = page.inner_text("#flags")
    assert "U+0430 CYRILLIC SMALL LETTER A" in flags and "U+202E RIGHT-TO-LEFT OVERRIDE" in flags
    assert "160 spaces" in flags
    assert page.inner_text("#words").startswith("The agent says (its own words, not checked):")


# The bounding box of the first text node that contains the string, on the viewport.
_BOX_OF = """(needle) => {
  const walk = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
  for (let node = walk.nextNode(); node; node = walk.nextNode()) {
    const at = node.data.indexOf(needle);
    if (at < 0) continue;
    const range = document.createRange();
    range.setStart(node, at);
    range.setEnd(node, at + needle.length);
    const r = range.getBoundingClientRect();
    return {left: r.left, right: r.right, top: r.top, bottom: r.bottom};
  }
  return null;
}"""


def test_the_approval_message_follows_the_same_rule(store: Store, inbox: str) -> None:
    _ask(store, inbox)
    [request] = store.outbox(inbox)
    body = request.body
    assert "ada@ex\\u0430mple.com" in body and "\\u202emoc.live@ada" in body
    assert "\u0430" not in body and "\u202e" not in body
    assert "U+0430 CYRILLIC SMALL LETTER A" in body and "U+202E RIGHT-TO-LEFT OVERRIDE" in body
    assert "160 spaces" in body
    assert 'The agent says (its own words, not checked): "I will send Ada 5 EUR."' in body
