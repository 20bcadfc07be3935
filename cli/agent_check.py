"""``wakeful check``: the configuration, checked the way a worker checks it at its start."""

from __future__ import annotations

import typer


def check() -> None:
    """Check the settings and the agent (for WAKEFUL_AGENT=claude, its WAKEFUL_AGENT_CONFIG:
    every tool's policy, call and input schema). Exit 1 with the reason if anything is wrong."""
    from agent import BUILTIN, load_agent
    from agent.config import ConfigError, load
    from tasks.settings import SettingsError, Settings

    try:
        settings = Settings.from_env()
        if BUILTIN.get(settings.agent, settings.agent) == BUILTIN["claude"]:
            cfg = load()
            typer.echo(f"agent: claude, model {cfg.model}, config {cfg.path}")
            typer.echo(f"  trusted sources: {', '.join(cfg.trusted_sources) or 'none (every event is data)'}")
            for tool in cfg.tools.values():
                runs = tool.call or f"route {tool.route} {tool.method} {tool.path}"
                typer.echo(f"  tool {tool.name}: {tool.policy}, {tool.effect}"
                           f"{', ' + tool.delivery if tool.effect == 'write' else ''}"
                           f"{f', approval_ttl {tool.approval_ttl}s' if tool.policy == 'ask' else ''}"
                           f"{', trusted output' if tool.trusted_output else ''} ({runs})")
            webhooks = ", ".join(cfg.trusted_webhook_sources())
            if webhooks:
                typer.echo(f"wakeful check: warning: trusted_sources names webhook sources ({webhooks}): "
                           "whoever gets a signed webhook sent (a stranger's comment, a customer's note) "
                           "speaks as you, and an allowed write then runs without a yes", err=True)
        else:
            load_agent(settings.agent)
            typer.echo(f"agent: {settings.agent}")
    except (ConfigError, SettingsError, ImportError, AttributeError, TypeError, ValueError) as exc:
        typer.echo(f"wakeful check: {exc}", err=True)
        raise typer.Exit(1) from None
    typer.echo("ok")
