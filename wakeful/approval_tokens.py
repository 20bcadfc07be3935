"""Signed, expiring approval tokens bound to one (inbox, request_id): a leaf module (the
standard library, wakeful/errors.py and wakeful/settings.py's ``SettingsError`` only), so the web edge that checks a
link (wakeful/web/approvals.py) and the runtime that mints one (tasks/approval_links.py) and checks
an answer (tasks/approvals.py) share one format, each passing in its own keys and lifetime
from the settings its process loaded at its start.

Format: ``<expires>.<base64url HMAC-SHA256(key, canonical(purpose, inbox, request_id, expires))>``,
where ``canonical`` is a JSON array, so no choice of inbox or request id can collide with
another's (no separator ambiguity). A link for another approver than the inbox's own user
(``inbox:ops``, ``channel:NAME``: store/approvals.py) signs the approver as a fifth element,
so it answers as that approver only, and its URL says who (``&by=``). The token carries no data but its expiry; the inbox and
request id come from the URL and must be the ones it was made for.

Why the standard library's ``hmac`` and not itsdangerous: the token is one fixed-format
MAC, about twenty lines with ``hmac.compare_digest``; itsdangerous would add a dependency
and a serializer for no property we need. Key rotation: the first key signs, any key
verifies (``WAKEFUL_APPROVAL_SECRET=new,old``).

A token is a bearer credential: whoever holds the link may answer. The web edge keeps it out
of access logs (see wakeful/web/__main__.py) and sends ``Referrer-Policy: no-referrer``.

One rule for answers: **a token covers what its holder may say.** The link's token covers any
answer, because its holder is the human (it reaches the web edge straight from them). An
answer sent by task travels through the broker, where whoever reads the queue could change
it on the way; so ``wakeful.answer_approval`` takes only an *answer token*, which covers one
answer: ``answer_token(link_token, "no")`` = ``<expires>.<base64url HMAC-SHA256(link MAC,
canonical(ANSWER_PURPOSE, answer))>``. Whoever holds the link makes it without the key (a chat
bot that shows the link's buttons); whoever sees only the answer token cannot make another
answer's (the link's MAC is its key).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import time
from collections.abc import Sequence
from urllib.parse import quote

from wakeful.errors import WakefulError
from wakeful.settings import SettingsError

PURPOSE = "wakeful-approval/1"
SELF = "self"  # the inbox's own user: the approver of a link that names none
ANSWER_PURPOSE = "wakeful-approval-answer/1"
_MAX_EXPIRY_DIGITS = 12


class NoSecret(SettingsError):
    """No key to sign with: WAKEFUL_APPROVAL_SECRET is not set."""


class NotAuthorized(WakefulError):
    """An approval answer its token does not authorise (missing, expired, for another
    approval, answer or approver, or no secret to check it with): not a malformed event,
    a caller without the right to answer."""


def _mac(key: str, inbox: str, request_id: str, expires: int, approver: str | None = None) -> bytes:
    # The approver (another than the inbox's own user) is the array's fifth element: a link
    # made for one approver is not another's, nor the inbox's own.
    signed: list[object] = [PURPOSE, inbox, request_id, expires]
    if approver is not None and approver != SELF:
        signed.append(approver)
    message = json.dumps(signed, ensure_ascii=True, separators=(",", ":"))
    return hmac.new(key.encode("utf-8"), message.encode("ascii"), hashlib.sha256).digest()


def _answer_mac(link_mac: bytes, answer: str) -> bytes:
    message = json.dumps([ANSWER_PURPOSE, answer], ensure_ascii=True, separators=(",", ":"))
    return hmac.new(link_mac, message.encode("ascii"), hashlib.sha256).digest()


def _b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode("ascii")


def _keys(secrets: Sequence[str] | str) -> tuple[str, ...]:
    keys = tuple(s for s in ((secrets,) if isinstance(secrets, str) else secrets) if s)
    if not keys:
        raise NoSecret("WAKEFUL_APPROVAL_SECRET is not set: approval links cannot be signed")
    return keys


def make_token(
    inbox: str,
    request_id: str,
    *,
    secret: Sequence[str] | str,
    expires_in: int,
    approver: str | None = None,
    now: int | None = None,
) -> str:
    """A token that lets its holder answer approval ``request_id`` of ``inbox`` until it
    expires. ``secret``: the keys (the first signs). ``approver``: who holds the link
    (store/approvals.py), signed with it, so the answer says who gave it."""
    key = _keys(secret)[0]
    if expires_in <= 0:
        raise ValueError("expires_in must be positive")
    expires = int(time.time() if now is None else now) + int(expires_in)
    return f"{expires}.{_b64(_mac(key, inbox, request_id, expires, approver))}"


def answer_token(link_token: str, answer: str) -> str:
    """The token that answers ``answer`` and nothing else, made from the link's token (no key
    needed): what a service sends with ``wakeful.answer_approval``. Keeps the link's expiry."""
    stamp, sep, mac = link_token.partition(".")
    try:
        link_mac = base64.urlsafe_b64decode(mac + "=" * (-len(mac) % 4))
    except ValueError:
        link_mac = b""
    if not sep or not stamp.isdigit() or len(link_mac) != hashlib.sha256().digest_size:
        raise ValueError("not an approval link's token (expected <expiry>.<MAC>)")
    return f"{stamp}.{_b64(_answer_mac(link_mac, answer))}"


def check_token(
    token: str, inbox: str, request_id: str, *, secrets: Sequence[str], now: int,
    answer: str | None = None, approver: str | None = None,
) -> str | None:
    """None when the token is valid for (inbox, request_id) at ``now``; else the reason code
    (``"bad_token"`` or ``"expired_token"``). Never raises on a crafted token.

    Without ``answer``: the link's token. With it: the answer token for that answer only (a
    link's token is then ``"bad_token"``: it does not name the answer). ``approver``: the one
    the link was made for (None or ``self``: the inbox's own user)."""
    if not secrets:
        return "bad_token"
    stamp, sep, mac = token.partition(".")
    if not sep or not stamp.isascii() or not stamp.isdigit() or len(stamp) > _MAX_EXPIRY_DIGITS:
        return "bad_token"
    expires = int(stamp)
    given = mac.encode("ascii", errors="replace")
    matched = False
    for key in secrets:
        expected = _mac(key, inbox, request_id, expires, approver)
        if answer is not None:
            expected = _answer_mac(expected, answer)
        matched |= hmac.compare_digest(_b64(expected).encode("ascii"), given)
    if not matched:
        return "bad_token"
    # Checked after the MAC, so an expiry is only reported for a token we really issued.
    if now >= expires:
        return "expired_token"
    return None


def approval_link(
    inbox: str,
    request_id: str,
    *,
    base_url: str,
    secret: Sequence[str] | str,
    expires_in: int,
    approver: str | None = None,
    now: int | None = None,
) -> str:
    """The URL an agent puts in its approval message: a page with Yes and No buttons.

    Opening it changes nothing (link previewers and mail scanners fetch links); the buttons
    POST the answer with the token. For another approver than the inbox's own user the URL
    carries ``by=<approver>``, which the token signs.
    """
    token = make_token(inbox, request_id, approver=approver, expires_in=expires_in, secret=secret, now=now)
    by = f"&by={quote(approver, safe='')}" if approver is not None and approver != SELF else ""
    return f"{base_url.rstrip('/')}/approvals/{quote(inbox, safe='')}/{quote(request_id, safe='')}?token={token}{by}"
