"""The proxy's routes: ``[routes.NAME]`` tables of the agent's TOML config (WAKEFUL_AGENT_CONFIG).

```toml
[routes.shop]
upstream = "https://shop.example.com/api"   # where requests to {proxy}/shop/... go
secret_env = "SHOP_TOKEN"                   # or secret_file = "/run/secrets/shop_token"
header = "Authorization"                    # the default; its value is "Bearer <secret>"
allow = ["GET /orders/", "POST /refunds"]   # METHOD and path prefix; nothing else passes
pass_headers = ["Shop-Version"]             # optional: request headers passed beyond the usual
```

Any other header (``header = "x-api-key"``) carries the raw secret. A prefix matches whole
path segments: ``/refunds`` allows ``/refunds`` and ``/refunds/7``, not ``/refunds-all``;
``/orders/`` allows everything below ``/orders/``. The query string is passed on unchecked.
A request carries only the headers wakeful/proxy/app.py passes (content type, accept, idempotency key,
``anthropic-*``...) and those its route names in ``pass_headers`` (an API that wants a version
header of its own); never a credential, a cookie or one that means something to HTTP itself.

Everything is checked when the proxy starts: a wrong table stops it with an error naming the
route (and the variable or file, never a secret's value).
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from wakeful.settings import agent_config_path, read_toml

CONFIG_ENV = "WAKEFUL_AGENT_CONFIG"
_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
_HEADER = re.compile(r"^[A-Za-z0-9!#$%&'*+.^_`|~-]{1,64}$")  # an HTTP token (RFC 9110)
_KEYS = {"upstream", "secret_env", "secret_file", "header", "allow", "pass_headers"}
METHODS = ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS")
# Headers that a route's secret may not go in: they mean something to HTTP itself.
_RESERVED = {"host", "content-length", "transfer-encoding", "connection", "upgrade", "te", "trailer",
             "keep-alive", "cookie", "x-wakeful-grant"}
# Headers no route may pass: credentials, and what the proxy sets or HTTP means by itself.
_NEVER_PASSED = _RESERVED | {"authorization", "x-api-key", "proxy-authorization", "accept-encoding", "forwarded",
                             "x-forwarded-for", "x-forwarded-host", "x-forwarded-proto", "x-real-ip",
                             "x-http-method-override", "x-http-method", "x-method-override", "x-original-url",
                             "x-rewrite-url"}
# Shorter secrets would redact ordinary words from every response (and are not secrets).
MIN_SECRET = 8


class RoutesError(ValueError):
    """The routes config is wrong; the message names the file and the route."""


@dataclass(frozen=True)
class Rule:
    method: str
    prefix: str

    def allows(self, method: str, path: str) -> bool:
        if method != self.method:
            return False
        if self.prefix.endswith("/"):
            return path.startswith(self.prefix)
        return path == self.prefix or path.startswith(self.prefix + "/")


@dataclass(frozen=True)
class Route:
    name: str
    upstream: str  # scheme://host[:port][/base], no trailing slash
    header: str  # lower case
    allow: tuple[Rule, ...]
    secret: str = field(repr=False)
    pass_headers: frozenset[str] = frozenset()  # lower case
    secret_env: str = ""  # the environment variable the secret came from (none for secret_file)

    def allows(self, method: str, path: str) -> bool:
        return any(rule.allows(method, path) for rule in self.allow)

    def credential(self) -> tuple[str, str]:
        """The header the upstream expects, and its value."""
        if self.header == "authorization":
            return self.header, f"Bearer {self.secret}"
        return self.header, self.secret


def load(path: str | os.PathLike[str] | None = None, env: Mapping[str, str] | None = None) -> dict[str, Route]:
    """The routes of the config file (``WAKEFUL_AGENT_CONFIG`` by default), secrets read."""
    env = os.environ if env is None else env
    path = str(path or agent_config_path(env))
    if not path:
        raise RoutesError(f"{CONFIG_ENV} is not set: the proxy reads its [routes.*] from the agent config")
    return parse(read_toml(path, RoutesError).get("routes"), path, env)


def parse(tables: Any, path: str = "<config>", env: Mapping[str, str] | None = None) -> dict[str, Route]:
    env = os.environ if env is None else env
    if not isinstance(tables, dict) or not tables:
        raise RoutesError(f"{path}: no [routes.NAME] table: the proxy has nothing to serve")
    return {name: _route(path, name, spec, env) for name, spec in tables.items()}


def _route(path: str, name: str, spec: Any, env: Mapping[str, str]) -> Route:
    where = f"{path}: [routes.{name}]"
    if not _NAME.match(name):
        raise RoutesError(f"{where}: a route name is 1-64 letters, digits, _ or -")
    if not isinstance(spec, dict):
        raise RoutesError(f"{where} must be a table")
    unknown = set(spec) - _KEYS
    if unknown:
        raise RoutesError(f"{where}: unknown key(s) {', '.join(sorted(unknown))}")
    header = spec.get("header", "Authorization")
    if not isinstance(header, str) or not _HEADER.match(header) or header.lower() in _RESERVED:
        raise RoutesError(f"{where}: header must be an HTTP header name (not {', '.join(sorted(_RESERVED))})")
    return Route(name=name, upstream=_upstream(where, spec.get("upstream")), header=header.lower(),
                 allow=_allow(where, spec.get("allow")), secret=_secret(where, spec, env),
                 pass_headers=_pass_headers(where, spec.get("pass_headers", []), header.lower()),
                 secret_env=spec["secret_env"] if "secret_env" in spec else "")


def _pass_headers(where: str, value: Any, secret_header: str) -> frozenset[str]:
    if not isinstance(value, list) or not all(isinstance(h, str) and _HEADER.match(h) for h in value):
        raise RoutesError(f"{where}: pass_headers must be a list of HTTP header names")
    names = frozenset(h.lower() for h in value)
    refused = sorted(names & (_NEVER_PASSED | {secret_header}))
    if refused:
        raise RoutesError(f"{where}: pass_headers may not name {', '.join(refused)} (credentials, what the "
                          "proxy sets, and method or URL overrides never pass)")
    return names


def _upstream(where: str, value: Any) -> str:
    if not isinstance(value, str) or not value:
        raise RoutesError(f"{where}: upstream must be an http:// or https:// URL")
    parts = urlsplit(value)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise RoutesError(f"{where}: upstream must be an http:// or https:// URL with a host, got {value!r}")
    if parts.query or parts.fragment or parts.username or parts.password:
        raise RoutesError(f"{where}: upstream must not carry a query, a fragment or credentials")
    try:
        parts.port  # noqa: B018 - raises on a bad port
    except ValueError:
        raise RoutesError(f"{where}: upstream has a bad port: {value!r}") from None
    return value.rstrip("/")


def _allow(where: str, value: Any) -> tuple[Rule, ...]:
    if not isinstance(value, list) or not value:
        raise RoutesError(f"{where}: allow must be a non-empty list of \"METHOD /path-prefix\" entries "
                          "(nothing is allowed otherwise)")
    rules = []
    for entry in value:
        method, _, prefix = str(entry).strip().partition(" ")
        prefix = prefix.strip()
        if not isinstance(entry, str) or method not in METHODS or not prefix.startswith("/"):
            raise RoutesError(f"{where}: allow entry {entry!r} must be \"METHOD /path-prefix\" with METHOD "
                              f"one of {', '.join(METHODS)}")
        segments = prefix.split("/")[1:-1] if prefix.endswith("/") else prefix.split("/")[1:]
        if any(s in ("", ".", "..") for s in segments) or any(c in prefix for c in "?#%\\ "):
            raise RoutesError(f"{where}: allow entry {entry!r}: the prefix must be a plain path "
                              "(no empty, . or .. segments, no ?, #, %, \\ or spaces)")
        rules.append(Rule(method, prefix))
    return tuple(rules)


def _secret(where: str, spec: dict[str, Any], env: Mapping[str, str]) -> str:
    if ("secret_env" in spec) == ("secret_file" in spec):
        raise RoutesError(f"{where}: give exactly one of secret_env or secret_file")
    if "secret_env" in spec:
        var = spec["secret_env"]
        if not isinstance(var, str) or not var:
            raise RoutesError(f"{where}: secret_env must name an environment variable")
        secret = env.get(var, "").strip()
        source = f"the environment variable {var}"
        if not secret:
            raise RoutesError(f"{where}: {source} is not set (it must be set for the proxy, and only the proxy)")
    else:
        file = spec["secret_file"]
        source = f"the file {file!r}"
        try:
            secret = Path(str(file)).read_text(encoding="utf-8").strip()
        except (OSError, UnicodeDecodeError) as exc:
            raise RoutesError(f"{where}: cannot read {source} ({type(exc).__name__})") from None
    if len(secret) < MIN_SECRET or any(ord(c) < 0x21 or ord(c) > 0x7E for c in secret):
        raise RoutesError(f"{where}: the secret in {source} must be at least {MIN_SECRET} printable "
                          "ASCII characters without spaces")
    return secret
