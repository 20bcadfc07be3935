"""The proxy's settings, each default with its reason. Read from the environment at start."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from urllib.parse import urlsplit

URL_ENV = "WAKEFUL_PROXY_URL"
# Loopback: only processes on this host reach it (compose puts it on the workers' network).
DEFAULT_URL = "http://127.0.0.1:8780"


class SettingsError(ValueError):
    """A proxy setting that cannot work; the message names the variable."""


@dataclass(frozen=True)
class ProxySettings:
    # Where workers reach the proxy, and so where it listens.
    url: str = DEFAULT_URL
    # Largest response body passed back (bytes, after decompression): the rest is cut and the
    # request recorded as "response_cut". A Messages API answer is well under 1 MiB (a
    # 64k-token stream is a few MiB of SSE); a tool result is capped far lower by the agent.
    max_response_bytes: int = 16 * 1024 * 1024
    # Largest request body accepted (413 beyond): the Messages API's own request limit.
    max_request_bytes: int = 32 * 1024 * 1024
    # Seconds to connect to an upstream (502 when it cannot be reached at all).
    connect_timeout: float = 10.0
    # Seconds of silence from an upstream before the request is given up (504 before the
    # response starts, cut after). A streamed answer sends pings well inside this; a long
    # non-streamed one sends nothing until done, so this is the slowest answer accepted.
    read_timeout: float = 300.0
    # Connections to the upstreams open at once: every run in flight of the dense workers it
    # serves may be waiting on the model (httpx's default, 100, made the 101st caller wait for
    # a connection and get 504: measured, 1,100 of 1,200 calls at once).
    upstream_connections: int = 1000
    # Seconds a caller has to send a request's headers, from connecting (or from the end of
    # the previous answer on a kept-alive connection): then the connection is closed
    # (serving.py). Workers send their headers in one write, so 10 s is already generous; a
    # slow or stalled client no longer holds a connection and a file descriptor for ever.
    header_timeout: float = 10.0
    # Refusals of callers without a live grant for the route (no grant, forged, expired,
    # fenced, unknown route...) written to the audit a second, twice as many at once
    # (store/budget.py): anyone who reaches the proxy can cause them at will, and a flood of
    # them must not become a flood of writes. Beyond it they are answered, logged and counted
    # (``refusals_unrecorded`` in /healthz). A caller with a live grant is always recorded.
    refusals_per_second: int = 20

    @property
    def listen(self) -> tuple[str, int]:
        parts = urlsplit(self.url)
        return parts.hostname or "127.0.0.1", parts.port or 80

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> ProxySettings:
        env = os.environ if env is None else env
        url = env.get(URL_ENV, "").strip() or DEFAULT_URL
        parts = urlsplit(url)
        if parts.scheme != "http" or not parts.hostname or parts.path not in ("", "/"):
            raise SettingsError(f"{URL_ENV} must be http://host:port (the proxy speaks plain HTTP to "
                                f"workers on a private network or loopback), got {url!r}")
        try:
            parts.port  # noqa: B018 - raises on a bad port
        except ValueError:
            raise SettingsError(f"{URL_ENV} has a bad port: {url!r}") from None
        values: dict[str, object] = {"url": url.rstrip("/")}
        for name, kind in (("max_response_bytes", int), ("max_request_bytes", int),
                           ("connect_timeout", float), ("read_timeout", float), ("header_timeout", float),
                           ("refusals_per_second", int), ("upstream_connections", int)):
            var = f"WAKEFUL_PROXY_{name.upper()}"
            raw = env.get(var, "").strip()
            if not raw:
                continue
            try:
                value = kind(raw)
            except ValueError:
                raise SettingsError(f"{var} must be a number, got {raw!r}") from None
            if value <= 0:
                raise SettingsError(f"{var} must be positive, got {raw!r}")
            values[name] = value
        return cls(**values)  # type: ignore[arg-type]
