"""Who may use the console: operators named in ``WAKEFUL_CONSOLE_USERS``, each with a scrypt
hash of a password (never the password), signed in by HTTP Basic over the TLS proxy in front.

- A password is checked with ``hashlib.scrypt`` (16 MiB, about 50 ms) and compared in
  constant time; an unknown name costs the same as a known one. A name and password once
  verified are remembered by this process (keyed by an HMAC under a key of its own, so the
  memory never holds them), so a page and its stylesheet do not each pay for scrypt.
- Failed checks are bounded: at most ``FAILURES_PER_SECOND`` a second per process (twice as
  many at once) are computed; beyond that the answer is 429 without one, so guessing cannot
  turn the console into a CPU sink.
- Every form that changes something carries a CSRF token: an HMAC, keyed by the user's own
  hash entry (a secret only the server holds), of the user's name and the UTC day. Today's
  and yesterday's are accepted, so a page left open over midnight still works. A browser
  sends Basic credentials with any request to the site, a forged cross-site form included;
  it cannot send the token, which only the console's own pages carry.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import os
import re
from collections import OrderedDict
from dataclasses import dataclass

from store.budget import WriteBudget

SCHEME = "scrypt"
# scrypt's cost: N = 2**14, r = 8 (16 MiB), p = 1: the parameters OWASP lists for scrypt.
COST, BLOCK, PARALLEL = 2 ** 14, 8, 1
NAME = re.compile(r"^[A-Za-z0-9._-]{1,32}$")
FAILURES_PER_SECOND = 2.0
REMEMBERED = 256  # verified (name, password) pairs kept per process
CSRF_DAYS = 2  # today's token and yesterday's


class BadUsers(ValueError):
    """``WAKEFUL_CONSOLE_USERS`` holds an entry that cannot work; the message names it by its
    position and name, never its hash."""


def _b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def _scrypt(password: str, salt: bytes, cost: int, block: int, parallel: int) -> bytes:
    return hashlib.scrypt(password.encode("utf-8"), salt=salt, n=cost, r=block, p=parallel, dklen=32,
                          maxmem=256 * block * cost)


def hash_password(password: str, *, salt: bytes | None = None) -> str:
    """The hash to put after ``name:`` in ``WAKEFUL_CONSOLE_USERS``."""
    salt = salt or os.urandom(16)
    digest = _scrypt(password, salt, COST, BLOCK, PARALLEL)
    return ":".join((SCHEME, str(COST), str(BLOCK), str(PARALLEL), _b64(salt), _b64(digest)))


@dataclass(frozen=True)
class User:
    name: str
    entry: str  # the hash entry as configured: the CSRF key
    cost: int
    block: int
    parallel: int
    salt: bytes
    digest: bytes

    def verify(self, password: str) -> bool:
        tried = _scrypt(password, self.salt, self.cost, self.block, self.parallel)
        return hmac.compare_digest(tried, self.digest)


def parse_users(entries: tuple[str, ...]) -> dict[str, User]:
    """``name:scrypt:N:r:p:salt:digest`` entries, each checked; ``BadUsers`` otherwise. (No
    ``$`` in them: a shell, a compose file or an .env file would expand it.)"""
    users: dict[str, User] = {}
    for position, entry in enumerate(entries, 1):
        name, _, hashed = entry.partition(":")
        where = f"entry {position}" + (f" ({name})" if NAME.match(name) else "")
        if not NAME.match(name):
            raise BadUsers(f"{where}: a name is 1-32 letters, digits, '.', '_' or '-', then ':' and its hash")
        if name in users:
            raise BadUsers(f"{where}: the name is given twice")
        users[name] = _user(name, hashed, where)
    return users


def _user(name: str, hashed: str, where: str) -> User:
    parts = hashed.split(":")
    try:
        scheme, cost, block, parallel = parts[0], int(parts[1]), int(parts[2]), int(parts[3])
        salt, digest = _unb64(parts[4]), _unb64(parts[5])
    except (IndexError, ValueError, binascii.Error):
        scheme = ""
    if scheme != SCHEME or len(parts) != 6:
        raise BadUsers(f"{where}: not a hash of `python -m wakeful.web.console hash {name}`")
    if not (2 <= cost <= 2 ** 20 and cost & (cost - 1) == 0 and 1 <= block <= 32 and 1 <= parallel <= 4
            and len(salt) >= 8 and len(digest) == 32):
        raise BadUsers(f"{where}: the hash's parameters are out of range (remake it)")
    return User(name, hashed, cost, block, parallel, salt, digest)


class Door:
    """The console's sign-in and CSRF rules for one process."""

    def __init__(self, users: dict[str, User]) -> None:
        self.users = users
        self._key = os.urandom(32)  # this process's: the memory of verified credentials
        self._remembered: OrderedDict[bytes, str] = OrderedDict()
        self._failures = WriteBudget(FAILURES_PER_SECOND)
        self._decoy = User("", "", COST, BLOCK, PARALLEL, b"\0" * 16, b"\0" * 32)

    @staticmethod
    def credentials(authorization: str | None) -> tuple[str, str] | None:
        """(name, password) from an ``Authorization: Basic`` header, None if there is none."""
        scheme, _, value = (authorization or "").partition(" ")
        if scheme.lower() != "basic":
            return None
        try:
            name, colon, password = base64.b64decode(value.strip(), validate=True).decode("utf-8").partition(":")
        except (binascii.Error, UnicodeDecodeError):
            return None
        return (name, password) if colon else None

    def remembered(self, name: str, password: str) -> str | None:
        return self._remembered.get(self._mark(name, password))

    def may_check(self) -> bool:
        """Whether another check that may fail fits this second's budget."""
        return self._failures.take()

    def check(self, name: str, password: str) -> str | None:
        """The user's name if the password is theirs (scrypt: call it off the event loop)."""
        user = self.users.get(name)
        if not (user or self._decoy).verify(password) or user is None:
            return None
        self._remembered[self._mark(name, password)] = name
        while len(self._remembered) > REMEMBERED:
            self._remembered.popitem(last=False)
        return name

    def _mark(self, name: str, password: str) -> bytes:
        return hmac.new(self._key, f"{name}\0{password}".encode(), hashlib.sha256).digest()

    def csrf(self, name: str, now: int, days_ago: int = 0) -> str:
        """The token of ``name``'s forms on the UTC day of ``now`` (``days_ago`` before it)."""
        day = now // 86400 - days_ago
        key = self.users[name].entry.encode()
        return hmac.new(key, f"wakeful-console-csrf\0{name}\0{day}".encode(), hashlib.sha256).hexdigest()

    def csrf_ok(self, name: str, token: object, now: int) -> bool:
        if not isinstance(token, str):
            return False
        return any(hmac.compare_digest(token.encode(), self.csrf(name, now, d).encode()) for d in range(CSRF_DAYS))
