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
            for tool in cfg.tools.values():
                runs = tool.call or f"route {tool.route} {tool.method} {tool.path}"
                typer.echo(f"  tool {tool.name}: {tool.policy}, {tool.effect}"
                           f"{', ' + tool.delivery if tool.effect == 'write' else ''}"
                           f"{f', approval_ttl {tool.approval_ttl}s' if tool.policy == 'ask' else ''} ({runs})")
        else:
            load_agent(settings.agent)
            typer.echo(f"agent: {settings.agent}")
    except (ConfigError, SettingsError, ImportError, AttributeError, TypeError, ValueError) as exc:
        typer.echo(f"wakeful check: {exc}", err=True)
        raise typer.Exit(1) from None
    typer.echo("ok")
