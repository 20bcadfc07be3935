"""``python -m wakeful.web``: serve the web edge with uvicorn (the Procfile's ``web`` process).

Listens on WAKEFUL_WEB_HOST:WAKEFUL_WEB_PORT (default 127.0.0.1:8000; PORT is honoured too).
uvicorn's access log is off because it prints query strings, and approval links carry a
token there; wakeful/web/access_log.py logs method, path and status instead.
"""

from __future__ import annotations

import logging
import sys

from wakeful import serving
from wakeful.same_user import closed_to_same_user
from wakeful.settings import RuntimeSettings, WebSettings, for_process


def main() -> None:
    # Both at the start: a bad setting is one line and exit 2, before anything listens. The
    # runtime's name the database (the same as the workers') and the doorbell's broker.
    settings = for_process(WebSettings, "wakeful web")
    runtime = for_process(RuntimeSettings, "wakeful web")
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    print(f"wakeful web: {runtime.where()}", file=sys.stderr, flush=True)  # as the workers say it
    closed_to_same_user()  # the approval and webhook secrets: no process of its user reads them
    from store import Store

    from .app import create_app

    app = create_app(settings=settings, store=Store.connect(runtime.store_url, **runtime.store_options()))
    host, port = settings.listen
    serving.run(
        app,
        host=host,
        port=port,
        # A slow client holds a connection only until its headers or its whole request are late
        # (wakeful/serving.py), and between requests for uvicorn's 5 s keep-alive.
        header_timeout=settings.header_timeout,
        request_timeout=settings.request_timeout,
        # Behind a TLS proxy the client address comes from X-Forwarded-For; uvicorn trusts it
        # only from FORWARDED_ALLOW_IPS (default 127.0.0.1).
        proxy_headers=True,
    )


if __name__ == "__main__":
    main()
