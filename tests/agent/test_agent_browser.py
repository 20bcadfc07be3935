"""A human answers a tool call's approval in a real browser: headless Chromium (Debian's
``chromium``, driven by Playwright) opens the signed link the dispatcher put in the outbox,
sees the tool, its input, the model's words and the deadline, clicks Yes, and the tool runs
once. The link is minted by the dispatching control process; the run worker that hosts the
agent never holds ``WAKEFUL_APPROVAL_SECRET``."""

from __future__ import annotations

import re
import socket
import sys
from pathlib import Path
from typing import Any

import httpx

from wakeful.agent.scripted import ScriptedModel
from agent_support import BASE_TOOLS, agent_env, calls
from wakeful.cli.processes import CONTROL_QUEUES, wait_for

CHROMIUM = "/usr/bin/chromium"
SECRET = "browser-test-approval-key"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_yes_in_a_real_browser_runs_the_tool_once(make_cluster: Any, write_config: Any,
                                                   model: ScriptedModel, tool_log: Path) -> None:
    import os

    from databases import service_missing

    if not os.access(CHROMIUM, os.X_OK):  # a laptop without it skips; CI (which installs it) fails
        service_missing("Chromium", f"no {CHROMIUM} (apt-get install chromium)")
    from playwright.sync_api import sync_playwright

    port = _free_port()
    config = write_config(BASE_TOOLS)
    cluster = make_cluster(env={**agent_env(config, model.base_url, tool_log),
                                "WAKEFUL_PUBLIC_URL": f"http://127.0.0.1:{port}",
                                "WAKEFUL_WEB_PORT": str(port)})
    # The key goes to the dispatcher and the web edge only: the control process is started
    # again with it, the run worker keeps the environment it was started with.
    [control] = [p for p in cluster.procs.procs if p.name == "control"]
    cluster.procs.stop(control)
    keyed = {"WAKEFUL_APPROVAL_SECRET": SECRET}
    control = cluster.procs.start("control-keyed", [
        sys.executable, "-m", "celery", "-A", "tasks", "worker", "-l", "INFO", "-n", "control2@%h",
        "-Q", ",".join(CONTROL_QUEUES), "-c", "2", "--without-mingle", "--without-gossip"], keyed)
    web = cluster.procs.start("web", [sys.executable, "-m", "wakeful.web"], keyed)
    cluster.procs.wait_ready(control)
    wait_for(lambda: _up(port), 30, "the web edge")
    [worker] = cluster.run_workers
    assert b"WAKEFUL_APPROVAL_SECRET" not in Path(f"/proc/{worker.pid}/environ").read_bytes()

    cluster.ingest("ada", "chat", "1", {"text": 'I will refund it now.\ncall refund_asked {"order": 42}'})
    sent = cluster.wait(lambda: [m for m in cluster.sent("ada") if "Approval needed" in m["body"]],
                        "the approval request in the outbox")
    [link] = re.findall(rf"http://127\.0\.0\.1:{port}/approvals/\S+", sent[0]["body"])
    assert "token=" in link and calls(tool_log) == []

    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, headless=True, args=["--no-sandbox"])
        try:
            page = browser.new_page()
            page.goto(link)
            assert page.inner_text("#tool") == "refund_asked"
            assert '"order": 42' in page.inner_text("#input")
            assert "I will refund it now." in page.inner_text("#words")
            assert "UTC" in page.inner_text("#deadline")
            page.click("button[value=yes]")
            page.wait_for_load_state()
            assert page.inner_text("body").strip() == "Recorded: yes."
        finally:
            browser.close()

    cluster.wait(lambda: [m for m in cluster.sent("ada") if "refund_asked: refunded order 42" in m["body"]]
                 or [b for b in (r.body for r in cluster.store.outbox("ada")) if "refunded order 42" in b],
                 "the agent's reply with the tool's result")
    assert [c["input"] for c in calls(tool_log)] == [{"order": 42}]
    assert web.alive()


def _up(port: int) -> bool:
    try:
        return httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=2).status_code == 200
    except httpx.TransportError:
        return False
