"""``python -m wakeful.proxy`` (or ``wakeful proxy``): check the routes, then serve with uvicorn.

A bad setting or routes table stops it before it listens, with an error that names the
route and the variable (never a secret's value) and exit status 2.
"""

from __future__ import annotations

import logging
import sys
from typing import TYPE_CHECKING

from wakeful import serving

from wakeful.settings import ProxySettings, RuntimeSettings, SettingsError, refuse
from wakeful.same_user import closed_to_same_user

from .routes import Route, RoutesError, load

if TYPE_CHECKING:
    from starlette.applications import Starlette

_LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s %(message)s"


def _started() -> tuple[ProxySettings, RuntimeSettings, dict[str, Route]]:
    """The proxy's settings, the runtime's (the same database as every other process: grants
    and audit; its store rules unused) and the routes, or one line and exit 2."""
    try:
        return ProxySettings.from_env(), RuntimeSettings.from_env(), load()
    except (SettingsError, RoutesError) as exc:
        refuse("wakeful proxy", exc)


def check_config() -> int:
    """``wakeful proxy --check``: what ``main`` would serve, without serving it."""
    settings, _, routes = _started()
    print(f"wakeful proxy: would listen on {settings.url} with {settings.processes} process(es)")
    for route in routes.values():
        allow = ", ".join(f"{rule.method} {rule.prefix}" for rule in route.allow)
        print(f"  {route.name}: {route.upstream} ({route.header}; allow {allow})")
    return 0


def main() -> int:
    logging.basicConfig(level=logging.INFO, format=_LOG_FORMAT)
    settings, _, routes = _started()  # here, so a mistake stops it before anything listens
    closed_to_same_user()  # it holds every route's key: no process of its user reads them
    host, port = settings.listen
    logging.getLogger("wakeful.proxy").info("proxy: routes %s, listening on %s with %d process(es)",
                                            ", ".join(sorted(routes)), settings.url, settings.processes)
    # The proxy logs method, path and outcome itself (serving.run turns uvicorn's access log off).
    serving.run("wakeful.proxy.__main__:served_app", host=host, port=port, processes=settings.processes,
                header_timeout=settings.header_timeout, request_timeout=settings.request_timeout,
                log_level="info")
    return 0


def served_app() -> Starlette:
    """The app, made in the process that serves it: ``main``'s own (one process), or each of
    its spawned children, which share its socket and nothing else (their own store pool, HTTP
    client, refusal budget). The parent checked the settings and routes already."""
    logging.basicConfig(level=logging.INFO, format=_LOG_FORMAT)  # a spawned child has no logging yet
    settings, runtime, routes = _started()
    closed_to_same_user()  # a spawned child is a new program (an exec): dumpable until it says not
    from store import Store

    from .app import create_app

    store = Store.connect(runtime.store_url, pool_size=4, pooler=runtime.database_pooler)
    return create_app(routes, store, settings)


if __name__ == "__main__":
    sys.exit(main())
