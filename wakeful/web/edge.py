"""What every route shares: the store, the doorbell, the settings, the clock, and the one
place a refusal becomes a response and a rejection record.

The store is created lazily, in the process that serves requests (uvicorn may fork workers;
an engine must never cross a fork). Blocking calls (store, doorbell, broker) run in worker
threads so the event loop keeps serving.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import anyio
import anyio.to_thread
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from wakeful.settings import RuntimeSettings, WebSettings
from store.budget import WriteBudget

from .refusals import Refused, excerpt, storable

log = logging.getLogger("wakeful.web")

Ring = Callable[[str], None]
Check = Callable[[], None]  # raises when the thing checked is down


def _default_ring() -> Ring:
    """The runtime's doorbell, imported late (web must import without Celery configured)."""
    try:
        from tasks.doorbell import ring
    except Exception:  # noqa: BLE001 - no runtime: events are stored, the sweep rings later
        log.warning("tasks.doorbell is not importable: events are stored but not rung; "
                    "the runtime's sweep will pick them up")
        return lambda inbox: None
    return ring


def runtime_store(runtime: RuntimeSettings) -> Callable[[], Any]:
    """A store factory for the runtime's database (web and workers can never point at
    different databases), connected when the serving process first needs it."""

    def connect() -> Any:
        from store import Store

        return Store.connect(runtime.store_url, **runtime.store_options())

    return connect


@dataclass
class Context:
    """What a refusal record says about the request it refused (filled in as it is learned)."""

    origin: str
    inbox: str | None = None
    source: str | None = None
    source_id: str | None = None
    body: bytes | None = None  # excerpted on refusal; None for routes that carry credentials


@dataclass
class Edge:
    settings: WebSettings
    store_factory: Callable[[], Any]
    ring_fn: Ring | None = None
    broker_check: Check | None = None
    clock: Callable[[], float] = time.time
    hook_secrets: Any = None  # web.hooks.HookSecrets: each inbox's own webhook secrets
    refusals: Counter = field(default_factory=Counter)  # (origin, code) -> count, this process
    doorbells: Counter = field(default_factory=Counter)  # returned / late / failed / skipped, this process
    unrecorded: Counter = field(default_factory=Counter)  # origin -> refusals not written to the store
    _store: Any = None
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _ringing: threading.BoundedSemaphore = field(init=False)
    _budget: WriteBudget = field(init=False)  # the rejection table's writes (single event loop)

    def __post_init__(self) -> None:
        self._ringing = threading.BoundedSemaphore(self.settings.rings_in_flight)
        self._budget = WriteBudget(self.settings.rejections_per_second, self.clock)

    @property
    def store(self) -> Any:
        if self._store is None:
            with self._lock:
                if self._store is None:
                    self._store = self.store_factory()
        return self._store

    def now(self) -> int:
        return int(self.clock())

    async def call_store(self, method: str, *args: Any, **kwargs: Any) -> Any:
        return await run_in_threadpool(lambda: getattr(self.store, method)(*args, **kwargs))

    async def ring(self, inbox: str) -> None:
        """Ring after the commit, waiting at most ``ring_timeout`` seconds.

        A doorbell is a courtesy, not a guarantee: the event is already stored and the
        runtime's sweep re-rings every inbox with work and no live lease. So a broker outage
        must cost senders nothing: a slow ring is left to finish in its thread while the
        sender gets its 2xx, and at most ``rings_in_flight`` rings run at once (beyond that a
        ring is skipped), so an outage cannot pile up threads.
        """
        if self.ring_fn is None:  # importing the runtime loads Celery: not on the event loop
            self.ring_fn = await anyio.to_thread.run_sync(_default_ring)
        ring_fn = self.ring_fn
        if not self._ringing.acquire(blocking=False):
            self.doorbells["skipped"] += 1
            log.warning("doorbell for inbox %r skipped: %d rings already in flight; the sweep will ring it",
                        inbox, self.settings.rings_in_flight)
            return

        def call() -> str:
            try:
                ring_fn(inbox)
                return "returned"
            except Exception:  # noqa: BLE001 - ring() promises not to raise; be safe anyway
                log.exception("doorbell failed for inbox %r; the sweep will re-ring", inbox)
                return "failed"
            finally:
                self._ringing.release()

        with anyio.move_on_after(self.settings.ring_timeout):
            self.doorbells[await anyio.to_thread.run_sync(call, abandon_on_cancel=True)] += 1
            return
        self.doorbells["late"] += 1
        log.warning("doorbell for inbox %r still ringing after %s s; answered without waiting",
                    inbox, self.settings.ring_timeout)

    async def refuse(self, ctx: Context, refused: Refused) -> Response:
        """Record the refusal (time, route, reason, source id; no secret, no full body) and
        answer it. Recording failing must not turn a 4xx into a 5xx: it is logged instead."""
        self.refusals[(ctx.origin, refused.code)] += 1
        source_id = refused.source_id or ctx.source_id
        reason = f"{refused.status} {refused.code}: {refused.detail}"
        log.info("refused %s %s inbox=%r source_id=%r", ctx.origin, reason, ctx.inbox, source_id)
        response = JSONResponse({"error": refused.code, "detail": refused.detail}, status_code=refused.status)
        if not self._budget.take():
            self.unrecorded[ctx.origin] += 1
            return response
        try:
            await run_in_threadpool(
                lambda: self.store.operator.record_rejection(
                    ctx.origin,
                    storable(reason, 500),
                    inbox=_name(ctx.inbox, 128),
                    source=ctx.source,
                    source_id=_name(source_id, 256),
                    excerpt=excerpt(ctx.body) if ctx.body else None,
                )
            )
        except Exception as exc:  # noqa: BLE001
            self.unrecorded[ctx.origin] += 1
            log.error("could not record a refusal of %s (%s): %s", ctx.origin, refused.code, type(exc).__name__)
        return response


def _name(value: str | None, limit: int) -> str | None:
    # The store bounds these columns; a hostile value is cut to fit (it is evidence, not a key).
    if not value:
        return None
    return storable(value, limit)


Handler = Callable[[Request, Edge, Context], Awaitable[Response]]


def guarded(origin: str, handler: Handler) -> Callable[[Request], Awaitable[Response]]:
    """Wrap a route: a ``Refused`` is recorded and answered; a store outage is a 503 with
    Retry-After (the sender retries later, nothing was stored); nothing else is expected."""
    from sqlalchemy.exc import DBAPIError, DataError, SQLAlchemyError

    async def endpoint(request: Request) -> Response:
        edge: Edge = request.app.state.edge
        ctx = Context(origin=origin, inbox=request.path_params.get("inbox"))
        try:
            return await handler(request, edge, ctx)
        except Refused as refused:
            return await edge.refuse(ctx, refused)
        except DataError as exc:  # input the database refused that validation let through
            log.warning("database refused input on %s: %s", origin, type(exc.orig).__name__)
            return await edge.refuse(ctx, Refused("invalid_event", "the database refused this input"))
        except (DBAPIError, SQLAlchemyError) as exc:
            log.error("store unavailable on %s: %s", origin, type(exc).__name__)
            return JSONResponse({"error": "store_unavailable"}, status_code=503,
                                headers={"Retry-After": "30"})

    endpoint.__name__ = handler.__name__
    return endpoint
