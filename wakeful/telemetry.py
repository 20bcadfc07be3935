"""Traces (OpenTelemetry): one trace follows a wake, across the web edge, the workers and the
egress proxy (docs/operating.md, "Traces").

Neutral on purpose: it imports only OpenTelemetry, so wakeful/web/, tasks/, wakeful/proxy/ and wakeful/agent/ all use
it without importing each other (the Celery instrumentation is wired in tasks/application.py
alone). Each process calls ``setup(role)`` once; every other function here is a no-op until a
setup succeeded.

**Off unless an exporter is configured**: ``OTEL_TRACES_EXPORTER`` as the OpenTelemetry
spec reads it (``otlp``: OTLP over HTTP/protobuf; ``console``: each span a JSON line on
stderr; a comma-separated list; ``none``: off), except that unset it means ``otlp`` only
when ``OTEL_EXPORTER_OTLP_ENDPOINT`` or ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`` is set;
``OTEL_SDK_DISABLED=true`` turns everything off. Off, the SDK is never imported
and ``span()`` yields a shared non-recording span without touching the context: a function
call and a flag test per span. The tests' exporter (``WAKEFUL_TRACES_TEST_DIR``) writes each
process's spans as JSON lines to a file of its own in that directory.

**What an attribute may hold**: names the operator chose (inbox, tool, route, model), ids
(events, tool uses, task ids), counts, statuses and error *types*. Never a prompt, a
completion, an event's payload, a tool's input or answer, a header, a URL with its query, a
grant or a secret; exceptions are recorded as their type only (their message can quote any
of those). Call sites pass attributes explicitly: nothing here copies a request or a payload.
"""

from __future__ import annotations

import json
import os
import sys
import threading
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

from opentelemetry import propagate, trace
from opentelemetry.trace import Link, SpanKind, Status, StatusCode

TEST_DIR_ENV = "WAKEFUL_TRACES_TEST_DIR"
ENDPOINT_ENVS = ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT")
TRACER_NAME = "wakeful"

CLIENT, SERVER, CONSUMER, PRODUCER, INTERNAL = (SpanKind.CLIENT, SpanKind.SERVER, SpanKind.CONSUMER,
                                                SpanKind.PRODUCER, SpanKind.INTERNAL)

_lock = threading.Lock()
_active = False  # a provider is installed in this process


# What OTEL_TRACES_EXPORTER may name here ("none" besides); the spec's zipkin is not shipped.
EXPORTERS = ("otlp", "console")


def wanted(env: Mapping[str, str] | None = None) -> tuple[str, ...]:
    """The exporters the environment configures, in order (``()``: traces off): those
    ``OTEL_TRACES_EXPORTER`` names, or unset, ``otlp`` when an OTLP endpoint is set (not the
    spec's default otlp to localhost: a user who configured nothing gets no traces, not an
    export refused every few seconds); ``test`` for ``WAKEFUL_TRACES_TEST_DIR``, instead of
    that default. A name not shipped stops the process at its start (SystemExit, one line)."""
    env = os.environ if env is None else env
    if env.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return ()
    named = [name.strip().lower() for name in env.get("OTEL_TRACES_EXPORTER", "").split(",") if name.strip()]
    if "none" in named:
        return ()
    unknown = [name for name in named if name not in EXPORTERS]
    if unknown:
        raise SystemExit(f"wakeful: OTEL_TRACES_EXPORTER={','.join(unknown)!r} is not supported; "
                         "use otlp, console or none (a comma-separated list)")
    if env.get(TEST_DIR_ENV, "").strip():  # the tests' exporter stands in for the default
        return tuple(dict.fromkeys([*named, "test"]))
    if not named and any(env.get(name, "").strip() for name in ENDPOINT_ENVS):
        named = ["otlp"]
    return tuple(dict.fromkeys(named))


def setup(role: str) -> bool:
    """Install this process's tracer provider if an exporter is configured; True when traces
    are on (now or by an earlier call: the first role wins). ``role`` names the process in
    ``service.name`` (``wakeful-{role}``) unless ``OTEL_SERVICE_NAME`` does."""
    global _active
    kinds = wanted()
    if not kinds:
        return False
    with _lock:
        if _active:
            return True
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider

        names = {} if os.environ.get("OTEL_SERVICE_NAME") else {"service.name": f"wakeful-{role}"}
        provider = TracerProvider(resource=Resource.create({**names, "wakeful.role": role}))
        for kind in kinds:
            provider.add_span_processor(_processor(kind, role))
        trace.set_tracer_provider(provider)
        _active = True
        return True


def _processor(kind: str, role: str) -> Any:
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter, SimpleSpanProcessor

    if kind == "test":
        # Written as each span ends: a test reads them while the processes run, and a
        # process killed at the end loses nothing.
        return SimpleSpanProcessor(JsonLinesExporter(os.environ[TEST_DIR_ENV], role))
    if kind == "console":
        # On stderr, where the process logs, not the SDK's stdout: a command's stdout is its
        # output (``wakeful status --json``). One line per span, printed as it ends, so it
        # reads and greps beside the log lines of the same moment.
        return SimpleSpanProcessor(ConsoleSpanExporter(
            out=sys.stderr, formatter=lambda span: span.to_json(indent=None) + os.linesep))
    protocol = (os.environ.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
                or os.environ.get("OTEL_EXPORTER_OTLP_PROTOCOL") or "http/protobuf").strip()
    if protocol != "http/protobuf":
        raise SystemExit(f"wakeful: OTEL_EXPORTER_OTLP_PROTOCOL={protocol!r} is not supported; "
                         "traces go out as OTLP over HTTP (http/protobuf, port 4318)")
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

    # Batched off the request path; the SDK restarts its thread in a forked child.
    return BatchSpanProcessor(OTLPSpanExporter())


def on() -> bool:
    return _active


@contextmanager
def span(name: str, *, kind: SpanKind = SpanKind.INTERNAL, attributes: Mapping[str, Any] | None = None,
         parent: Mapping[str, Any] | None = None, links: Sequence[Mapping[str, Any]] = ()) -> Iterator[Any]:
    """A span, current inside the block. ``parent``: a carrier (headers) whose ``traceparent``
    the span continues; else the current context. ``links``: carriers of other traces this
    work also serves. An exception marks the span as an error, by its type only."""
    if not _active:
        yield trace.INVALID_SPAN
        return
    context = propagate.extract(parent) if parent is not None else None
    linked = [Link(c) for c in (trace.get_current_span(propagate.extract(carrier)).get_span_context()
                                for carrier in links) if c.is_valid]
    tracer = trace.get_tracer(TRACER_NAME)
    with tracer.start_as_current_span(name, context=context, kind=kind, attributes=_clean(attributes),
                                      links=linked, record_exception=False,
                                      set_status_on_exception=False) as current:
        try:
            yield current
        except BaseException as exc:
            current.set_attribute("error.type", type(exc).__qualname__)
            current.set_status(Status(StatusCode.ERROR, type(exc).__qualname__))
            raise


def execute_tool(name: str, tool_use_id: str, **attributes: Any) -> Any:
    """The span of one tool call, ``execute_tool {name}`` after the GenAI semantic
    conventions: the tool's name and call id, never its input or its answer."""
    return span(f"execute_tool {name}", attributes={
        "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": name,
        "gen_ai.tool.call.id": tool_use_id, "gen_ai.tool.type": "function", **attributes})


def annotate(**attributes: Any) -> None:
    """Attributes on the current span (names with dots: pass a dict through ``**{...}``)."""
    if _active:
        trace.get_current_span().set_attributes(_clean(attributes) or {})


@contextmanager
def continued(carrier: Mapping[str, Any]) -> Iterator[None]:
    """Inside the block, spans are children of the span ``carrier`` (headers) names: work
    handed to another process goes on in the trace that handed it over."""
    if not _active:
        yield
        return
    from opentelemetry import context

    token = context.attach(propagate.extract(carrier))
    try:
        yield
    finally:
        context.detach(token)


def flush(timeout_millis: int = 5000) -> None:
    """Export the spans still batched: for a process about to end without atexit."""
    if _active:
        trace.get_tracer_provider().force_flush(timeout_millis)  # type: ignore[attr-defined]


def current() -> Any:
    """The current span (a non-recording one when off or outside any)."""
    return trace.get_current_span() if _active else trace.INVALID_SPAN


def headers() -> dict[str, str]:
    """The current context as W3C ``traceparent``/``tracestate`` headers ({} when off)."""
    carrier: dict[str, str] = {}
    if _active:
        propagate.inject(carrier)
    return carrier


def _clean(attributes: Mapping[str, Any] | None) -> dict[str, Any] | None:
    if not attributes:
        return None
    return {k: v for k, v in attributes.items() if v is not None}


class JsonLinesExporter:
    """The tests' exporter: each span as one JSON line in ``{directory}/{role}-{pid}.jsonl``
    (the pid read at export, so a forked child writes a file of its own)."""

    def __init__(self, directory: str, role: str) -> None:
        self.directory, self.role = directory, role

    def export(self, spans: Sequence[Any]) -> Any:
        from opentelemetry.sdk.trace.export import SpanExportResult

        os.makedirs(self.directory, exist_ok=True)
        path = os.path.join(self.directory, f"{self.role}-{os.getpid()}.jsonl")
        with open(path, "a", encoding="utf-8") as out:
            for s in spans:
                out.write(json.dumps(_as_json(s), default=str) + "\n")
        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        pass

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return True


def _as_json(s: Any) -> dict[str, Any]:
    ctx, parent = s.get_span_context(), s.parent
    return {"name": s.name, "kind": s.kind.name, "trace_id": f"{ctx.trace_id:032x}",
            "span_id": f"{ctx.span_id:016x}", "parent_id": f"{parent.span_id:016x}" if parent else None,
            "links": [f"{link.context.trace_id:032x}" for link in s.links],
            "attributes": dict(s.attributes or {}), "status": s.status.status_code.name,
            "events": [{"name": e.name, "attributes": dict(e.attributes or {})} for e in s.events],
            "service": s.resource.attributes.get("service.name"), "pid": os.getpid(),
            "argv": " ".join(sys.argv[:3])}
