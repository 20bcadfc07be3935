"""Approval tokens with the web edge's defaults: the keys, the link's lifetime and the public
URL from its settings (settings.WebSettings). The format and every rule about it are in
approval_tokens.py, which the runtime uses with its own settings."""

from __future__ import annotations

from collections.abc import Sequence

import approval_tokens
from approval_tokens import ANSWER_PURPOSE, PURPOSE, SELF, answer_token, check_token
from settings import SettingsError, WebSettings

__all__ = ["ANSWER_PURPOSE", "PURPOSE", "SELF", "answer_token", "approval_link", "check_token", "make_token"]


def make_token(
    inbox: str,
    request_id: str,
    *,
    approver: str | None = None,
    expires_in: int | None = None,
    secret: Sequence[str] | str | None = None,
    now: int | None = None,
) -> str:
    """``approval_tokens.make_token`` with ``WAKEFUL_APPROVAL_SECRET`` and
    ``WAKEFUL_APPROVAL_TOKEN_TTL`` for what is not given."""
    web = WebSettings.from_env() if secret is None or expires_in is None else None
    keys = web.approval_secrets if web is not None and secret is None else secret
    ttl = web.approval_token_ttl if web is not None and expires_in is None else expires_in
    try:
        return approval_tokens.make_token(inbox, request_id, approver=approver, now=now,
                                          secret=keys or (), expires_in=int(ttl or 0))
    except approval_tokens.NoSecret as exc:
        raise SettingsError(str(exc)) from None


def approval_link(
    inbox: str,
    request_id: str,
    *,
    approver: str | None = None,
    base_url: str | None = None,
    expires_in: int | None = None,
    secret: Sequence[str] | str | None = None,
    now: int | None = None,
) -> str:
    """``approval_tokens.approval_link`` with the web edge's settings for what is not given."""
    web = WebSettings.from_env()
    try:
        return approval_tokens.approval_link(
            inbox, request_id, approver=approver, now=now, base_url=base_url or web.public_url,
            secret=web.approval_secrets if secret is None else secret,
            expires_in=web.approval_token_ttl if expires_in is None else expires_in)
    except approval_tokens.NoSecret as exc:
        raise SettingsError(str(exc)) from None
