"""How wakeful's HTTP processes (``python -m wakeful.web``, ``python -m wakeful.proxy``) are served by uvicorn,
and the one bound uvicorn lacks: a request's headers must arrive within ``header_timeout``.

uvicorn times out only an idle keep-alive connection, and its timer stops at the first byte
of the next request: a client that sends half a request line and then nothing (slowloris)
holds its connection, and a file descriptor, for ever. Here the h11 protocol gets a timer
from the moment the server waits for a request (a new connection, or a finished answer on a
keep-alive one) until that request's headers are complete; when it fires the connection is
closed. A body is the app's to bound (wakeful/web/body.py, wakeful/proxy/app.py), an answer is never cut.

``limit_concurrency`` is deliberately not set: uvicorn counts every open connection against
it, half-sent ones included, and answers 503 to whole requests beyond it, so a slow client
would turn everyone else's requests into 503s. Put a buffering reverse proxy in front (it
bounds connections and sends each request whole); this timer is the floor without one.
"""

from __future__ import annotations

import asyncio
from typing import Any

import uvicorn
from uvicorn.protocols.http.h11_impl import H11Protocol


class HeadersInTime(H11Protocol):
    """uvicorn's h11 protocol (its own fallback when httptools is not installed), closing a
    connection whose next request's headers are not complete ``header_timeout`` seconds after
    the server started waiting for them."""

    header_timeout: float = 10.0
    _timer: asyncio.TimerHandle | None = None
    _waiting_since_cycle: Any = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._wait_for_headers()

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        self._stop_if_headers_came()

    def on_response_complete(self) -> None:
        self._wait_for_headers()  # before: a pipelined request is read inside the call
        super().on_response_complete()
        self._stop_if_headers_came()

    def connection_lost(self, exc: Exception | None) -> None:
        self._stop()
        super().connection_lost(exc)

    def _wait_for_headers(self) -> None:
        self._stop()
        # uvicorn starts a new request cycle when a request's headers are complete
        self._waiting_since_cycle = self.cycle
        self._timer = self.loop.call_later(self.header_timeout, self._headers_too_late)

    def _stop_if_headers_came(self) -> None:
        if self._timer is not None and self.cycle is not self._waiting_since_cycle:
            self._stop()

    def _stop(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _headers_too_late(self) -> None:
        self._timer = None
        if not self.transport.is_closing():
            self.transport.close()


def run(app: Any, *, host: str, port: int, header_timeout: float, **options: Any) -> None:
    """Serve ``app`` as both processes are served: no access log (it prints query strings,
    which carry tokens), no Server header, 5 s keep-alive, headers within ``header_timeout``."""
    protocol = type("HeadersInTime", (HeadersInTime,), {"header_timeout": header_timeout})
    uvicorn.run(app, host=host, port=port, http=protocol, access_log=False, server_header=False,
                timeout_keep_alive=5, **options)
