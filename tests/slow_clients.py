"""Slow clients on real sockets: requests whose headers never finish (slowloris), for the
web and proxy processes' header timeout (issue 23, item 9), and bodies dribbled after
complete headers, for their request timeout (issue 54). Shared by tests/web and
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


def dribbling(url: str, head: bytes, count: int) -> list[socket.socket]:
    """``count`` connections, each with complete request headers (``head``, ending in the blank
    line) whose body then comes one byte at a time (``dribble_until_closed``)."""
    socks = []
    for _ in range(count):
        sock = connect(url)
        sock.sendall(head)
        socks.append(sock)
    return socks


def dribble_until_closed(socks: list[socket.socket], deadline_s: float = 60.0,
                         every_s: float = 0.2) -> list[bytes | None]:
    """Send each socket one more body byte every ``every_s`` (the client's pace, far under any
    size limit) until the server closes it, up to a generous deadline. What each server said
    before it closed (b"" for nothing), or None for a socket still open at the deadline."""
    said: dict[socket.socket, bytes] = {sock: b"" for sock in socks}
    open_ = set(socks)
    deadline = time.monotonic() + deadline_s
    selector = selectors.DefaultSelector()
    for sock in socks:
        selector.register(sock, selectors.EVENT_READ)
    next_byte = time.monotonic()
    while open_ and time.monotonic() < deadline:
        for key, _ in selector.select(timeout=max(0.0, next_byte - time.monotonic())):
            sock = key.fileobj  # type: ignore[assignment]
            try:
                data = sock.recv(65536)
            except OSError:  # reset by the server: closed
                data = b""
            said[sock] += data
            if not data:
                selector.unregister(sock)
                open_.discard(sock)
        if time.monotonic() >= next_byte:
            for sock in list(open_):
                try:
                    sock.send(b" ")
                except OSError:  # closed meanwhile: the read above tells it
                    pass
            next_byte = time.monotonic() + every_s
    selector.close()
    for sock in socks:
        sock.close()
    return [None if sock in open_ else said[sock] for sock in socks]
