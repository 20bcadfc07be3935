"""Traces without a collector: ``OTEL_TRACES_EXPORTER=console`` prints each span on the
process's stderr, one JSON line per span (docs/operating.md "Traces"), read here from real
worker processes' logs; the exporter names follow the OpenTelemetry spec's variable."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from wakeful import telemetry

pytestmark = pytest.mark.processes


def printed_spans(text: str) -> list[dict[str, Any]]:
    """The spans a process printed: its log's lines that are a span as JSON."""
    found = []
    for line in text.splitlines():
        if not line.startswith("{"):
            continue
        try:
            span = json.loads(line)
        except ValueError:
            continue
        if isinstance(span, dict) and "context" in span and "name" in span:
            found.append(span)
    return found


def test_the_exporters_the_environment_names() -> None:
    endpoint = {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318"}
    assert telemetry.wanted({"OTEL_TRACES_EXPORTER": "console"}) == ("console",)
    assert telemetry.wanted({"OTEL_TRACES_EXPORTER": " Console , otlp"}) == ("console", "otlp")
    # Named, otlp needs no endpoint: the SDK's default (localhost:4318), as the spec says.
    assert telemetry.wanted({"OTEL_TRACES_EXPORTER": "otlp"}) == ("otlp",)
    # Unset, otlp only when an endpoint says where to: nothing configured, no traces.
    assert telemetry.wanted({}) == ()
    assert telemetry.wanted(endpoint) == ("otlp",)
    assert telemetry.wanted({**endpoint, "OTEL_TRACES_EXPORTER": "none"}) == ()
    assert telemetry.wanted({"OTEL_TRACES_EXPORTER": "console", "OTEL_SDK_DISABLED": "true"}) == ()
    assert telemetry.wanted({"OTEL_TRACES_EXPORTER": "console", telemetry.TEST_DIR_ENV: "/x"}) == ("console", "test")


def test_an_exporter_not_shipped_is_one_clear_line(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "WAKEFUL_"))}
    done = subprocess.run([sys.executable, "-c", "import tasks.application"],
                          env={**env, "WAKEFUL_HOME": str(tmp_path), "OTEL_TRACES_EXPORTER": "zipkin"},
                          capture_output=True, text=True, timeout=120)
    assert done.returncode != 0
    assert done.stderr.strip().splitlines() == [
        "wakeful: OTEL_TRACES_EXPORTER='zipkin' is not supported; use otlp, console or none "
        "(a comma-separated list)"]


def test_console_spans_go_to_stderr_and_leave_stdout_alone(tmp_path: Path) -> None:
    """stdout is a command's output (``wakeful status --json``): spans never mix into it."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "WAKEFUL_"))}
    done = subprocess.run([sys.executable, "-c",
                           "from wakeful import telemetry\n"
                           "assert telemetry.setup('check')\n"
                           "with telemetry.span('wakeful.run', attributes={'wakeful.inbox': 'ada'}):\n"
                           "    print('output')\n"],
                          env={**env, "WAKEFUL_HOME": str(tmp_path), "OTEL_TRACES_EXPORTER": "console"},
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout == "output\n"
    [span] = printed_spans(done.stderr)
    assert span["name"] == "wakeful.run" and span["attributes"] == {"wakeful.inbox": "ada"}
    assert span["resource"]["attributes"]["service.name"] == "wakeful-check"


@pytest.mark.parametrize("backend", ["embedded"])
def test_a_wakes_spans_are_printed_by_the_workers_that_made_them(make_cluster: Any) -> None:
    c = make_cluster(env={"OTEL_TRACES_EXPORTER": "console"})
    c.ingest("ada", "chat", "m-1", {"text": "hello"})
    c.wait(lambda: c.settled("ada", 1), "the wake's run done")
    [runs] = [p for p in c.procs.procs if p.name == "runs0"]
    [control] = [p for p in c.procs.procs if p.name == "control"]

    def the_wake() -> tuple[dict[str, Any], dict[str, Any]] | None:
        run = [s for s in printed_spans(runs.text())
               if s["name"] == "wakeful.run" and s["attributes"].get("wakeful.inbox") == "ada"]
        ingest = [s for s in printed_spans(control.text()) if s["name"] == "wakeful.ingest"]
        return (run[0], ingest[0]) if run and ingest else None

    run, ingest = c.wait(the_wake, "the run's span on the runs worker's stderr, the ingest's on the control's")
    # One trace across the two processes: the ingest rang the run's doorbell.
    assert run["context"]["trace_id"] == ingest["context"]["trace_id"]
    assert run["resource"]["attributes"]["service.name"] == "wakeful-runs0"
    assert run["attributes"]["wakeful.run.outcome"] == "done"
