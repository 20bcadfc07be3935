"""Webhook receivers: ``POST /hooks/{github,stripe,standard}/{inbox}``.

The order is the guarantee: content type and declared size (headers only) → the body, read
up to the limit → the signature over those raw bytes → JSON parsed with every hazard bounded
→ one short ingest transaction → the doorbell → 2xx. A duplicate delivery is 200 and stores
nothing new (senders retry on anything but 2xx). Nothing is stored for refused input.

The stored payload is ``{"type": <event type or null>, "body": <the sender's JSON object>}``:
GitHub puts the event type in a header, so the body alone would lose it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from wakeful import telemetry
from wakeful.settings import WebSettings

from .body import check_json_content_type, parse_object, read_bounded
from .edge import Context, Edge, guarded
from .refusals import Refused
from .signatures import verify_github, verify_standard, verify_stripe

Verify = Callable[[bytes, Mapping[str, str], Sequence[str], WebSettings, int], None]


@dataclass(frozen=True)
class Sender:
    """One kind of webhook sender: how it signs, and where its idempotency key and event type are."""

    source: str  # the event key's source, and the kind in `wakeful hooks set INBOX KIND`
    verify: Verify  # (body, headers, secrets, settings, now): raises Refused
    global_secrets: Callable[[WebSettings], tuple[str, ...]]  # for inboxes without their own
    source_id: Callable[[Mapping[str, str], dict[str, Any]], Any]
    event_type: Callable[[Mapping[str, str], dict[str, Any]], Any]


def _header(name: str) -> Callable[[Mapping[str, str], dict[str, Any]], Any]:
    def get(headers: Mapping[str, str], _body: dict[str, Any]) -> Any:
        value = headers.get(name)
        if not value:
            raise Refused("missing_header", f"missing {name}")
        return value

    return get


def _field(name: str) -> Callable[[Mapping[str, str], dict[str, Any]], Any]:
    def get(_headers: Mapping[str, str], body: dict[str, Any]) -> Any:
        value = body.get(name)
        if not isinstance(value, str) or not value:
            raise Refused("invalid_event", f"body has no string {name!r}")
        return value

    return get


def _optional_field(name: str) -> Callable[[Mapping[str, str], dict[str, Any]], Any]:
    def get(_headers: Mapping[str, str], body: dict[str, Any]) -> Any:
        value = body.get(name)
        return value if isinstance(value, str) else None

    return get


SENDERS: dict[str, Sender] = {
    "github": Sender(
        source="github",
        verify=lambda body, headers, secrets, s, now: verify_github(body, headers, secrets),
        global_secrets=lambda s: s.github_secrets,
        # the same across GitHub's (manual) redeliveries of one delivery
        source_id=_header("x-github-delivery"),
        event_type=lambda headers, _body: headers.get("x-github-event"),
    ),
    "stripe": Sender(
        source="stripe",
        verify=lambda body, headers, secrets, s, now: verify_stripe(
            body, headers, secrets, now=now, tolerance=s.tolerance),
        global_secrets=lambda s: s.stripe_secrets,
        source_id=_field("id"),  # evt_...: the same across Stripe's retries
        event_type=_optional_field("type"),
    ),
    "standard": Sender(
        source="standard",
        verify=lambda body, headers, secrets, s, now: verify_standard(
            body, headers, secrets, now=now, tolerance=s.tolerance),
        global_secrets=lambda s: s.webhook_secrets,
        source_id=_header("webhook-id"),  # the spec's idempotency key
        event_type=_optional_field("type"),
    ),
}


def receiver(sender: Sender) -> Callable[[Request, Edge, Context], Any]:
    async def traced(request: Request, edge: Edge, ctx: Context) -> Response:
        # A wake's trace starts here, a new one: a sender's own traceparent is not trusted.
        with telemetry.span(f"POST /hooks/{sender.source}/{{inbox}}", kind=telemetry.SERVER, attributes={
                "http.request.method": "POST", "http.route": f"/hooks/{sender.source}/{{inbox}}",
                "wakeful.inbox": request.path_params.get("inbox"), "wakeful.event.source": sender.source}):
            response = await receive(request, edge, ctx)
            telemetry.annotate(**{"http.response.status_code": response.status_code,
                                  "wakeful.event.source_id": ctx.source_id})
            return response

    async def receive(request: Request, edge: Edge, ctx: Context) -> Response:
        ctx.source = sender.source
        settings = edge.settings
        check_json_content_type(request)
        body = await read_bounded(request, settings.max_body_bytes)
        headers = request.headers
        # The id header is not covered by GitHub's signature, but it names the delivery in
        # the rejection record, which is what an operator searches for.
        ctx.source_id = headers.get("x-github-delivery") or headers.get("webhook-id")
        inbox = request.path_params["inbox"]
        # An inbox with secrets of its own is verified by those only: a sender that can sign
        # for inbox A cannot write into inbox B.
        own = await edge.hook_secrets.own(inbox)
        secrets = sender.global_secrets(settings) if own is None else own.get(sender.source, ())
        sender.verify(body, headers, secrets, settings, edge.now())
        # Only a signed body is kept as an excerpt of a later refusal: an unsigned one can
        # carry anything.
        ctx.body = body
        data = parse_object(body, max_depth=settings.max_depth, max_int_digits=settings.max_int_digits)
        source_id = sender.source_id(headers, data)
        ctx.source_id = source_id
        payload = {"type": sender.event_type(headers, data), "body": data}
        stored = await _ingest(edge, inbox, sender.source, source_id, payload)
        if stored:
            await edge.ring(inbox)
        return JSONResponse(
            {"inbox": inbox, "source": sender.source, "source_id": source_id, "duplicate": not stored},
            status_code=202 if stored else 200,
        )

    traced.__name__ = f"receive_{sender.source}"
    return traced


async def _ingest(edge: Edge, inbox: str, source: str, source_id: str, payload: dict[str, Any]) -> bool:
    from store import InvalidEvent

    try:
        return bool(await edge.call_store("ingest", inbox, source, source_id, payload))
    except InvalidEvent as exc:
        raise Refused("invalid_event", str(exc)) from None


routes = [
    # :path so an inbox may contain a slash (sent as-is or as %2F): the inbox is the rest.
    Route(f"/hooks/{name}/{{inbox:path}}", guarded(f"web:hooks/{name}", receiver(sender)), methods=["POST"])
    for name, sender in SENDERS.items()
]
