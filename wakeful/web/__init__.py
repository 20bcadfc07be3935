"""wakeful's HTTP edge: signed webhooks in, approval answers in, health and metrics out.

``create_app()`` builds the ASGI app. The signed, expiring links an agent's approval message
carries are made and checked by wakeful/approval_tokens.py, with the keys and lifetime its caller's
settings give. See docs/web.md.
"""

from wakeful.settings import WebSettings

from .app import create_app

__all__ = ["WebSettings", "create_app"]
