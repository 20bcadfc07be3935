"""Per-inbox webhook secrets, encrypted at rest.

Each row holds one inbox's secrets for one sender kind (GitHub, Stripe, Standard Webhooks)
as a Fernet token (the ``cryptography`` library: AES-128-CBC with an HMAC-SHA256, a
timestamp, and ``MultiFernet`` for key rotation). The key comes from the environment
(``WAKEFUL_SECRETS_KEY``), never from the database, so a dump of the database alone does not
reveal a secret. The token also carries the inbox and kind it was made for: a row copied
onto another inbox by someone with write access to the table decrypts, but does not verify
anything there.

The store takes the cipher as an argument: it never reads the environment.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass

from cryptography.fernet import Fernet, InvalidToken, MultiFernet
from wakeful.errors import WakefulError
from sqlalchemy import Connection, delete, select

from . import validate
from .db import clock_expr, insert
from .records import InvalidEvent
from .tables import HOOK_KINDS, hook_secrets
from .transactions import Transactions

# Two: the secret in use and the one replacing it, while a sender rotates. More would widen
# the set of keys that can sign for an inbox for no purpose.
MAX_SECRETS = 2
SECRET_MAX_CHARS = 512


class SecretsKeyError(WakefulError, ValueError):
    """The encryption key is missing or malformed (the message never shows a key)."""


@dataclass(frozen=True)
class HookSecretRow:
    """What ``wakeful hooks list`` shows: never a secret."""

    inbox: str
    kind: str
    count: int
    updated: int


def cipher(keys: str) -> MultiFernet:
    """``MultiFernet`` over comma-separated Fernet keys: the first encrypts, any decrypts
    (``new,old`` while rotating; ``wakeful hooks rekey`` re-encrypts every row under the first)."""
    parts = [k.strip() for k in keys.split(",") if k.strip()]
    if not parts:
        raise SecretsKeyError("WAKEFUL_SECRETS_KEY is not set: per-inbox webhook secrets need it "
                              "(make one with `wakeful hooks new-key`)")
    try:
        return MultiFernet([Fernet(k) for k in parts])
    except (ValueError, TypeError):
        raise SecretsKeyError("WAKEFUL_SECRETS_KEY holds a value that is not a Fernet key") from None


def new_key() -> str:
    return Fernet.generate_key().decode("ascii")


def check(inbox: str, kind: str, secrets: Sequence[str]) -> tuple[str, ...]:
    validate.inbox(inbox)
    if kind not in HOOK_KINDS:
        raise InvalidEvent(f"kind must be one of {', '.join(HOOK_KINDS)}, got {kind!r}")
    values = tuple(secrets)
    if not 1 <= len(values) <= MAX_SECRETS:
        raise InvalidEvent(f"give 1 or {MAX_SECRETS} secrets (two while rotating), got {len(values)}")
    for value in values:
        if not isinstance(value, str) or not value.strip() or value != value.strip():
            raise InvalidEvent("a secret must be a non-empty string without surrounding spaces")
        if len(value) > SECRET_MAX_CHARS or not value.isprintable():
            raise InvalidEvent(f"a secret must be printable and at most {SECRET_MAX_CHARS} characters")
    return values


def seal(f: MultiFernet, inbox: str, kind: str, secrets: Sequence[str]) -> str:
    plain = json.dumps({"inbox": inbox, "kind": kind, "secrets": list(secrets)})
    return f.encrypt(plain.encode("utf-8")).decode("ascii")


def unseal(f: MultiFernet, inbox: str, kind: str, token: str) -> tuple[str, ...]:
    """The secrets of this row, or ``SecretsKeyError`` if the key cannot open it or it was
    made for another inbox or kind."""
    try:
        data = json.loads(f.decrypt(token.encode("ascii")))
    except (InvalidToken, ValueError):
        raise SecretsKeyError(f"the secrets of inbox {inbox!r} ({kind}) do not open with "
                              "WAKEFUL_SECRETS_KEY") from None
    if data.get("inbox") != inbox or data.get("kind") != kind:
        raise SecretsKeyError(f"the secrets stored for inbox {inbox!r} ({kind}) were made for "
                              "another inbox")
    return tuple(data["secrets"])


def put(conn: Connection, inbox: str, kind: str, sealed: str, now: int | None) -> None:
    stmt = insert(conn, hook_secrets).values(inbox=inbox, kind=kind, secrets=sealed, updated=clock_expr(now))
    conn.execute(stmt.on_conflict_do_update(index_elements=["inbox", "kind"],
                                            set_={"secrets": stmt.excluded.secrets,
                                                  "updated": stmt.excluded.updated}))


def remove(conn: Connection, inbox: str, kind: str | None) -> int:
    query = delete(hook_secrets).where(hook_secrets.c.inbox == inbox)
    if kind is not None:
        query = query.where(hook_secrets.c.kind == kind)
    return conn.execute(query).rowcount


def rows(conn: Connection) -> list[tuple[str, str, str, int]]:
    """Every (inbox, kind, sealed, updated)."""
    query = select(hook_secrets.c.inbox, hook_secrets.c.kind, hook_secrets.c.secrets, hook_secrets.c.updated)
    return [tuple(r) for r in conn.execute(query.order_by(hook_secrets.c.inbox, hook_secrets.c.kind))]


class HookSecrets:
    """Per-inbox webhook secrets (``store.hook_secrets``), sealed with the ``cipher`` each
    call is given; one short transaction each."""

    def __init__(self, transactions: Transactions) -> None:
        self.transactions = transactions

    def replace(self, inbox: str, kind: str, secrets: Sequence[str], *, cipher: MultiFernet,
                now: int | None = None) -> None:
        """Replace the secrets ``inbox`` verifies ``kind`` deliveries with (1 or 2)."""
        sealed = seal(cipher, inbox, kind, check(inbox, kind, secrets))
        with self.transactions.transaction() as conn:
            put(conn, inbox, kind, sealed, now)

    def remove(self, inbox: str, kind: str | None = None) -> int:
        """Rows removed: one kind, or every kind of the inbox."""
        with self.transactions.transaction() as conn:
            return remove(conn, inbox, kind)

    def unsealed(self, *, cipher: MultiFernet) -> dict[str, dict[str, tuple[str, ...]]]:
        """Every inbox's secrets by kind; a row the cipher cannot open is ``()`` (verifies
        nothing: the inbox fails closed)."""
        with self.transactions.transaction() as conn:
            stored = rows(conn)
        out: dict[str, dict[str, tuple[str, ...]]] = {}
        for inbox, kind, sealed, _ in stored:
            try:
                out.setdefault(inbox, {})[kind] = unseal(cipher, inbox, kind, sealed)
            except SecretsKeyError:
                out.setdefault(inbox, {})[kind] = ()
        return out

    def rows(self, *, cipher: MultiFernet | None = None) -> list[HookSecretRow]:
        """(inbox, kind, how many secrets, updated) per row: never a secret. The count is -1
        when no cipher is given or it cannot open the row."""
        with self.transactions.transaction() as conn:
            stored = rows(conn)
        out = []
        for inbox, kind, sealed, updated in stored:
            try:
                count = len(unseal(cipher, inbox, kind, sealed)) if cipher else -1
            except SecretsKeyError:
                count = -1
            out.append(HookSecretRow(inbox, kind, count, updated))
        return out

    def rekey(self, *, cipher: MultiFernet) -> int:
        """Re-encrypt every row under the cipher's first key (``MultiFernet.rotate``)."""
        with self.transactions.transaction() as conn:
            stored = rows(conn)
            for inbox, kind, sealed, updated in stored:
                unseal(cipher, inbox, kind, sealed)  # refuses a foreign row
                put(conn, inbox, kind, cipher.rotate(sealed.encode("ascii")).decode("ascii"), updated)
        return len(stored)
