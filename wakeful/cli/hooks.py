"""``wakeful hooks``: per-inbox webhook secrets (set, list, remove, rekey, new-key).

An inbox with secrets of its own verifies its deliveries with those only; the global
``WAKEFUL_{GITHUB,STRIPE,WEBHOOK}_SECRETS`` apply only to inboxes without any. Secrets are
stored encrypted under ``WAKEFUL_SECRETS_KEY`` (Fernet keys, comma-separated while rotating);
a running web process picks changes up within ``web.hooks.REFRESH_SECONDS`` (5 s). No
command ever prints a secret.
"""

from __future__ import annotations

import sys
from datetime import datetime, timezone
from typing import Optional

import typer

from store.display import safe

hooks_cli = typer.Typer(no_args_is_help=True, help="Per-inbox webhook secrets (encrypted at rest).")


def _secrets_key() -> str:
    from wakeful.settings import RuntimeSettings, for_process

    return for_process(RuntimeSettings, "wakeful").secrets_key


def _cipher():  # type: ignore[no-untyped-def]
    from store.hook_secrets import SecretsKeyError, cipher

    try:
        return cipher(_secrets_key())
    except SecretsKeyError as exc:
        typer.echo(f"wakeful: {exc}", err=True)
        raise typer.Exit(2) from None


@hooks_cli.command("set")
def set_(inbox: str, kind: str = typer.Argument(..., help="github, stripe or standard."),
         secrets: Optional[list[str]] = typer.Argument(
             None, help="One secret, or two while rotating. None: read them from stdin, one "
                        "a line (keeps them out of the shell history and `ps`).")) -> None:
    """Set the secrets INBOX verifies KIND deliveries with (replaces the previous ones)."""
    from store import InvalidEvent
    from wakeful.web.signatures import check_secret

    from wakeful.cli.operator import opened_store

    values = list(secrets or []) or [line.strip() for line in sys.stdin.read().splitlines() if line.strip()]
    f = _cipher()
    try:
        for value in values:
            check_secret(kind, value)
        with opened_store() as store:
            store.hook_secrets.replace(inbox, kind, values, cipher=f)
    except (InvalidEvent, ValueError) as exc:
        typer.echo(f"wakeful: rejected: {safe(exc)}", err=True)
        raise typer.Exit(2) from None
    typer.echo(f"inbox {safe(inbox)}: {len(values)} {kind} secret(s) set; a running web process "
               "uses them within 5 s")


@hooks_cli.command("list")
def list_() -> None:
    """Inboxes with secrets of their own: kind, how many, when set (never the secrets)."""
    from wakeful.cli.operator import opened_store, table

    from store.hook_secrets import SecretsKeyError, cipher

    try:
        f = cipher(_secrets_key())
    except SecretsKeyError:
        f = None  # still list the rows; the count shows "?"
    with opened_store() as store:
        rows = store.hook_secrets.rows(cipher=f)
    table(["inbox", "kind", "secrets", "updated"],
          [[r.inbox, r.kind, "?" if r.count < 0 else r.count,
            datetime.fromtimestamp(r.updated, timezone.utc).strftime("%Y-%m-%d %H:%M:%S")] for r in rows],
          "no inbox has secrets of its own")


@hooks_cli.command("remove")
def remove(inbox: str, kind: Optional[str] = typer.Argument(None, help="Only this kind.")) -> None:
    """Remove INBOX's secrets (of KIND, or all): it falls back to the global ones, if any."""
    from wakeful.cli.operator import opened_store
    from store.tables import HOOK_KINDS

    if kind is not None and kind not in HOOK_KINDS:
        typer.echo(f"wakeful: kind must be one of {', '.join(HOOK_KINDS)}", err=True)
        raise typer.Exit(2)
    with opened_store() as store:
        removed = store.hook_secrets.remove(inbox, kind)
    if not removed:
        typer.echo(f"wakeful: inbox {safe(inbox)} has no {kind + ' ' if kind else ''}secrets", err=True)
        raise typer.Exit(1)
    typer.echo(f"inbox {safe(inbox)}: {removed} row(s) removed")


@hooks_cli.command("rekey")
def rekey() -> None:
    """Re-encrypt every row under the first key of WAKEFUL_SECRETS_KEY (after adding a new
    key in front of the old one; then the old key can go)."""
    from wakeful.cli.operator import opened_store
    from store.hook_secrets import SecretsKeyError

    f = _cipher()
    try:
        with opened_store() as store:
            n = store.hook_secrets.rekey(cipher=f)
    except SecretsKeyError as exc:
        typer.echo(f"wakeful: {safe(exc)}; nothing changed", err=True)
        raise typer.Exit(1) from None
    typer.echo(f"{n} row(s) re-encrypted")


@hooks_cli.command("new-key")
def new_key() -> None:
    """Print a new Fernet key for WAKEFUL_SECRETS_KEY."""
    from store.hook_secrets import new_key as make

    typer.echo(make())
