"""wakeful's HTTP edge: signed webhooks in, approval answers in, health and metrics out.

``create_app()`` builds the ASGI app; ``approval_link()``/``make_token()`` build the signed,
expiring links an agent's approval message carries. See docs/web.md.
"""

from settings import WebSettings

from .app import create_app
from .tokens import answer_token, approval_link, check_token, make_token

__all__ = ["WebSettings", "answer_token", "approval_link", "check_token", "create_app", "make_token"]
