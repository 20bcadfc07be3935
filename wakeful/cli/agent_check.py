"""``wakeful check``: the configuration, checked the way a worker checks it at its start."""

from __future__ import annotations

import typer


def check() -> None:
    """Check the settings and the agent, and the tool config (WAKEFUL_AGENT_CONFIG: every
    tool's policy, call and input schema) when the agent is claude or the file is named.
    Exit 2 on a bad setting, 1 on a bad agent or config, with the reason on one line."""
    from wakeful.settings import RuntimeSettings, for_process

    settings = for_process(RuntimeSettings, "wakeful check")  # a bad one: one line, exit 2
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
    except (ConfigError, ImportError, AttributeError, TypeError, ValueError) as exc:
        typer.echo(f"wakeful check: {exc}", err=True)
        raise typer.Exit(1) from None
    typer.echo("ok")


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
