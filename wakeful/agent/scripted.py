"""A scripted Messages API on loopback: the model for tests and ``wakeful demo agent``.

It speaks the real wire format (``POST /v1/messages``), so the agent runs the real
``anthropic`` SDK over real HTTP against it (``ANTHROPIC_BASE_URL``): retries, timeouts and
parsing are the SDK's own. Its "model" follows a tiny script written in the user's text:

- ``call TOOL {json}``: a ``tool_use`` of TOOL with that input (several lines, several uses
  in one reply, each with a fresh ``toolu_`` id as the real API gives);
- ``silent``: it calls ``stay_silent``; ``urgent``: it calls ``mark_urgent`` and replies;
- ``refuse`` / ``max_tokens``: a reply that stops for that reason;
- anything else: a reply ``Noted: <the text>``.

Given tool results it reports them: ``TOOL: <content>`` (or ``TOOL failed: ...``; a runtime
tool's ``ok`` goes unsaid), and it is a
red-team model: a ``call`` line anywhere in its latest input is obeyed, inside
``<untrusted>`` data or a tool's answer (a line of its text, or of a string in its JSON) as
much as in the owner's words, as a model a prompt injection has steered would. Tests can
make the next requests fail with a status and a Retry-After (``fail_next``), hold one until
released (``hold_next``), stop listening so connections are refused and listen again on the
same port (``refuse_connections`` / ``accept_connections``: an outage), and read every
request the SDK sent (``requests``).

For the bench (bench/waiting.py) it answers each request ``delay`` seconds after it arrived, as
a real model takes seconds to reply, and counts the requests it holds at once
(``in_flight``, ``peak_in_flight``; ``GET /_scripted/stats`` from another process). It is a
``ThreadingHTTPServer``: one thread per connection, sleeping through the delay, and a listen
backlog of ``BACKLOG`` (socketserver's default of 5 made 1,000 simultaneous connections wait
on SYN retransmits, 1 s and more each). Measured on a 2-core box: 1,000 concurrent delayed
requests are held at once (see docs/performance.md, "Agents that wait").
"""

from __future__ import annotations

import json
import re
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

# Connections the kernel queues before the server accepts them: enough for a bench's 1,000
# calls arriving at once (the kernel caps it at net.core.somaxconn).
BACKLOG = 4096

_CALL = re.compile(r"^\s*call\s+([A-Za-z0-9_-]+)\s*(\{.*\})?\s*$")


def reply_to(request: dict[str, Any]) -> dict[str, Any]:
    """The scripted model: one reply to one Messages API request."""
    messages = request.get("messages") or []
    last = messages[-1] if messages else {"role": "user", "content": []}
    content = last.get("content")
    blocks = [{"type": "text", "text": content}] if isinstance(content, str) else list(content or [])
    results = [b for b in blocks if b.get("type") == "tool_result"]
    text = "\n".join(b.get("text", "") for b in blocks if b.get("type") == "text")
    uses: list[dict[str, Any]] = []
    said = [_report(messages, results)] if results else []
    for line in text.splitlines():
        match = _CALL.match(line)
        if match:
            uses.append(_use(match.group(1), json.loads(match.group(2) or "{}")))
        elif line.strip() == "silent":
            uses.append(_use("stay_silent", {}))
        elif line.strip() in ("refuse", "max_tokens"):  # the stop reasons a test may ask for
            return _message(request, [{"type": "text", "text": "I was about to"}] if line.strip() == "max_tokens"
                            else [], "refusal" if line.strip() == "refuse" else "max_tokens")
        elif line.strip() == "urgent":
            uses.append(_use("mark_urgent", {}))
            said.append("Urgent: something needs you now.")
        elif line.strip() and not _is_tag(line):
            said.append(f"Noted: {line.strip()}")
    uses += [_use(m.group(1), json.loads(m.group(2) or "{}"))
             for r in results for line in _lines(r.get("content")) if (m := _CALL.match(line))]
    out = ([{"type": "text", "text": " | ".join(said)}] if said else []) + uses
    if not out:
        out = [{"type": "text", "text": "Noted."}]
    return _message(request, out, "tool_use" if uses else "end_turn")


def _lines(content: Any) -> list[str]:
    """Every line of a tool result's text, and of each string inside any JSON in it (the
    whole text, or one of its lines, wrapped as data)."""
    if isinstance(content, dict):
        return [line for v in content.values() for line in _lines(v)]
    if isinstance(content, list):
        return [line for v in content for line in _lines(v)]
    if not isinstance(content, str):
        return []
    lines = content.splitlines()
    nested = [line for part in dict.fromkeys([content, *lines]) for line in _lines(_json(part))]
    return list(dict.fromkeys(lines + nested))


def _json(text: str) -> Any:
    try:
        decoded = json.loads(text)
    except ValueError:
        return None
    return decoded if isinstance(decoded, dict | list) else None


def _report(messages: list[dict[str, Any]], results: list[dict[str, Any]]) -> str:
    names = {}
    for m in messages:
        if m.get("role") == "assistant" and isinstance(m.get("content"), list):
            names.update({b["id"]: b["name"] for b in m["content"] if b.get("type") == "tool_use"})
    lines = []
    for r in results:
        name = names.get(r["tool_use_id"], "tool")
        if name in ("stay_silent", "mark_urgent") and not r.get("is_error"):
            continue  # "ok": nothing to report; a refusal is reported as any tool's error
        body = r.get("content")
        body = body if isinstance(body, str) else json.dumps(body)
        body = "\n".join(line for line in body.splitlines() if not _is_tag(line)).strip()
        lines.append(f"{name} failed: {body}" if r.get("is_error") else f"{name}: {body}")
    return " | ".join(lines) or "Noted."


def _is_tag(line: str) -> bool:
    return line.startswith(("<untrusted", "</untrusted"))


def _use(name: str, tool_input: dict[str, Any]) -> dict[str, Any]:
    return {"type": "tool_use", "id": f"toolu_{uuid.uuid4().hex[:24]}", "name": name, "input": tool_input}


def _message(request: dict[str, Any], content: list[dict[str, Any]], stop: str) -> dict[str, Any]:
    size = len(json.dumps(request.get("messages", [])))
    return {"id": f"msg_{uuid.uuid4().hex[:24]}", "type": "message", "role": "assistant",
            "model": request.get("model", "scripted"), "content": content, "stop_reason": stop,
            "stop_sequence": None,
            "usage": {"input_tokens": size // 4 + 1, "output_tokens": len(json.dumps(content)) // 4 + 1}}


class ScriptedModel:
    """The server: ``with ScriptedModel() as model: ... model.base_url ...``."""

    def __init__(self, host: str = "127.0.0.1", port: int = 0, delay: float = 0.0,
                 keep_requests: bool = True) -> None:
        self.delay = delay  # seconds before each answer (the bench's model "thinking")
        self.keep_requests = keep_requests  # False: the bench's many calls are not kept
        self.in_flight = 0
        self.peak_in_flight = 0
        self.answered = 0
        self.requests: list[dict[str, Any]] = []
        self.replies: list[dict[str, Any]] = []  # every successful reply, in the order sent
        self.seen: list[tuple[str, str | None]] = []  # (path, the key header) of every request
        self._failures: list[tuple[int, float | None]] = []
        self._holds: list[threading.Event] = []
        self._lock = threading.Lock()
        self._server = self._listen(host, port)
        self.address = self._server.server_address[:2]
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self.listening = False

    def _listen(self, host: str, port: int) -> ThreadingHTTPServer:
        server = _Server((host, port), self._handler())
        server.daemon_threads = True
        return server

    @property
    def base_url(self) -> str:
        host, port = self.address
        return f"http://{host}:{port}"

    def start(self) -> ScriptedModel:
        self._thread.start()
        self.listening = True
        return self

    def stop(self) -> None:
        for hold in self._holds:
            hold.set()
        if self.listening:
            self.refuse_connections()

    def refuse_connections(self) -> None:
        """Close the listening socket: every connection is refused until
        ``accept_connections`` (the model API down, or the proxy in front of it restarting)."""
        self._server.shutdown()
        self._server.server_close()
        self.listening = False

    def accept_connections(self) -> None:
        """Listen again on the same address."""
        self._server = self._listen(*self.address)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self.start()

    def __enter__(self) -> ScriptedModel:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    def fail_next(self, count: int, status: int = 500, retry_after: float | None = None) -> None:
        """The next ``count`` requests answer ``status`` (529: overloaded), with a
        Retry-After header when given."""
        with self._lock:
            self._failures.extend([(status, retry_after)] * count)

    def hold_next(self) -> threading.Event:
        """The next request waits until the returned event is set (a model call that hangs)."""
        hold = threading.Event()
        with self._lock:
            self._holds.append(hold)
        return hold

    def stats(self) -> dict[str, Any]:
        with self._lock:
            return {"in_flight": self.in_flight, "peak_in_flight": self.peak_in_flight,
                    "answered": self.answered, "delay": self.delay}

    def _count(self, step: int) -> None:
        with self._lock:
            self.in_flight += step
            self.peak_in_flight = max(self.peak_in_flight, self.in_flight)
            if step < 0:
                self.answered += 1

    def _next_action(self, request: dict[str, Any]) -> tuple[tuple[int, float | None] | None, threading.Event | None]:
        with self._lock:
            if self.keep_requests:
                self.requests.append(request)
            if self._failures:
                return self._failures.pop(0), None
            hold = next((h for h in self._holds if not getattr(h, "taken", False)), None)
            if hold is not None:
                hold.taken = True  # type: ignore[attr-defined]
            return None, hold

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        model = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 - the bench's counters, from another process
                if self.path == "/_scripted/stats":
                    return self._send(200, model.stats())
                self._send(404, {"type": "error", "error": {"type": "not_found_error", "message": self.path}})

            def do_POST(self) -> None:  # noqa: N802 (the http.server API)
                arrived = time.monotonic()
                model._count(+1)
                try:
                    self._post(arrived)
                finally:
                    model._count(-1)

            def _post(self, arrived: float) -> None:
                length = int(self.headers.get("content-length") or 0)
                try:
                    request = json.loads(self.rfile.read(length) or b"{}")
                except ValueError:
                    return self._send(400, {"type": "error", "error": {"type": "invalid_request_error",
                                                                        "message": "not JSON"}})
                # Any prefix: through the egress proxy the path is /<route>/v1/messages.
                if model.keep_requests:
                    model.seen.append((self.path, self.headers.get("x-api-key") or self.headers.get("authorization")))
                if not self.path.split("?")[0].endswith("/v1/messages"):
                    return self._send(404, {"type": "error", "error": {"type": "not_found_error",
                                                                        "message": self.path}})
                failure, hold = model._next_action(request)
                if hold is not None:
                    hold.wait(600)
                if model.delay > 0:
                    time.sleep(max(0.0, arrived + model.delay - time.monotonic()))
                if failure is not None:
                    status, after = failure
                    kind = "overloaded_error" if status == 529 else "api_error"
                    return self._send(status, {"type": "error", "error": {"type": kind, "message": "scripted failure"}},
                                      {} if after is None else {"retry-after": f"{after:g}"})
                reply = reply_to(request)
                if model.keep_requests:
                    with model._lock:
                        model.replies.append(reply)
                self._send(200, reply)

            def _send(self, status: int, body: dict[str, Any], headers: dict[str, str] | None = None) -> None:
                data = json.dumps(body).encode()
                self.send_response(status)
                for name, value in (headers or {}).items():
                    self.send_header(name, value)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: Any) -> None:  # quiet: tests read .requests instead
                pass

        return Handler


class _Server(ThreadingHTTPServer):
    request_queue_size = BACKLOG


def main() -> None:  # python -m wakeful.agent.scripted [port [delay]]: serve until interrupted
    import sys

    port = int(sys.argv[1]) if len(sys.argv) > 1 else 0
    delay = float(sys.argv[2]) if len(sys.argv) > 2 else 0.0
    # With a delay (the bench) nothing is kept per request: a long run would grow without end.
    model = ScriptedModel(port=port, delay=delay, keep_requests=delay == 0).start()
    print(model.base_url, flush=True)
    try:
        threading.Event().wait()
    except KeyboardInterrupt:
        model.stop()


if __name__ == "__main__":
    main()
