"""``python -m wakeful.web.console hash NAME``: a console user's entry for
``WAKEFUL_CONSOLE_USERS``, ``NAME:scrypt:...``, from a password asked for twice on the
terminal (or read, one line, from stdin when it is not a terminal). The password itself is
never stored or printed; several users are comma-separated."""

from __future__ import annotations

import getpass
import sys

from .access import NAME, hash_password


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 2 or args[0] != "hash":
        print("usage: python -m wakeful.web.console hash NAME", file=sys.stderr)
        return 2
    user = args[1]
    if not NAME.match(user):
        print("wakeful console: a name is 1-32 letters, digits, '.', '_' or '-'", file=sys.stderr)
        return 2
    if sys.stdin.isatty():
        password = getpass.getpass(f"password for {user}: ")
        if password != getpass.getpass("again: "):
            print("wakeful console: the two passwords differ", file=sys.stderr)
            return 1
    else:
        password = sys.stdin.readline().rstrip("\r\n")
    if len(password) < 12:
        print("wakeful console: use a password of at least 12 characters", file=sys.stderr)
        return 1
    print(f"{user}:{hash_password(password)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
