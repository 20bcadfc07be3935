"""An access log that never writes a query string or a header.

uvicorn's own access log prints the full request line, and approval links carry their token
in ``?token=``: ``python -m wakeful.web`` turns uvicorn's off and this one on. Paths are logged as
sent, with control and bidi characters escaped (``%1B`` decodes to ESC): they carry inbox
and request ids, which are not secrets but are chosen by whoever sends the request.
"""

from __future__ import annotations

import logging
from typing import Any

log = logging.getLogger("wakeful.web.access")


class AccessLog:
    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        status = 500  # if the app dies before answering

        async def send_and_note(message: Any) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, send_and_note)
        finally:
            client = scope.get("client") or ("-", 0)
            # repr() escapes every non-printable character: no terminal escape reaches the log
            log.info("%s %s %s %d", client[0], scope["method"], repr(scope["path"])[1:-1], status)
