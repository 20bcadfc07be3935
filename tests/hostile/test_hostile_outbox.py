"""Model text on its way out: through the default ``log`` channel of the Procfile's control
process, terminal escapes, hyperlinks, carriage returns, bidi overrides and a forged log
record reach the log escaped, on the one line of their send."""

from __future__ import annotations

import pytest

pytestmark = [pytest.mark.postgres, pytest.mark.redis, pytest.mark.processes]

# what a steered model writes (the demo agent quotes an event's text back, as a model would)
EVIL = ("\x1b[2J\x1b[31mred "
        "\x1b]8;;https://evil.example/\x1b\\click me\x1b]8;;\x1b\\ "
        "safe\rOVERWRITTEN "
        "\u202emoc.live@ada"
        "\n[2026-12-01 21:00:00,000: WARNING/MainProcess] forged: all approvals granted")
RAW = ("\x1b", "\r", "\u202e")


def test_model_text_reaches_the_log_channel_escaped(doors) -> None:
    from wakeful.cli.processes import CONTROL_QUEUES

    [control] = [p for p in doors.procs.procs if p.name == "control"]
    doors.procs.stop(control)
    logged = doors.procs.start("control-log", [*_worker_args("control-log", CONTROL_QUEUES)],
                               {"WAKEFUL_OUTBOX_CHANNEL": "log"})
    doors.procs.wait_ready(logged)
    doors.client().send_task("wakeful.ingest", kwargs={"inbox": "ada", "source": "chat", "source_id": "m1",
                                                       "payload": {"text": EVIL, "urgent": True}})
    text = doors.wait(lambda: "outbox inbox=ada" in logged.text() and logged.text(),
                      "the reply in the control process's log")
    for raw in RAW:
        assert raw not in text, (raw, text[-2000:])
    assert not any(line.startswith("[2026-12-01 21:00:00,000") for line in text.splitlines()), text[-2000:]
    assert "\\x1b]8;;https://evil.example/" in text and "\\u202emoc.live@ada" in text


def _worker_args(name: str, queues: tuple[str, ...]) -> list[str]:
    import sys

    return [sys.executable, "-m", "celery", "-A", "tasks", "worker", "-l", "INFO", "-n", f"{name}@%h",
            "-Q", ",".join(queues), "-c", "2", "--without-mingle", "--without-gossip"]
