"""The ASGI app: ``create_app()`` builds it; uvicorn serves it (``python -m wakeful.web``, or
``uvicorn --factory wakeful.web.app:create_app``).

Everything the app talks to can be passed in, so tests run it against a real store with a
simple doorbell: ``create_app(store=Store.connect(url), ring=rung.append)``.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from wakeful import telemetry
from wakeful.settings import RuntimeSettings, WebSettings

from . import approvals, console, ops, receivers
from .access_log import AccessLog
from .edge import Check, Edge, Ring, runtime_store
from .hooks import HookSecrets, loader as hook_loader


log = logging.getLogger("wakeful.web")


def _warn_global_secrets(settings: WebSettings) -> None:
    names = [name for name, values in (("WAKEFUL_GITHUB_SECRETS", settings.github_secrets),
                                       ("WAKEFUL_STRIPE_SECRETS", settings.stripe_secrets),
                                       ("WAKEFUL_WEBHOOK_SECRETS", settings.webhook_secrets)) if values]
    if names:
        log.warning("%s verify deliveries to EVERY inbox without secrets of its own: whoever can "
                    "sign for one such inbox can write into all of them. For several senders, "
                    "give each inbox its own (`wakeful hooks set INBOX KIND SECRET`).", ", ".join(names))


async def _not_found(request: Request, exc: Exception) -> Response:
    return JSONResponse({"error": "not_found"}, status_code=404)


async def _method_not_allowed(request: Request, exc: Exception) -> Response:
    return JSONResponse({"error": "method_not_allowed"}, status_code=405)


def create_app(
    *,
    store: Any = None,
    ring: Ring | None = None,
    settings: WebSettings | None = None,
    broker_check: Check | None = None,
    clock: Callable[[], float] | None = None,
) -> Starlette:
    """The web edge.

    - ``store``: a ``store.Store``; default: connected lazily (in the serving process) to the
      runtime's database URL.
    - ``ring``: ``ring(inbox)``, the doorbell; default ``tasks.doorbell.ring``.
    - ``settings``: default ``WebSettings.from_env()`` (secrets, limits, tolerance).
    - ``broker_check``: raises when the broker is down; default: connect to the runtime's broker.
    - ``clock``: seconds since the epoch; signatures' timestamps and tokens are judged by it.

    Called with no settings or store (``uvicorn --factory``), it is the process's start: it
    loads what it is not given from the environment here, once; nothing below reads it.
    """
    settings = settings or WebSettings.from_env()
    telemetry.setup("web")  # traces, when an exporter is configured (docs/operating.md)
    edge = Edge(
        settings=settings,
        store_factory=(lambda: store) if store is not None else runtime_store(RuntimeSettings.from_env()),
        ring_fn=ring,
        broker_check=broker_check,
        clock=clock or time.time,
    )
    edge.hook_secrets = HookSecrets(hook_loader(lambda: edge.store, settings.secrets_key), edge.clock)
    _warn_global_secrets(settings)
    app = Starlette(
        routes=[*receivers.routes, *approvals.routes, *ops.routes, *console.routes(settings)],
        exception_handlers={404: _not_found, 405: _method_not_allowed},
        middleware=[Middleware(AccessLog)],
    )
    app.state.edge = edge
    return app
