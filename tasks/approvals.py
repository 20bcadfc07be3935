"""``wakeful.answer_approval``: a human's answer to a deferred action, sent by a service.

The call must carry the token of its answer (``approval_tokens.answer_token(link_token, answer)``,
made from the approval's signed link): whoever can publish to the broker is not thereby a
human who may approve, and whoever can take a message off the queue must not be able to
change the answer it carries. A chat bot that shows the link's buttons makes the token of the
button pressed. The link's own token is refused here (it covers any answer, so a broker reader
could flip one); without a valid token the answer is refused and recorded; nothing is stored.

A link made for another approver than the inbox's own user (``by=<approver>`` in its URL)
is answered with ``by=<approver>`` too: the token signs it, and the answer is stored with it.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from wakeful.approval_tokens import NotAuthorized, check_token
from store import InvalidEvent

from tasks.application import app
from tasks.approval_links import approval_keys
from tasks.doorbell import ring
from tasks.runtime import get_store

log = logging.getLogger("wakeful.approvals")


@app.task(name="wakeful.answer_approval")
def answer_approval(inbox: Any = None, request_id: Any = None, answer: Any = None,
                    token: Any = None, *, by: Any = None) -> dict[str, Any]:
    """Store the answer unless the deadline passed; returns the outcome that stands.

    ``{"outcome": "yes" | "no" | "expired" | "unknown"}``, or ``{"outcome": None,
    "rejected": "<why>"}`` for a missing or wrong token or a malformed answer. The inbox's
    doorbell rings whenever an answer (or the expiry) stands, so the agent resumes with it.
    """
    store = get_store()
    try:
        approver = "self" if by is None else by
        if not isinstance(approver, str):
            raise InvalidEvent("by must be the approver named in the link (a string)")
        _authorize(inbox, request_id, answer, token, approver)
        outcome = store.answer_approval(inbox, request_id, answer, by=approver)
    except (NotAuthorized, InvalidEvent, ValueError, TypeError) as exc:
        # Never the token in the record or the log: it is a credential.
        store.operator.record_rejection("task:wakeful.answer_approval", str(exc), inbox=inbox,
                                        source="approval", source_id=request_id,
                                        excerpt=repr(answer)[:40])
        log.warning("approval answer rejected: %s", exc)
        return {"outcome": None, "rejected": str(exc)}
    if outcome != "unknown":
        ring(inbox)
    return {"outcome": outcome}


def _authorize(inbox: Any, request_id: Any, answer: Any, token: Any, approver: str) -> None:
    if not isinstance(inbox, str) or not isinstance(request_id, str):
        raise InvalidEvent("inbox and request_id must be strings")
    if not isinstance(token, str) or not token:
        raise NotAuthorized("an approval answer needs the token from its link")
    secrets = approval_keys()
    if not secrets:
        raise NotAuthorized("WAKEFUL_APPROVAL_SECRET is not set: approvals are answered only "
                            "with `wakeful answer`")
    now = int(time.time())
    problem = check_token(token, inbox, request_id, secrets=secrets, now=now, answer=str(answer),
                          approver=approver)
    if problem == "expired_token":
        raise NotAuthorized("this approval token has expired")
    if problem is None:
        return
    if check_token(token, inbox, request_id, secrets=secrets, now=now, approver=approver) is None:
        raise NotAuthorized("this is the link's token, which covers any answer: send the answer's "
                            "own token, approval_tokens.answer_token(link_token, answer)")
    raise NotAuthorized("this token is not valid for this approval and answer")
