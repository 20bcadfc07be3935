"""Keep a worker alive when Redis restarts while it holds an unacked message.

On a lost connection the consumer closes its channel, and kombu's Redis QoS then tries to
put the unacked messages back (``restore_unacked``) through a connection that is already
gone: ``AttributeError: 'NoneType' object has no attribute 'hostname'``, which Celery treats
as an unrecoverable error and the worker exits (seen here with kombu 5.7 / Celery 5.7 on a
Redis restart; the same failure as kombu#970 and #582). A worker must outlive its broker.

The same happens one step later to a task that was running across the reconnect: its late
ack goes to the old channel, whose connection is gone (``'NoneType' object has no attribute
'client'``), and the worker exits again.

The third failure is a hang: after a reconnect the poller can report the remote-control
subscriber's descriptor readable while its connection has nothing to read (seen here in one
run of six of tests/runtime/test_runtime_redis_restart.py under load: the control worker's
main thread blocked in ``PubSub.parse_response`` for good, since redis-py 8 reads a
subscriber with no socket timeout, and beat's sweeps queued unconsumed behind it).
kombu's ``Channel._receive`` reads the subscriber once before it asks whether anything is
there; the guard asks first, as kombu already does for every read after the first, and
reads nothing when nothing is there.

Nothing needs restoring or acking for wakeful: a Celery message is only a doorbell, the Redis
that held it is gone anyway, and the sweep rings every inbox that has work and no live lease
(a doorbell delivered twice costs one refused ``acquire``). So this guard turns both crashes
into warnings and lets Celery carry on with its new connection. It catches AttributeError
only, from these three methods only; the subscriber's read is the fourth method it wraps.

Upstream: the same failure family as kombu#970 and kombu#582 (closed, but the path is still
there in 5.7), and celery#10205 (a worker that stops consuming after a Redis connection
reset) is the current report. The patch reaches into kombu's internals, so it is pinned:
``install`` refuses a kombu it was not verified against (``VERIFIED_KOMBU``), with a clear
error, rather than patch code it has never seen. To verify a new kombu, run
``tests/faults/test_faults_redis_restart.py`` (3 Redis restarts under load: every process
stays up and every event is done) and ``tests/runtime/test_runtime_units.py``, then add its
version here.
"""

from __future__ import annotations

import logging

log = logging.getLogger("wakeful.broker")

_installed = False

# kombu releases (major, minor) this patch was verified against: kombu 5.7.0 with Celery
# 5.7.0 and redis-py 8.1.0, by the tests named in the module doc.
VERIFIED_KOMBU = ((5, 7),)


class UnverifiedKombu(RuntimeError):
    """kombu is a version the Redis-restart patch was never verified against."""


def check_version(version: str) -> None:
    try:
        major_minor = tuple(int(part) for part in version.split(".")[:2])
    except ValueError:
        major_minor = ()
    if major_minor not in VERIFIED_KOMBU:
        verified = ", ".join(f"{a}.{b}.x" for a, b in VERIFIED_KOMBU)
        raise UnverifiedKombu(
            f"kombu {version} is installed, but wakeful's Redis-restart guard "
            f"(tasks/redis_guard.py) was verified against kombu {verified} only: install a "
            f"verified kombu, or verify this one (see the module doc) and add it to VERIFIED_KOMBU")


def install() -> None:
    global _installed
    if _installed:
        return
    import kombu
    from kombu.transport import redis as kombu_redis

    check_version(kombu.__version__)

    from kombu.transport.virtual.base import QoS as VirtualQoS

    QoS = kombu_redis.QoS
    original_restore, original_ack, original_reject = QoS.restore_unacked, QoS.ack, QoS.reject

    def restore_unacked(self, client=None):  # type: ignore[no-untyped-def]
        try:
            return original_restore(self, client)
        except AttributeError as exc:  # the channel's connection is already torn down
            log.warning("broker connection lost with %d unacked message(s); not restoring "
                        "them (%s): the sweep rings their inboxes", len(self._delivered), exc)
            self._delivered.clear()
            return None

    def ack(self, delivery_tag):  # type: ignore[no-untyped-def]
        try:
            return original_ack(self, delivery_tag)
        except AttributeError as exc:  # acked on a channel closed by a reconnect
            log.warning("late ack on a closed broker channel dropped (%s)", exc)
            _forget(self, delivery_tag)

    def reject(self, delivery_tag, requeue=False):  # type: ignore[no-untyped-def]
        try:
            return original_reject(self, delivery_tag, requeue=requeue)
        except AttributeError as exc:
            log.warning("reject on a closed broker channel dropped (%s)", exc)
            _forget(self, delivery_tag)

    def _forget(qos, delivery_tag):  # type: ignore[no-untyped-def]
        try:
            VirtualQoS.ack(qos, delivery_tag)  # local bookkeeping only
        except Exception:  # noqa: BLE001 - the channel is gone; nothing left to tidy
            pass

    QoS.restore_unacked, QoS.ack, QoS.reject = restore_unacked, ack, reject
    kombu_redis.Channel._receive = _receive_when_readable(kombu_redis.Channel._receive)
    _installed = True


def _receive_when_readable(original_receive):  # type: ignore[no-untyped-def]
    def _receive(self):  # type: ignore[no-untyped-def]
        connection = self.subclient.connection
        if connection is not None:
            try:
                readable = connection.can_read(timeout=0)  # a closed socket raises here
            except self.connection_errors:
                self._in_listen = None  # as kombu's own read does on a lost connection
                raise
            if not readable:
                log.debug("remote-control subscriber reported readable with nothing to read")
                return False
        return original_receive(self)

    return _receive
