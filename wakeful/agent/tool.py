"""One tool and one use of it, whatever runs it: :class:`Tool` is what the config declares
and a source lists (wakeful/agent/config.py, wakeful/agent/sources.py), :class:`ToolCall` what a tool is
handed when it runs (wakeful/agent/tools.py). Below the config and every source, so each of them
can name both."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from wakeful.agent.loading import import_callable

__all__ = ["Tool", "ToolCall"]


@dataclass(frozen=True)
class Tool:
    """One tool as the policy, the model and the executor see it, whatever runs it."""

    name: str
    policy: str  # allow, deny or ask
    effect: str  # read (runs inline, may run again after a crash) or write (after the commit)
    description: str
    input_schema: dict[str, Any]
    delivery: str = "at-least-once"
    approval_ttl: int = 3600
    call: str | None = None  # "module:callable"
    route: str | None = None  # an HTTP tool through the egress proxy (wakeful/agent/egress.py)
    method: str = "GET"
    path: str = "/"
    routes: tuple[str, ...] = ()  # the routes a Python tool reaches with call.http(route)
    # Its answers reach the model as the owner's words (not data, no taint): declared only
    # for a tool whose output no outsider can write.
    trusted_output: bool = False
    # Who gets an ask's link (store/approvals.py): None takes [agent] approver.
    approver: str | None = None
    # The source that runs it (wakeful/agent/sources.py): "python", "http", "mcp.NAME", "wakes".
    # Left empty, it is "python" for a call and "http" for a route.
    source: str = ""

    def __post_init__(self) -> None:
        if not self.source:
            object.__setattr__(self, "source", "http" if self.route else "python")

    @property
    def grant_routes(self) -> tuple[str, ...]:
        """The egress routes a grant for this tool must cover."""
        return (self.route,) if self.route else self.routes

    def function(self) -> Callable[..., Any]:
        assert self.call is not None
        return import_callable(self.call)


@dataclass(frozen=True)
class ToolCall:
    """One tool use, as the tool sees it."""

    id: str  # the model's tool_use id
    name: str
    inbox: str
    idempotency_key: str  # the same on every try of this tool use: pass it on to the service
    attempt: int = 1

    def http(self, route: str) -> Any:
        """A client for ``route`` through the egress proxy, bound to this call (wakeful/agent/egress.py)."""
        from wakeful.agent import egress  # type: ignore[attr-defined]  # provided by the egress proxy's kit

        return egress.client(route, self)
