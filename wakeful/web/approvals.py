"""Approval answers: ``GET``/``POST /approvals/{inbox}/{request_id}``.

``GET`` (the link in the agent's message) shows a page with Yes and No buttons and changes
nothing: chat link previews and mail scanners open links, and must not answer for a human.
``POST`` with ``answer=yes|no`` and the link's ``token`` (form fields, a JSON object, or the
token as ``?token=`` / ``Authorization: Bearer``) stores the answer and returns the outcome
that stands: ``yes``/``no``, ``expired`` (a late answer never counts), ``unknown`` (404).

A link made for another approver than the inbox's own user (store/approvals.py) carries
``by=<approver>`` (query or form field), which its token signs: the answer is stored with who
gave it (``self`` for a link without ``by``). A ``by`` the token was not made for is
``bad_token``.

The token is checked before anything else is looked at; it is never logged, echoed or
recorded (a refusal of this route keeps no body excerpt).
"""

from __future__ import annotations

import html
from typing import Any
from urllib.parse import parse_qs, unquote

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, Response
from starlette.routing import Route

from wakeful.approval_tokens import SELF, check_token
from store import display

from .body import parse_object, read_bounded
from .edge import Context, Edge, guarded
from .refusals import Refused

ANSWERS = ("yes", "no")

# Every value whole on any screen: a <pre> does not wrap, so a value padded with spaces would
# push the rest of itself out of sight; these wrap spaces and long words alike.
_INPUT_STYLE = "background:#f4f4f4;padding:.5em;white-space:break-spaces;overflow-wrap:anywhere"
_FLAGS_STYLE = "border:2px solid #b00000;background:#fff0f0;padding:0 .5em;overflow-wrap:anywhere"
_WORDS_STYLE = "border-left:4px solid #888;padding-left:.5em;color:#444;overflow-wrap:anywhere"

# The page is ours and tiny: no external resource, no script, and no Referer leaves it.
_HEADERS = {
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
    "Content-Security-Policy": "default-src 'none'; style-src 'unsafe-inline'; form-action 'self'",
    "X-Frame-Options": "DENY",
}


def _ids(request: Request) -> tuple[str, str]:
    """(inbox, request_id) from the raw, still percent-encoded path, so either may contain a
    slash: ``/approvals/team%2Falice/deploy%2F42`` is inbox ``team/alice``, request
    ``deploy/42`` (``approval_link`` encodes them that way)."""
    raw = request.scope.get("raw_path") or request.scope["path"].encode("utf-8")
    raw = raw.split(b"?", 1)[0]
    parts = raw.decode("latin-1").split("/")
    # ["", "approvals", inbox, request_id]
    if len(parts) != 4 or not parts[2] or not parts[3]:
        raise Refused("bad_path", "the path is /approvals/{inbox}/{request_id}, each percent-encoded")
    return unquote(parts[2], errors="replace"), unquote(parts[3], errors="replace")


def _token_from(request: Request, fields: dict[str, Any]) -> str | None:
    token = fields.get("token") or request.query_params.get("token")
    auth = request.headers.get("authorization", "")
    if not token and auth[:7].lower() == "bearer ":
        token = auth[7:].strip()
    return token if isinstance(token, str) and token else None


def _approver_from(request: Request, fields: dict[str, Any]) -> str:
    """Who the link was made for: its ``by``, or the inbox's own user."""
    by = fields.get("by") or request.query_params.get("by")
    if by is None:
        return SELF
    if not isinstance(by, str) or not 0 < len(by) <= 160:
        raise Refused("bad_token", "this token is not valid for this approval")
    return by


def _authorize(edge: Edge, token: str | None, inbox: str, request_id: str, approver: str) -> None:
    if token is None:
        raise Refused("no_token", "an approval answer needs the token from its link")
    problem = check_token(token, inbox, request_id, secrets=edge.settings.approval_secrets, now=edge.now(),
                          approver=approver)
    if problem == "expired_token":
        raise Refused("expired_token", "this approval link has expired")
    if problem is not None:
        raise Refused("bad_token", "this token is not valid for this approval")


async def _fields(request: Request, limit: int) -> dict[str, Any]:
    media = request.headers.get("content-type", "").partition(";")[0].strip().lower()
    if media not in ("application/x-www-form-urlencoded", "application/json", ""):
        raise Refused("content_type", "send the answer as a form or a JSON object")
    body = await read_bounded(request, limit)
    if media == "application/json":
        return parse_object(body, max_depth=4, max_int_digits=20)
    try:
        parsed = parse_qs(body.decode("utf-8"), max_num_fields=10, strict_parsing=False)
    except (UnicodeDecodeError, ValueError):
        raise Refused("bad_answer", "the form is not valid") from None
    return {k: v[0] for k, v in parsed.items() if v}


def _wants_html(request: Request) -> bool:
    return "text/html" in request.headers.get("accept", "")


async def answer(request: Request, edge: Edge, ctx: Context) -> Response:
    from store import InvalidEvent

    inbox, request_id = _ids(request)
    ctx.inbox, ctx.source, ctx.source_id = inbox, "approval", request_id
    fields = await _fields(request, edge.settings.max_approval_body_bytes)
    approver = _approver_from(request, fields)
    _authorize(edge, _token_from(request, fields), inbox, request_id, approver)
    given = fields.get("answer")
    if given not in ANSWERS:
        raise Refused("bad_answer", "answer must be yes or no")
    try:
        outcome = await edge.call_store("answer_approval", inbox, request_id, given, by=approver)
    except InvalidEvent as exc:
        raise Refused("invalid_event", str(exc)) from None
    if outcome != "unknown":
        # The answer (or the expiry the store fired on the spot) is an inbox event: wake the
        # agent. A repeated answer rings again, which costs a worker one empty look.
        await edge.ring(inbox)
    status = 404 if outcome == "unknown" else 200
    if _wants_html(request):
        return HTMLResponse(_page(_outcome_text(outcome, given)), status_code=status, headers=_HEADERS)
    return JSONResponse({"inbox": inbox, "request_id": request_id, "answer": given, "outcome": outcome},
                        status_code=status, headers=_HEADERS)


async def show(request: Request, edge: Edge, ctx: Context) -> Response:
    inbox, request_id = _ids(request)
    ctx.inbox, ctx.source, ctx.source_id = inbox, "approval", request_id
    token = _token_from(request, {})
    approver = _approver_from(request, {})
    _authorize(edge, token, inbox, request_id, approver)
    e = html.escape
    by = f'<input type="hidden" name="by" value="{e(approver)}">' if approver != SELF else ""
    form = (
        f'<form method="post"><input type="hidden" name="token" value="{e(token or "")}">{by}'
        '<button name="answer" value="yes">Yes</button> '
        '<button name="answer" value="no">No</button></form>'
    )
    details = await run_in_threadpool(_tool_details, edge, inbox, request_id)
    body = (f"<p>Approval <b>{e(display.escaped(request_id))}</b> for <b>{e(display.escaped(inbox))}</b>"
            f"</p>{details}{form}")
    return HTMLResponse(_page(body), headers=_HEADERS)


def _tool_details(edge: Edge, inbox: str, request_id: str) -> str:
    """For a tool call of the agent kit (store/effects.py): the tool, its input, the model's
    words and the deadline, by the rule of store/display.py (the approval message's too).
    Empty for any other approval."""
    import time

    effect = edge.store.effects.get(inbox, request_id)
    if effect is None:
        return ""
    e = html.escape
    deadline = next((a.deadline for a in edge.store.approvals.view(inbox, pending_only=False)
                     if a.request_id == request_id), None)
    when = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(deadline)) if deadline else "unknown"
    shown = display.for_approval(effect.input, effect.words)
    flags = ""
    if shown.flags:
        items = "".join(f"<li>{e(flag)}</li>" for flag in shown.flags)
        flags = (f'<div id="flags" role="alert" style="{_FLAGS_STYLE}"><p><b>{e(display.FLAGS_LABEL)}</b>'
                 f"</p><ul>{items}</ul></div>")
    said = (f'<p id="words" style="{_WORDS_STYLE}">{e(display.WORDS_LABEL)} <code>{e(shown.words)}</code></p>'
            if shown.words else "")
    if effect.why:
        said += f'<p id="why">{e(display.WHY_LABEL)} {e(display.escaped(effect.why))}</p>'

    return (f'<p>The agent wants to run the tool <b id="tool">{e(display.escaped(effect.tool))}</b> '
            f'with this input (what runs if you say yes):</p><pre id="input" style="{_INPUT_STYLE}">'
            f"{e(shown.input)}</pre>{flags}{said}"
            f'<p>Answer before <b id="deadline">{e(when)}</b>; after that nothing runs.</p>')


def _outcome_text(outcome: str, given: str) -> str:
    if outcome == "expired":
        return "<p>This approval has expired; the answer was not counted.</p>"
    if outcome == "unknown":
        return "<p>No such approval.</p>"
    if outcome != given:
        return f"<p>An earlier answer stands: <b>{html.escape(outcome)}</b>.</p>"
    return f"<p>Recorded: <b>{html.escape(outcome)}</b>.</p>"


def _page(body: str) -> str:
    return (
        '<!doctype html><html><head><meta charset="utf-8"><title>wakeful approval</title>'
        '<meta name="viewport" content="width=device-width"></head>'
        f"<body style=\"font-family:sans-serif;max-width:32em;margin:2em auto;padding:0 1em\">{body}</body></html>"
    )


routes = [
    Route("/approvals/{target:path}", guarded("web:approvals", answer), methods=["POST"]),
    Route("/approvals/{target:path}", guarded("web:approvals", show), methods=["GET"]),
]
