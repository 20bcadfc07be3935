"""The worker's side of the egress proxy: clients that carry a grant, never a key.

The runtime mints a grant (store/grants.py) and wraps it in an ``Egress``:

- for a run, ``Run.grant(routes, ttl)`` (wakeful/agent/__init__.py): the routes of the agent's model
  and read tools; good while this generation holds the inbox's lease;
- for an effect, ``for_effect(store, inbox, holder, generation, tool_use_id, attempt, routes,
  ttl)``: the routes of that write; good while that attempt of the effect executes.

``Egress.http(route)`` is an ``httpx.Client`` whose base URL is ``{proxy}/{route}``;
``Egress.anthropic_client()`` an ``anthropic.Anthropic`` whose API key is the grant (the proxy
takes it from ``Authorization: Bearer`` and sends the real key instead). Tools reach the
current grant through ``using(egress)`` (a context variable) and ``client(route, call)``,
which is what ``ToolCall.http(route)`` returns (wakeful/agent/tool.py).

Imports the store and httpx only (anthropic when asked for its client); never Celery.
"""

from __future__ import annotations

import functools
import os
import threading
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any

import httpx

from wakeful import telemetry
from wakeful.settings import ProxySettings
from wakeful.agent.outage import NOT_ACTED_ON, TryLater, is_transient, retry_after

PROXY_URL_ENV = ProxySettings.variable("url")
GRANT_HEADER = "X-Wakeful-Grant"
# Methods that change nothing: sent with the input as the query, and no Idempotency-Key.
READ_METHODS = ("GET", "HEAD")


class EgressError(Exception):
    """A request through the proxy that did not succeed: the status and the reason, which the
    model sees as an error tool_result."""

    def __init__(self, status: int, reason: str, outcome: str = "") -> None:
        super().__init__(f"HTTP {status}: {reason}" if status else reason)
        self.status, self.reason, self.outcome = status, reason, outcome


class Unavailable(EgressError, TryLater):
    """The proxy or the route's upstream is away (unreachable, timing out, 429, 5xx): an
    outage, so the run or the effect waits and tries again (wakeful/agent/outage.py)."""

    def __init__(self, status: int, reason: str, outcome: str = "", *, after: float | None = None,
                 maybe_done: bool = False) -> None:
        EgressError.__init__(self, status, reason, outcome)
        self.after, self.maybe_done = after, maybe_done


def proxy_url(env: Mapping[str, str] | None = None) -> str:
    """Where a worker reaches the proxy: the URL the proxy listens on. Asked on every run
    that uses the proxy: the settings are parsed once per value of the proxy's variables,
    not from the whole environment on each run."""
    env = os.environ if env is None else env
    return _proxy_url(tuple(sorted((k, v) for k, v in env.items() if k.upper().startswith("WAKEFUL_PROXY_"))))


@functools.lru_cache(maxsize=8)
def _proxy_url(variables: tuple[tuple[str, str], ...]) -> str:
    return ProxySettings.from_env(dict(variables)).url


@dataclass(frozen=True)
class Egress:
    proxy_url: str
    grant: str = field(repr=False)
    timeout: float = 60.0

    def http(self, route: str) -> httpx.Client:
        """A client for ``route``: relative URLs go to ``{proxy}/{route}/...`` with the grant."""
        return httpx.Client(base_url=f"{self.proxy_url}/{route}", headers={GRANT_HEADER: self.grant},
                            timeout=self.timeout, follow_redirects=False, trust_env=False)

    def anthropic_client(self, route: str = "anthropic", **kwargs: Any) -> Any:
        """``anthropic.Anthropic`` pointed at the proxy's ``route`` with the grant as its key.
        Every run's client is a copy of one per process (``with_options``): only the key
        differs, the connection pool is shared (``sdk_http_client``), so a thousand runs in
        flight are a thousand requests on one pool, not a thousand pools."""
        import anthropic

        kwargs.setdefault("timeout", self.timeout)
        key = (self.proxy_url, route, tuple(sorted(kwargs.items())))
        with _clients_lock:
            base = _clients.get(key)
            if base is None:
                base = _clients[key] = anthropic.Anthropic(
                    api_key="each run's grant", base_url=f"{self.proxy_url}/{route}",
                    http_client=sdk_http_client(), **kwargs)
        return base.with_options(api_key=self.grant)


_clients: dict[tuple[Any, ...], Any] = {}
_clients_lock = threading.RLock()  # sdk_http_client is called with it held
_http_client: Any = None
# Connections the process's model client keeps: one per run in flight in a dense worker (its
# threads), so a burst of calls reuses connections instead of opening new ones. The SDK's
# default keeps only 100 alive.
SDK_CONNECTIONS = 1000


def sdk_http_client() -> Any:
    """The process's one HTTP client for the ``anthropic`` SDK (direct or through the proxy)."""
    global _http_client
    with _clients_lock:
        if _http_client is None:
            import anthropic
            import httpx2

            _http_client = anthropic.DefaultHttpxClient(limits=httpx2.Limits(
                max_connections=SDK_CONNECTIONS, max_keepalive_connections=SDK_CONNECTIONS))
        return _http_client


def for_effect(store: Any, inbox: str, holder: str, generation: int, tool_use_id: str, attempt: int,
               routes: Iterable[str], ttl: int, proxy: str | None = None) -> Egress | None:
    """An effect's Egress (None: that attempt of the effect is not executing)."""
    grant = store.grants.mint(inbox, holder, generation, list(routes), ttl, tool_use_id=tool_use_id,
                             attempt=attempt)
    return Egress(proxy or proxy_url(), grant) if grant else None


_current: ContextVar[Egress | None] = ContextVar("wakeful_egress", default=None)


@contextmanager
def using(egress: Egress | None) -> Iterator[Egress | None]:
    """Tools called inside this block go through ``egress`` (the run's or the effect's)."""
    token = _current.set(egress)
    try:
        yield egress
    finally:
        _current.reset(token)


def current() -> Egress | None:
    return _current.get()


class RouteClient:
    """A route as a tool uses it: ``request(method, path, input)`` returns the JSON (or text)
    of a 2xx answer and raises ``EgressError`` with the status and reason otherwise (the
    proxy's refusals included). ``http()`` gives a plain httpx client for anything else
    (use it in a ``with`` block)."""

    def __init__(self, egress: Egress, route: str, idempotency_key: str | None = None) -> None:
        self.egress = egress
        self.route = route
        self.idempotency_key = idempotency_key

    def http(self) -> httpx.Client:
        return self.egress.http(self.route)

    def request(self, method: str, path: str, input: dict[str, Any] | None = None) -> Any:
        method = method.upper()
        headers = {}
        if method not in READ_METHODS and self.idempotency_key:
            headers["Idempotency-Key"] = self.idempotency_key
        headers.update(telemetry.headers())  # W3C traceparent: the proxy's span joins the trace
        try:
            with self.http() as http:
                if method in READ_METHODS:
                    response = http.request(method, path, params=_query(input), headers=headers)
                else:
                    response = http.request(method, path, json=input or {}, headers=headers)
        except httpx.TimeoutException:
            raise Unavailable(0, f"route {self.route!r}: the proxy did not answer in time", maybe_done=True) from None
        except httpx.HTTPError as exc:
            # Connecting failed (the proxy restarting) or the connection broke: only a failed
            # connect proves the request never left.
            raise Unavailable(0, f"route {self.route!r}: cannot reach the proxy ({type(exc).__name__})",
                              maybe_done=not isinstance(exc, httpx.ConnectError)) from None
        if not response.is_success:
            status, outcome = response.status_code, response.headers.get("x-wakeful-refused", "")
            if is_transient(status):
                # The proxy's 502 "upstream_down" is a connect that failed: nothing was sent.
                raise Unavailable(status, _reason(response), outcome, after=retry_after(response.headers),
                                  maybe_done=status not in NOT_ACTED_ON and outcome != "upstream_down")
            raise EgressError(status, _reason(response), outcome)
        if "json" in response.headers.get("content-type", ""):
            try:
                return response.json()
            except ValueError:
                pass
        return response.text


def client(route: str, call: Any = None) -> RouteClient:
    """What ``ToolCall.http(route)`` returns: ``route`` under the current grant, with the
    call's idempotency key on writes."""
    egress = _current.get()
    if egress is None:
        raise EgressError(0, f"no egress grant for route {route!r}: the runtime did not set one "
                             "(agent.egress.using) for this run or effect")
    return RouteClient(egress, route, getattr(call, "idempotency_key", None))


def _query(input: dict[str, Any] | None) -> dict[str, Any]:
    # A query carries scalars; anything nested goes as its JSON text.
    import json

    return {k: v if isinstance(v, str | int | float) and not isinstance(v, bool) else json.dumps(v)
            for k, v in (input or {}).items()}


def _reason(response: httpx.Response) -> str:
    try:
        body = response.json()
        message = body.get("error", {}).get("message") if isinstance(body, dict) else None
        if isinstance(message, str) and message:
            return message[:500]
    except ValueError:
        pass
    return (response.text or response.reason_phrase)[:500]
