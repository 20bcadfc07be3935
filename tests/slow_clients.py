"""Slow clients on real sockets: requests whose headers never finish (slowloris), for the
web and proxy processes' header timeout (issue 23, item 9). Shared by tests/web and
tests/proxy; nothing here sleeps a fixed time: it waits for the server to close."""

from __future__ import annotations

import selectors
import socket
import time
from urllib.parse import urlsplit

# A request line and one header, then nothing: the blank line that ends the headers never comes.
HALF_SENT = b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: "


def connect(url: str) -> socket.socket:
    parts = urlsplit(url)
    return socket.create_connection((parts.hostname, parts.port), timeout=30)


def half_sent(url: str, count: int) -> list[socket.socket]:
    """``count`` connections, each holding a request whose headers never finish."""
    socks = []
    for _ in range(count):
        sock = connect(url)
        sock.sendall(HALF_SENT)
        socks.append(sock)
    return socks


def half_sent_after_a_request(url: str) -> socket.socket:
    """A keep-alive connection that asked once, was answered, then began a second request and
    stopped halfway (a byte of it is enough to cancel uvicorn's keep-alive timer)."""
    sock = connect(url)
    sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
    answer = b""
    while b"\r\n\r\n" not in answer:  # the status line and headers of the first answer
        chunk = sock.recv(65536)
        assert chunk, "the server closed the connection before answering"
        answer += chunk
    sock.sendall(HALF_SENT)
    return sock


def still_open(socks: list[socket.socket], deadline_s: float = 60.0) -> int:
    """Wait (up to a generous deadline) for the server to close every socket; how many it did
    not close. A closed socket reads EOF or a reset; anything the server says first is read."""
    selector = selectors.DefaultSelector()  # epoll: hundreds of sockets, no FD_SETSIZE limit
    for sock in socks:
        selector.register(sock, selectors.EVENT_READ)
    waiting = len(socks)
    deadline = time.monotonic() + deadline_s
    while waiting and time.monotonic() < deadline:
        for key, _ in selector.select(timeout=1.0):
            try:
                data = key.fileobj.recv(65536)  # type: ignore[union-attr]
            except OSError:  # reset by the server: closed
                data = b""
            if not data:
                selector.unregister(key.fileobj)
                waiting -= 1
    selector.close()
    for sock in socks:
        sock.close()
    return waiting
