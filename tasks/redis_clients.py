"""One Redis client per kombu channel, not one per broker command.

kombu's Redis transport builds a new ``redis.Redis`` for every command it sends outside its
poll loop (``Channel.conn_or_acquire``): each publish (a ring, a recruit, a dispatch ring),
each ack and each delivery's bookkeeping. The client shares the channel's connection pool,
so nothing is gained by a new one, but redis-py copies its table of ~170 response callbacks
into every new client. yappi in the bench's workers (docs/performance.md, "A Redis client
per broker command"): 2,279 clients in 45 s in the control worker's main process, 28% of its
CPU; the dense run worker builds two per run (its recruit's publish, its dispatch ring's).
The same cost was found and fixed the same way elsewhere (chrisguidry/docket#461).

A ``redis.Redis`` is safe to share between threads: each command checks a connection out of
the pool for itself, and a pipeline is an object of its own per use. The shared client is
made again whenever the channel's pool is (a channel that reconnected has a new pool), so a
client never outlives the connections it was made for.

Pinned with the Redis-restart guard (tasks/redis_guard.py): it replaces a kombu method,
verified against the releases in ``redis_guard.VERIFIED_KOMBU``.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

_installed = False


def install() -> None:
    global _installed
    if _installed:
        return
    import kombu
    from kombu.transport import redis as kombu_redis

    from tasks.redis_guard import check_version

    check_version(kombu.__version__)

    @contextmanager
    def conn_or_acquire(self: Any, client: Any = None) -> Iterator[Any]:
        yield client if client else shared_client(self)

    kombu_redis.Channel.conn_or_acquire = conn_or_acquire
    _installed = True


def shared_client(channel: Any) -> Any:
    """The channel's one client on its current pool (two threads that race here each make
    one, and one of them is kept: harmless)."""
    pool = channel.pool
    client = channel.__dict__.get("_wakeful_client")
    if client is None or client.connection_pool is not pool:
        client = channel._create_client()
        channel.__dict__["_wakeful_client"] = client
    return client
