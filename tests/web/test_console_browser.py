"""The console in headless Chromium against real processes: ``python -m wakeful.web`` with the
console on, and the runtime tests' cluster (a run worker, a control worker, beat) on
PostgreSQL and Redis, hosting an agent on the tool kit defined here.

- A signed GitHub webhook asks for a refund; the agent's write waits for a human; the
  operator answers Yes in the console; the tool runs once; the agent says so and the message
  is sent. The inbox's timeline shows each step, newest first, in the order it happened.
- An event that kills the agent goes dead; with the agent fixed, Requeue in the console makes
  it done.
- A stranger's webhook with markup, a bidi override, a 10,000-character line and a fake
  "Approve" link is shown inert at 390 and 1280 px: no script ran, no link, nothing wider than
  the screen, every disguise escaped and named.

Screenshots go to the test's tmp_path; with ``WAKEFUL_TEST_CONSOLE_SHOTS=DIR`` also to DIR: that
is how docs/console-1280.png (the fleet while the refund waits and an event is dead) and
docs/console-390.png (the inbox's page on a phone, after it all) are made."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from runtime.conftest import make_cluster, redis_db  # noqa: F401  (the runtime tests' harness)

HERE = Path(__file__).resolve().parent
CHROMIUM = "/usr/bin/chromium"
PASSWORD = "a console password for the browser test"
ADA, EVE = "ada", "eve"
HOSTILE = ("<script>alert(1)</script><img src=x onerror=alert(2)> Refund \u202emoc.live@ada now. "
           '<a href="https://evil.example/approvals/ada/x?token=1767225600.FAKEMAC">Approve</a> ' + "W" * 10_000)


# -- the agent and its tool, hosted by the cluster's worker (WAKEFUL_AGENT=test_console_browser:agent) --

def agent(run: Any) -> Any:
    """A webhook's issue number is refunded (a write: after a stranger's text, a human says yes
    first); what the tool answered is said; a chat "poison" kills the run while the file named by
    CONSOLE_TEST_POISON exists."""
    from wakeful import Toolkit

    kit = Toolkit(run)
    said = [f"{r.tool}: {r.content}" for r in kit.results if r.final]
    for event in kit.events:
        if (event.payload or {}).get("text") == "poison" and Path(os.environ["CONSOLE_TEST_POISON"]).exists():
            raise RuntimeError("the agent cannot read this event")
        issue = ((event.payload or {}).get("body") or {}).get("issue") or {}
        if event.source == "github" and "refund" in str(issue.get("title", "")).lower():
            kit.use("refund", {"order": issue["number"]}, words=f"The customer in #{issue['number']} asks for a refund.")
    return kit.outcome(messages=said)


def refund(tool_input: dict[str, Any], call: Any) -> str:
    return f"refunded order {tool_input['order']}"


CONFIG = """[agent]
model = "none"
system = "You answer customers."
trusted_sources = ["chat"]

[tools.refund]
description = "Refund an order"
call = "test_console_browser:refund"
policy = "allow"
effect = "write"
approval_ttl = 900
input_schema = { type = "object", properties = { order = { type = "integer" } }, required = ["order"] }
"""


@pytest.fixture(params=[pytest.param("redis_pg", marks=[pytest.mark.postgres, pytest.mark.redis,
                                                        pytest.mark.processes])])
def backend(request: pytest.FixtureRequest) -> str:
    return request.param


@pytest.fixture
def stack(make_cluster: Any, tmp_path: Path) -> Iterator[tuple[Any, Any, Path]]:  # noqa: F811
    from databases import service_missing
    from test_uvicorn import start, stop
    from wakeful.web.console.access import hash_password

    if not os.access(CHROMIUM, os.X_OK):  # a laptop without it skips; CI (which installs it) fails
        service_missing("Chromium", f"no {CHROMIUM} (apt-get install chromium)")
    config, poison = tmp_path / "agent.toml", tmp_path / "poison"
    config.write_text(CONFIG)
    poison.touch()
    paths = os.pathsep.join([str(HERE), str(HERE.parent), os.environ.get("PYTHONPATH", "")])
    cluster = make_cluster(env={"WAKEFUL_AGENT": "test_console_browser:agent", "WAKEFUL_AGENT_CONFIG": str(config),
                                "CONSOLE_TEST_POISON": str(poison), "PYTHONPATH": paths})
    web_home = tmp_path / "web"
    web_home.mkdir()
    web = start(cluster.env["WAKEFUL_DATABASE_URL"], web_home, init=False, WAKEFUL_BROKER_URL=cluster.broker_url,
                WAKEFUL_CONSOLE_USERS=f"ada:{hash_password(PASSWORD)}")
    yield cluster, web, poison
    stop(web)


def webhook(web: Any, inbox: str, issue: dict[str, Any], comment: str) -> None:
    from web_signing import body_of, github_headers
    from web_support import GITHUB_SECRET

    body = body_of({"action": "created", "issue": issue, "comment": {"body": comment}})
    r = httpx.post(f"{web.url}/hooks/github/{inbox}", content=body, timeout=10,
                   headers=github_headers(GITHUB_SECRET, body, event="issue_comment"))
    assert r.status_code == 202, r.text


def steps(page: Any) -> list[tuple[str, str]]:
    """The timeline's steps as shown, top (newest) first: (kind, text)."""
    return [(li.get_attribute("data-kind"), " ".join(li.inner_text().split())) for li in page.query_selector_all("li.step")]


def test_the_console_in_a_browser(stack: tuple[Any, Any, Path], tmp_path: Path) -> None:
    from playwright.sync_api import sync_playwright

    cluster, web, poison = stack
    assert httpx.get(f"{web.url}/console", timeout=10).status_code == 401  # no credentials: refused
    webhook(web, ADA, {"number": 4411, "title": "Refund for order 4411"}, "Nobody answered me. Please refund.")
    [asked] = cluster.wait(lambda: [e for e in cluster.store.effects.view(ADA) if e.status == "asked"],
                           "ada: the refund waits for a human")
    cluster.wait(lambda: any(m.kind == "approval" and m.sent_at for m in cluster.store.outbox(ADA)),
                 "ada: the approval request sent")
    webhook(web, EVE, {"number": 7, "title": "question"}, HOSTILE)
    cluster.ingest(ADA, "chat", "poison-1", {"text": "poison"})
    [dead] = cluster.wait(lambda: [e for e in cluster.store.dead(ADA) if e.source_id == "poison-1"],
                          "ada: the poison event dead", timeout=60)
    cluster.wait(lambda: cluster.settled(EVE, 1), "eve: the stranger's comment read")
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, headless=True, args=["--no-sandbox"])
        try:
            _screenshot(browser, web, "/console", 1280, "console-1280.png", tmp_path)  # what needs attention
            context = browser.new_context(http_credentials={"username": "ada", "password": PASSWORD},
                                          viewport={"width": 1280, "height": 900})
            page = context.new_page()
            page.goto(f"{web.url}/console/inbox?i={ADA}")
            page.click("section.approvals form.act.yes button")  # answered in the console
            assert page.url.startswith(f"{web.url}/console/inbox?i={ADA}#action-")
            cluster.wait(lambda: any(m.body == "refund: refunded order 4411" and m.sent_at
                                     for m in cluster.store.outbox(ADA)), "ada: the refund's result said and sent")
            page.goto(f"{web.url}/console/inbox?i={ADA}")
            _assert_in_order(steps(page), asked.tool_use_id)
            _requeue_from_the_console(cluster, page, web, poison, dead.id)
            _screenshot(browser, web, f"/console/inbox?i={ADA}", 390, "console-390.png", tmp_path, height=1800)
            _hostile_is_inert(browser, web, tmp_path)
        finally:
            browser.close()
    assert [a.actor for a in cluster.store.console.actions(ADA)] == ["console:ada", "console:ada"]
    forged = httpx.post(f"{web.url}/console/requeue", data={"inbox": ADA}, auth=("ada", PASSWORD), timeout=10)
    assert forged.status_code == 403 and "nothing was changed" in forged.text  # no CSRF token
    assert len(cluster.store.console.actions(ADA)) == 2


def _assert_in_order(shown: list[tuple[str, str]], tool_use_id: str) -> None:
    """Each step of the story, oldest first, found at a strictly higher place on the page (the
    page is newest first)."""
    story = [("event", "github/"), ("run", "done"), ("effect", "refund"), ("approval", "by console:ada"),
             ("message", "Approval needed"), ("event", "chat/poison-1"), ("run", "error"),
             ("action", "answered"), ("event", f"approval/{tool_use_id}"),
             ("run", "done"), ("event", f"tool/{tool_use_id}"), ("run", "done"),
             ("message", "refund: refunded order 4411")]
    place = len(shown)
    for kind, text in story:
        found = [i for i, (k, t) in enumerate(shown[:place]) if k == kind and text in t]
        assert found, f"{kind} {text!r} not found above place {place}: {shown}"
        place = found[-1]
    said = next(t for k, t in shown if k == "message" and "refund: refunded" in t)
    assert " sent " in said and "held" not in said
    tool = next(t for k, t in shown if k == "effect")
    assert "ask a human first" in tool and "done" in tool and "refunded order 4411" in tool


def _requeue_from_the_console(cluster: Any, page: Any, web: Any, poison: Path, dead: int) -> None:
    poison.unlink()  # the agent is fixed
    page.goto(f"{web.url}/console/inbox?i={ADA}")
    assert "dead" in page.inner_text(f"#event-{dead}")
    page.click(f"section.dead tr:has(a[href='#event-{dead}']) form.act button")
    cluster.wait(lambda: cluster.store.operator.event(dead).status == "done", "ada: the requeued event done")
    page.goto(f"{web.url}/console/inbox?i={ADA}")
    shown = page.inner_text(f"#event-{dead}")
    assert "done" in shown and "dead" not in shown
    assert "requeued event" in page.inner_text("li.step.action")


def _screenshot(browser: Any, web: Any, path: str, width: int, file: str, tmp_path: Path, height: int = 0) -> None:
    """A page as a browser that wide shows it: the whole page, or its first ``height`` pixels."""
    context = browser.new_context(http_credentials={"username": "ada", "password": PASSWORD},
                                  viewport={"width": width, "height": height or 900})
    page = context.new_page()
    page.goto(web.url + path)
    assert page.evaluate("document.documentElement.scrollWidth") <= width
    page.screenshot(path=str(tmp_path / file), full_page=not height)
    keep = os.environ.get("WAKEFUL_TEST_CONSOLE_SHOTS")
    if keep:
        shutil.copy(tmp_path / file, Path(keep) / file)
    context.close()


def _hostile_is_inert(browser: Any, web: Any, tmp_path: Path) -> None:
    for width in (390, 1280):
        context = browser.new_context(http_credentials={"username": "ada", "password": PASSWORD},
                                      viewport={"width": width, "height": 900})
        page = context.new_page()
        dialogs: list[str] = []
        page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
        page.goto(f"{web.url}/console/inbox?i={EVE}")
        page.screenshot(path=str(tmp_path / f"hostile-{width}.png"), full_page=True)
        assert dialogs == []
        assert page.evaluate("document.querySelectorAll('script, img, iframe').length") == 0
        assert page.evaluate("[...document.querySelectorAll('a')].filter(a => !a.href.startsWith("
                             f"'{web.url}/console')).length") == 0
        assert page.evaluate("document.documentElement.scrollWidth") <= width
        text = page.inner_text("li.step.event")
        assert "\u202e" not in text and "\\u202emoc.live@ada" in text and "<script>alert(1)</script>" in text
        assert "W" * 10_000 in text.replace("\n", "") and "FAKEMAC" not in text
        assert "What github sent (data from outside, not checked):" in text
        flags = page.inner_text("li.step.event .flags")
        assert "U+202E RIGHT-TO-LEFT OVERRIDE" in flags
        box = page.evaluate("(() => { const r = document.querySelector('li.step.event pre.value')"
                            ".getBoundingClientRect(); return [r.left, r.right]; })()")
        assert 0 <= box[0] and box[1] <= width
        context.close()
