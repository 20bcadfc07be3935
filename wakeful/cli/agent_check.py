"""``wakeful check``: the configuration, checked the way a worker checks it at its start."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

import typer

if TYPE_CHECKING:
    from wakeful.settings import RuntimeSettings


def check() -> None:
    """Check what a process needs at its start: the settings, the store (reachable, and
    migrated), the broker (reachable), the agent, and the tool config (WAKEFUL_AGENT_CONFIG:
    every tool's policy, call and input schema) when the agent is claude or the file is named.
    Exit 2 on a bad setting, 1 on anything else, each failure on one line."""
    from wakeful.settings import RuntimeSettings, for_process

    settings = for_process(RuntimeSettings, "wakeful check")  # a bad one: one line, exit 2
    # A stdio server that cannot start is said below, once, with its cause: not also as the
    # listing's warning a worker logs.
    logging.getLogger("wakeful.agent.mcp").addFilter(lambda record: record.msg != _listing_failed())
    typer.echo(settings.where())
    failures = [f for f in (_store_problem(settings), _broker_problem(settings)) if f]
    for failure in failures:
        typer.echo(f"wakeful check: {failure}", err=True)
    from wakeful.agent import load_agent
    from wakeful.agent.loading import BUILTIN, builtin
    from wakeful.agent.config import ConfigError, for_worker

    try:
        claude = builtin(settings.agent) == BUILTIN["claude"]
        if not claude:
            load_agent(settings.agent)
            typer.echo(f"agent: {settings.agent}")
        cfg = for_worker(settings.agent)  # what a worker loads at its start, checked alike
        if cfg is not None:
            _show(cfg, claude)
            failures += _servers_problems(cfg)
    except (ConfigError, ImportError, AttributeError, TypeError, ValueError) as exc:
        typer.echo(f"wakeful check: {exc}", err=True)
        raise typer.Exit(1) from None
    if failures:
        raise typer.Exit(1)
    typer.echo("ok")


def _listing_failed() -> str:
    from wakeful.agent.mcp import LISTING_FAILED

    return LISTING_FAILED


def _servers_problems(cfg: object) -> list[str]:
    """Each stdio MCP server that does not start and list its tools, one line each (said
    here, where a worker would only log a closed connection at its first run)."""
    from wakeful.agent.config import AgentConfig

    assert isinstance(cfg, AgentConfig)
    if not any(name.startswith("mcp.") for name in cfg.sources):
        return []
    from wakeful.agent.mcp import startable

    problems = [startable(source) for source in cfg.sources.values()]
    for problem in filter(None, problems):
        typer.echo(f"wakeful check: {problem}", err=True)
    return [p for p in problems if p]


def _store_problem(settings: "RuntimeSettings") -> str | None:
    """The store unreachable, or PostgreSQL without this wakeful's schema (its workers do not
    migrate it: `wakeful init` does). The embedded SQLite file is migrated by the first
    process that starts, so only its reachability counts."""
    from store import Store
    from wakeful.cli.operator import usable

    store = Store.connect(settings.store_url, **settings.store_options())
    try:
        problem = usable(store, settings.store_url)
    finally:
        store.dispose()
    if problem and not problem.startswith("cannot reach") and not settings.database_url:
        return None
    return problem


def _broker_problem(settings: "RuntimeSettings") -> str | None:
    """The broker unreachable (the embedded one is a file made at the first start)."""
    if settings.embedded_broker:
        return None
    from kombu import Connection

    from wakeful.settings import without_password

    try:
        with Connection(settings.broker, connect_timeout=5) as conn:
            conn.ensure_connection(max_retries=1, timeout=5)
    except Exception as exc:  # noqa: BLE001 - kombu raises the transport's own errors: name it, one line
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        return f"cannot reach the broker ({without_password(settings.broker)}): {reason}"
    return None


def _show(cfg: object, claude: bool) -> None:
    from wakeful.agent.config import AgentConfig

    assert isinstance(cfg, AgentConfig)
    typer.echo(f"agent: claude, model {cfg.model}, config {cfg.path}" if claude else f"tools: config {cfg.path}")
    typer.echo(f"  trusted sources: {', '.join(cfg.trusted_sources) or 'none (every event is data)'}")
    for tool in cfg.tools.values():
        runs = tool.call or (f"route {tool.route} {tool.method} {tool.path}" if tool.route else f"source {tool.source}")
        typer.echo(f"  tool {tool.name}: {tool.policy}, {tool.effect}"
                   f"{', ' + tool.delivery if tool.effect == 'write' else ''}"
                   f"{f', approval_ttl {tool.approval_ttl}s' if tool.policy == 'ask' else ''}"
                   f"{', trusted output' if tool.trusted_output else ''} ({runs})")
    webhooks = ", ".join(cfg.trusted_webhook_sources())
    if webhooks:
        typer.echo(f"wakeful check: warning: trusted_sources names webhook sources ({webhooks}): "
                   "whoever gets a signed webhook sent (a stranger's comment, a customer's note) "
                   "speaks as you, and an allowed write then runs without a yes", err=True)
