"""Scenario 12: the claude agent's tool calls under faults (issue 12), shared by CI and the soak.

Real processes against the scripted Messages API on loopback. Messages ask for write tools:
at-least-once and at-most-once ones, and "flaky" ones whose executor dies right after the
call, before recording it, and an MCP server's write (tests/faults/fault_mcp.py, over stdio,
its idempotency key in ``_meta``). A run worker is SIGKILLed inside its finish (before the COMMIT),
so the tool uses that run proposed are never committed. The checker then counts executions
per tool use id: none for an id no finish committed, one key per id, at most one execution
of an at-most-once tool, every effect settled and its result delivered to the inbox.
"""

from __future__ import annotations

import json
import random
import signal
import sys
import tempfile
from pathlib import Path

from wakeful.agent.scripted import ScriptedModel

from agent_checks import executions, tool_counts  # type: ignore[import-not-found]
from fault_tools import CONFIG  # type: ignore[import-not-found]

TEXTS = ('call refund {{"order": {n}}}', 'call notify {{"order": {n}}}',
         'call flaky {{"order": {n}}}', 'call flaky_once {{"order": {n}}}',
         'call refund {{"order": {n}}}\ncall notify {{"order": {n}}}', 'call mcp_refund {{"order": {n}}}')
# An MCP server's write, as a tool source like the others (wakeful/agent/mcp.py); only its
# configured tool, its text pinned (the server's own would taint every conversation: docs/mcp.md).
MCP_CONFIG = """
[mcp.faults]
command = "{python}"
args = ["{server}", "{log}"]
prefix = "mcp_"
policy = "deny"

[mcp.faults.tools.refund]
policy = "allow"
effect = "write"
trusted_output = true
description = "Refund an order (a write through MCP)"
input_schema = {{ type = "object", properties = {{ order = {{ type = "integer" }} }}, required = ["order"] }}
"""


def agent_tools(make_stack, rng: random.Random, scale: int = 1):  # type: ignore[no-untyped-def]
    from scenarios import Result, _drain  # type: ignore[import-not-found]

    config = Path(tempfile.mkdtemp(prefix="wakeful-agent-fault-")) / "agent.toml"
    mcp_log = config.parent / "mcp_calls.jsonl"
    config.write_text(CONFIG + MCP_CONFIG.format(python=sys.executable, log=mcp_log,
                                                 server=Path(__file__).with_name("fault_mcp.py")))
    with ScriptedModel() as model:
        s = make_stack(WAKEFUL_AGENT="claude", WAKEFUL_AGENT_CONFIG=str(config),
                       ANTHROPIC_BASE_URL=model.base_url, ANTHROPIC_API_KEY="fault-test")
        s.inputs.generated_sources.add("tool")  # results the executor ingests
        # The faulty worker is the only run worker until it blocks in its first finish, so the
        # kill lands there every time (with a healthy worker beside it, the healthy one once
        # took every inbox and the faulty one never reached a finish).
        faulty = s.worker("runs-finish", faults="before_finish_commit:block:1")
        control, beat = s.control(), s.beat()
        s.ready(faulty, control, beat)
        inboxes = [f"agent{i}" for i in range(4 * scale)]

        def batch(tag: str) -> list[tuple]:
            return [(inbox, "chat", f"{tag}-{inbox}",
                     {"text": rng.choice(TEXTS).format(n=rng.randint(1, 10_000))}) for inbox in inboxes]

        mark = s.log_length()
        s.feed(batch("a"))
        s.wait_blocked("before_finish_commit", after=mark, timeout=90)
        s.kill(faulty, signal.SIGKILL)
        s.ready(s.worker("runs-healthy"))
        s.feed(batch("b"))
        s.feed(batch("c"))
        s.feed([(inboxes[0], "chat", "mcp-write", {"text": 'call mcp_refund {"order": 1}'})])  # one for sure
        book = s.store.effects
        for _ in range(3):  # a result ingested after a drain wakes the agent once more
            s.wait(lambda: not [e for e in book.view() if e.status in ("ready", "executing")],
                   "every effect executed", timeout=120 * scale)
            _drain(s, timeout=120 * scale)
        counts = s.counts()
        mcp_calls = _log_mcp_calls(s.store, mcp_log, s.home / "tools.jsonl")
        counts.update(tool_counts(s.store, s.home / "tools.jsonl"))
        counts["tool_mcp_never_called"] = int(mcp_calls == 0)  # the MCP write above ran
    return Result(counts, injected={"sigkill_in_finish": 1},
                  measured={**executions(s.home / "tools.jsonl"), "effects": len(book.view()),
                            "model_calls": len(model.requests)})


def _log_mcp_calls(store, mcp_log: Path, tool_log: Path) -> int:  # type: ignore[no-untyped-def]
    """The MCP server knows only the key: each of its calls goes into the tools' log under the
    tool use whose effect holds that key (an unknown key counts as a call nothing committed)."""
    from sqlalchemy import select

    from store.tables import effects

    lines = mcp_log.read_text().splitlines() if mcp_log.exists() else []
    with store.engine.connect() as conn:
        owners = {r.idempotency_key: (r.inbox, r.tool_use_id) for r in conn.execute(
            select(effects.c.idempotency_key, effects.c.inbox, effects.c.tool_use_id))}
    with tool_log.open("a", encoding="utf-8") as f:
        for line in lines:
            call = json.loads(line)
            inbox, use = owners.get(call["key"], ("(mcp)", f"unknown-key-{call['key']}"))
            f.write(json.dumps({"inbox": inbox, "id": use, "key": call["key"], "tool": call["tool"],
                                "attempt": 0}) + "\n")
    return len(lines)
