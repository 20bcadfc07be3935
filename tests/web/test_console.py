"""The operator's console (wakeful/web/console/, store/console.py), in-process against a real
store on SQLite and on PostgreSQL: off without operators, a sign-in that holds, CSRF on every
action (refused: nothing changed), each action done and audited in one transaction and shown
in the timeline, the timeline paged newest first without a repeat or a gap, the fleet's
attention lists and charts drawn from the store, text from outside inert, nothing secret shown.
The same in a real browser against real processes: tests/web/test_console_browser.py."""

from __future__ import annotations

import logging
import re
import subprocess
import sys
import time
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import anyio.from_thread
import pytest

from store import Effect, Message, Outcome, Store
from store.console import AGENT_RUNS_KEY, Action, Item, decode, in_order
from store.records import Event
from store.spend import Budget, Usage
from wakeful.settings import WebSettings
from wakeful.web.app import create_app
from wakeful.web.console import CSP
from wakeful.web.console.access import BadUsers, hash_password, parse_users
from web_support import Client, web_settings

ROOT = Path(__file__).resolve().parents[2]
PASSWORD = "correct horse battery staple"
ADA = ("ada", PASSWORD)
USERS = (f"ada:{hash_password(PASSWORD)}", f"bob:{hash_password('bobs own password')}")
HOSTILE = ("<script>alert(1)</script><img src=x onerror=alert(2)> \u202emoc.live@ada "
           '<a href="https://evil.example/approvals/x?token=1767225600.SECRETMAC0123">Approve</a> '
           + "A" * 10_000)


@pytest.fixture
def settings() -> WebSettings:
    return web_settings(console_users=USERS, console_trace_url="http://jaeger.test/search?inbox={inbox}&gen={generation}")


def csrf_of(page: str) -> str:
    found = re.search(r'name="csrf" value="([0-9a-f]{64})"', page)
    assert found, "no CSRF token on the page"
    return found.group(1)


def inbox_page(client: Client, inbox: str) -> str:
    r = client.get("/console/inbox", params={"i": inbox}, auth=ADA)
    assert r.status_code == 200, r.text
    return r.text


def make_dead(store: Store, inbox: str, source_id: str, start: int) -> int:
    """An event parked dead the way the runtime parks one: claimed and failed until the cap."""
    store.ingest(inbox, "chat", source_id, {"text": "poison"})
    at = start
    for _ in range(store.settings.max_attempts):
        generation = store.acquire(inbox, "w1", now=at)
        assert generation is not None
        batch = store.claim(inbox, "w1", generation, now=at)
        assert store.finish(inbox, "w1", generation, [e.id for e in batch], error="RuntimeError: boom", now=at)
        store.release(inbox, "w1", generation, now=at, force=True)
        at += 10_000
    generation = store.acquire(inbox, "w1", now=at)
    assert generation is not None and store.claim(inbox, "w1", generation, now=at) == []
    store.release(inbox, "w1", generation, now=at, force=True)
    [dead] = [e for e in store.dead(inbox) if e.source_id == source_id]
    return dead.id


def ask(store: Store, inbox: str, tool_use_id: str = "toolu_1", ttl: int = 600) -> None:
    """A run that commits a tool call waiting for a human's yes, as the agent kit's finish does."""
    store.ingest(inbox, "chat", f"m-{tool_use_id}", {"text": "refund order 7"})
    generation = store.acquire(inbox, "w1")
    assert generation is not None
    batch = store.claim(inbox, "w1", generation)
    effect = Effect(tool_use_id, "refund", {"order": 7}, approval_ttl=ttl, words="I will refund order 7.")
    assert store.finish(inbox, "w1", generation, [e.id for e in batch],
                        outcome=Outcome(effects=[effect], messages=[Message("Asked for a refund.")]))
    store.release(inbox, "w1", generation, force=True)


def run_once(store: Store, inbox: str, outcome: Outcome | None = None) -> None:
    generation = store.acquire(inbox, "w1")
    assert generation is not None
    batch = store.claim(inbox, "w1", generation)
    assert store.finish(inbox, "w1", generation, [e.id for e in batch], outcome=outcome or Outcome())
    store.release(inbox, "w1", generation, force=True)


# -- off, and signing in ------------------------------------------------------------------------

def test_off_without_operators_every_console_path_is_404_and_the_start_says_so(
        web_store: Store, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="wakeful.web.console"):
        app = create_app(store=web_store, ring=lambda inbox: None, settings=web_settings(), broker_check=lambda: None)
    assert "the console (/console) is off: WAKEFUL_CONSOLE_USERS names no operator" in caplog.text
    with anyio.from_thread.start_blocking_portal() as portal:
        client = Client(app, portal)
        for method, path in (("GET", "/console"), ("GET", "/console/inbox?i=x"), ("POST", "/console/requeue"),
                             ("GET", "/console/static/console.css")):
            r = client.request(method, path, auth=ADA)
            assert r.status_code == 404 and r.text.startswith("the console is off: set WAKEFUL_CONSOLE_USERS"), path
            assert r.headers["content-security-policy"] == CSP
        portal.call(client.http.aclose)


def test_a_bad_entry_turns_the_console_off_naming_the_entry_never_the_hash(
        web_store: Store, caplog: pytest.LogCaptureFixture) -> None:
    broken = USERS[0][:-4]  # a digest cut short
    with caplog.at_level(logging.ERROR, logger="wakeful.web.console"):
        app = create_app(store=web_store, ring=lambda inbox: None, broker_check=lambda: None,
                         settings=web_settings(console_users=(USERS[1], broken)))
    assert "the console (/console) is off: WAKEFUL_CONSOLE_USERS entry 2 (ada):" in caplog.text
    assert broken.partition(":")[2][:20] not in caplog.text
    with anyio.from_thread.start_blocking_portal() as portal:
        client = Client(app, portal)
        assert client.get("/console", auth=("bob", "bobs own password")).status_code == 404
        portal.call(client.http.aclose)
    for entries, said in (((f"ada {USERS[0][4:]}",), "a name is"), ((USERS[0], USERS[0]), "given twice"),
                          (("ada:plaintext-password",), "not a hash")):
        with pytest.raises(BadUsers, match=said):
            parse_users(entries)


def test_without_credentials_refused_with_a_challenge_wrong_ones_recorded(client: Client, web_store: Store) -> None:
    r = client.get("/console")
    assert r.status_code == 401 and r.headers["www-authenticate"].startswith('Basic realm="wakeful console"')
    for auth in (("ada", "not the password"), ("mallory", PASSWORD)):
        r = client.get("/console", auth=auth)
        assert r.status_code == 401 and "fleet" not in r.text.lower()
    reasons = [x.reason for x in web_store.operator.rejections() if x.origin == "web:console"]
    assert reasons[:2] == ["401 no_token: wrong console name or password"] * 2
    assert not any(PASSWORD in x or "not the password" in x for x in reasons)
    r = client.get("/console", auth=ADA)
    assert r.status_code == 200 and "<h1>Fleet</h1>" in r.text and "signed in as ada" in r.text


class Tags(HTMLParser):
    """Every start tag and its attributes: what the page would run or load."""

    def __init__(self) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict[str, str | None]]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))


def tags_of(page: str) -> list[tuple[str, dict[str, str | None]]]:
    parser = Tags()
    parser.feed(page)
    return parser.tags


def assert_inert(page: str) -> None:
    """No script, no inline style or handler, nothing loaded or linked off the console."""
    for tag, attrs in tags_of(page):
        assert tag not in ("script", "img", "iframe", "object", "embed", "base"), tag
        assert "style" not in attrs and not any(a.startswith("on") for a in attrs), (tag, attrs)
        for key in ("href", "src", "action", "formaction"):
            target = attrs.get(key)
            assert target is None or target.startswith(("/console", "#", "data:", "http://jaeger.test/")), (tag, target)


def test_every_page_has_the_strict_csp_and_nothing_inline(client: Client, web_store: Store, inbox: str) -> None:
    ask(web_store, inbox)
    for path in ("/console", f"/console/inbox?i={inbox}", "/console/search?q=x", "/console/static/console.css"):
        r = client.get(path, auth=ADA)
        assert r.status_code == 200, path
        assert r.headers["content-security-policy"] == CSP
        assert r.headers["x-frame-options"] == "DENY" and r.headers["referrer-policy"] == "no-referrer"
        assert r.headers["cache-control"] == "no-store"
        if path.endswith(".css"):
            assert r.headers["content-type"].startswith("text/css")
        else:
            assert_inert(r.text)


# -- actions: CSRF, done, audited, shown ------------------------------------------------------------

def test_a_post_without_the_csrf_token_is_refused_and_changes_nothing(client: Client, web_store: Store,
                                                                       rung: list[str], inbox: str) -> None:
    dead = make_dead(web_store, inbox, "p1", int(time.time()))
    bobs = csrf_of(client.get(f"/console/inbox?i={inbox}", auth=("bob", "bobs own password")).text)
    for data in ({"inbox": inbox, "event": str(dead)}, {"inbox": inbox, "event": str(dead), "csrf": "0" * 64},
                 {"inbox": inbox, "event": str(dead), "csrf": bobs}):
        r = client.post("/console/requeue", data=data, auth=ADA)
        assert r.status_code == 403 and "bad_token" in r.text and "nothing was changed" in r.text
    r = client.post("/console/requeue", json={"inbox": inbox, "event": dead, "csrf": csrf_of(inbox_page(client, inbox))},
                    auth=ADA)
    assert r.status_code == 415
    assert web_store.operator.event(dead).status == "dead"
    assert web_store.console.actions(inbox) == [] and rung == []


def test_requeue_one_then_all_from_the_console(client: Client, web_store: Store, rung: list[str], inbox: str) -> None:
    start = int(time.time())
    first, second, third = (make_dead(web_store, inbox, f"p{i}", start + i * 100_000) for i in range(3))
    token = csrf_of(inbox_page(client, inbox))
    r = client.post("/console/requeue", data={"inbox": inbox, "event": str(first), "csrf": token}, auth=ADA)
    assert r.status_code == 303
    [action] = web_store.console.actions(inbox)
    assert r.headers["location"] == f"/console/inbox?i={inbox}#action-{action.id}"
    assert (action.actor, action.action, action.target, action.outcome) == ("console:ada", "requeue", str(first),
                                                                            "requeued")
    assert web_store.operator.event(first).status == "pending" and web_store.operator.event(first).attempts == 0
    assert rung == [inbox]
    again = client.post("/console/requeue", data={"inbox": inbox, "event": str(first), "csrf": token}, auth=ADA)
    assert again.status_code == 303 and web_store.console.actions(inbox)[0].outcome == "not dead: nothing requeued"
    assert rung == [inbox]  # nothing new to do: not rung
    client.post("/console/requeue", data={"inbox": inbox, "csrf": token}, auth=ADA)
    assert web_store.console.actions(inbox)[0].outcome == "requeued 2 dead event(s)"
    assert {web_store.operator.event(i).status for i in (second, third)} == {"pending"}
    page = inbox_page(client, inbox)
    steps = re.findall(r'<li class="step action" data-kind="action" id="action-(\d+)"', page)
    assert [int(s) for s in steps] == [a.id for a in web_store.console.actions(inbox)]  # newest first
    assert "requeued every dead event" in page and "console:ada" in page


def test_requeue_names_its_inbox_an_event_of_another_is_left_alone(client: Client, web_store: Store,
                                                                    rung: list[str], inbox: str) -> None:
    other = make_dead(web_store, inbox + "-other", "p1", int(time.time()))
    web_store.ingest(inbox, "chat", "hello", {"text": "hi"})
    token = csrf_of(inbox_page(client, inbox + "-other"))  # the operator's token, whatever the page
    client.post("/console/requeue", data={"inbox": inbox, "event": str(other), "csrf": token}, auth=ADA)
    assert web_store.operator.event(other).status == "dead" and rung == []
    assert web_store.console.actions(inbox)[0].outcome == f"not in inbox {inbox}: nothing requeued"


def test_an_approval_answered_in_the_console_is_recorded_as_the_operators(client: Client, web_store: Store,
                                                                           rung: list[str], inbox: str) -> None:
    ask(web_store, inbox)
    page = inbox_page(client, inbox)
    assert "Waiting approvals" in page and 'name="answer" value="yes"' in page
    token = csrf_of(page)
    r = client.post("/console/answer", data={"inbox": inbox, "request": "toolu_1", "answer": "yes", "csrf": token},
                    auth=ADA)
    assert r.status_code == 303 and rung == [inbox]
    [approval] = web_store.approvals.view(inbox, pending_only=False)
    assert (approval.answer, approval.answered_by) == ("yes", "console:ada")
    client.post("/console/answer", data={"inbox": inbox, "request": "toolu_1", "answer": "no", "csrf": token},
                auth=ADA)
    assert [a.outcome for a in web_store.console.actions(inbox)] == ["yes", "yes"]  # the first answer stands
    page = inbox_page(client, inbox)
    assert "answer <b class=\"status yes\">yes</b> by <code>console:ada</code>" in page
    assert "Waiting approvals" not in page
    bad = client.post("/console/answer", data={"inbox": inbox, "request": "toolu_1", "answer": "maybe",
                                               "csrf": token}, auth=ADA)
    assert bad.status_code == 422 and len(web_store.console.actions(inbox)) == 2


def test_cancel_a_timer_but_never_an_approvals_expiry(client: Client, web_store: Store, inbox: str) -> None:
    web_store.add_timer(inbox, "digest", None, {"kind": "digest"}, every=3600)
    ask(web_store, inbox)
    token = csrf_of(inbox_page(client, inbox))
    client.post("/console/cancel-timer", data={"inbox": inbox, "timer": "digest", "csrf": token}, auth=ADA)
    client.post("/console/cancel-timer", data={"inbox": inbox, "timer": "approval:toolu_1", "csrf": token}, auth=ADA)
    assert [t.id for t in web_store.timers(inbox)] == ["approval:toolu_1"]
    assert [a.outcome for a in web_store.console.actions(inbox)] == [
        "refused: an approval's expiry timer (answer the approval instead)", "cancelled"]


# -- the timeline -----------------------------------------------------------------------------------

def test_the_timeline_pages_newest_first_without_a_repeat_or_a_gap(web_store: Store, inbox: str) -> None:
    for i in range(12):
        web_store.ingest(inbox, "chat", f"m{i}", {"text": f"message {i}"})
        run_once(web_store, inbox, Outcome(messages=[f"answer {i}"]))
    ask(web_store, inbox, "toolu_a")
    ask(web_store, inbox, "toolu_b")
    web_store.console.answer("console:ada", inbox, "toolu_a", "no")
    seen: list[tuple[str, Any]] = []
    cursor = None
    while True:
        page = web_store.console.timeline(inbox, before=cursor, limit=5)
        assert len(page.items) <= 5
        seen += [(i.kind, getattr(i.record, "id", None) or getattr(i.record, "tool_use_id", None)
                  or i.record.request_id) for i in page.items]
        times = [i.at for i in page.items]
        assert times == sorted(times, reverse=True)
        if page.older is None:
            break
        cursor = page.older
    assert len(seen) == len(set(seen))
    counts = {kind: sum(1 for k, _ in seen if k == kind) for kind in ("event", "run", "message", "effect", "approval",
                                                                       "action")}
    assert counts == {"event": len(web_store.events(inbox)), "run": len(web_store.operator.run_log(inbox)),
                      "message": len(web_store.outbox(inbox)), "effect": 2, "approval": 2, "action": 1}
    with pytest.raises(ValueError, match="not a timeline cursor"):
        decode("bm90IGpzb24")


def test_the_inbox_page_links_to_older_pages_and_refuses_a_forged_cursor(client: Client, web_store: Store,
                                                                          inbox: str) -> None:
    for i in range(60):
        web_store.ingest(inbox, "chat", f"m{i}", {"text": f"message {i}"})
    first = inbox_page(client, inbox)
    older = re.search(r'rel="next" href="([^"]+)"', first)
    assert older and first.count('data-kind="event"') == 50
    second = client.get(older.group(1).replace("&amp;", "&"), auth=ADA)
    assert second.status_code == 200 and second.text.count('data-kind="event"') == 10
    assert 'rel="next"' not in second.text and "the beginning" in second.text
    assert client.get("/console/inbox", params={"i": inbox, "before": "eyJldmVudCI6IngifQ"},
                      auth=ADA).status_code == 404


def test_a_run_shows_its_events_outcome_agent_log_and_trace_link(client: Client, web_store: Store, inbox: str) -> None:
    web_store.ingest(inbox, "chat", "m1", {"text": "hello"})
    generation = web_store.acquire(inbox, "w1")
    assert generation is not None
    [event] = web_store.claim(inbox, "w1", generation)
    log = [{"generation": generation, "events": [event.id], "model_calls": 2, "input_tokens": 300,
            "output_tokens": 40, "decisions": {"toolu_x": "lookup:inline", "toolu_y": "wipe:refuse"}}]
    assert web_store.finish(inbox, "w1", generation, [event.id], outcome=Outcome(memory={AGENT_RUNS_KEY: log}))
    page = inbox_page(client, inbox)
    assert f'<a href="#event-{event.id}">#{event.id}</a>' in page
    assert "model calls 2 · tokens 300/40 · tool decisions: toolu_x: lookup:inline, toolu_y: wipe:refuse" in page
    assert f'href="http://jaeger.test/search?inbox={inbox}&amp;gen={generation}"' in page


def test_the_agent_runs_key_is_the_built_in_agents() -> None:
    from wakeful.agent.claude import LOG_KEY

    assert AGENT_RUNS_KEY == LOG_KEY


# -- text from outside, secrets ------------------------------------------------------------------

def test_hostile_event_text_is_shown_escaped_flagged_and_inert(client: Client, web_store: Store, inbox: str) -> None:
    web_store.ingest(inbox, "chat", "evil", {"text": HOSTILE})
    page = inbox_page(client, inbox)
    assert_inert(page)
    assert "\u202e" not in page and "\\u202emoc.live@ada" in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page and "onerror=alert(2)" in page  # as text
    assert "A" * 10_000 in page  # whole, wrapped by the stylesheet
    assert "U+202E RIGHT-TO-LEFT OVERRIDE" in page and "What chat sent (data from outside, not checked):" in page
    assert "SECRETMAC0123" not in page and "token=[hidden]" in page


def test_nothing_secret_is_ever_shown(client: Client, web_store: Store, inbox: str, settings: WebSettings) -> None:
    ask(web_store, inbox)
    web_store.ingest(inbox, "chat", "link", {"text": "see https://agent.example/approvals/a/b?token=17.abcdefMAC&by=x"})
    pages = [inbox_page(client, inbox), client.get("/console", auth=ADA).text,
             client.get("/console/search", params={"q": "link"}, auth=ADA).text]
    for page in pages:
        assert "abcdefMAC" not in page and PASSWORD not in page
        assert not any(entry.partition(":")[2] in page for entry in settings.console_users)
        assert "approval-secret-for-tests" not in page


# -- the fleet --------------------------------------------------------------------------------------

def test_the_fleet_puts_what_needs_attention_first(client: Client, web_store: Store, inbox: str) -> None:
    now = int(time.time())
    make_dead(web_store, f"{inbox}-dead", "p1", now)
    ask(web_store, f"{inbox}-asks", ttl=900)
    web_store.ingest(f"{inbox}-gone", "chat", "m1", {"text": "hi"})  # a worker that took it and vanished
    generation = web_store.acquire(f"{inbox}-gone", "host:1:gone", now=now - 1000)
    assert generation is not None and web_store.claim(f"{inbox}-gone", "host:1:gone", generation, now=now - 1000)
    web_store.ingest(f"{inbox}-down", "chat", "m1", {"text": "hi"})
    generation = web_store.acquire(f"{inbox}-down", "w1")
    assert generation is not None
    batch = web_store.claim(f"{inbox}-down", "w1", generation)
    web_store.finish(f"{inbox}-down", "w1", generation, [e.id for e in batch], error="upstream down", retry_after=60)
    web_store.spend.count(f"{inbox}-spends", Budget(inbox_tokens=1000), Usage("m", 850, 50))
    fleet = web_store.console.fleet()
    by_kind = {a.kind: a for a in fleet.attention}
    assert f"{inbox}-dead" in [r.inbox for r in by_kind["dead"].rows]
    assert [(r.inbox, r.detail) for r in by_kind["approvals"].rows if r.inbox.startswith(inbox)] == [
        (f"{inbox}-asks", "toolu_1")]
    assert by_kind["approvals"].near >= 1
    assert [(r.inbox, r.detail) for r in by_kind["lapsed"].rows if r.inbox.startswith(inbox)] == [
        (f"{inbox}-gone", "host:1:gone")]
    assert f"{inbox}-down" in [r.inbox for r in by_kind["outage"].rows]
    assert f"{inbox}-asks" in [r.inbox for r in by_kind["held"].rows]
    assert [r.detail for r in by_kind["budget"].rows if r.inbox == f"{inbox}-spends"] == ["900 of 1,000 tokens"]
    page = client.get("/console", auth=ADA).text
    for kind, who in (("dead", "dead"), ("approvals", "asks"), ("lapsed", "gone"), ("outage", "down"),
                      ("budget", "spends")):
        section = page.split(f'id="attention-{kind}"', 1)[1].split("</div>", 1)[0]
        assert f"{inbox}-{who}" in section, kind


def test_the_charts_are_drawn_from_the_store(client: Client, web_store: Store, inbox: str) -> None:
    before = web_store.console.fleet()
    for i in range(3):
        web_store.ingest(inbox, "chat", f"m{i}", {"text": "hi"})
        run_once(web_store, inbox)
    after = web_store.console.fleet()
    assert sum(n for _, n, _ in after.runs_per_minute) - sum(n for _, n, _ in before.runs_per_minute) == 3
    assert len(after.runs_per_minute) == 1440 and len(after.latency) == 24 and len(after.dead_per_day) == 14
    assert sum(n for *_, n in after.latency) - sum(n for *_, n in before.latency) == 3
    page = client.get("/console", auth=ADA).text
    total = sum(n for _, n, _ in web_store.console.fleet().runs_per_minute)
    assert f"{total:,} runs in 24 h" in page and page.count('<svg class="chart"') == 4


def test_search_by_inbox_and_by_an_events_source_key(client: Client, web_store: Store, inbox: str) -> None:
    web_store.ingest(inbox, "github", "4411", {"type": "issues", "body": {}})
    web_store.ingest(f"{inbox}-b", "stripe", "4411", {"type": "charge", "body": {}})
    found = web_store.console.search("4411")
    assert sorted(e.inbox for e in found.events) == [inbox, f"{inbox}-b"] and found.inbox is None
    assert [e.inbox for e in web_store.console.search("github/4411").events] == [inbox]
    assert web_store.console.search(inbox).inbox == inbox
    page = client.get("/console/search", params={"q": "4411"}, auth=ADA).text
    assert len(re.findall(r'<td><a href="/console/inbox\?i=[^"#]+#event-\d+">', page)) == 2
    assert client.get("/console/search", params={"q": "x" * 301}, auth=ADA).status_code == 422


# -- the hash --------------------------------------------------------------------------------------

def test_the_hash_command_makes_an_entry_that_signs_in(tmp_path: Path) -> None:
    made = subprocess.run([sys.executable, "-m", "wakeful.web.console", "hash", "carol"], input="a long password 1\n",
                          capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert made.returncode == 0, made.stderr
    entry = made.stdout.strip()
    assert entry.startswith("carol:scrypt:16384:8:1:") and "a long password" not in entry
    assert parse_users((entry,))["carol"].verify("a long password 1")
    assert not parse_users((entry,))["carol"].verify("a long password 2")
    short = subprocess.run([sys.executable, "-m", "wakeful.web.console", "hash", "carol"], input="short\n",
                           capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert short.returncode == 1 and "12 characters" in short.stderr


def test_failed_sign_ins_are_bounded_per_second(client: Client) -> None:
    """Twelve guesses at once: a few are checked (401), the rest answered 429 without scrypt."""
    codes = [r.status_code for r in client.gather([("GET", "/console", {"auth": ("ada", f"guess {i}")})
                                                   for i in range(12)])]
    assert sorted(set(codes)) == [401, 429] and codes.count(401) <= 5


def test_actions_in_one_second_stand_in_the_order_they_were_taken() -> None:
    """An answer given in the console is placed just under the event it stored; a requeue in the
    same second after it (the box is fast: the CI's Chromium test did both within one) must
    still be the newest step of the two, not fall under the answer."""
    t = 1_800_000_000
    answer_event = Item("event", t, Event(9, "ada", "approval", "toolu_1", {"answer": "yes"}, "done", 1))
    answered = Item("action", t, Action(1, t, "console:ada", "answer", "ada", "toolu_1", "yes", "yes"))
    requeued = Item("action", t, Action(2, t, "console:ada", "requeue", "ada", "7", None, "requeued"))
    shown = in_order([answered, requeued, answer_event])
    assert [i.record.id for i in shown if i.kind == "action"] == [2, 1]
    assert shown.index(answer_event) < shown.index(answered)  # the answer's event above the answer
