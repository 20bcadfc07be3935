"""``python -m proxy`` (or ``wakeful proxy``): check the routes, then serve with uvicorn.

A bad setting or routes table stops it before it listens, with an error that names the
route and the variable (never a secret's value) and exit status 2.
"""

from __future__ import annotations

import logging
import sys

import serving

from .routes import RoutesError, load
from .settings import ProxySettings, SettingsError


def _store():  # type: ignore[no-untyped-def]
    # The same variables as every other process (tasks/settings.py), read here so the proxy
    # needs nothing of the Celery shell: only the database (grants, audit), no store rules.
    import os

    from store import Store
    from store.db import embedded_url

    url = os.environ.get("WAKEFUL_DATABASE_URL", "").strip() or embedded_url(
        os.environ.get("WAKEFUL_HOME", "").strip() or "var")
    return Store.connect(url, pool_size=4, pooler=os.environ.get("WAKEFUL_DATABASE_POOLER", "").strip())


def check_config() -> int:
    """``wakeful proxy --check``: what ``main`` would serve, without serving it."""
    try:
        settings = ProxySettings.from_env()
        routes = load()
    except (SettingsError, RoutesError) as exc:
        print(f"wakeful proxy: {exc}", file=sys.stderr)
        return 2
    print(f"wakeful proxy: would listen on {settings.url}")
    for route in routes.values():
        allow = ", ".join(f"{rule.method} {rule.prefix}" for rule in route.allow)
        print(f"  {route.name}: {route.upstream} ({route.header}; allow {allow})")
    return 0


def main() -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    try:
        settings = ProxySettings.from_env()
        routes = load()
    except (SettingsError, RoutesError) as exc:
        print(f"wakeful proxy: {exc}", file=sys.stderr)
        return 2
    from .app import create_app

    app = create_app(routes, _store(), settings)
    host, port = settings.listen
    logging.getLogger("wakeful.proxy").info("proxy: routes %s, listening on %s", ", ".join(sorted(routes)),
                                            settings.url)
    # The proxy logs method, path and outcome itself (serving.run turns uvicorn's access log off).
    serving.run(app, host=host, port=port, header_timeout=settings.header_timeout, log_level="info")
    return 0


if __name__ == "__main__":
    sys.exit(main())
