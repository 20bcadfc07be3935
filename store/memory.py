"""An inbox's memory: keys the agent reads at the start of a run and writes with its finish."""

from __future__ import annotations

from typing import Any

from sqlalchemy import Connection, and_, bindparam, delete, select

from . import validate
from .db import upsert
from wakeful.settings import StoreSettings
from .tables import memory

_MEMORY = select(memory.c.key, memory.c.value).where(memory.c.inbox == bindparam("p_inbox")).order_by(memory.c.key)


def read(conn: Connection, inbox: str) -> dict[str, Any]:
    return {r.key: r.value for r in conn.execute(_MEMORY, {"p_inbox": inbox})}


def write(conn: Connection, s: StoreSettings, inbox: str, writes: dict[str, Any], now: int) -> None:
    """Upsert each key, all in one statement; a value of None deletes it."""
    rows = []
    for key, value in writes.items():
        validate.name("memory key", key, 255)
        if value is None:
            conn.execute(delete(memory).where(and_(memory.c.inbox == inbox, memory.c.key == key)))
        else:
            validate.payload({"value": value}, s.max_payload_bytes)
            rows.append({"inbox": inbox, "key": key, "value": value, "updated": now})
    upsert(conn, memory, rows, ["inbox", "key"])
