""""Try later": what an agent or a tool says when something it needs is down.

The attempt cap exists for events that crash whatever runs them. A model API that refuses
connections, answers 429, 5xx or ``overloaded`` (529), or a proxy that cannot reach a tool's
upstream is not such an event: raise :class:`TryLater` and the runtime gives the run's
attempt back and lets its events wait the outage out (store/retries.py), honouring the
upstream's ``Retry-After``, up to ``WAKEFUL_OUTAGE_HORIZON``. Raised by a tool that runs after
the commit (an effect), it puts the call back to wait under the same idempotency key.

Any other exception is an error, counted against the cap as before.
"""

from __future__ import annotations

import email.utils
import time
from collections.abc import Mapping

# Statuses that say "not now" rather than "not this": a timeout, a rate limit, and the server
# side's errors (500-class, with Anthropic's 529 overloaded). 4xx otherwise is the request's
# fault and would fail again.
_TRANSIENT_4XX = frozenset({408, 429})
# Of those, the answers that say the request was not acted on at all (rate limited,
# unavailable); after any other (500, a gateway's 502/504, a timeout) it may have been.
NOT_ACTED_ON = frozenset({408, 429, 503, 529})


def is_transient(status: int) -> bool:
    return status in _TRANSIENT_4XX or status >= 500


class TryLater(Exception):
    """The run (or the tool call) could not be done now for a reason outside its input.

    ``after``: seconds the upstream asked for (its Retry-After), None to let the backoff
    decide. ``maybe_done``: the call may have reached the upstream and taken effect (a
    timeout, a gateway error): an at-most-once effect is then reported interrupted instead of
    being tried again."""

    def __init__(self, reason: str = "try later", *, after: float | None = None, maybe_done: bool = False) -> None:
        super().__init__(reason)
        self.after = after
        self.maybe_done = maybe_done

    @property
    def seconds(self) -> int:
        """``after`` as the store takes it: whole seconds, 0 for "the backoff decides"."""
        return max(0, int(-(-(self.after or 0) // 1)))


def retry_after(headers: Mapping[str, str] | None) -> float | None:
    """An answer's ``retry-after-ms`` or ``Retry-After`` (seconds or an HTTP date) in seconds;
    None when absent or unreadable."""
    if not headers:
        return None
    millis = headers.get("retry-after-ms")
    if millis:
        try:
            return max(0.0, float(millis) / 1000)
        except ValueError:
            pass
    value = (headers.get("retry-after") or "").strip()
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())
