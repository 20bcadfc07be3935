"""``python -m web``: serve the web edge with uvicorn (the Procfile's ``web`` process).

Listens on WAKEFUL_WEB_HOST:WAKEFUL_WEB_PORT (default 127.0.0.1:8000; PORT is honoured too).
uvicorn's access log is off because it prints query strings, and approval links carry a
token there; web/access_log.py logs method, path and status instead.
"""

from __future__ import annotations

import logging

import uvicorn

from .settings import listen_address


def main() -> None:
    host, port = listen_address()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    uvicorn.run(
        "web.app:create_app",
        factory=True,
        host=host,
        port=port,
        access_log=False,
        # Behind a TLS proxy the client address comes from X-Forwarded-For; uvicorn trusts it
        # only from FORWARDED_ALLOW_IPS (default 127.0.0.1).
        proxy_headers=True,
        server_header=False,
        # A slow client cannot hold a connection open forever between requests.
        timeout_keep_alive=5,
    )


if __name__ == "__main__":
    main()
