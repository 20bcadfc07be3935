"""What the web tests share besides fixtures: the test secrets, settings built from them, and
an in-process client. (A uniquely named module: ``conftest`` is not importable by name when
several test folders have one.)"""

from __future__ import annotations

import anyio
import anyio.from_thread
import httpx

from wakeful.settings import WebSettings

GITHUB_SECRET = "gh-secret-for-tests"
STRIPE_SECRET = "whsec_stripe_test_secret"
WEBHOOK_SECRET = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
APPROVAL_SECRET = "approval-secret-for-tests-0123456789"


def web_settings(**overrides: object) -> WebSettings:
    values: dict[str, object] = dict(
        github_secrets=(GITHUB_SECRET,),
        stripe_secrets=(STRIPE_SECRET,),
        webhook_secrets=(WEBHOOK_SECRET,),
        approval_secrets=(APPROVAL_SECRET,),
    )
    values.update(overrides)
    return WebSettings(**values)  # type: ignore[arg-type]


class Client:
    """The app in-process over httpx's ASGI transport, driven from sync tests through one
    event loop in a portal thread (what Starlette's TestClient does, without its deprecated
    httpx path). An exception escaping the app fails the test instead of hiding in a 500."""

    def __init__(self, app, portal) -> None:  # type: ignore[no-untyped-def]
        self.portal = portal
        self.http = httpx.AsyncClient(transport=httpx.ASGITransport(app=app, raise_app_exceptions=True),
                                      base_url="http://web.test")

    def request(self, method: str, url: str, **kwargs: object) -> httpx.Response:
        return self.portal.call(lambda: self.http.request(method, url, **kwargs))

    def post(self, url: str, **kwargs: object) -> httpx.Response:
        return self.request("POST", url, **kwargs)

    def get(self, url: str, **kwargs: object) -> httpx.Response:
        return self.request("GET", url, **kwargs)

    def gather(self, requests: list[tuple[str, str, dict]]) -> list[httpx.Response]:
        """Send all at once on the app's loop: the store calls run in concurrent threads."""
        async def all_at_once() -> list[httpx.Response]:
            results: list[httpx.Response] = [None] * len(requests)  # type: ignore[list-item]

            async def one(i: int, method: str, url: str, kwargs: dict) -> None:
                results[i] = await self.http.request(method, url, **kwargs)

            async with anyio.create_task_group() as tg:
                for i, (method, url, kwargs) in enumerate(requests):
                    tg.start_soon(one, i, method, url, kwargs)
            return results

        return self.portal.call(all_at_once)
