"""Traces are off unless an exporter is configured, and then go out as real OTLP (issue 25,
part 4; docs/operating.md "Traces"). Each case is a fresh Python process: the setup is per
process, as in production."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from wakeful import telemetry

ROOT = Path(__file__).resolve().parents[2]


def _python(code: str, **env: str) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "WAKEFUL_", "ANTHROPIC_"))}
    clean["WAKEFUL_HOME"] = env.pop("WAKEFUL_HOME", "")
    return subprocess.run([sys.executable, "-c", code], env={**clean, **env}, cwd=ROOT,
                          capture_output=True, text=True, timeout=120)


def test_which_exporter_the_environment_asks_for() -> None:
    assert telemetry.wanted({}) == ()
    assert telemetry.wanted({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318"}) == ("otlp",)
    assert telemetry.wanted({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://c:4318/v1/traces"}) == ("otlp",)
    assert telemetry.wanted({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318", "OTEL_SDK_DISABLED": "true"}) == ()
    assert telemetry.wanted({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318", "OTEL_TRACES_EXPORTER": "none"}) == ()
    assert telemetry.wanted({telemetry.TEST_DIR_ENV: "/tmp/x"}) == ("test",)


def test_off_by_default_no_sdk_is_loaded(tmp_path: Path) -> None:
    """Every layer imported and a span of each kind made: without an exporter nothing of the
    SDK or the Celery instrumentation is loaded and no span records."""
    done = _python(
        "import sys, tasks.application, tasks.ingest, tasks.run_inbox, tasks.outbox, wakeful.web.app, "
        "wakeful.proxy.app, wakeful.agent.claude, wakeful.agent.effects\n"
        "from wakeful import telemetry\n"
        "with telemetry.span('x') as s:\n"
        "    assert not s.is_recording() and telemetry.headers() == {}\n"
        "loaded = sorted(m for m in sys.modules if m.startswith(('opentelemetry.sdk', "
        "'opentelemetry.instrumentation', 'opentelemetry.exporter')))\n"
        "print('loaded', loaded, telemetry.on())\n", WAKEFUL_HOME=str(tmp_path))
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "loaded [] False"


def test_an_unsupported_protocol_is_one_clear_line(tmp_path: Path) -> None:
    done = _python("import tasks.application", WAKEFUL_HOME=str(tmp_path),
                   OTEL_EXPORTER_OTLP_ENDPOINT="http://127.0.0.1:9", OTEL_EXPORTER_OTLP_PROTOCOL="grpc")
    assert done.returncode != 0
    assert done.stderr.strip().splitlines() == [
        "wakeful: OTEL_EXPORTER_OTLP_PROTOCOL='grpc' is not supported; traces go out as OTLP over "
        "HTTP (http/protobuf, port 4318)"]


@contextmanager
def otlp_receiver() -> Iterator[tuple[str, list[bytes]]]:
    """A loopback OTLP/HTTP receiver: every body POSTed to /v1/traces."""
    bodies: list[bytes] = []

    class Receive(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 (the standard library's name)
            body = self.rfile.read(int(self.headers.get("content-length") or 0))
            if self.path == "/v1/traces":
                bodies.append(body)
            self.send_response(200)
            self.send_header("content-type", "application/x-protobuf")
            self.send_header("content-length", "0")
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Receive)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", bodies
    finally:
        server.shutdown()
        server.server_close()


def test_spans_go_out_as_otlp_to_the_configured_endpoint(tmp_path: Path) -> None:
    pytest.importorskip("opentelemetry.proto")
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

    with otlp_receiver() as (url, bodies):
        done = _python(
            "from wakeful import telemetry\n"
            "from opentelemetry import trace\n"
            "assert telemetry.setup('check')\n"
            "with telemetry.span('wakeful.run', attributes={'wakeful.inbox': 'ada'}):\n"
            "    with telemetry.execute_tool('lookup_order', 'toolu_1'):\n"
            "        print(telemetry.headers()['traceparent'])\n"
            "trace.get_tracer_provider().shutdown()\n",  # flushes the batch, as at exit
            WAKEFUL_HOME=str(tmp_path), OTEL_EXPORTER_OTLP_ENDPOINT=url)
        assert done.returncode == 0, done.stderr
    trace_id = done.stdout.strip().split("-")[1]
    sent = [ExportTraceServiceRequest.FromString(body) for body in bodies]
    resources = [r for request in sent for r in request.resource_spans]
    services = {a.value.string_value for r in resources for a in r.resource.attributes if a.key == "service.name"}
    spans = [s for r in resources for scope in r.scope_spans for s in scope.spans]
    assert services == {"wakeful-check"}
    assert sorted(s.name for s in spans) == ["execute_tool lookup_order", "wakeful.run"]
    assert {s.trace_id.hex() for s in spans} == {trace_id}
