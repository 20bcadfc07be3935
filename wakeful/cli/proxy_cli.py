"""``wakeful proxy`` (the Procfile's proxy process) and ``wakeful audit [INBOX]``."""

from __future__ import annotations

from dataclasses import asdict
from typing import Optional

import typer

from wakeful.cli.operator import JSON, emit_json, opened_store, table, when


def proxy(check: bool = typer.Option(False, "--check", help="Check the settings and routes (secrets "
                                      "included) and list the routes, then exit.")) -> None:
    """Serve the egress proxy on WAKEFUL_PROXY_URL: routes from WAKEFUL_AGENT_CONFIG, their secrets
    from this process's environment only (docs/proxy.md)."""
    from wakeful.proxy.__main__ import check_config, main

    raise typer.Exit(check_config() if check else main())


def audit(inbox: Optional[str] = typer.Argument(None, help="One inbox (default: all)."),
          limit: int = typer.Option(50, help="The latest N requests."), as_json: bool = JSON) -> None:
    """Requests through the egress proxy: who (inbox, generation, tool use), where (route, method,
    path), and what came of it. Never headers or bodies."""
    with opened_store() as store:
        rows = store.grants.audit(inbox, limit=limit)
    if as_json:
        emit_json([asdict(r) for r in rows])
        return
    table(["id", "at", "inbox", "gen", "tool_use", "route", "method", "path", "status", "bytes", "ms",
           "outcome"],
          [[r.id, when(r.at), r.inbox, r.generation, r.tool_use_id, r.route, r.method, r.path, r.status,
            r.bytes, r.duration_ms, r.outcome] for r in rows],
          f"no requests through the proxy{f' for inbox {inbox!r}' if inbox else ''} on record")


def register(cli: typer.Typer) -> None:
    cli.command("proxy")(proxy)
    cli.command("audit")(audit)
