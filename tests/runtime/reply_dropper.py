"""A TCP proxy in front of PostgreSQL that loses one COMMIT's reply, for real.

It forwards bytes both ways and reads the client's side of the wire protocol. Once a client's
transaction has sent the finish's UPDATE (recognised by its ``RETURNING events.id,
events.claimed_at``), the proxy forwards that transaction's ``COMMIT`` to the server, swallows
the server's answer and closes the client's connection: the commit happened, the client sees
"server closed the connection unexpectedly". Once only; every other byte passes untouched.
"""

from __future__ import annotations

import socket
import struct
import threading

FINISH = b"RETURNING events.id, events.claimed_at"
SSL_OR_GSS = (80877103, 80877104)


class ReplyDropper:
    def __init__(self, upstream: tuple[str, int]) -> None:
        self.upstream = upstream
        self.fired = threading.Event()  # the one reply was lost
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        self._closing = False
        threading.Thread(target=self._accept, daemon=True).start()

    def close(self) -> None:
        self._closing = True
        self._listener.close()

    def _accept(self) -> None:
        while not self._closing:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            server = socket.create_connection(self.upstream)
            state = {"finishing": False, "dropping": threading.Event()}
            threading.Thread(target=self._client_to_server, args=(client, server, state), daemon=True).start()
            threading.Thread(target=self._server_to_client, args=(server, client, state), daemon=True).start()

    def _client_to_server(self, client: socket.socket, server: socket.socket, state: dict) -> None:
        try:
            startup = True
            while True:
                if startup:  # SSLRequest / GSSENCRequest, then StartupMessage: no type byte
                    head = _read(client, 4)
                    (length,) = struct.unpack("!I", head)
                    body = _read(client, length - 4)
                    server.sendall(head + body)
                    startup = struct.unpack("!I", body[:4])[0] in SSL_OR_GSS
                    continue
                kind = _read(client, 1)
                head = _read(client, 4)
                (length,) = struct.unpack("!I", head)
                body = _read(client, length - 4)
                if FINISH in body:
                    state["finishing"] = True
                commit = kind == b"Q" and body.lstrip().upper().startswith(b"COMMIT")
                if commit and state["finishing"] and not self.fired.is_set():
                    self.fired.set()
                    state["dropping"].set()  # the answer to this COMMIT never reaches the client
                elif commit:
                    state["finishing"] = False
                server.sendall(kind + head + body)
        except OSError:
            pass
        finally:
            _close(server)

    def _server_to_client(self, server: socket.socket, client: socket.socket, state: dict) -> None:
        try:
            while True:
                data = server.recv(65536)
                if not data:
                    return
                if state["dropping"].is_set():
                    return  # swallowed: the client's connection is closed below
                client.sendall(data)
        except OSError:
            pass
        finally:
            _close(client)


def _read(sock: socket.socket, n: int) -> bytes:
    data = b""
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            raise OSError("closed")
        data += chunk
    return data


def _close(sock: socket.socket) -> None:
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    sock.close()
