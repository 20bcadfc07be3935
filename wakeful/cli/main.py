"""The ``wakeful`` command.

Imports stay inside the commands: ``wakeful demo`` must point the environment at its own
directory before the settings are loaded, and ``wakeful --help`` should not load Celery. A
command loads the settings when it starts (``_settings``): a bad one is one line, exit 2.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path
from typing import Any, Optional

import typer

cli = typer.Typer(add_completion=False, no_args_is_help=True,
                  help="wakeful: a durable inbox, a fenced lease, timers, approvals and a "
                       "paced outbox for an always-on agent, on Celery.")
db_cli = typer.Typer(no_args_is_help=True, help="The store's database.")
cli.add_typer(db_cli, name="db")


def _store():
    from tasks.runtime import get_store

    return get_store()


def _settings():  # type: ignore[no-untyped-def]
    from wakeful.settings import RuntimeSettings, for_process

    return for_process(RuntimeSettings, "wakeful")


@cli.command()
def demo(
    story: Optional[str] = typer.Argument(
        None, help="`agent`: the claude agent with tools (ask, link, yes, once; deny; expiry), "
                   "offline with a bundled scripted model."),
    directory: Optional[Path] = typer.Option(
        None, "--dir", help="Where the demo keeps its files (default: a fresh temp directory)."),
    keep: bool = typer.Option(False, help="Keep the demo's directory (logs, SQLite files)."),
) -> None:
    """Play the article's story through real worker and beat processes, embedded, then stop."""
    if story == "agent":
        from wakeful.cli.agent_demo import run_agent_demo

        raise typer.Exit(run_agent_demo(directory, keep))
    if story is not None:
        raise typer.BadParameter(f"unknown demo {story!r}: the choices are the default and `agent`")
    from wakeful.cli.demo import run_demo

    raise typer.Exit(run_demo(directory, keep))


from wakeful.cli.agent_check import check as _check  # noqa: E402

cli.command("check")(_check)


@cli.command()
def init() -> None:
    """Create or upgrade the store's tables; on the embedded broker, its tables and queues."""
    _init()
    typer.echo("wakeful: store migrated" + (", embedded broker ready" if _embedded() else ""))


def _embedded() -> bool:
    return _settings().embedded_broker


def _init() -> None:
    settings = _settings()
    settings.home.mkdir(parents=True, exist_ok=True)
    _store().migrate()
    if settings.embedded_broker:
        import tasks
        from tasks import embedded
        from tasks.celeryconfig import QUEUES

        embedded.init(tasks.app, QUEUES)


@db_cli.command("upgrade")
def db_upgrade() -> None:
    """Alembic upgrade to head."""
    _store().migrate()
    typer.echo("wakeful: store at the latest schema")


@cli.command()
def up(
    processes: list[str] = typer.Argument(None, help="Process types to start (default: all "
                                          "that can run here)."),
    procfile: Optional[Path] = typer.Option(None, help="Default: ./Procfile, else the one "
                                            "next to this package."),
) -> None:
    """Run the Procfile through honcho (development; use a real supervisor in production)."""
    settings = _settings()

    path = procfile or _find_procfile()
    names = list(processes or [])
    if not names:
        names = _procfile_types(path)
        if not settings.flower_basic_auth and "flower" in names:
            typer.echo("wakeful up: skipping flower (set WAKEFUL_FLOWER_BASIC_AUTH to run it)",
                       err=True)
            names.remove("flower")
        if "proxy" in names and not settings.agent_config:
            # The egress proxy serves the [routes.*] of the agent config; without one it has
            # nothing to do (and honcho would stop everything when it exits).
            typer.echo("wakeful up: skipping proxy (set WAKEFUL_AGENT_CONFIG to a config with [routes.*])",
                       err=True)
            names.remove("proxy")
        if "web" in names and not _web_available():
            names.remove("web")
    routes = _routes("proxy" in names)
    if not processes and "proxy" in names and not routes:
        typer.echo("wakeful up: skipping proxy (the agent config has no [routes.*] table: nothing to serve)",
                   err=True)
        names.remove("proxy")
    secrets = sorted({r.secret_env for r in routes.values() if r.secret_env})
    _init()
    if secrets:
        path = _procfile_without(path, secrets, settings.home)
    # The Procfile's commands (celery, wakeful, python) are this interpreter's, also from a
    # virtualenv that was never activated.
    scripts = str(Path(sys.executable).parent)
    os.environ["PATH"] = scripts + os.pathsep + os.environ.get("PATH", "")
    honcho = shutil.which("honcho") or str(Path(scripts) / "honcho")
    os.execv(honcho, [honcho, "-f", str(path), "-d", str(Path.cwd()), "start", *names])


def _routes(proxy_starts: bool) -> dict[str, Any]:
    """The agent config's egress routes (``[routes.*]``), none without a config or that table;
    their ``secret_env`` variables are the proxy's alone. A route the proxy cannot serve stops
    ``up`` with the proxy's one-line reason when the proxy is to start."""
    from wakeful.settings import agent_config_path, read_toml

    path = agent_config_path()
    if not path:
        return {}
    from wakeful.proxy.routes import RoutesError, parse

    try:
        tables = read_toml(path, RoutesError).get("routes")
        return parse(tables, path) if tables else {}
    except RoutesError as exc:
        if proxy_starts:
            typer.echo(f"wakeful up: {exc}", err=True)
            raise typer.Exit(2) from None
        return {}


def _procfile_without(path: Path, secrets: list[str], home: Path) -> Path:
    """A copy of the Procfile whose processes but the proxy start with ``secrets`` unset (``exec``:
    not even the shell honcho starts stays behind holding them):
    honcho gives every process the same environment, and a worker must never hold a key."""
    unset = " ".join(f"-u {name}" for name in secrets)
    lines = []
    for line in path.read_text().splitlines():
        name, sep, command = line.partition(":")
        if sep and name.strip() and not name.lstrip().startswith("#") and name.strip() != "proxy":
            line = f"{name}: exec env {unset} {command.strip()}"
        lines.append(line)
    home.mkdir(parents=True, exist_ok=True)
    out = home / "Procfile.up"
    out.write_text("\n".join(lines) + "\n")
    return out


def _find_procfile() -> Path:
    # The checkout's own: wakeful/cli/main.py -> the repository root, two folders up.
    for candidate in (Path.cwd() / "Procfile", Path(__file__).resolve().parents[2] / "Procfile"):
        if candidate.exists():
            return candidate
    raise typer.BadParameter("no Procfile here; pass --procfile")


def _procfile_types(path: Path) -> list[str]:
    names = []
    for line in path.read_text().splitlines():
        if line.strip() and not line.lstrip().startswith("#") and ":" in line:
            names.append(line.split(":", 1)[0].strip())
    return names


def _web_available() -> bool:
    import importlib.util

    return importlib.util.find_spec("web") is not None


@cli.command()
def ingest(
    inbox: str,
    source: str,
    source_id: str,
    payload: str = typer.Argument("{}", help="The event's JSON object."),
) -> None:
    """Store an event (once per inbox, source and source_id) and ring the inbox's doorbell."""
    from store import InvalidEvent
    from tasks.doorbell import ring

    from wakeful.cli.operator import opened_store

    with opened_store() as store:
        try:
            stored = store.ingest(inbox, source, source_id, json.loads(payload))
        except (ValueError, InvalidEvent) as exc:
            typer.echo(f"rejected: {exc}", err=True)
            raise typer.Exit(2)
    if stored:
        ring(inbox)
    typer.echo("stored" if stored else "duplicate (already stored)")


# The operator's commands (status, dead, requeue, approvals, answer, timers, outbox, events,
# runs, rejected, incidents) live in wakeful/cli/operator.py.
from wakeful.cli.operator import register as _register_operator_commands  # noqa: E402

_register_operator_commands(cli)

# `wakeful proxy` (the egress proxy process) and `wakeful audit` live in wakeful/cli/proxy_cli.py.
from wakeful.cli.proxy_cli import register as _register_proxy_commands  # noqa: E402

_register_proxy_commands(cli)

# `wakeful hooks set|list|remove|rekey|new-key`: per-inbox webhook secrets (wakeful/cli/hooks.py).
from wakeful.cli.hooks import hooks_cli  # noqa: E402

cli.add_typer(hooks_cli, name="hooks")


@cli.command()
def purge(older_than: Optional[int] = typer.Option(None, help="Seconds (default "
                                                   "WAKEFUL_RETENTION).")) -> None:
    """Retention: delete old finished rows now."""
    from wakeful.cli.operator import opened_store

    with opened_store() as store:
        counts = store.purge(older_than if older_than is not None else _settings().retention)
    typer.echo(json.dumps(counts))


@cli.command()
def flower() -> None:
    """Start Flower with basic auth (refuses to start open)."""
    from wakeful.cli.flower import main as flower_main

    flower_main()


def main() -> None:
    cli()


if __name__ == "__main__":
    main()
