"""Database errors from named constraints, mapped to the domain error of the rule they protect.

The store validates input before it writes, so these fire only when that validation and the
schema disagree (a bug, or a row written by hand): the caller then still gets the error of
the rule, naming the constraint, instead of a driver's IntegrityError. The constraint's name
is read from the error itself: PostgreSQL reports it (``diag.constraint_name``); SQLite names
a CHECK constraint in its message and a UNIQUE or PRIMARY KEY one by its columns, which are
looked up in the tables' metadata. An unknown constraint is left as it was raised.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager

from sqlalchemy import CheckConstraint, PrimaryKeyConstraint, UniqueConstraint
from sqlalchemy.exc import IntegrityError

from .records import InvalidEvent, InvalidTimer
from .tables import metadata

# constraint name -> (the domain error, what the rule says)
RULES: dict[str, tuple[type[ValueError], str]] = {
    "uq_events_key": (InvalidEvent, "an event with this (inbox, source, source_id) is stored already"),
    "ck_events_status_known": (InvalidEvent, "an event's status is pending, running, done or dead"),
    "ck_events_attempts_not_negative": (InvalidEvent, "an event's attempts are never negative"),
    "ck_inboxes_generation_not_negative": (InvalidEvent, "a lease's generation is never negative"),
    "ck_timers_every_positive": (InvalidTimer, "a timer's every= is a positive number of seconds"),
    "ck_timers_every_or_cron": (InvalidTimer, "a timer repeats by every= or by cron=, not both"),
    "ck_timers_misfire_known": (InvalidTimer, "a timer's misfire is coalesce or each"),
}


def _unique_by_columns() -> dict[tuple[str, ...], str]:
    """SQLite's "UNIQUE constraint failed: t.a, t.b" names columns: map them to a name."""
    names: dict[tuple[str, ...], str] = {}
    for table in metadata.tables.values():
        for c in table.constraints:
            if isinstance(c, (UniqueConstraint, PrimaryKeyConstraint)) and c.name:
                names[tuple(f"{table.name}.{col.name}" for col in c.columns)] = str(c.name)
    return names


_UNIQUE_BY_COLUMNS = _unique_by_columns()
_CHECK_NAMES = {str(c.name) for t in metadata.tables.values() for c in t.constraints
                if isinstance(c, CheckConstraint) and c.name}


def constraint_name(exc: IntegrityError) -> str | None:
    diag = getattr(exc.orig, "diag", None)
    if diag is not None and getattr(diag, "constraint_name", None):
        return str(diag.constraint_name)
    message = str(exc.orig)
    check = re.search(r"CHECK constraint failed: (\w+)", message)
    if check and check.group(1) in _CHECK_NAMES:
        return check.group(1)
    unique = re.search(r"UNIQUE constraint failed: ([\w., ]+)", message)
    if unique:
        return _UNIQUE_BY_COLUMNS.get(tuple(col.strip() for col in unique.group(1).split(",")))
    return None


@contextmanager
def mapped() -> Iterator[None]:
    """Re-raise an IntegrityError from a known constraint as its rule's domain error."""
    try:
        yield
    except IntegrityError as exc:
        name = constraint_name(exc)
        if name not in RULES:
            raise
        error, rule = RULES[name]
        raise error(f"{rule} (constraint {name})") from exc
