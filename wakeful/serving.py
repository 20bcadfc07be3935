"""How wakeful's HTTP processes (``python -m wakeful.web``, ``python -m wakeful.proxy``) are served by uvicorn,
and the two bounds uvicorn lacks: a request's headers must arrive within ``header_timeout``, and
the whole request, headers and body, within ``request_timeout``.

uvicorn times out only an idle keep-alive connection, and its timer stops at the first byte
of the next request: a client that sends half a request line and then nothing (slowloris)
holds its connection, and a file descriptor, for ever; so does one that sends complete headers
and then dribbles its body a byte at a time, since each byte it sends is progress. Here the h11
protocol gets a timer from the moment the server waits for a request (a new connection, or a
finished answer on a keep-alive one) until that request's headers are complete: when it fires
the connection is closed. Then another, until the request's body is complete, set at
``request_timeout`` after the request's first byte (on a new connection, after it opened):
when it fires before the app answered, the answer is 408 and the connection is closed, and
the app reading the body is told the client left (it never sees a body cut short as whole).
An answer is never cut by either timer: one the app has begun is finished, then the
connection closed. A body's size is the app's to bound (wakeful/web/body.py, wakeful/proxy/app.py).

Several processes (``processes``, the proxy's WAKEFUL_PROXY_PROCESSES) are uvicorn's own
workers: the parent binds the socket, spawns the children that accept on it, and restarts one
that dies. A spawned child imports what it runs, so the app is then a factory's import string
and the protocol a picklable ``partial`` of this module's class (not a class made at run time).

``limit_concurrency`` is deliberately not set: uvicorn counts every open connection against
it, half-sent ones included, and answers 503 to whole requests beyond it, so a slow client
would turn everyone else's requests into 503s. Put a buffering reverse proxy in front (it
bounds connections and sends each request whole); these timers are the floor without one.
"""

from __future__ import annotations

import asyncio
from functools import partial
from typing import Any

import h11
import uvicorn
from uvicorn.protocols.http.h11_impl import H11Protocol

_TOO_SLOW = b"the request was not complete in time\n"
# Seconds a child has to answer its parent's ping (several processes), else it is killed and
# replaced. A spawned child answers only once it has imported what it runs (SQLAlchemy and all:
# seconds on a busy small host), and uvicorn's 5 s killed one at its start on 2 loaded cores. A
# child that exits is replaced at once whatever this is; only a hung one waits this long.
_CHILD_ANSWERS_WITHIN = 30


class RequestsInTime(H11Protocol):
    """uvicorn's h11 protocol (its own fallback when httptools is not installed), closing a
    connection whose next request's headers are not complete ``header_timeout`` seconds after
    the server started waiting for them, or whose request is not complete ``request_timeout``
    seconds after it began (408 when nothing was answered yet)."""

    _timer: asyncio.TimerHandle | None = None
    _waiting_since_cycle: Any = None  # while waiting for headers: the cycle before them
    _reading_body = False  # headers complete, body not yet
    _began: float | None = None  # loop time of the request's first byte

    def __init__(self, *args: Any, header_timeout: float, request_timeout: float, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.header_timeout, self.request_timeout = header_timeout, request_timeout

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._wait_for_headers()
        self._began = self.loop.time()  # a connection is opened to send a request

    def data_received(self, data: bytes) -> None:
        if self._began is None:
            self._began = self.loop.time()
        super().data_received(data)
        self._follow_the_request()

    def on_response_complete(self) -> None:
        self._wait_for_headers()  # before: a pipelined request is read inside the call
        super().on_response_complete()
        self._follow_the_request()

    def connection_lost(self, exc: Exception | None) -> None:
        self._stop()
        super().connection_lost(exc)

    def _wait_for_headers(self) -> None:
        self._stop()
        # uvicorn starts a new request cycle when a request's headers are complete
        self._waiting_since_cycle = self.cycle
        self._reading_body = False
        self._began = None  # a kept-alive client's next request begins at its first byte
        self._timer = self.loop.call_later(self.header_timeout, self._too_late)

    def _follow_the_request(self) -> None:
        """From the headers' timer to the body's once the headers came; none once the body did."""
        if self._timer is not None and not self._reading_body and self.cycle is not self._waiting_since_cycle:
            self._stop()
            self._reading_body = True
            began = self._began if self._began is not None else self.loop.time()
            self._timer = self.loop.call_at(began + self.request_timeout, self._too_late)
        if self._reading_body and not self.cycle.more_body:
            self._stop()
            self._reading_body = False

    def _stop(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _too_late(self) -> None:
        self._timer = None
        if self.transport.is_closing():
            return
        cycle = self.cycle
        if self._reading_body and cycle is not None and not cycle.response_started:
            self._answer_408(cycle)
        elif self._reading_body and cycle is not None and not cycle.response_complete:
            cycle.keep_alive = False  # the app is answering: let it finish, then close
            return
        self.transport.close()

    def _answer_408(self, cycle: Any) -> None:
        # The app waits for a body that is not coming: it is told the client left (its
        # receive() returns http.disconnect, its answer goes nowhere), and the client is told why.
        cycle.disconnected = True
        cycle.message_event.set()
        headers = [(b"content-type", b"text/plain; charset=utf-8"), (b"connection", b"close"),
                   (b"content-length", str(len(_TOO_SLOW)).encode())]
        try:
            self.transport.write(self.conn.send(h11.Response(status_code=408, headers=headers,
                                                             reason=b"Request Timeout")))
            self.transport.write(self.conn.send(h11.Data(data=_TOO_SLOW)))
            self.transport.write(self.conn.send(h11.EndOfMessage()))
        except h11.LocalProtocolError:  # h11 cannot answer in its state: closing says enough
            pass


def run(app: Any, *, host: str, port: int, header_timeout: float, request_timeout: float,
        processes: int = 1, **options: Any) -> None:
    """Serve ``app`` as both processes are served: no access log (it prints query strings,
    which carry tokens), no Server header, 5 s keep-alive, headers within ``header_timeout``,
    the whole request within ``request_timeout``. ``app`` is an ASGI app, or the import string
    (``module:function``) of a factory called in the process that serves: required for more
    than one ``processes``, since each is spawned and makes its own."""
    # A partial of an importable class, not a class made here: a spawned child unpickles it.
    protocol = partial(RequestsInTime, header_timeout=header_timeout, request_timeout=request_timeout)
    uvicorn.run(app, host=host, port=port, http=protocol,  # type: ignore[arg-type] - called as a class is
                factory=isinstance(app, str), workers=processes, access_log=False, server_header=False,
                timeout_keep_alive=5, timeout_worker_healthcheck=_CHILD_ANSWERS_WITHIN, **options)
