"""Webhook receivers: ``POST /hooks/{github,stripe,standard}/{inbox}``.

The order is the guarantee: content type and declared size (headers only) → the body, read
up to the limit → the signature over those raw bytes → JSON parsed with every hazard bounded
→ one short ingest transaction → the doorbell → 2xx. A duplicate delivery is 200 and stores
nothing new (senders retry on anything but 2xx). Nothing is stored for refused input.

The stored payload is ``{"type": <event type or null>, "body": <the sender's JSON object>}``:
GitHub puts the event type in a header, so the body alone would lose it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from .body import check_json_content_type, parse_object, read_bounded
from .edge import Context, Edge, guarded
from .refusals import Refused
from .settings import WebSettings
from .signatures import verify_github, verify_standard, verify_stripe

Verify = Callable[[bytes, Mapping[str, str], WebSettings, int], None]


@dataclass(frozen=True)
class Sender:
    """One kind of webhook sender: how it signs, and where its idempotency key and event type are."""

    source: str  # the event key's source
    verify: Verify
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
        verify=lambda body, headers, s, now: verify_github(body, headers, s.github_secrets),
        # the same across GitHub's (manual) redeliveries of one delivery
        source_id=_header("x-github-delivery"),
        event_type=lambda headers, _body: headers.get("x-github-event"),
    ),
    "stripe": Sender(
        source="stripe",
        verify=lambda body, headers, s, now: verify_stripe(
            body, headers, s.stripe_secrets, now=now, tolerance=s.tolerance),
        source_id=_field("id"),  # evt_...: the same across Stripe's retries
        event_type=_optional_field("type"),
    ),
    "standard": Sender(
        source="standard",
        verify=lambda body, headers, s, now: verify_standard(
            body, headers, s.webhook_secrets, now=now, tolerance=s.tolerance),
        source_id=_header("webhook-id"),  # the spec's idempotency key
        event_type=_optional_field("type"),
    ),
}


def receiver(sender: Sender) -> Callable[[Request, Edge, Context], Any]:
    async def receive(request: Request, edge: Edge, ctx: Context) -> Response:
        ctx.source = sender.source
        settings = edge.settings
        check_json_content_type(request)
        body = await read_bounded(request, settings.max_body_bytes)
        ctx.body = body
        headers = request.headers
        # The id header is not covered by GitHub's signature, but it names the delivery in
        # the rejection record, which is what an operator searches for.
        ctx.source_id = headers.get("x-github-delivery") or headers.get("webhook-id")
        sender.verify(body, headers, settings, edge.now())
        data = parse_object(body, max_depth=settings.max_depth, max_int_digits=settings.max_int_digits)
        source_id = sender.source_id(headers, data)
        ctx.source_id = source_id
        payload = {"type": sender.event_type(headers, data), "body": data}
        inbox = request.path_params["inbox"]
        stored = await _ingest(edge, inbox, sender.source, source_id, payload)
        if stored:
            await edge.ring(inbox)
        return JSONResponse(
            {"inbox": inbox, "source": sender.source, "source_id": source_id, "duplicate": not stored},
            status_code=202 if stored else 200,
        )

    receive.__name__ = f"receive_{sender.source}"
    return receive


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
