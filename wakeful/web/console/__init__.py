"""The operator's console at ``/console`` (docs/console.md): what the agent did for whom, and
why, on one page per inbox, and the inboxes that need attention first.

Served by the web edge (one process fewer than a console of its own: the edge already has
the store, the doorbell and a TLS proxy in front), off unless ``WAKEFUL_CONSOLE_USERS`` names
its operators; then every ``/console`` path asks for one of them (HTTP Basic, access.py) and
a form that changes something needs its CSRF token too. Off, every ``/console`` path answers
404 with one line saying how to turn it on, and the web edge says so at its start.

    GET  /console                       the fleet: what needs attention first; the last day's charts
    GET  /console/inbox?i=INBOX[&before=CURSOR]   one inbox's state and timeline, newest first
    GET  /console/search?q=TEXT         an inbox by name, events by their source key
    POST /console/requeue               inbox, [event]: a dead event (or every one) back to pending
    POST /console/answer                inbox, request, answer=yes|no: recorded as by console:<name>
    POST /console/cancel-timer          inbox, timer
    GET  /console/static/console.css    the stylesheet (no script anywhere)

Each action runs in one store transaction with its audit row (store/console.py), rings the
inbox when it made work, and sends the browser back to the inbox's page, where the action is
the newest step. The pages are read from the store's indexes only (``python -m bench.console``).
Every response: a strict CSP (nothing inline, nothing from elsewhere), no framing, no
referrer, no caching.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable
from pathlib import Path
from urllib.parse import parse_qs, quote

import anyio.to_thread
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import HTMLResponse, PlainTextResponse, RedirectResponse, Response
from starlette.routing import Route

from store import InvalidCall, InvalidEvent
from store.console import Done
from wakeful.settings import WebSettings

from ..body import read_bounded
from ..edge import Context, Edge, guarded
from ..refusals import Refused
from .access import BadUsers, Door, parse_users
from .fleet import fleet_page, search_page
from .inbox import inbox_page
from .render import Html, inbox_url, name, page

log = logging.getLogger("wakeful.web.console")

ORIGIN = "web:console"
CSP = ("default-src 'none'; style-src 'self'; script-src 'self'; img-src 'self' data:; form-action 'self'; "
       "frame-ancestors 'none'; base-uri 'none'")
HEADERS = {"Content-Security-Policy": CSP, "X-Frame-Options": "DENY", "Referrer-Policy": "no-referrer",
           "Cache-Control": "no-store", "X-Content-Type-Options": "nosniff"}
CHALLENGE = {"WWW-Authenticate": 'Basic realm="wakeful console", charset="UTF-8"'}
OFF = "the console is off: set WAKEFUL_CONSOLE_USERS to turn it on (docs/console.md)\n"
STYLESHEET = Path(__file__).parent / "static" / "console.css"
FORM_MAX = 8192  # a form is a few ids and a token
QUERY_MAX = 300

Handler = Callable[[Request, Edge, Context], Awaitable[Response]]


def routes(settings: WebSettings) -> list[Route]:
    """The console's routes for this process: on with its operators, or off (404), said in
    the log either way."""
    try:
        users = parse_users(settings.console_users)
    except BadUsers as exc:
        log.error("the console (/console) is off: WAKEFUL_CONSOLE_USERS %s", exc)
        users = {}
    if not users:
        if not settings.console_users:
            log.warning("the console (/console) is off: WAKEFUL_CONSOLE_USERS names no operator (docs/console.md)")
        return [Route("/console", _off, methods=["GET", "POST"]),
                Route("/console/{rest:path}", _off, methods=["GET", "POST"])]
    log.info("the console is on at /console for %d operator(s)", len(users))
    return Console(Door(users), _tracer(settings.console_trace_url)).routes()


async def _off(request: Request) -> Response:
    return PlainTextResponse(OFF, status_code=404, headers=HEADERS)


def _tracer(template: str) -> Callable[[str, int], str | None]:
    """A run's link to its trace, from WAKEFUL_CONSOLE_TRACE_URL; no link without one."""
    if template and not template.startswith(("http://", "https://")):
        log.error("WAKEFUL_CONSOLE_TRACE_URL must be an http(s):// URL: the console shows no trace links")
        template = ""
    if not template:
        return lambda inbox, generation: None
    return lambda inbox, generation: (template.replace("{inbox}", quote(inbox, safe=""))
                                      .replace("{generation}", str(generation)))


class Console:
    def __init__(self, door: Door, trace: Callable[[str, int], str | None]) -> None:
        self.door, self.trace = door, trace
        self.stylesheet = STYLESHEET.read_bytes()

    def routes(self) -> list[Route]:
        return [self._route("/console", self.fleet), self._route("/console/inbox", self.inbox),
                self._route("/console/search", self.search), self._route("/console/static/console.css", self.css),
                self._route("/console/requeue", self.requeue, "POST"),
                self._route("/console/answer", self.answer, "POST"),
                self._route("/console/cancel-timer", self.cancel_timer, "POST")]

    # -- the door: every route signs in first ------------------------------------------------

    def _route(self, path: str, handler: Handler, method: str = "GET") -> Route:
        inner = guarded(ORIGIN, handler)  # refusals recorded, a store outage a 503

        async def endpoint(request: Request) -> Response:
            refused = await self._sign_in(request)
            if refused is not None:
                return refused
            return _finished(await inner(request))

        endpoint.__name__ = handler.__name__
        return Route(path, endpoint, methods=[method])

    async def _sign_in(self, request: Request) -> Response | None:
        edge: Edge = request.app.state.edge
        given = Door.credentials(request.headers.get("authorization"))
        if given is None:
            return _text(401, "sign in with an operator's name and password (WAKEFUL_CONSOLE_USERS)", CHALLENGE)
        user = self.door.remembered(*given)
        if user is None:
            if not self.door.may_check():
                log.warning("console: too many sign-ins to check this second; answered 429")
                return _text(429, "too many failed sign-ins: try again in a second", {"Retry-After": "1"})
            user = await anyio.to_thread.run_sync(self.door.check, *given)
        if user is None:
            # Recorded like any refusal (never the password); "no_token": no credential that holds.
            await edge.refuse(Context(ORIGIN), Refused("no_token", "wrong console name or password"))
            return _text(401, "wrong name or password", CHALLENGE)
        request.state.user = user
        return None

    def _page(self, request: Request, title: str, body: Html, query: str = "") -> Response:
        return HTMLResponse(page(title, body, user=name(request.state.user), query=query), headers=HEADERS)

    def _csrf(self, request: Request, edge: Edge) -> str:
        return self.door.csrf(request.state.user, edge.now())

    # -- pages -------------------------------------------------------------------------------

    async def fleet(self, request: Request, edge: Edge, ctx: Context) -> Response:
        fleet = await run_in_threadpool(lambda: edge.store.console.fleet())
        return self._page(request, "Fleet", fleet_page(fleet))

    async def inbox(self, request: Request, edge: Edge, ctx: Context) -> Response:
        inbox = _bounded(request.query_params.get("i"), "i", 128)
        ctx.inbox = inbox
        try:
            shown = await run_in_threadpool(lambda: edge.store.console.timeline(
                inbox, before=request.query_params.get("before")))
        except InvalidCall:
            raise Refused("bad_path", "not a page of this inbox's timeline") from None
        body = inbox_page(shown, self._csrf(request, edge), self.trace)
        return self._page(request, f"Inbox {name(inbox)}", body, query=inbox)

    async def search(self, request: Request, edge: Edge, ctx: Context) -> Response:
        query = (request.query_params.get("q") or "").strip()
        if not query:
            return RedirectResponse("/console", status_code=303, headers=HEADERS)
        query = _bounded(query, "q", QUERY_MAX)
        found = await run_in_threadpool(lambda: edge.store.console.search(query))
        return self._page(request, f"Search {name(query)}", search_page(found, edge.now()), query=query)

    async def css(self, request: Request, edge: Edge, ctx: Context) -> Response:
        return Response(self.stylesheet, media_type="text/css", headers=HEADERS)

    # -- actions -----------------------------------------------------------------------------

    async def requeue(self, request: Request, edge: Edge, ctx: Context) -> Response:
        fields = await self._form(request, edge)
        inbox, event = _bounded(fields.get("inbox"), "inbox", 128), fields.get("event")
        if event is not None and not (event.isdigit() and len(event) <= 18):
            raise Refused("invalid_event", "event must be an event's id")
        return await self._act(edge, ctx, inbox, lambda actor: edge.store.console.requeue(
            actor, inbox, int(event) if event else None), request)

    async def answer(self, request: Request, edge: Edge, ctx: Context) -> Response:
        fields = await self._form(request, edge)
        inbox, request_id = _bounded(fields.get("inbox"), "inbox", 128), _bounded(fields.get("request"), "request", 256)
        given = fields.get("answer")
        if given not in ("yes", "no"):
            raise Refused("bad_answer", "answer must be yes or no")
        return await self._act(edge, ctx, inbox, lambda actor: edge.store.console.answer(
            actor, inbox, request_id, given), request)

    async def cancel_timer(self, request: Request, edge: Edge, ctx: Context) -> Response:
        fields = await self._form(request, edge)
        inbox, timer = _bounded(fields.get("inbox"), "inbox", 128), _bounded(fields.get("timer"), "timer", 256)
        return await self._act(edge, ctx, inbox, lambda actor: edge.store.console.cancel_timer(actor, inbox, timer),
                               request)

    async def _form(self, request: Request, edge: Edge) -> dict[str, str]:
        """The form's fields, once its CSRF token is the signed-in operator's."""
        media = request.headers.get("content-type", "").partition(";")[0].strip().lower()
        if media != "application/x-www-form-urlencoded":
            raise Refused("content_type", "send the console's form as application/x-www-form-urlencoded")
        body = await read_bounded(request, FORM_MAX)
        try:
            parsed = parse_qs(body.decode("utf-8"), max_num_fields=10)
        except (UnicodeDecodeError, ValueError):
            raise Refused("invalid_event", "the form is not valid") from None
        fields = {k: v[0] for k, v in parsed.items() if v}
        if not self.door.csrf_ok(request.state.user, fields.get("csrf"), edge.now()):
            raise Refused("bad_token", "the form's CSRF token is missing or not yours: nothing was changed")
        return fields

    async def _act(self, edge: Edge, ctx: Context, inbox: str, act: Callable[[str], Done],
                   request: Request) -> Response:
        ctx.inbox = inbox
        actor = f"console:{request.state.user}"
        try:
            done = await run_in_threadpool(act, actor)
        except InvalidEvent as exc:
            raise Refused("invalid_event", str(exc)) from None
        log.info("console: %s %s inbox=%r target=%r -> %s", actor, done.action.action, inbox, done.action.target,
                 done.action.outcome)
        if done.ring:
            await edge.ring(inbox)
        where = inbox_url(inbox) + f"#action-{done.action.id}"
        return RedirectResponse(where, status_code=303, headers=HEADERS)


def _bounded(value: str | None, field: str, limit: int) -> str:
    if not value or len(value) > limit or "\x00" in value:
        raise Refused("invalid_event", f"{field} must be 1 to {limit} characters")
    return value


def _text(status: int, text: str, headers: dict[str, str] | None = None) -> Response:
    return PlainTextResponse(text + "\n", status_code=status, headers={**HEADERS, **(headers or {})})


def _finished(response: Response) -> Response:
    """The console's headers on every answer; a refusal as one line of text, not JSON."""
    if response.status_code >= 400 and response.media_type == "application/json":
        said = json.loads(bytes(response.body))
        kept = {k: v for k, v in response.headers.items() if k.lower() == "retry-after"}
        return _text(response.status_code, f"{response.status_code} {said.get('error')}: {said.get('detail', '')}".rstrip(": "),
                     kept)
    response.headers.update(HEADERS)
    return response
